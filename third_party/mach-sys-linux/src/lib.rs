//! The part of `mach-sys` mlx-rs uses, for systems without Mach.

pub mod mach_time {
    /// Nanoseconds of a monotonic clock: what mlx-rs uses to seed its
    /// random state (on macOS, Mach's absolute time units).
    ///
    /// # Safety
    /// None needed; `unsafe` as the Mach binding it stands in for.
    pub unsafe fn mach_approximate_time() -> u64 {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        since_epoch.wrapping_add(start.elapsed().as_nanos() as u64)
    }
}
