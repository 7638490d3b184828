//! promptfoo's eval results (`promptfoo eval -o results.json`), results
//! format version 3: one set of results per column, a provider and prompt
//! (`results.prompts[promptIdx]`), each an import of its own.
//!
//! Facts this reader relies on, checked against files promptfoo 0.121.20
//! wrote (docs/import.md): results are in completion order (sorted here by
//! `testIdx`); `testIdx` counts rows after variable expansion and repeats,
//! so a test is known by its content (`description` and `vars`) and a
//! repeat by how many times that content came before; `failureReason` is 0
//! (pass), 1 (an assert failed) or 2 (an error, whose `error` field also
//! fills on plain failures); the version is `metadata.promptfooVersion`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{ImportError, Imported, Sample, Score, metric_name, missing};
use crate::bundle::ImportedFrom;

/// The results format versions this reader knows.
pub const FORMAT_VERSIONS: [u64; 1] = [3];

const MAX_BYTES: u64 = 1 << 30;

/// One column of a results file: its name and its import.
pub struct Column {
    /// The provider's label (or id), with the prompt's label when the
    /// file has several prompts: what the bundle's folder is named after.
    pub name: String,
    pub imported: Imported,
}

/// Reads a results file, one import per column. `by_position`: a test is
/// known by its order of first appearance (`test-N`), not by its
/// description and variables (for runs whose tests were reworded).
pub fn read(path: &Path, by_position: bool) -> Result<Vec<Column>, ImportError> {
    let format = |problem: String| ImportError::Format {
        path: path.to_path_buf(),
        problem,
    };
    let bytes = crate::input::read_bounded(path, MAX_BYTES).map_err(|e| ImportError::Read {
        path: path.to_path_buf(),
        problem: crate::input::io_error(e).to_string(),
    })?;
    let sha256 = crate::hash::sha256_hex(&bytes);
    let log: Value = serde_json::from_slice(&bytes).map_err(|e| {
        format(format!(
            "not a promptfoo results file (not JSON: {e}); write one with `promptfoo eval -o results.json` (a .jsonl output holds no header and cannot be imported)"
        ))
    })?;
    let results = log
        .get("results")
        .filter(|r| r.is_object())
        .ok_or_else(|| format("no `results` object: not a promptfoo results file".into()))?;
    let tool_version = log["metadata"]["promptfooVersion"]
        .as_str()
        .map(str::to_owned);
    let version = results["version"].as_u64().ok_or_else(|| {
        format("`results.version` is missing: not a promptfoo results file of format 3 (promptfoo 0.x since 2024)".into())
    })?;
    if !FORMAT_VERSIONS.contains(&version) {
        return Err(format(format!(
            "promptfoo results format version {version} (written by promptfoo {}); this vauban reads version {}: export the eval again with a promptfoo that writes it",
            tool_version.as_deref().unwrap_or("of an unknown version"),
            FORMAT_VERSIONS.map(|v| v.to_string()).join(", ")
        )));
    }
    let prompts = results["prompts"]
        .as_array()
        .ok_or_else(|| format("`results.prompts` is not a list".into()))?;
    let rows = results["results"]
        .as_array()
        .ok_or_else(|| format("`results.results` is not a list".into()))?;
    let task = log["config"]["description"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!(
                "promptfoo eval {}",
                log["evalId"].as_str().unwrap_or("(no id)")
            )
        });
    // Test content → its sample id, in the order of first appearance.
    let mut ordered: Vec<&Value> = rows.iter().collect();
    ordered.sort_by_key(|r| r["testIdx"].as_u64().unwrap_or(u64::MAX));
    let ids = sample_ids(&ordered, by_position);
    let mut columns: Vec<Column> = Vec::new();
    for (idx, p) in prompts.iter().enumerate() {
        let provider = p["provider"].as_str().unwrap_or("provider").to_owned();
        let name = match prompts.len() > 1
            && prompts
                .iter()
                .filter(|q| q["provider"] == p["provider"])
                .count()
                > 1
        {
            true => format!("{provider}-{}", p["label"].as_str().unwrap_or("prompt")),
            false => provider.clone(),
        };
        columns.push(Column {
            name,
            imported: Imported {
                from: ImportedFrom {
                    tool: "promptfoo".into(),
                    tool_version: tool_version.clone(),
                    format_version: Some(version.to_string()),
                    file: path.display().to_string(),
                    sha256: sha256.clone(),
                    task: task.clone(),
                    model: provider,
                    by_position,
                    missing: Vec::new(),
                },
                samples: Vec::new(),
            },
        });
        // The repeats of a test in this column, counted in testIdx order.
        let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
        for row in ordered
            .iter()
            .filter(|r| r["promptIdx"].as_u64() == Some(idx as u64))
        {
            let id = ids[&content_key(row)].as_str();
            let epoch = seen.entry(id).or_insert(0);
            *epoch += 1;
            let column = columns.last_mut().expect("pushed above");
            result(path, row, id, *epoch, &mut column.imported)?;
        }
    }
    if columns.is_empty() {
        return Err(format(
            "`results.prompts` is empty: the eval ran no provider".into(),
        ));
    }
    Ok(columns)
}

/// What identifies a test across providers and runs: its description and
/// its variables.
fn content_key(row: &Value) -> String {
    format!(
        "{}\u{0}{}",
        row["testCase"]["description"], row["testCase"]["vars"]
    )
}

/// A sample id per distinct test: its description where that names one
/// test, else `test-N` in order of first appearance.
fn sample_ids(rows: &[&Value], by_position: bool) -> BTreeMap<String, String> {
    let mut keys: Vec<(String, Option<String>)> = Vec::new();
    for r in rows {
        let k = content_key(r);
        if !keys.iter().any(|(x, _)| *x == k) {
            let d = r["testCase"]["description"].as_str().map(str::to_owned);
            keys.push((k, d));
        }
    }
    let unique = |d: &str| keys.iter().filter(|(_, e)| e.as_deref() == Some(d)).count() == 1;
    keys.iter()
        .enumerate()
        .map(|(i, (k, d))| {
            let id = match d {
                Some(d) if !by_position && !d.is_empty() && unique(d) => super::prompt_id(d),
                _ => format!("test-{}", i + 1),
            };
            (k.clone(), id)
        })
        .collect()
}

fn result(
    path: &Path,
    row: &Value,
    id: &str,
    epoch: u32,
    into: &mut Imported,
) -> Result<(), ImportError> {
    if row["failureReason"].as_u64() == Some(2) {
        let why = row["error"].as_str().unwrap_or("an error");
        let why = &why[..why.floor_char_boundary(300)];
        into.from.missing.push(missing(
            id,
            Some(epoch),
            format!("the provider call errored: {why}"),
        ));
        return Ok(());
    }
    let Some(output) = row
        .get("response")
        .map(|r| &r["output"])
        .filter(|o| !o.is_null())
    else {
        into.from
            .missing
            .push(missing(id, Some(epoch), "the result has no response"));
        return Ok(());
    };
    let output = match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let input = row["prompt"]["raw"]
        .as_str()
        .ok_or_else(|| ImportError::Sample {
            path: path.to_path_buf(),
            sample: id.to_owned(),
            problem: "its `prompt.raw` is missing".into(),
        })?;
    let mut scores = Vec::new();
    if let Some(pass) = row["success"].as_bool() {
        scores.push(Score {
            metric: "promptfoo.pass".into(),
            scorer: "promptfoo assertions (all pass)".into(),
            value: f64::from(u8::from(pass)),
        });
    }
    if let Some(score) = row["score"].as_f64().filter(|s| s.is_finite()) {
        scores.push(Score {
            metric: "promptfoo.score".into(),
            scorer: "promptfoo assertions (mean score)".into(),
            value: score,
        });
    }
    if let Some(named) = row["namedScores"].as_object() {
        for (name, v) in named {
            if let Some(x) = v.as_f64().filter(|x| x.is_finite()) {
                scores.push(Score {
                    metric: metric_name("promptfoo", &["named", name]),
                    scorer: name.clone(),
                    value: x,
                });
            }
        }
    }
    let logprobs = row["response"]["logProbs"]
        .as_array()
        .and_then(|l| {
            l.iter()
                .map(|x| x.as_f64().map(|v| v as f32))
                .collect::<Option<Vec<f32>>>()
        })
        .filter(|l| !l.is_empty());
    into.samples.push(Sample {
        id: id.to_owned(),
        epoch,
        input: input.to_owned(),
        category: row["testCase"]["metadata"]["category"]
            .as_str()
            .map(str::to_owned),
        output,
        scores,
        logprobs,
    });
    Ok(())
}
