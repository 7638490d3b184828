//! What a plugin may touch: nothing but its inputs.
//!
//! Every job gets a fresh [`SandboxState`]: a WASI context with no preopened
//! directories (unless the config grants a read-only data directory), no
//! environment, no arguments, no network (TCP, UDP and name lookup off),
//! a fixed wall clock and a seeded random source, so a plugin's output is
//! reproducible; stdout and stderr go to bounded buffers; memory is capped by
//! [`MemoryCap`], which names the limit when it refuses.
//!
//! The call deadline is an epoch deadline: it stops wasm code, not time the
//! host spends serving a WASI call. So no host call a plugin can make may
//! wait on the outside world:
//! - clock waits (`subscribe-duration`/`-instant`, which `std::thread::sleep`
//!   becomes) are served on the sandbox's own [`VirtualClock`]: the wait
//!   returns at once and the plugin's monotonic time jumps to its end;
//! - a granted data directory may hold only regular files and directories
//!   ([`check_data_dir`]): a FIFO, device or socket would block a read;
//! - one random request is at most [`MAX_RANDOM_BYTES`];
//! - stdout/stderr are in-memory sinks that are always ready, stdin is closed,
//!   file reads are bounded per call by WASI, and sockets are not linked;
//! - the `tensors` import computes over data of bounded size.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use wasmtime::ResourceLimiter;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{
    Deterministic, FsPerms, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

use super::tensors::TensorSource;

/// The sandbox's limits; `Default` is the default sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxOptions {
    /// Wall-clock time one call may run (epoch interruption).
    pub deadline: Duration,
    /// Instructions one call may run, when set (fuel; costs some speed).
    pub fuel: Option<u64>,
    /// Linear memory the plugin may grow to, over all its memories.
    pub memory_bytes: u64,
    /// The stderr (and stdout) kept per job; the rest is counted, not kept.
    pub stderr_bytes: usize,
    /// A host directory the plugin may read, mounted at `/data`. Only when
    /// the config grants it.
    pub data_dir: Option<PathBuf>,
    /// Seeds the plugin's random source (`wasi:random`).
    pub seed: u64,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            deadline: Duration::from_secs(1),
            fuel: None,
            memory_bytes: 256 << 20,
            stderr_bytes: 16 << 10,
            data_dir: None,
            seed: 0,
        }
    }
}

/// The fixed time a plugin sees: 2025-01-01T00:00:00Z.
pub const FIXED_WALL_CLOCK_SECS: u64 = 1_735_689_600;

/// The most bytes one `wasi:random` request may ask for. Rust's standard
/// library asks for 16 (hash map keys); WASI's own default limit, 64 MiB,
/// took the host a fraction of a second to fill, outside the deadline.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// The longest call deadline a config or flag may set.
pub const MAX_DEADLINE_MS: u64 = 600_000;
/// The most linear memory a config or flag may grant (wasm32 addresses 4 GiB).
pub const MAX_MEMORY_MIB: u64 = 4096;

/// Checks a deadline (ms) and memory limit (MiB) as a user gives them: one
/// set of bounds for `run`, `validate` and `plugin test`. The error names
/// the field (`deadline_ms`, `memory_mib`).
pub fn check_limits(
    deadline_ms: Option<u64>,
    memory_mib: Option<u64>,
) -> Result<(), (&'static str, String)> {
    if let Some(ms) = deadline_ms
        && !(1..=MAX_DEADLINE_MS).contains(&ms)
    {
        return Err((
            "deadline_ms",
            format!("{ms} is outside 1-{MAX_DEADLINE_MS} milliseconds"),
        ));
    }
    if let Some(mib) = memory_mib
        && !(1..=MAX_MEMORY_MIB).contains(&mib)
    {
        return Err((
            "memory_mib",
            format!(
                "{mib} is outside 1-{MAX_MEMORY_MIB} MiB (a wasm32 plugin addresses at most 4 GiB)"
            ),
        ));
    }
    Ok(())
}

/// The most entries a granted data directory may hold (it is checked
/// entry by entry for every job).
pub const MAX_DATA_DIR_ENTRIES: usize = 10_000;

/// Store data of one job.
pub struct SandboxState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) stderr: BoundedPipe,
    /// Raw tensors of the traces in the current call, for the `tensors` import.
    pub(crate) tensors: Option<Arc<dyn TensorSource>>,
    /// The trace ids of the current batch: `open` refuses any other.
    pub(crate) open_traces: Vec<String>,
    /// Tensors the plugin opened in the current call, charged to it.
    pub(crate) opened: super::tensors::Opened,
    /// The plugin's monotonic time, which only its own waits advance.
    pub(crate) clock: VirtualClock,
}

impl SandboxState {
    pub fn new(options: &SandboxOptions) -> Result<SandboxState, String> {
        let stderr = BoundedPipe::new(options.stderr_bytes);
        let mut b = WasiCtxBuilder::new();
        b.stdout(stderr.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .wall_clock(FixedWallClock)
            .secure_random(seeded_bytes(options.seed))
            .insecure_random(seeded_bytes(options.seed ^ 0x5eed))
            .insecure_random_seed(u128::from(options.seed))
            .max_random_size(MAX_RANDOM_BYTES);
        if let Some(dir) = &options.data_dir {
            check_data_dir(dir)?;
            b.preopened_dir(dir, "/data", FsPerms::ReadOnly)
                .map_err(|e| format!("cannot grant the data directory {}: {e}", dir.display()))?;
        }
        Ok(SandboxState {
            wasi: b.build(),
            table: ResourceTable::new(),
            memory: MemoryCap::new(options.memory_bytes),
            stderr,
            tensors: None,
            open_traces: Vec::new(),
            opened: super::tensors::Opened::default(),
            clock: VirtualClock::default(),
        })
    }
}

/// Refuses a data directory that holds anything but regular files and
/// directories (followed through symlinks): reading a FIFO, a character
/// device or a socket would block the host outside the call's deadline.
pub fn check_data_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| format!("cannot grant the data directory {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "cannot grant the data directory {}: it is not a directory",
            dir.display()
        ));
    }
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = pending.pop() {
        let entries = std::fs::read_dir(&d)
            .map_err(|e| format!("cannot grant the data directory {}: {e}", d.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("cannot grant the data directory {}: {e}", d.display()))?
                .path();
            seen += 1;
            if seen > MAX_DATA_DIR_ENTRIES {
                return Err(format!(
                    "cannot grant the data directory {}: it holds more than {MAX_DATA_DIR_ENTRIES} entries; grant a directory with only the files the plugin reads",
                    dir.display()
                ));
            }
            // Symlinks are followed: the target's type is what a read meets.
            // A dangling link is refused too, rather than guessed at.
            let meta = std::fs::metadata(&path).map_err(|e| {
                format!(
                    "cannot grant the data directory {}: {}: {e}",
                    dir.display(),
                    path.display()
                )
            })?;
            let file_type = meta.file_type();
            if file_type.is_dir() {
                // A symlinked directory is not walked again (no cycles); the
                // sandbox refuses links that leave the granted directory.
                if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                    pending.push(path);
                }
            } else if !file_type.is_file() {
                return Err(format!(
                    "cannot grant the data directory {}: {} is {}, not a regular file; a plugin reading it could block the host past its deadline. Move it out of the directory",
                    dir.display(),
                    path.display(),
                    describe_special(&file_type)
                ));
            }
        }
    }
    Ok(())
}

fn describe_special(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    let _ = t;
    "a special file"
}

/// The sandbox's monotonic clock, in nanoseconds from 0. A wait is served
/// at once and moves the clock to the wait's end, so a plugin that sleeps
/// sees time pass as it asked without holding the host; wasm that loops
/// around its sleeps still meets the epoch deadline.
#[derive(Clone, Default)]
pub struct VirtualClock {
    now: Arc<AtomicU64>,
}

impl VirtualClock {
    pub fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

/// A wait on the virtual clock: ready at once; reaching it moves the clock
/// to its end.
struct VirtualWait {
    clock: VirtualClock,
    until: u64,
}

#[wasmtime_wasi::async_trait]
impl Pollable for VirtualWait {
    async fn ready(&mut self) {
        self.clock.now.fetch_max(self.until, Ordering::Relaxed);
    }
}

/// Links `wasi:clocks/monotonic-clock` to the virtual clock, in place of
/// WASI's (which serves waits by sleeping).
pub(crate) struct VirtualClocks;

impl wasmtime::component::HasData for VirtualClocks {
    type Data<'a> = VirtualClockView<'a>;
}

pub(crate) struct VirtualClockView<'a> {
    clock: &'a VirtualClock,
    table: &'a mut ResourceTable,
}

impl SandboxState {
    pub(crate) fn virtual_clock(&mut self) -> VirtualClockView<'_> {
        VirtualClockView {
            clock: &self.clock,
            table: &mut self.table,
        }
    }
}

impl VirtualClockView<'_> {
    fn wait_until(&mut self, until: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let wait = self.table.push(VirtualWait {
            clock: self.clock.clone(),
            until,
        })?;
        wasmtime_wasi::p2::subscribe(self.table, wait)
    }
}

impl monotonic_clock::Host for VirtualClockView<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(self.clock.now())
    }
    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1)
    }
    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.wait_until(when)
    }
    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let until = self.clock.now().saturating_add(duration);
        self.wait_until(until)
    }
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A seeded byte stream for `wasi:random` (cycled by WASI after 64 KiB).
/// The bytes of the last seed are kept: generating them took about 50 µs,
/// a third of a fresh job.
fn seeded_bytes(seed: u64) -> Deterministic {
    static LAST: Mutex<Option<(u64, Arc<[u8]>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let bytes = match &*last {
        Some((s, b)) if *s == seed => b.clone(),
        _ => {
            let mut bytes = vec![0u8; 64 << 10];
            rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
            let b: Arc<[u8]> = bytes.into();
            *last = Some((seed, b.clone()));
            b
        }
    };
    Deterministic::new(bytes.to_vec())
}

struct FixedWallClock;

impl HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::from_secs(FIXED_WALL_CLOCK_SECS)
    }
}

/// The memory refusal, as the error that ends the call.
#[derive(Debug, thiserror::Error)]
#[error(
    "memory limit: the plugin asked for {desired} bytes of linear memory; the sandbox allows {limit}"
)]
pub struct MemoryLimitHit {
    pub desired: usize,
    pub limit: u64,
}

/// Caps linear memory, and tables at a million elements.
pub struct MemoryCap {
    limit: u64,
    /// Bytes of every memory this store has grown, so many small memories
    /// cannot add up past the cap.
    total: u64,
    /// Bytes the host holds for the plugin (tensors it opened): memory it
    /// causes, charged to the same cap as its own.
    host: u64,
}

impl MemoryCap {
    fn new(limit: u64) -> MemoryCap {
        MemoryCap {
            limit,
            total: 0,
            host: 0,
        }
    }

    /// Charges `bytes` of host memory held for the plugin, or says why not.
    pub(crate) fn charge_host(&mut self, bytes: u64) -> Result<(), String> {
        let used = self.total.saturating_add(self.host);
        if used.saturating_add(bytes) > self.limit {
            return Err(format!(
                "{bytes} more bytes would pass the plugin's memory limit of {} ({} in its linear memory, {} held by the host for its open tensors)",
                self.limit, self.total, self.host
            ));
        }
        self.host += bytes;
        Ok(())
    }

    /// Gives back host memory charged with [`MemoryCap::charge_host`].
    pub(crate) fn release_host(&mut self, bytes: u64) {
        self.host = self.host.saturating_sub(bytes);
    }

    /// Host memory held for the plugin.
    pub fn host_bytes(&self) -> u64 {
        self.host
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grown = (desired - current) as u64;
        if self.total.saturating_add(self.host).saturating_add(grown) > self.limit {
            // An error, not `Ok(false)`: a refused grow makes Rust guests
            // abort with `unreachable`, which would hide the cause.
            return Err(MemoryLimitHit {
                desired,
                limit: self.limit,
            }
            .into());
        }
        self.total += grown;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        64
    }
    fn tables(&self) -> usize {
        64
    }
    fn memories(&self) -> usize {
        16
    }
}

/// A byte sink that keeps the first `capacity` bytes and counts the rest.
/// Writes never fail: a chatty plugin keeps running (Rust's `eprintln!`
/// panics on a failed write).
#[derive(Clone)]
pub struct BoundedPipe {
    inner: Arc<Mutex<PipeBuffer>>,
}

struct PipeBuffer {
    kept: Vec<u8>,
    capacity: usize,
    dropped: u64,
}

impl BoundedPipe {
    pub fn new(capacity: usize) -> BoundedPipe {
        BoundedPipe {
            inner: Arc::new(Mutex::new(PipeBuffer {
                kept: Vec::new(),
                capacity,
                dropped: 0,
            })),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut b = self.inner.lock().expect("no panics while held");
        let room = b.capacity.saturating_sub(b.kept.len());
        let take = room.min(bytes.len());
        b.kept.extend_from_slice(&bytes[..take]);
        b.dropped += (bytes.len() - take) as u64;
    }

    /// What was kept, as text, with a note of how much was not.
    pub fn contents(&self) -> String {
        let b = self.inner.lock().expect("no panics while held");
        let mut s = String::from_utf8_lossy(&b.kept).into_owned();
        if b.dropped > 0 {
            s.push_str(&format!("\n[... {} more bytes not kept]", b.dropped));
        }
        s
    }
}

impl IsTerminal for BoundedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for BoundedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for BoundedPipe {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for BoundedPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for BoundedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_keeps_the_first_bytes_and_counts_the_rest() {
        let p = BoundedPipe::new(5);
        p.push(b"hello world");
        p.push(b"!");
        assert_eq!(p.contents(), "hello\n[... 7 more bytes not kept]");
    }

    #[test]
    fn memory_cap_names_the_limit_and_counts_every_grow() {
        let mut cap = MemoryCap::new(100);
        assert!(cap.memory_growing(0, 60, None).unwrap());
        let e = cap.memory_growing(60, 120, None).unwrap_err();
        assert!(e.to_string().contains("memory limit"), "{e}");
        assert!(cap.memory_growing(0, 40, None).unwrap());
        assert!(cap.memory_growing(0, 1, None).is_err());
    }
}
