//! The command-line form of an intervention,
//! `layer=10,mode=subtract,direction=FILE,alpha=1.0`: comma-separated
//! `key=value` entries, parsed strictly (an unknown or repeated key is an
//! error, never ignored) and resolved against a model before any run.
//!
//! A direction path cannot contain a comma; everything after the first `=`
//! of an entry is its value.

use std::path::PathBuf;
use std::str::FromStr;

use super::InterveneError;
use super::direction::load_direction;
use super::primitive::{Condition, Intervention, Mode, Positions, parse_positions, parse_when};

/// Every key a spec may hold.
const KEYS: [&str; 10] = [
    "layer",
    "mode",
    "direction",
    "alpha",
    "tensor",
    "row",
    "value",
    "positions",
    "when",
    "threshold",
];

/// An intervention as written on the command line, before its direction
/// file is read.
#[derive(Debug, Clone, PartialEq)]
pub struct InterventionSpec {
    pub layer: usize,
    pub mode: Mode,
    pub direction: PathBuf,
    pub tensor: Option<String>,
    pub row: Option<usize>,
    /// 1.0 unless given.
    pub alpha: f32,
    /// The clamp target: required for clamp, refused otherwise.
    pub value: Option<f32>,
    /// All unless given.
    pub positions: Positions,
    /// Set by `threshold=` (with `when=`, default above).
    pub condition: Option<Condition>,
}

impl FromStr for InterventionSpec {
    type Err = InterveneError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |problem: String| InterveneError::Spec {
            text: text.to_owned(),
            problem,
        };
        let mut entries: Vec<(&str, &str)> = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let Some((key, value)) = part.split_once('=') else {
                return Err(err(format!(
                    "`{part}` is not key=value; entries are separated by commas, e.g. layer=10,mode=subtract,direction=d.safetensors"
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            if !KEYS.contains(&key) {
                return Err(err(format!(
                    "unknown key `{key}`; valid keys: {}",
                    crate::text::list(&KEYS)
                )));
            }
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(err(format!("key `{key}` is given twice; give it once")));
            }
            if value.is_empty() {
                return Err(err(format!("`{key}=` has no value")));
            }
            entries.push((key, value));
        }
        let get = |key: &str| entries.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let required = |key: &str, what: &str| {
            get(key).ok_or_else(|| {
                err(format!(
                    "{key}= is missing ({what}); layer, mode and direction are required"
                ))
            })
        };
        let index = |key: &str, v: &str| {
            v.parse::<usize>().map_err(|_| {
                err(format!(
                    "{key}=`{v}` is not an index; write a whole number such as {key}=0"
                ))
            })
        };
        let number = |key: &str, v: &str| match v.parse::<f32>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(err(format!(
                "{key}=`{v}` is not a finite number; write e.g. {key}=0.5"
            ))),
        };

        let layer = index(
            "layer",
            required("layer", "the block whose output to change")?,
        )?;
        let mode = required("mode", "what to do along the direction")?;
        let mode = mode.parse::<Mode>().map_err(|_| {
            err(format!(
                "mode=`{mode}` is unknown; valid modes: {}",
                Mode::names()
            ))
        })?;
        let direction = PathBuf::from(required("direction", "the direction file")?);
        let alpha = get("alpha")
            .map(|v| number("alpha", v))
            .transpose()?
            .unwrap_or(1.0);
        let value = get("value").map(|v| number("value", v)).transpose()?;
        match (mode, value) {
            (Mode::Clamp, None) => {
                return Err(err(
                    "mode=clamp needs value=V, the component to set along the direction".into(),
                ));
            }
            (m, Some(_)) if m != Mode::Clamp => {
                return Err(err(format!(
                    "value= is the clamp target, but mode is `{m}`; drop value= or use mode=clamp"
                )));
            }
            _ => {}
        }
        let positions = get("positions")
            .map(parse_positions)
            .transpose()
            .map_err(err)?
            .unwrap_or_default();
        let when = get("when").map(parse_when).transpose().map_err(err)?;
        let threshold = get("threshold")
            .map(|v| number("threshold", v))
            .transpose()?;
        let condition = match (threshold, when) {
            (Some(threshold), when) => Some(Condition {
                when: when.unwrap_or_default(),
                threshold,
            }),
            (None, Some(w)) => {
                return Err(err(format!(
                    "when={w} needs threshold=T, the projection to compare with; add it or drop when="
                )));
            }
            (None, None) => None,
        };
        Ok(InterventionSpec {
            layer,
            mode,
            direction,
            tensor: get("tensor").map(str::to_owned),
            row: get("row").map(|v| index("row", v)).transpose()?,
            alpha,
            value,
            positions,
            condition,
        })
    }
}

impl InterventionSpec {
    /// Loads the direction and checks it against the model: layer <
    /// `layers`, width == `hidden`, finite values, the row and tensor
    /// choice, a unit direction for clamp, and exactly one row for
    /// single-direction modes (a `[k, d]` tensor with k > 1 needs `row=N`
    /// or a subspace_* mode; a `[d]` tensor is one row).
    pub fn resolve(&self, hidden: usize, layers: usize) -> Result<Intervention, InterveneError> {
        if self.layer >= layers {
            return Err(InterveneError::LayerOutOfRange {
                layer: self.layer,
                layers,
            });
        }
        let direction = load_direction(
            &self.direction,
            self.tensor.as_deref(),
            self.row,
            self.layer,
        )?;
        let width = direction.width();
        if width != hidden {
            return Err(InterveneError::WidthMismatch { width, hidden });
        }
        let intervention = Intervention {
            layer: self.layer,
            mode: self.mode,
            direction,
            alpha: self.alpha,
            value: self.value,
            positions: self.positions,
            condition: self.condition,
        };
        intervention.check()?;
        Ok(intervention)
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::intervene::When;

    fn parse(s: &str) -> Result<InterventionSpec, String> {
        s.parse::<InterventionSpec>().map_err(|e| e.to_string())
    }

    #[test]
    fn parses_the_full_form_and_defaults() {
        let s = parse("layer=10,mode=subtract,direction=d.safetensors").unwrap();
        assert_eq!(
            s,
            InterventionSpec {
                layer: 10,
                mode: Mode::Subtract,
                direction: PathBuf::from("d.safetensors"),
                tensor: None,
                row: None,
                alpha: 1.0,
                value: None,
                positions: Positions::All,
                condition: None,
            }
        );
        let s = parse(
            "layer=3, mode=clamp, direction=cv.gguf, alpha=0.5, tensor=direction.3, row=0, value=-2, positions=4.., when=below, threshold=1e-2",
        )
        .unwrap();
        assert_eq!(s.mode, Mode::Clamp);
        assert_eq!(s.alpha, 0.5);
        assert_eq!(s.tensor.as_deref(), Some("direction.3"));
        assert_eq!(s.row, Some(0));
        assert_eq!(s.value, Some(-2.0));
        assert_eq!(
            s.positions,
            Positions::Range {
                start: 4,
                end: None
            }
        );
        assert_eq!(
            s.condition,
            Some(Condition {
                when: When::Below,
                threshold: 0.01
            })
        );
        let s = parse("layer=1,mode=add,direction=d.npy,threshold=2,positions=last").unwrap();
        assert_eq!(s.condition.unwrap().when, When::Above);
        assert_eq!(s.positions, Positions::Last);
    }

    #[test]
    fn parse_errors_name_the_text_and_the_fix() {
        let e = parse("layer=1,mode=add,direction=d.npy,scale=2").unwrap_err();
        assert!(
            e.contains("unknown key `scale`") && e.contains("alpha, tensor"),
            "{e}"
        );
        let e = parse("mode=add,direction=d.npy").unwrap_err();
        assert!(e.contains("layer= is missing"), "{e}");
        let e = parse("layer=1,layer=2,mode=add,direction=d.npy").unwrap_err();
        assert!(e.contains("`layer` is given twice"), "{e}");
        let e = parse("layer=1,mode=add,direction=d.npy,positions=3-5").unwrap_err();
        assert!(e.contains("positions `3-5`") && e.contains("N..M"), "{e}");
        let e = parse("layer=1,mode=add,direction=d.npy,positions=5..5").unwrap_err();
        assert!(e.contains("5..6"), "{e}");
        let e = parse("layer=1,mode=add,direction=d.npy,value=3").unwrap_err();
        assert!(e.contains("mode=clamp") && e.contains("`add`"), "{e}");
        let e = parse("layer=1,mode=clamp,direction=d.npy").unwrap_err();
        assert!(e.contains("needs value="), "{e}");
        let e = parse("layer=1,mode=remove,direction=d.npy").unwrap_err();
        assert!(
            e.contains("`remove`") && e.contains("subspace_remove"),
            "{e}"
        );
        let e = parse("layer=1,mode=add,direction=d.npy,alpha=nan").unwrap_err();
        assert!(e.contains("alpha=`nan`") && e.contains("finite"), "{e}");
        let e = parse("layer=ten,mode=add,direction=d.npy").unwrap_err();
        assert!(e.contains("layer=`ten`"), "{e}");
        let e = parse("layer=1,mode=add,direction=d.npy,when=above").unwrap_err();
        assert!(e.contains("threshold="), "{e}");
        let e = parse("layer=1,mode=add,direction=d.npy,when=over,threshold=1").unwrap_err();
        assert!(e.contains("when `over`"), "{e}");
        let e = parse("layer=1,mode=add,direction").unwrap_err();
        assert!(e.contains("`direction` is not key=value"), "{e}");
        let e = parse("layer=1,mode=add,direction=").unwrap_err();
        assert!(e.contains("`direction=` has no value"), "{e}");
        // The whole spec is quoted in every message.
        assert!(e.starts_with("intervention spec `layer=1,mode=add,direction=`"));
    }

    #[test]
    fn resolve_checks_against_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dirs.safetensors");
        let values: Vec<u8> = [0f32, 1.0, 0.0, 0.0, 0.0, 2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3], &values)
                .unwrap();
        std::fs::write(&path, safetensors::serialize([("b", view)], None).unwrap()).unwrap();
        let spec = |extra: &str| {
            format!("direction={},{extra}", path.display())
                .parse::<InterventionSpec>()
                .unwrap()
        };

        let err = spec("layer=1,mode=subtract").resolve(3, 4).unwrap_err();
        assert!(
            matches!(err, InterveneError::OneRowNeeded { rows: 2, .. }),
            "{err}"
        );
        let iv = spec("layer=1,mode=subtract,row=0").resolve(3, 4).unwrap();
        assert_eq!((iv.direction.rows(), iv.direction.row), (1, Some(0)));
        let iv = spec("layer=1,mode=subspace_remove").resolve(3, 4).unwrap();
        assert_eq!(iv.direction.norms, vec![1.0, 2.0]);
        assert_eq!(iv.record()["direction"]["rows"], 2);

        let err = spec("layer=4,mode=subspace_remove")
            .resolve(3, 4)
            .unwrap_err();
        assert!(err.to_string().contains("layer 4 is out of range"), "{err}");
        let err = spec("layer=1,mode=subspace_remove")
            .resolve(4096, 4)
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("width 3") && msg.contains("4096"), "{msg}");
        let err = spec("layer=1,mode=clamp,value=1,row=1")
            .resolve(3, 4)
            .unwrap_err();
        assert!(matches!(err, InterveneError::NotUnit { norm } if norm == 2.0));
        assert!(
            spec("layer=1,mode=clamp,value=1,row=0")
                .resolve(3, 4)
                .is_ok()
        );
    }
}
