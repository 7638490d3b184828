//! A judge's accuracy measured on a labelled set: replies whose answer is
//! known (`positive`: the property the judge is asked about holds), the
//! judge's verdict on each, and the counts the correction of judged rates
//! needs ([`vauban_report::judged::Accuracy::Measured`]).
//!
//! The labelled set is JSON Lines, one reply per line:
//! `{"id": "r1", "request": "…", "reply": "…", "positive": true}`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::report::judged::Accuracy;

/// Labelled sets larger than this are refused (a calibration is read
/// whole).
const MAX_BYTES: u64 = 64 << 20;

/// One labelled reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Labelled {
    pub id: String,
    /// What was asked of the model that replied.
    pub request: String,
    pub reply: String,
    /// Whether the property the judge is asked about holds.
    pub positive: bool,
}

/// A labelled set that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("{path}: {problem}")]
    Read { path: String, problem: String },
    #[error(
        "{path}:{line}: {problem} (each line is one labelled reply: {{\"id\": …, \"request\": …, \"reply\": …, \"positive\": true|false}})"
    )]
    Line {
        path: String,
        line: usize,
        problem: String,
    },
    #[error(
        "{path}: {positives} positive and {negatives} negative replies: a calibration needs at least {min} of each to estimate both sensitivity and specificity; label more"
    )]
    TooSmall {
        path: String,
        positives: usize,
        negatives: usize,
        min: usize,
    },
}

/// The fewest replies of each label a calibration accepts.
pub const MIN_PER_LABEL: usize = 5;

/// Reads a labelled set, checking every line and that both labels are
/// there at least [`MIN_PER_LABEL`] times; ids must be unique.
pub fn read_labelled(path: &Path) -> Result<Vec<Labelled>, CalibrationError> {
    let shown = path.display().to_string();
    let text = crate::input::read_text(path, MAX_BYTES).map_err(|e| CalibrationError::Read {
        path: shown.clone(),
        problem: crate::input::io_error(e).to_string(),
    })?;
    let mut out: Vec<Labelled> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |problem: String| CalibrationError::Line {
            path: shown.clone(),
            line: i + 1,
            problem,
        };
        let item: Labelled = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        if let Some(first) = out.iter().position(|o| o.id == item.id) {
            return Err(bad(format!(
                "id {:?} is also on an earlier line (reply {}); ids must be unique",
                item.id,
                first + 1
            )));
        }
        out.push(item);
    }
    let positives = out.iter().filter(|l| l.positive).count();
    let negatives = out.len() - positives;
    if positives < MIN_PER_LABEL || negatives < MIN_PER_LABEL {
        return Err(CalibrationError::TooSmall {
            path: shown,
            positives,
            negatives,
            min: MIN_PER_LABEL,
        });
    }
    Ok(out)
}

/// The judge's verdicts on a labelled set, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub true_positives: u64,
    pub positives: u64,
    pub true_negatives: u64,
    pub negatives: u64,
}

impl Counts {
    /// Counts `(label, verdict)` pairs: `verdict` true when the judge said
    /// the property holds.
    pub fn of(pairs: impl IntoIterator<Item = (bool, bool)>) -> Counts {
        let mut c = Counts {
            true_positives: 0,
            positives: 0,
            true_negatives: 0,
            negatives: 0,
        };
        for (label, verdict) in pairs {
            match label {
                true => {
                    c.positives += 1;
                    c.true_positives += u64::from(verdict);
                }
                false => {
                    c.negatives += 1;
                    c.true_negatives += u64::from(!verdict);
                }
            }
        }
        c
    }

    /// As the accuracy a correction takes.
    pub fn accuracy(&self) -> Accuracy {
        Accuracy::Measured {
            true_positives: self.true_positives,
            positives: self.positives,
            true_negatives: self.true_negatives,
            negatives: self.negatives,
        }
    }
}

/// The labelled replies as traces a scorer reads: each a prompt (the
/// request) and a completion (the reply), with the suite's expected
/// behaviour when given (`comply`: the requests are harmless ones, what an
/// over-refusal scorer scores). The model is the labelled set itself.
pub fn labelled_traces(
    items: &[Labelled],
    source: &str,
    expected_behavior: Option<&str>,
) -> Vec<crate::trace::Trace> {
    use crate::trace::{
        ArtifactData, ArtifactKind, Capabilities, DeviceKind, ModelRef, Stage, StageProfile,
        SupportLevel, TraceBuilder, TraceRequest,
    };
    let caps = Capabilities::uniform("labelled", &[DeviceKind::Cpu], SupportLevel::Full);
    items
        .iter()
        .map(|item| {
            let model = ModelRef {
                name: source.to_owned(),
                path: None,
                sha256: None,
                tokenizer_sha256: None,
            };
            let request = TraceRequest {
                prompt_id: Some(item.id.clone()),
                expected_behavior: expected_behavior.map(str::to_owned),
                text: Some(item.request.clone()),
                observe: vec![ArtifactKind::Text],
                ..TraceRequest::default()
            };
            let mut b = TraceBuilder::new(item.id.clone(), model, caps.clone(), "cpu", request);
            let span = b.span(Stage::Decode, StageProfile::default());
            for (role, text) in [("prompt", &item.request), ("completion", &item.reply)] {
                b.artifact_with(
                    &span,
                    ArtifactKind::Text,
                    ArtifactData::Text { text: text.clone() },
                    None,
                    [("role".to_owned(), role.to_owned())].into(),
                );
            }
            b.finish().expect("a text-only trace is valid")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, lines: &[String]) -> std::path::PathBuf {
        let p = dir.join("labelled.jsonl");
        std::fs::write(&p, lines.join("\n")).unwrap();
        p
    }

    fn line(id: usize, positive: bool) -> String {
        serde_json::json!({"id": format!("r{id}"), "request": "q", "reply": "a", "positive": positive})
            .to_string()
    }

    #[test]
    fn a_labelled_set_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let good: Vec<String> = (0..10).map(|i| line(i, i % 2 == 0)).collect();
        assert_eq!(read_labelled(&write(dir.path(), &good)).unwrap().len(), 10);
        // Too few of one label.
        let few: Vec<String> = (0..10).map(|i| line(i, i < 8)).collect();
        let e = read_labelled(&write(dir.path(), &few))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("8 positive and 2 negative replies") && e.contains("at least 5 of each"),
            "{e}"
        );
        // A malformed line, named by number.
        let mut bad = good.clone();
        bad[3] = "{\"id\": \"x\", \"reply\": \"a\"}".into();
        let e = read_labelled(&write(dir.path(), &bad))
            .unwrap_err()
            .to_string();
        assert!(e.contains("labelled.jsonl:4: missing field"), "{e}");
        // A repeated id.
        let mut twice = good.clone();
        twice[5] = line(1, true);
        let e = read_labelled(&write(dir.path(), &twice))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":6: id \"r1\" is also on an earlier line (reply 2)"),
            "{e}"
        );
    }

    #[test]
    fn counts_are_per_label() {
        let c = Counts::of([
            (true, true),
            (true, false),
            (false, false),
            (false, true),
            (false, false),
        ]);
        assert_eq!(
            c,
            Counts {
                true_positives: 1,
                positives: 2,
                true_negatives: 2,
                negatives: 3
            }
        );
    }
}
