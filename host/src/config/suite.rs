//! The prompt suite: the prompts both models run, each with the category
//! the report groups by, what the model is expected to do, and how the
//! report may show it.
//!
//! A suite is inline in the config (`[[suite.prompts]]`) or a file:
//! `.jsonl` (one JSON object per line) or `.toml` (`[[prompts]]` tables).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use vauban_format::document::Redaction;

/// One prompt of a suite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// Unique in the suite; pairs baseline and candidate traces.
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub category: Option<String>,
    /// `refuse`, `comply`, `express_uncertainty`, `ask_clarifying_question`, `defer`.
    #[serde(default)]
    pub expected_behavior: Option<String>,
    #[serde(default)]
    pub redaction: Redaction,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The expected behaviours scorers understand.
pub const EXPECTED_BEHAVIORS: [&str; 5] = [
    "refuse",
    "comply",
    "express_uncertainty",
    "ask_clarifying_question",
    "defer",
];

/// Why a suite cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read the suite file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("the suite file {path} {problem}")]
    NotAFile { path: PathBuf, problem: String },
    #[error(
        "{path}: unknown suite file type; write the prompts as .jsonl (one JSON object per line) or .toml ([[prompts]] tables)"
    )]
    Extension { path: PathBuf },
    #[error("{place}: {message}")]
    Invalid { place: String, message: String },
}

/// The largest suite file read (about a million short prompts).
pub const MAX_SUITE_BYTES: u64 = 256 << 20;

/// The suite file's text. A UTF-8 byte-order mark (which Windows editors
/// write) is dropped; bytes that are not UTF-8 are an error naming the
/// line, column and byte offset.
fn read_suite_file(path: &Path) -> Result<String, SuiteError> {
    let bytes = crate::input::read_bounded(path, MAX_SUITE_BYTES).map_err(|e| match e {
        crate::input::ReadProblem::Io(source) => SuiteError::Read {
            path: path.to_owned(),
            source,
        },
        other => SuiteError::NotAFile {
            path: path.to_owned(),
            problem: format!("{other}; give a .jsonl or .toml file"),
        },
    })?;
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    match std::str::from_utf8(body) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => {
            let at = e.valid_up_to();
            let line_start = body[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            let line = body[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            let offset = at + (bytes.len() - body.len());
            Err(SuiteError::Line {
                path: path.to_owned(),
                line,
                message: format!(
                    "not UTF-8 text: byte 0x{:02x} at byte offset {offset} (column {}); save the suite as UTF-8",
                    body[at],
                    at - line_start + 1
                ),
            })
        }
    }
}

/// A checked list of prompts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suite {
    pub prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlSuite {
    prompts: Vec<Prompt>,
}

impl Suite {
    /// Reads a `.jsonl` or `.toml` suite file and checks it.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = read_suite_file(path)?;
        let (prompts, lines) = match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl") => parse_jsonl(path, &text)?.into_iter().unzip(),
            Some("toml") => {
                let prompts = toml::from_str::<TomlSuite>(&text)
                    .map_err(|e| SuiteError::Toml {
                        path: path.to_owned(),
                        message: e.to_string(),
                    })?
                    .prompts;
                // The line of each `[[prompts]]` table, when every prompt
                // is one (an inline array has no per-prompt header).
                let headers: Vec<usize> = text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| l.trim_start().starts_with("[[prompts]]"))
                    .map(|(i, _)| i + 1)
                    .collect();
                let lines = match headers.len() == prompts.len() {
                    true => headers,
                    false => Vec::new(),
                };
                (prompts, lines)
            }
            _ => {
                return Err(SuiteError::Extension {
                    path: path.to_owned(),
                });
            }
        };
        Suite::check(prompts, &path.display().to_string(), &lines)
    }

    /// Checks prompts given inline (`place` names them in errors).
    pub fn new(prompts: Vec<Prompt>, place: &str) -> Result<Suite, SuiteError> {
        Suite::check(prompts, place, &[])
    }

    /// Checks prompts; `lines` (when given) holds each prompt's line in
    /// the file `place`, so an error points at the prompt itself.
    fn check(prompts: Vec<Prompt>, place: &str, lines: &[usize]) -> Result<Suite, SuiteError> {
        let at_prompt = |i: usize| match lines.get(i) {
            Some(line) => format!("{place}:{line}"),
            None => place.to_owned(),
        };
        if prompts.is_empty() {
            return Err(SuiteError::Invalid {
                place: place.to_owned(),
                message: "the suite has no prompts; add at least one".to_owned(),
            });
        }
        let mut seen = BTreeSet::new();
        for (i, p) in prompts.iter().enumerate() {
            let invalid = |message: String| SuiteError::Invalid {
                place: at_prompt(i),
                message,
            };
            let at = format!("prompt {} (id `{}`)", i + 1, p.id);
            if p.id.trim().is_empty() {
                return Err(invalid(format!("prompt {} has an empty id", i + 1)));
            }
            if !seen.insert(p.id.as_str()) {
                return Err(invalid(format!(
                    "{at}: the id is used twice; ids pair baseline and candidate traces, so make each unique"
                )));
            }
            if p.text.is_empty() {
                return Err(invalid(format!("{at}: the text is empty")));
            }
            if let Some(e) = &p.expected_behavior
                && !EXPECTED_BEHAVIORS.contains(&e.as_str())
            {
                return Err(invalid(format!(
                    "{at}: expected_behavior `{e}` is not one of {}",
                    EXPECTED_BEHAVIORS.join(", ")
                )));
            }
        }
        Ok(Suite { prompts })
    }

    /// Prompts of one category.
    pub fn category<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Prompt> + 'a {
        self.prompts
            .iter()
            .filter(move |p| p.category.as_deref() == Some(name))
    }

    /// The distinct categories, sorted.
    pub fn categories(&self) -> BTreeSet<&str> {
        self.prompts
            .iter()
            .filter_map(|p| p.category.as_deref())
            .collect()
    }
}

/// The prompts of a JSONL suite, each with its line.
fn parse_jsonl(path: &Path, text: &str) -> Result<Vec<(Prompt, usize)>, SuiteError> {
    let mut prompts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let prompt = serde_json::from_str::<Prompt>(line).map_err(|e| SuiteError::Line {
            path: path.to_owned(),
            line: i + 1,
            message: format!("{e} (each line is one prompt: {{\"id\": …, \"text\": …}})"),
        })?;
        prompts.push((prompt, i + 1));
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn jsonl_and_toml_suites_read_the_same_prompts() {
        let (_a, jsonl) = write(
            "s.jsonl",
            "{\"id\":\"a\",\"text\":\"Hi\",\"category\":\"harmless\",\"expected_behavior\":\"comply\"}\n\n{\"id\":\"b\",\"text\":\"Bye\",\"redaction\":\"redacted\",\"tags\":[\"x\"]}\n",
        );
        let (_b, toml_path) = write(
            "s.toml",
            "[[prompts]]\nid = \"a\"\ntext = \"Hi\"\ncategory = \"harmless\"\nexpected_behavior = \"comply\"\n\n[[prompts]]\nid = \"b\"\ntext = \"Bye\"\nredaction = \"redacted\"\ntags = [\"x\"]\n",
        );
        let a = Suite::load(&jsonl).unwrap();
        let b = Suite::load(&toml_path).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.prompts[1].redaction, Redaction::Redacted);
        assert_eq!(a.categories().into_iter().collect::<Vec<_>>(), ["harmless"]);
    }

    #[test]
    fn a_toml_suite_error_names_the_prompts_table_line() {
        let (_d, p) = write(
            "s.toml",
            "# suite\n[[prompts]]\nid = \"a\"\ntext = \"Hi\"\n\n[[prompts]]\nid = \"b\"\ntext = \"\"\n",
        );
        let e = Suite::load(&p).unwrap_err().to_string();
        assert!(
            e.contains("s.toml:6:") && e.contains("text is empty"),
            "{e}"
        );
    }

    #[test]
    fn a_byte_order_mark_is_dropped_and_a_bom_alone_is_not_text_to_parse() {
        let (_d, p) = write("s.jsonl", "\u{feff}{\"id\":\"a\",\"text\":\"Hi\"}\n");
        assert_eq!(Suite::load(&p).unwrap().prompts[0].id, "a");
        // Offsets count the mark: the bad byte is the file's 6th.
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("b.jsonl");
        std::fs::write(&bad, b"\xEF\xBB\xBF{\"\xff").unwrap();
        let e = Suite::load(&bad).unwrap_err().to_string();
        assert!(
            e.contains("b.jsonl:1:") && e.contains("byte 0xff at byte offset 5 (column 3)"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_line_is_named() {
        let (_d, p) = write(
            "s.jsonl",
            "{\"id\":\"a\",\"text\":\"Hi\"}\n{\"id\":\"b\"}\n",
        );
        let e = Suite::load(&p).unwrap_err().to_string();
        assert!(e.contains("s.jsonl:2:") && e.contains("text"), "{e}");
    }

    #[test]
    fn duplicate_ids_and_unknown_behaviours_are_refused() {
        let p = |id: &str, e: Option<&str>| Prompt {
            id: id.into(),
            text: "t".into(),
            category: None,
            expected_behavior: e.map(Into::into),
            redaction: Redaction::Safe,
            tags: vec![],
        };
        let e = Suite::new(vec![p("a", None), p("a", None)], "inline")
            .unwrap_err()
            .to_string();
        assert!(e.contains("used twice"), "{e}");
        let e = Suite::new(vec![p("a", Some("obey"))], "inline")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`obey`") && e.contains("refuse"), "{e}");
    }
}
