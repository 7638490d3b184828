//! The activation primitive per call, on the CPU: candle's tensor path
//! (the reference) against vauban-kernels' fused pass, on the shapes a
//! traced run calls it with: a decode step's one token and a prompt's 128,
//! at SmolLM2's width (576) and a 7-8B model's (4096), one direction
//! (`subtract`, `project`) and a subspace of 4 (`subspace_remove`), with a
//! condition. Median µs per call of `--reps` rounds (default 7) of
//! `--calls` calls each (default 2000 for one token, 50 for 128), and the
//! ratio. Prints figures; asserts nothing (the gate tests check that both
//! give one outcome).
//!
//! Run: `cargo bench -p vauban-exec --bench primitive -- [--reps N]`.

use std::time::Instant;

use candle_core::{Device, Tensor};
use vauban_exec::executor::candle::intervene::{apply_fused, apply_with, basis_tensor};
use vauban_exec::intervene::{Condition, Direction, Intervention, Mode, Positions, When};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `k` orthonormal rows of width `d`, deterministic.
fn basis(k: usize, d: usize) -> Vec<f32> {
    let mut rows: Vec<Vec<f32>> = Vec::new();
    for j in 0..k {
        let mut r: Vec<f32> = (0..d)
            .map(|i| ((i * 7 + j * 13) as f32 * 0.37).sin())
            .collect();
        for q in &rows {
            let dot: f32 = r.iter().zip(q).map(|(a, b)| a * b).sum();
            r.iter_mut().zip(q).for_each(|(a, b)| *a -= dot * b);
        }
        let norm = r.iter().map(|a| a * a).sum::<f32>().sqrt();
        rows.push(r.iter().map(|a| a / norm).collect());
    }
    rows.concat()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(7), |v| v.parse())?;
    println!(
        "the activation primitive per call (median of {reps} rounds; {} threads)",
        vauban_kernels::pool::Pool::global().threads()
    );
    println!(
        "{:<34} {:>12} {:>12} {:>8}",
        "case", "tensor µs", "fused µs", "speed-up"
    );
    for d in [576, 4096] {
        for tokens in [1, 128] {
            for (mode, k, condition) in [
                (Mode::Subtract, 1, None),
                (Mode::Project, 1, None),
                (
                    Mode::Subtract,
                    1,
                    Some(Condition {
                        when: When::Above,
                        threshold: 0.0,
                    }),
                ),
                (Mode::SubspaceRemove, 4, None),
            ] {
                let direction =
                    Direction::new("bench.safetensors", "b", "00", None, &basis(k, d), &[k, d])?;
                let iv = Intervention {
                    layer: 0,
                    mode,
                    direction,
                    alpha: 1.0,
                    value: None,
                    positions: Positions::All,
                    condition,
                };
                let values: Vec<f32> = (0..tokens * d)
                    .map(|i| ((i as f32) * 0.013).cos() * 2.0)
                    .collect();
                let h = Tensor::from_vec(values, (1, tokens, d), &Device::Cpu)?;
                let calls = if tokens == 1 { 2000 } else { 50 };
                // As a session holds it: the basis made once, on h's device.
                let on_device = basis_tensor(&iv.direction, h.device())?;
                let time = |fused: bool| -> anyhow::Result<f64> {
                    let mut rounds = Vec::new();
                    for _ in 0..reps {
                        let start = Instant::now();
                        for _ in 0..calls {
                            let out = match fused {
                                true => apply_fused(&iv, &h, 0)?,
                                false => apply_with(&iv, &on_device, &h, 0)?,
                            };
                            std::hint::black_box(out);
                        }
                        rounds.push(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
                    }
                    Ok(median(rounds))
                };
                let (tensor, fused) = (time(false)?, time(true)?);
                let case = format!(
                    "{}{} d{d} ×{tokens}",
                    mode.as_str(),
                    if condition.is_some() { " (cond)" } else { "" }
                );
                println!(
                    "{case:<34} {tensor:>12.2} {fused:>12.2} {:>7.1}×",
                    tensor / fused
                );
            }
        }
    }
    Ok(())
}
