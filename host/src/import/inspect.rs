//! Inspect's eval logs (UK AISI's `inspect_ai`): the `.eval` archive (a
//! zip of JSON members, zstd-compressed since 0.3.2xx, deflate before) and
//! the `.json` form (one EvalLog object), log format version 2.
//!
//! Facts this reader relies on, checked against logs Inspect 0.3.285 and
//! 0.3.130 wrote (docs/import.md): samples are the archive's
//! `samples/*.json` members (a re-logged sample's later member wins), each
//! with its own `id` (a string or an integer) and 1-based `epoch`;
//! `header.json` (written last) holds `version`, `status` and `eval`
//! (`task`, `model`, `packages.inspect_ai`); Python writes an unscored
//! value as a bare `NaN`; a score's `value` is `"C"`, `"I"`, `"P"`, `"N"`, a
//! number, a bool, a numeric or yes/no string, or a dict of those (one
//! metric per key), converted as Inspect's `value_to_float` does.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::{ImportError, Imported, Sample, Score, metric_name, missing, parse_python_json};
use crate::bundle::ImportedFrom;

/// The log format versions this reader knows (Inspect's
/// `LOG_SCHEMA_VERSION`).
pub const FORMAT_VERSIONS: [u64; 1] = [2];

/// The largest log read (an archive is read whole, then member by member).
const MAX_BYTES: u64 = 4 << 30;
/// The largest archive member inflated.
const MAX_MEMBER: u64 = 1 << 30;

/// Reads an Inspect log, `.eval` or `.json`.
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
    let (header, samples) = if bytes.starts_with(b"PK\x03\x04") {
        read_archive(path, &bytes)?
    } else if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        let text =
            std::str::from_utf8(&bytes).map_err(|e| format(format!("not UTF-8 JSON: {e}")))?;
        let mut log = parse_python_json(text).map_err(|e| format(format!("not JSON: {e}")))?;
        let samples = match log.get_mut("samples").map(Value::take) {
            Some(Value::Array(s)) => s,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => return Err(format("`samples` is not a list".into())),
        };
        (log, samples)
    } else {
        return Err(format(
            "not an Inspect log: neither a .eval archive (zip) nor a .json EvalLog".into(),
        ));
    };
    let from = header_facts(path, &header, sha256)?;
    let mut imported = Imported {
        from,
        samples: Vec::new(),
    };
    for raw in samples {
        sample(path, &raw, &mut imported)?;
    }
    // Inspect's own order: epoch, then id.
    imported
        .samples
        .sort_by(|a, b| (a.epoch, &a.id).cmp(&(b.epoch, &b.id)));
    Ok(imported)
}

/// The header and the samples of a `.eval` archive.
fn read_archive(path: &Path, bytes: &[u8]) -> Result<(Value, Vec<Value>), ImportError> {
    let format = |problem: String| ImportError::Format {
        path: path.to_path_buf(),
        problem,
    };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| {
        format(format!(
            "not a readable .eval archive (a truncated file?): {e}"
        ))
    })?;
    // Members by name, the last of a name winning (a re-logged sample).
    let mut members: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..zip.len() {
        let name = zip
            .name_for_index(i)
            .ok_or_else(|| format(format!("member {i} has no name")))?
            .map_err(|e| format(format!("member {i}: {e}")))?
            .into_owned();
        members.insert(name, i);
    }
    let mut member = |i: usize| -> Result<Value, ImportError> {
        let mut f = zip
            .by_index(i)
            .map_err(|e| format(format!("member {i}: {e}")))?;
        let name = f
            .name()
            .map_err(|e| format(format!("member {i}: {e}")))?
            .into_owned();
        if f.size() > MAX_MEMBER {
            return Err(format(format!(
                "member {name} inflates to {} bytes, over the limit of {MAX_MEMBER}",
                f.size()
            )));
        }
        let mut text = String::new();
        (&mut f)
            .take(MAX_MEMBER + 1)
            .read_to_string(&mut text)
            .map_err(|e| format(format!("member {name}: {e}")))?;
        parse_python_json(&text).map_err(|e| format(format!("member {name}: not JSON: {e}")))
    };
    // `header.json` is written last; a run still going or crashed has only
    // `_journal/start.json`.
    let header = match (
        members.get("header.json"),
        members.get("_journal/start.json"),
    ) {
        (Some(&i), _) => member(i)?,
        (None, Some(&i)) => {
            let mut start = member(i)?;
            start["status"] = "started".into();
            start
        }
        (None, None) => {
            return Err(format(
                "an archive without header.json or _journal/start.json: not an Inspect .eval log"
                    .into(),
            ));
        }
    };
    let samples = members
        .iter()
        .filter(|(n, _)| n.starts_with("samples/") && n.ends_with(".json"))
        .map(|(_, &i)| member(i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((header, samples))
}

/// Where the log came from, from its header; refuses a format version
/// this reader does not know, naming it and the tool's version.
fn header_facts(path: &Path, header: &Value, sha256: String) -> Result<ImportedFrom, ImportError> {
    let format = |problem: String| ImportError::Format {
        path: path.to_path_buf(),
        problem,
    };
    let eval = header
        .get("eval")
        .filter(|e| e.is_object())
        .ok_or_else(|| format("no `eval` in the header: not an Inspect log".into()))?;
    let tool_version = eval["packages"]["inspect_ai"].as_str().map(str::to_owned);
    let version = header
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            format("the header has no log format `version`: not an Inspect log".into())
        })?;
    if !FORMAT_VERSIONS.contains(&version) {
        return Err(format(format!(
            "Inspect log format version {version} (written by inspect_ai {}); this vauban reads version {}: import it with a vauban that knows it, or convert it with `inspect log convert`",
            tool_version.as_deref().unwrap_or("of an unknown version"),
            FORMAT_VERSIONS.map(|v| v.to_string()).join(", ")
        )));
    }
    let text = |v: &Value, what: &str| {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| format(format!("the header's eval has no `{what}`")))
    };
    Ok(ImportedFrom {
        tool: "inspect".into(),
        tool_version,
        format_version: Some(version.to_string()),
        file: path.display().to_string(),
        sha256,
        task: text(&eval["task"], "task")?,
        model: text(&eval["model"], "model")?,
        by_position: false,
        missing: Vec::new(),
    })
}

/// One EvalSample: a trace's worth, or a missing record saying why not.
fn sample(path: &Path, raw: &Value, into: &mut Imported) -> Result<(), ImportError> {
    let id = match &raw["id"] {
        Value::String(s) => super::prompt_id(s),
        Value::Number(n) => n.to_string(),
        other => {
            return Err(ImportError::Format {
                path: path.to_path_buf(),
                problem: format!("a sample whose id is {other}, not a string or a number"),
            });
        }
    };
    let bad = |problem: String| ImportError::Sample {
        path: path.to_path_buf(),
        sample: id.clone(),
        problem,
    };
    let epoch = raw["epoch"]
        .as_u64()
        .and_then(|e| u32::try_from(e).ok())
        .filter(|&e| e >= 1)
        .ok_or_else(|| bad(format!("epoch {} is not a positive integer", raw["epoch"])))?;
    if let Some(e) = raw.get("error").filter(|e| !e.is_null()) {
        let message = e["message"].as_str().or(e.as_str()).unwrap_or("an error");
        into.from.missing.push(missing(
            &id,
            Some(epoch),
            format!("the sample errored: {message}"),
        ));
        return Ok(());
    }
    let input = render_input(&raw["input"]).map_err(&bad)?;
    let Some(output) = output_text(&raw["output"]) else {
        into.from
            .missing
            .push(missing(&id, Some(epoch), "the sample has no output"));
        return Ok(());
    };
    let mut scores = Vec::new();
    if let Some(map) = raw["scores"].as_object() {
        for (scorer, score) in map {
            scores_of(scorer, &score["value"], &mut scores);
        }
    }
    let logprobs = raw["output"]["choices"][0]["logprobs"]["content"]
        .as_array()
        .and_then(|tokens| {
            tokens
                .iter()
                .map(|t| t["logprob"].as_f64().map(|l| l as f32))
                .collect::<Option<Vec<f32>>>()
        })
        .filter(|l| !l.is_empty());
    into.samples.push(Sample {
        category: raw["metadata"]["category"].as_str().map(str::to_owned),
        id,
        epoch,
        input,
        output,
        scores,
        logprobs,
    });
    Ok(())
}

/// A sample's input as text: a string as it is, a chat one message per
/// line (`role: text`).
fn render_input(input: &Value) -> Result<String, String> {
    match input {
        Value::String(s) => Ok(s.clone()),
        Value::Array(messages) => {
            let lines: Vec<String> = messages
                .iter()
                .map(|m| {
                    let role = m["role"].as_str().unwrap_or("user");
                    format!("{role}: {}", content_text(&m["content"]))
                })
                .collect();
            Ok(lines.join("\n"))
        }
        other => Err(format!(
            "its input is {other}, not a string or a list of messages"
        )),
    }
}

/// A message's content as text: a string, or its text parts joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The output's text: `completion`, or the first choice's message.
fn output_text(output: &Value) -> Option<String> {
    let choice = &output["choices"][0]["message"]["content"];
    match output["completion"].as_str() {
        Some(c) if !c.is_empty() || !choice.is_null() => Some(c.to_owned()),
        _ if !choice.is_null() => Some(content_text(choice)),
        _ => None,
    }
}

/// A score's value as metrics: one for a scalar, one per key of a dict; a
/// value Inspect would not count (unscored, a list, an unknown string) is
/// left out.
fn scores_of(scorer: &str, value: &Value, into: &mut Vec<Score>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if let Some(x) = value_to_float(v) {
                    into.push(Score {
                        metric: metric_name("inspect", &[scorer, key]),
                        scorer: format!("{scorer}/{key}"),
                        value: x,
                    });
                }
            }
        }
        v => {
            if let Some(x) = value_to_float(v) {
                into.push(Score {
                    metric: metric_name("inspect", &[scorer]),
                    scorer: scorer.to_owned(),
                    value: x,
                });
            }
        }
    }
}

/// Inspect's `value_to_float`: `C` 1, `P` 0.5, `I` and `N` 0 (case as
/// written), a bool or a number as it is, a yes/true or no/false string
/// (any case), a numeric string; none for anything else (where Inspect
/// warns and counts 0, vauban leaves the value out rather than invent it).
pub fn value_to_float(v: &Value) -> Option<f64> {
    match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite()),
        Value::String(s) => match s.as_str() {
            "C" => Some(1.0),
            "P" => Some(0.5),
            "I" | "N" => Some(0.0),
            s => match s.to_ascii_lowercase().as_str() {
                "yes" | "true" => Some(1.0),
                "no" | "false" => Some(0.0),
                s => s.parse::<f64>().ok().filter(|x| x.is_finite()),
            },
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_convert_as_inspect_converts_them() {
        for (v, want) in [
            (json!("C"), Some(1.0)),
            (json!("P"), Some(0.5)),
            (json!("I"), Some(0.0)),
            (json!("N"), Some(0.0)),
            (json!("c"), None),
            (json!("Yes"), Some(1.0)),
            (json!("FALSE"), Some(0.0)),
            (json!("0.25"), Some(0.25)),
            (json!(7), Some(7.0)),
            (json!(true), Some(1.0)),
            (json!(null), None),
            (json!([1, "C"]), None),
            (json!("maybe"), None),
        ] {
            assert_eq!(value_to_float(&v), want, "{v}");
        }
    }

    #[test]
    fn a_dict_value_is_a_metric_per_key() {
        let mut out = Vec::new();
        scores_of("multi", &json!({"exact": "I", "partial": "P"}), &mut out);
        let got: Vec<(&str, f64)> = out.iter().map(|s| (s.metric.as_str(), s.value)).collect();
        assert_eq!(
            got,
            [("inspect.multi.exact", 0.0), ("inspect.multi.partial", 0.5)]
        );
    }

    #[test]
    fn a_chat_input_is_one_message_per_line() {
        let input = json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Say hello"}]}
        ]);
        assert_eq!(
            render_input(&input).unwrap(),
            "system: You are terse.\nuser: Say hello"
        );
    }
}
