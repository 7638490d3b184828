//! Each tensor library's activation primitive (libtorch's, MLX's: those
//! this build has) against candle's: every mode, with positions (all,
//! last, a range across a decode offset) and a condition, on the same
//! activations of two batch rows: the same projections, tokens touched,
//! new activations and norm of the change, to f32 rounding.
#![cfg(any(feature = "torch", feature = "mlx"))]

use vauban_exec::executor::candle::intervene as candle_iv;
use vauban_exec::intervene::{
    Condition, Direction, InterveneError, Intervention, Mode, Outcome, Positions, When,
};

const D: usize = 16;

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// One unit row for the single-direction modes, two orthonormal rows for
/// the subspace modes.
fn direction(subspace: bool) -> Direction {
    let mut a = vec![0f32; D];
    a[1] = 0.6;
    a[4] = 0.8;
    let mut rows = a.clone();
    let mut shape = vec![D];
    if subspace {
        let mut b = vec![0f32; D];
        b[7] = 1.0;
        rows.extend(b);
        shape = vec![2, D];
    }
    Direction::new("test", "direction", "", None, &rows, &shape).unwrap()
}

/// A backend's primitive on `[batch, tokens, hidden]` values, its new
/// activation brought back to the host.
type Apply =
    fn(&Intervention, &[f32], [usize; 3], usize) -> Result<Outcome<Vec<f32>>, InterveneError>;

#[cfg(feature = "torch")]
fn torch(
    iv: &Intervention,
    values: &[f32],
    shape: [usize; 3],
    offset: usize,
) -> Result<Outcome<Vec<f32>>, InterveneError> {
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let h = tch::Tensor::from_slice(values).reshape(dims);
    let out = vauban_exec::executor::torch::intervene::apply(iv, &h, offset)?;
    Ok(Outcome {
        hidden: out
            .hidden
            .map(|h| Vec::<f32>::try_from(&h.flatten(0, -1)).unwrap()),
        projections: out.projections,
        applied: out.applied,
        delta_norm: out.delta_norm,
    })
}

#[cfg(feature = "mlx")]
fn mlx(
    iv: &Intervention,
    values: &[f32],
    shape: [usize; 3],
    offset: usize,
) -> Result<Outcome<Vec<f32>>, InterveneError> {
    let dims: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
    let h = mlx_rs::Array::from_slice(values, &dims);
    let out = vauban_exec::executor::mlx::intervene::apply(iv, &h, offset)?;
    Ok(Outcome {
        hidden: out.hidden.map(|h| h.as_slice::<f32>().to_vec()),
        projections: out.projections,
        applied: out.applied,
        delta_norm: out.delta_norm,
    })
}

/// The primitives this build has, by name.
fn backends() -> Vec<(&'static str, Apply)> {
    vec![
        #[cfg(feature = "torch")]
        ("torch", torch as Apply),
        #[cfg(feature = "mlx")]
        ("mlx", mlx as Apply),
    ]
}

#[test]
fn every_mode_matches_candles() {
    for (name, apply) in backends() {
        every_mode_matches(name, apply);
    }
}

fn every_mode_matches(name: &str, apply: Apply) {
    let mut seed = 7u64;
    let (b, t, offset) = (2usize, 5usize, 3usize);
    let values: Vec<f32> = (0..b * t * D).map(|_| lcg(&mut seed) * 2.0).collect();
    let h_candle =
        candle_core::Tensor::from_slice(&values, (b, t, D), &candle_core::Device::Cpu).unwrap();
    let mut checked = 0;
    for mode in Mode::ALL {
        for positions in [
            Positions::All,
            Positions::Last,
            Positions::Range {
                start: 4,
                end: Some(7),
            },
        ] {
            for condition in [
                None,
                Some(Condition {
                    when: When::Above,
                    threshold: 0.1,
                }),
            ] {
                let iv = Intervention {
                    layer: 0,
                    mode,
                    direction: direction(mode.subspace()),
                    alpha: 0.7,
                    value: (mode == Mode::Clamp).then_some(1.5),
                    positions,
                    condition,
                };
                let what = format!("{name}: {mode:?} {positions:?} {condition:?}");
                let want = candle_iv::apply(&iv, &h_candle, offset).unwrap();
                let got = apply(&iv, &values, [b, t, D], offset).unwrap();
                assert_eq!(got.applied, want.applied, "{what}: tokens touched");
                for (g, w) in got
                    .projections
                    .iter()
                    .flatten()
                    .zip(want.projections.iter().flatten())
                {
                    assert!((g - w).abs() < 1e-5, "{what}: projection {g} against {w}");
                }
                assert!(
                    (got.delta_norm - want.delta_norm).abs() <= 1e-5 * want.delta_norm.max(1.0),
                    "{what}: |change| {} against {}",
                    got.delta_norm,
                    want.delta_norm
                );
                match (&got.hidden, &want.hidden) {
                    (None, None) => {}
                    (Some(g), Some(w)) => {
                        let w = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                        assert_eq!(g.len(), w.len(), "{what}: shape");
                        let worst = g
                            .iter()
                            .zip(&w)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0f32, f32::max);
                        assert!(worst < 1e-5, "{what}: max |Δ| {worst}");
                    }
                    (g, w) => panic!("{what}: hidden {} against {}", g.is_some(), w.is_some()),
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 8 * 3 * 2);
}

#[test]
fn a_direction_of_another_width_is_refused() {
    let iv = Intervention {
        layer: 0,
        mode: Mode::Subtract,
        direction: direction(false),
        alpha: 1.0,
        value: None,
        positions: Positions::All,
        condition: None,
    };
    for (name, apply) in backends() {
        let err = apply(&iv, &[0.0; 2 * (D + 1)], [1, 2, D + 1], 0)
            .err()
            .unwrap_or_else(|| panic!("{name}: a direction of width {D} on {}", D + 1))
            .to_string();
        assert!(
            err.contains(&D.to_string()) && err.contains(&(D + 1).to_string()),
            "{name}: {err}"
        );
    }
}
