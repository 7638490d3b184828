//! The gated MLP's activation, `act(gate) · up`: what every family's MLP
//! runs between its two products, in one pass over both, across the
//! pool's threads.

use std::sync::Mutex;

use crate::pool::Pool;

/// The gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `x · σ(x)` (SwiGLU: llama, Qwen, OLMo, Phi).
    Silu,
    /// The tanh approximation of GELU (GeGLU: Gemma).
    GeluTanh,
}

/// Values per task: a prompt's gate splits across the threads; a decode
/// step's (one row) stays on the calling thread.
const CHUNK: usize = 8 * 1024;

/// `2·√(2/π)`.
const TWO_K: f32 = 2.0 * 0.797_884_6;

/// `out[i] = act(gate[i]) · up[i]`. tanh-GELU is computed as `x / (1 +
/// e^(−2y))`, which equals `x · ½(1 + tanh y)` with `y = √(2/π)(x +
/// 0.044715x³)`: one `exp` per value, as SiLU takes, where libm's `tanh`
/// (what candle's `gelu` calls) costs several times more.
pub fn gated(act: Gate, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && up.len() == out.len(),
        "gate, up and out are one length"
    );
    let parts: Vec<Mutex<&mut [f32]>> = out.chunks_mut(CHUNK).map(Mutex::new).collect();
    let run = |i: usize| {
        let mut part = parts[i].lock().expect("each task locks its own part");
        let start = i * CHUNK;
        let (g, u) = (
            &gate[start..start + part.len()],
            &up[start..start + part.len()],
        );
        let values = part.iter_mut().zip(g).zip(u);
        match act {
            Gate::Silu => values.for_each(|((o, &x), &v)| *o = x / (1.0 + (-x).exp()) * v),
            Gate::GeluTanh => values.for_each(|((o, &x), &v)| {
                *o = x / (1.0 + (-TWO_K * (x + 0.044_715 * x * x * x)).exp()) * v
            }),
        }
    };
    match parts.len() {
        0 => {}
        1 => run(0),
        n => Pool::global().run(n, &run),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definitions, in f64.
    fn reference(act: Gate, x: f64) -> f64 {
        match act {
            Gate::Silu => x / (1.0 + (-x).exp()),
            Gate::GeluTanh => {
                let y = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                0.5 * x * (1.0 + y.tanh())
            }
        }
    }

    #[test]
    fn both_activations_match_their_definitions_across_the_threads() {
        // More values than one task holds, from −20 to 20, and up ≠ 1.
        let n = 3 * CHUNK + 17;
        let gate: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 40.0).collect();
        let up: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        for act in [Gate::Silu, Gate::GeluTanh] {
            let mut out = vec![f32::NAN; n];
            gated(act, &gate, &up, &mut out);
            let mut worst = 0f64;
            for ((&x, &v), &o) in gate.iter().zip(&up).zip(&out) {
                let want = reference(act, x as f64) * v as f64;
                let err = (o as f64 - want).abs() / want.abs().max(1e-3);
                worst = worst.max(err);
            }
            assert!(worst < 2e-6, "{act:?}: relative error {worst:e}");
            // Far in the tails: the limits, never NaN.
            let mut tails = [0f32; 2];
            gated(act, &[-100.0, 100.0], &[1.0, 1.0], &mut tails);
            assert_eq!(tails[1], 100.0, "{act:?}");
            assert!(
                tails[0].abs() < 1e-30 && !tails[0].is_nan(),
                "{act:?}: {}",
                tails[0]
            );
        }
    }
}
