//! Each kernel on its own: a SmolLM2-sized FFN matrix (1536 × 576, and
//! 6144 × 2048 for a 1-3B model's) with random blocks, times one row of
//! activations (decode: weight GB/s, to set against the machine's
//! bandwidth) and 128 rows (a prompt: giga multiply-adds per second), for
//! every format and every instruction set this CPU runs. Those matrices
//! stay in the last-level cache; a 16384 × 8192 one (75 to 270 MB) times
//! one row on every kernel but the portable ones, read from memory as a
//! model's decode reads its weights. Prints figures; asserts nothing.
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
