//! lm-evaluation-harness's `--log_samples` output: `samples_<task>_<date>.jsonl`,
//! one line per document and filter, beside the run's
//! `results_<date>.json` (which alone records the version and the model).
//!
//! Facts this reader relies on, checked against files lm_eval 0.4.13 wrote
//! (docs/import.md): a line has `doc_id`, `doc`, `target`, `arguments`
//! (`gen_args_N.arg_0` the prompt; for a choice task, one `gen_args_N` per
//! choice with its continuation as `arg_1`), `resps`, `filtered_resps`,
//! `filter`, `metrics` (the names) and each metric's value; every leaf of
//! `resps` is a string (a choice's is `[loglikelihood, is_greedy]`);
//! several filters are several lines of one document; a task's repeats are
//! the inner list of `resps[0]`, scored together. Before 0.4.7 a line had
//! no `filter`, and 0.4.0-0.4.2 wrote a JSON array: both are refused.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ImportError, Imported, Sample, Score, metric_name};
use crate::bundle::ImportedFrom;

const MAX_BYTES: u64 = 1 << 30;

/// Reads a samples file, and its run's results file when it is beside it.
pub fn read(path: &Path) -> Result<Imported, ImportError> {
    let format = |problem: String| ImportError::Format {
        path: path.to_path_buf(),
        problem,
    };
    let bytes = crate::input::read_bounded(path, MAX_BYTES).map_err(|e| ImportError::Read {
        path: path.to_path_buf(),
        problem: crate::input::io_error(e).to_string(),
    })?;
    let sha256 = crate::hash::sha256_hex(&bytes);
    let text = std::str::from_utf8(&bytes).map_err(|e| format(format!("not UTF-8: {e}")))?;
    let results = results_beside(path);
    let version = results
        .as_ref()
        .and_then(|(_, r)| r["lm_eval_version"].as_str().map(str::to_owned));
    let said_version = || {
        version
            .clone()
            .unwrap_or_else(|| "an unknown version (no results file beside it)".into())
    };
    if text.trim_start().starts_with('[') {
        return Err(format(format!(
            "a JSON array: the samples file of lm_eval 0.4.0-0.4.2 (this file: {}); this vauban reads the JSON Lines of 0.4.7 and later: rerun with a newer lm_eval",
            said_version()
        )));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let task = name
        .strip_prefix("samples_")
        .and_then(|n| n.rsplit_once('_'))
        .map(|(task, _)| task.to_owned())
        .ok_or_else(|| {
            format(
                "not an lm_eval samples file: its name is not samples_<task>_<date>.jsonl".into(),
            )
        })?;
    let model = results
        .as_ref()
        .and_then(|(_, r)| {
            r["model_name"]
                .as_str()
                .or(r["config"]["model_args"]["model"].as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| {
            "(the model is named in the run's results file, not found beside it)".into()
        });
    let mut imported = Imported {
        from: ImportedFrom {
            tool: "lm-eval".into(),
            tool_version: version.clone(),
            format_version: None,
            file: path.display().to_string(),
            sha256,
            task: task.clone(),
            model,
            by_position: false,
            missing: Vec::new(),
        },
        samples: Vec::new(),
    };
    // One sample per document; each filter's metrics on it.
    let mut by_doc: std::collections::BTreeMap<u64, Sample> = Default::default();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = |problem: String| ImportError::Format {
            path: path.to_path_buf(),
            problem: format!("line {}: {problem}", n + 1),
        };
        let v: Value = serde_json::from_str(line).map_err(|e| at(format!("not JSON: {e}")))?;
        for field in ["doc_id", "arguments", "resps", "metrics", "filter"] {
            if v.get(field).is_none() {
                return Err(at(format!(
                    "no `{field}`: not a samples line of lm_eval 0.4.7 or later (this file: {}); rerun with a newer lm_eval",
                    said_version()
                )));
            }
        }
        let doc = v["doc_id"]
            .as_u64()
            .ok_or_else(|| at("`doc_id` is not a number".into()))?;
        let filter = v["filter"].as_str().unwrap_or("none");
        let sample = match by_doc.get_mut(&doc) {
            Some(s) => s,
            None => {
                let Some((input, output)) = prompt_and_output(&v) else {
                    imported.from.missing.push(super::missing(
                        &doc.to_string(),
                        None,
                        "its arguments or responses are not in a shape this reader knows",
                    ));
                    continue;
                };
                by_doc.entry(doc).or_insert(Sample {
                    id: doc.to_string(),
                    epoch: 1,
                    input,
                    category: None,
                    output,
                    scores: Vec::new(),
                    logprobs: None,
                })
            }
        };
        for m in v["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if let Some(x) = v[m].as_f64().filter(|x| x.is_finite()) {
                let metric = match filter {
                    "none" => metric_name("lm_eval", &[m]),
                    f => metric_name("lm_eval", &[m, f]),
                };
                sample.scores.push(Score {
                    metric,
                    scorer: format!("{task} {m} ({filter})"),
                    value: x,
                });
            }
        }
    }
    imported.samples = by_doc.into_values().collect();
    Ok(imported)
}

/// The prompt and the model's output of a line: a generation's text, or
/// for a choice task the most likely choice's continuation (lm_eval keeps
/// only each choice's loglikelihood).
fn prompt_and_output(v: &Value) -> Option<(String, String)> {
    let args = v["arguments"].as_object()?;
    let first = args.get("gen_args_0")?;
    let prompt = match &first["arg_0"] {
        Value::String(s) => s.clone(),
        // A chat request: one JSON string of the messages.
        Value::Array(a) => a.first()?.as_str()?.to_owned(),
        _ => return None,
    };
    let resps = v["resps"].as_array()?;
    match &first["arg_1"] {
        // A generation: its settings, and the first response.
        Value::Object(_) => Some((
            prompt,
            resps.first()?.as_array()?.first()?.as_str()?.to_owned(),
        )),
        // A choice: the continuation with the highest loglikelihood.
        Value::String(_) => {
            let mut best: Option<(f64, String)> = None;
            for i in 0..args.len() {
                let cont = args.get(&format!("gen_args_{i}"))?["arg_1"].as_str()?;
                let ll: f64 = resps
                    .get(i)?
                    .as_array()?
                    .first()?
                    .as_array()?
                    .first()?
                    .as_str()?
                    .parse()
                    .ok()?;
                if best.as_ref().is_none_or(|(b, _)| ll > *b) {
                    best = Some((ll, cont.to_owned()));
                }
            }
            Some((prompt, best?.1))
        }
        _ => None,
    }
}

/// The run's results file: `results_<date>.json` beside
/// `samples_<task>_<date>.jsonl`, or the only `results_*.json` there.
fn results_beside(samples: &Path) -> Option<(PathBuf, Value)> {
    let dir = samples.parent()?;
    let name = samples.file_name()?.to_string_lossy().into_owned();
    let date = name.strip_suffix(".jsonl")?.rsplit_once('_')?.1.to_owned();
    let exact = dir.join(format!("results_{date}.json"));
    let path = match exact.is_file() {
        true => exact,
        false => {
            let found: Vec<PathBuf> = std::fs::read_dir(dir)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n.starts_with("results_") && n.ends_with(".json")
                    })
                })
                .collect();
            match found.as_slice() {
                [one] => one.clone(),
                _ => return None,
            }
        }
    };
    let text = crate::input::read_text(&path, 64 << 20).ok()?;
    Some((path.clone(), serde_json::from_str(&text).ok()?))
}
