//! Each kernel on its own: a SmolLM2-sized FFN matrix (1536 × 576, and
//! 6144 × 2048 for a 1-3B model's) with random blocks, times one row of
//! activations (decode: weight GB/s, to set against the machine's
//! bandwidth) and 128 rows (a prompt: giga multiply-adds per second), for
//! every format and every instruction set this CPU runs. Those matrices
//! stay in the last-level cache; a 16384 × 8192 one (75 to 270 MB) times
//! one row on every kernel but the portable ones, read from memory as a
//! model's decode reads its weights. Prints figures; asserts nothing.
//!
//! First, the ceiling for the m=128 figures on AVX-512: the rate of
//! independent 512-bit f32 multiply-adds one core sustains, times the
//! threads (what no f32 kernel can pass).
//!
//! Run: `cargo bench -p vauban-kernels --bench kernels [-- Q4_K Q6_K]`
//! (format names: only those).

use std::time::Instant;

use vauban_kernels::{Format, Isa, QMatrix};

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut byte = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u8
    };
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F.
        let one = unsafe { fma_peak() };
        let threads = vauban_kernels::pool::Pool::global().threads();
        println!(
            "f32 multiply-add peak (512-bit FMA, 16 chains): {one:.1} GMAC/s a core, \
             {:.1} on {threads} threads",
            one * threads as f64
        );
    }
    println!(
        "threads {}; {:<6} {:<19} {:>12} {:>12} {:>14}",
        vauban_kernels::pool::Pool::global().threads(),
        "format",
        "kernels",
        "shape",
        "m=1 GB/s",
        "m=128 GMAC/s"
    );
    for (rows, cols) in [(1536, 576), (6144, 2048), (16384, 8192)] {
        // Past the last-level cache: one row, the fastest kernels.
        let memory = rows * cols > 1 << 26;
        for format in Format::ALL {
            if cols % format.block_len() != 0
                || !(only.is_empty() || only.iter().any(|o| o == format.name()))
            {
                continue;
            }
            let blocks = rows * cols / format.block_len();
            let mut data: Vec<u8> = (0..blocks * format.block_bytes()).map(|_| byte()).collect();
            // Sane f16 scales (random bits can be NaN).
            for b in data.chunks_exact_mut(format.block_bytes()) {
                for &at in format.factor_offsets() {
                    b[at..at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
                }
            }
            let w = QMatrix::new(format, rows, cols, data.clone()).unwrap();
            // The same matrix repacked for the 512-bit kernels, where they
            // take its format.
            let p = QMatrix::new(format, rows, cols, data).unwrap().packed();
            let x: Vec<f32> = (0..128 * cols)
                .map(|i| ((i * 7919) % 255) as f32 / 127.0 - 1.0)
                .collect();
            let packed = p.is_packed().then_some((&p, Isa::Avx512Vnni));
            let runs = Isa::available().iter().map(|&isa| (&w, isa)).chain(packed);
            // From memory: every kernel but the portable ones (minutes).
            let runs: Vec<_> = match memory {
                true => runs.filter(|(_, isa)| *isa != Isa::Portable).collect(),
                false => runs.collect(),
            };
            for (w, isa) in runs {
                let mut y = vec![0f32; 128 * rows];
                let time = |m: usize, y: &mut [f32], reps: usize| {
                    w.matmul_on(isa, &x[..m * cols], m, &mut y[..m * rows]);
                    let t = Instant::now();
                    for _ in 0..reps {
                        w.matmul_on(isa, &x[..m * cols], m, &mut y[..m * rows]);
                    }
                    t.elapsed().as_secs_f64() / reps as f64
                };
                let one = time(1, &mut y, if memory { 20 } else { 200 });
                let many = if memory {
                    f64::NAN
                } else {
                    time(128, &mut y, 5)
                };
                println!(
                    "           {:<6} {:<19} {:>12} {:>12.1} {:>14.1}",
                    format.name(),
                    format!(
                        "{}{}",
                        isa.name(),
                        if w.is_packed() { " packed" } else { "" }
                    ),
                    format!("{rows}x{cols}"),
                    w.bytes() as f64 / one / 1e9,
                    (128 * rows * cols) as f64 / many / 1e9
                );
            }
        }
    }
}

/// Multiply-adds a second one core sustains on 16 independent chains of
/// 512-bit FMAs (more than the latency times the issue width), in
/// billions. Written in assembly: the point is the instruction's rate, and
/// a compiler may keep chains in memory or reorder them.
///
/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_peak() -> f64 {
    const ITERS: usize = 20_000_000;
    let t = Instant::now();
    // SAFETY: AVX-512 F (the caller's promise); touches only zmm0-17 and
    // the counter, declared clobbered.
    unsafe {
        std::arch::asm!(
            "vxorps zmm16, zmm16, zmm16",
            "vxorps zmm17, zmm17, zmm17",
            "2:",
            "vfmadd231ps zmm0, zmm16, zmm17",
            "vfmadd231ps zmm1, zmm16, zmm17",
            "vfmadd231ps zmm2, zmm16, zmm17",
            "vfmadd231ps zmm3, zmm16, zmm17",
            "vfmadd231ps zmm4, zmm16, zmm17",
            "vfmadd231ps zmm5, zmm16, zmm17",
            "vfmadd231ps zmm6, zmm16, zmm17",
            "vfmadd231ps zmm7, zmm16, zmm17",
            "vfmadd231ps zmm8, zmm16, zmm17",
            "vfmadd231ps zmm9, zmm16, zmm17",
            "vfmadd231ps zmm10, zmm16, zmm17",
            "vfmadd231ps zmm11, zmm16, zmm17",
            "vfmadd231ps zmm12, zmm16, zmm17",
            "vfmadd231ps zmm13, zmm16, zmm17",
            "vfmadd231ps zmm14, zmm16, zmm17",
            "vfmadd231ps zmm15, zmm16, zmm17",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) ITERS => _,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
            out("zmm16") _, out("zmm17") _,
            options(nostack, nomem),
        );
    }
    (ITERS * 16 * 16) as f64 / t.elapsed().as_secs_f64() / 1e9
}
