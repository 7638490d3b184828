//! Other tools' eval logs as trace bundles (issue 38): each sample (and
//! each epoch or repeat) becomes a trace holding the prompt, the output
//! text, the tool's own scores as metric artifacts labelled with the
//! scorer that gave them, and the output's log-probabilities where the log
//! holds them; the bundle's manifest records where it came from (the
//! file's sha256, the tool and its version, the task, the model) and the
//! samples that became no trace, with the reason. `vauban diff` then
//! compares two imports as it compares any two recordings.
//!
//! One reader per tool turns its format into [`Imported`]; [`write_bundle`]
//! is the one writer.

pub mod inspect;
pub mod lm_eval;
pub mod promptfoo;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::bundle::{BundleWriter, ImportMissing, ImportedFrom, WriteMode};
use crate::trace::{
    ArtifactData, ArtifactKind as K, Capabilities, DeviceKind, ModelRef, Stage, StageProfile,
    SupportLevel, TensorData, Trace, TraceBuilder, TraceRequest,
};

/// A log that cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: {problem}")]
    Read { path: PathBuf, problem: String },
    /// The file is not a log of the tool named, or of a version the
    /// importer knows.
    #[error("{path}: {problem}")]
    Format { path: PathBuf, problem: String },
    #[error("{path}: sample {sample}: {problem}")]
    Sample {
        path: PathBuf,
        sample: String,
        problem: String,
    },
    #[error("{path}: no sample could be imported ({why})")]
    Empty { path: PathBuf, why: String },
    #[error("cannot write the bundle {path}: {problem}")]
    Write { path: PathBuf, problem: String },
}

/// One sample of a log (one epoch or repeat of it).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's id in the log: what pairs it with the other side.
    pub id: String,
    /// 1-based; the first epoch is the prompt's first sample.
    pub epoch: u32,
    /// The prompt as text (a chat rendered one message per line).
    pub input: String,
    /// A category, where the log gives one (a sample's `category` metadata).
    pub category: Option<String>,
    /// The model's output text.
    pub output: String,
    /// The tool's scores, by metric name, with the scorer that gave each.
    pub scores: Vec<Score>,
    /// The log-probability of each output token, where the log holds them.
    pub logprobs: Option<Vec<f32>>,
}

/// One of the tool's scores of a sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    /// The metric's name in the report: `TOOL.SCORER[.KEY]`, lowercased
    /// to what a metric name may hold.
    pub metric: String,
    /// The scorer as the log names it.
    pub scorer: String,
    pub value: f64,
}

/// A log read: where it came from, its samples, and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub from: ImportedFrom,
    pub samples: Vec<Sample>,
}

/// What `write_bundle` wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub traces: usize,
    pub prompts: usize,
    pub missing: usize,
    pub metrics: Vec<String>,
}

/// Writes `imported` as a trace bundle at `out` (which must not exist).
pub fn write_bundle(imported: &Imported, out: &Path) -> Result<Written, ImportError> {
    let bad = |problem: String| ImportError::Write {
        path: out.to_path_buf(),
        problem,
    };
    let from = &imported.from;
    if imported.samples.is_empty() {
        return Err(ImportError::Empty {
            path: PathBuf::from(&from.file),
            why: match from.missing.first() {
                Some(m) => format!(
                    "{} sample(s) left out, the first {} because {}",
                    from.missing.len(),
                    m.sample,
                    m.reason
                ),
                None => "the log holds no sample".into(),
            },
        });
    }
    let mut writer =
        BundleWriter::create(out, WriteMode::CreateNew).map_err(|e| bad(e.to_string()))?;
    writer.imported(from.clone());
    let logprobs = imported.samples.iter().all(|s| s.logprobs.is_some());
    let caps = capabilities(&from.tool, logprobs);
    let model = ModelRef {
        name: from.model.clone(),
        path: None,
        sha256: None,
        tokenizer_sha256: None,
    };
    let mut metrics: Vec<String> = Vec::new();
    let mut prompts = std::collections::BTreeSet::new();
    for s in &imported.samples {
        let (trace, tensors) = trace_of(s, &model, &caps, logprobs)
            .map_err(|e| bad(format!("sample {} epoch {}: {e}", s.id, s.epoch)))?;
        writer
            .add_trace(&trace, &tensors)
            .map_err(|e| bad(format!("sample {} epoch {}: {e}", s.id, s.epoch)))?;
        prompts.insert(s.id.clone());
        for m in &s.scores {
            if !metrics.contains(&m.metric) {
                metrics.push(m.metric.clone());
            }
        }
    }
    writer.finish().map_err(|e| bad(e.to_string()))?;
    Ok(Written {
        traces: imported.samples.len(),
        prompts: prompts.len(),
        missing: from.missing.len(),
        metrics,
    })
}

/// What an import holds: text and metrics always, log-probabilities when
/// every sample has them.
fn capabilities(tool: &str, logprobs: bool) -> Capabilities {
    let caps = Capabilities::uniform(
        format!("import:{tool}"),
        &[DeviceKind::Cpu],
        SupportLevel::Unsupported,
    )
    .with(K::Text, SupportLevel::Full)
    .with(K::Metric, SupportLevel::Full);
    match logprobs {
        true => caps.with(K::Logprobs, SupportLevel::Full),
        false => caps,
    }
}

type Tensors = HashMap<String, TensorData>;

fn trace_of(
    s: &Sample,
    model: &ModelRef,
    caps: &Capabilities,
    logprobs: bool,
) -> Result<(Trace, Tensors), String> {
    let mut observe = vec![K::Text, K::Metric];
    if logprobs {
        observe.push(K::Logprobs);
    }
    let request = TraceRequest {
        prompt_id: Some(s.id.clone()),
        category: s.category.clone(),
        text: Some(s.input.clone()),
        observe,
        raw_tensors: logprobs,
        ..TraceRequest::default()
    };
    let id = sample_trace_id(&s.id, s.epoch);
    let mut b = TraceBuilder::new(id, model.clone(), caps.clone(), "cpu", request);
    let span = b.span(Stage::Decode, StageProfile::default());
    let role = |r: &str| [("role".to_owned(), r.to_owned())].into();
    b.artifact_with(
        &span,
        K::Text,
        ArtifactData::Text {
            text: s.input.clone(),
        },
        None,
        role("prompt"),
    );
    b.artifact_with(
        &span,
        K::Text,
        ArtifactData::Text {
            text: s.output.clone(),
        },
        None,
        role("completion"),
    );
    for m in &s.scores {
        b.artifact_with(
            &span,
            K::Metric,
            ArtifactData::Scalar {
                name: m.metric.clone(),
                value: m.value,
                unit: None,
            },
            None,
            [("scorer".to_owned(), m.scorer.clone())].into(),
        );
    }
    if s.scores.is_empty() {
        b.missing(
            K::Metric,
            "the tool recorded no score of this sample that counts (unscored, or values it would not count)",
        );
    }
    let mut tensors = Tensors::new();
    if let Some(lp) = s.logprobs.as_ref().filter(|_| logprobs) {
        let data = TensorData::from_f32(vec![lp.len()], lp).map_err(|e| e.to_string())?;
        let labels = [
            ("role".to_owned(), "completion".to_owned()),
            ("values".to_owned(), "chosen token".to_owned()),
        ]
        .into();
        let id = b.artifact_with(
            &span,
            K::Logprobs,
            ArtifactData::tensor(data.as_ref(), true),
            None,
            labels,
        );
        tensors.insert(id, data);
    }
    let trace = b.finish().map_err(|e| e.to_string())?;
    Ok((trace, tensors))
}

/// A sample's trace id: its id for the first epoch, `ID#K` for epoch K+1,
/// as `vauban run` names a prompt's samples.
fn sample_trace_id(id: &str, epoch: u32) -> String {
    crate::pipeline::record::sample_id(id, epoch.saturating_sub(1) as usize)
}

/// A sample id as a prompt id may be (letters, digits, `-`, `_`, `.`:
/// ids name trace files); anything else becomes `_`.
pub fn prompt_id(raw: &str) -> String {
    let id: String = raw
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || "-_.".contains(c) {
            true => c,
            false => '_',
        })
        .collect();
    match id.is_empty() {
        true => "_".into(),
        false => id,
    }
}

/// A metric name from a tool's scorer (and key): `inspect.match`,
/// `inspect.multi.exact`; what a metric name may not hold becomes `_`.
pub fn metric_name(tool: &str, parts: &[&str]) -> String {
    let mut name = tool.to_owned();
    for p in parts {
        name.push('.');
        name.extend(p.chars().map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        }));
    }
    name.truncate(64);
    name
}

/// JSON as Python writes it: bare `NaN`, `Infinity` and `-Infinity`
/// (Python's `json` module writes them for non-finite floats; Inspect
/// writes an unscored value as `NaN`) become `null` before parsing, outside
/// strings only.
pub fn parse_python_json(text: &str) -> Result<serde_json::Value, serde_json::Error> {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        } else if let Some(token) = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t))
        {
            out.push_str("null");
            rest = &rest[token.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    serde_json::from_str(&out)
}

/// The missing record of a sample.
pub fn missing(sample: &str, epoch: Option<u32>, reason: impl Into<String>) -> ImportMissing {
    ImportMissing {
        sample: sample.to_owned(),
        epoch,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_keeps_strings_and_nulls_its_non_finite_numbers() {
        let v = parse_python_json(
            r#"{"a": NaN, "b": [Infinity, -Infinity, 1.5], "c": "NaN \"Infinity\""}"#,
        )
        .unwrap();
        assert!(v["a"].is_null());
        assert_eq!(v["b"], serde_json::json!([null, null, 1.5]));
        assert_eq!(v["c"], "NaN \"Infinity\"");
    }

    #[test]
    fn metric_names_are_what_a_metric_name_may_hold() {
        assert_eq!(metric_name("inspect", &["match"]), "inspect.match");
        assert_eq!(
            metric_name("inspect", &["Multi", "exact-Match"]),
            "inspect.multi.exact_match"
        );
        assert_eq!(metric_name("inspect", &["a/b c"]), "inspect.a_b_c");
    }
}
