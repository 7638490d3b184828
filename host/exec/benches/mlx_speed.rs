//! MLX's f32 matrix product on this machine's CPU (the BLAS that
//! scripts/setup-mlx.sh swapped into the PyPI wheel): GFLOP/s of an n×n
//! product for a few n, median of `--reps` (default 5). Prints figures;
//! asserts nothing.
//!
//! Run: `eval "$(bash scripts/setup-mlx.sh)"; cargo bench -p vauban-exec
//! --features mlx --bench mlx_speed -- [--reps N]`.

use std::time::Instant;

use mlx_rs::Array;

fn main() -> anyhow::Result<()> {
    let mut reps = 5;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--reps" {
            reps = args.next().unwrap_or_default().parse()?;
        }
    }
    println!("n       GFLOP/s (median of {reps})");
    for n in [512usize, 1024, 2048] {
        let values: Vec<f32> = (0..n * n)
            .map(|i| ((i % 97) as f32 - 48.0) / 97.0)
            .collect();
        let a = Array::from_slice(&values, &[n as i32, n as i32]);
        let mut times = Vec::new();
        for _ in 0..reps + 1 {
            let start = Instant::now();
            let c = a.matmul(&a)?;
            c.eval()?;
            times.push(start.elapsed().as_secs_f64());
        }
        // The first product warms the BLAS threads up.
        times.remove(0);
        times.sort_by(f64::total_cmp);
        let t = times[times.len() / 2];
        println!("{n:<7} {:.1}", 2.0 * (n as f64).powi(3) / t / 1e9);
    }
    Ok(())
}
