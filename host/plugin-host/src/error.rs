//! Everything a plugin can do wrong, as one typed error. The host reports it
//! and carries on with the other plugins.

use std::path::PathBuf;
use std::time::Duration;

use crate::trace::ArtifactKind;

use super::component::ComponentProblem;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot read plugin {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin {} is refused: {problem}", path.display())]
    Refused {
        path: PathBuf,
        problem: ComponentProblem,
    },
    #[error("plugin {} does not compile: {message}", path.display())]
    Compile { path: PathBuf, message: String },
    #[error("plugin {} is a {found} plugin; this needs a {wanted}", path.display())]
    WrongWorld {
        path: PathBuf,
        found: super::World,
        wanted: super::World,
    },
    #[error("the plugin sandbox cannot be set up: {0}")]
    Sandbox(String),
    /// A call into the plugin failed; `stderr` is what it printed (bounded).
    /// A guest's panic reads first ("`score` panicked: MESSAGE at FILE:LINE"),
    /// then the trap, the wasm backtrace and the rest of its stderr.
    #[error("{}", call_message(plugin, call, failure, stderr))]
    Call {
        plugin: String,
        call: &'static str,
        failure: Failure,
        stderr: String,
    },
}

fn stderr_note(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!("\n  plugin stderr:\n    {}", s.replace('\n', "\n    "))
    }
}

fn indented(title: &str, text: &str) -> String {
    // Only blank lines trimmed: the frames keep their own alignment.
    let text = text.trim_matches('\n').trim_end();
    format!("\n  {title}:\n    {}", text.replace('\n', "\n    "))
}

/// A Rust guest's panic as its default hook prints it on stderr:
/// `thread '…' panicked at FILE:LINE:COL:\nMESSAGE\nnote: …`. Returns the
/// message, the location, and the rest of stderr.
pub fn guest_panic(stderr: &str) -> Option<(String, String, String)> {
    let start = stderr.find("panicked at ")?;
    let line_start = stderr[..start].rfind('\n').map_or(0, |i| i + 1);
    let after = &stderr[start + "panicked at ".len()..];
    let (location, rest) = after.split_once('\n').unwrap_or((after, ""));
    let location = location.trim().trim_end_matches(':').to_owned();
    // The message runs to the hook's `note:` line (or the end).
    let (message, tail) = match rest.find("\nnote: ") {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None if rest.starts_with("note: ") => ("", rest),
        None => (rest, ""),
    };
    let others: String = [&stderr[..line_start], tail]
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && !s.starts_with("note: run with `RUST_BACKTRACE"))
        .collect::<Vec<_>>()
        .join("\n");
    Some((message.trim().to_owned(), location, others))
}

fn call_message(plugin: &str, call: &str, failure: &Failure, stderr: &str) -> String {
    let Failure::Trap { message, backtrace } = failure else {
        return format!(
            "plugin {plugin}: `{call}` failed: {failure}{}",
            stderr_note(stderr)
        );
    };
    let backtrace = backtrace
        .as_deref()
        .map(|b| indented("wasm backtrace", b))
        .unwrap_or_default();
    match guest_panic(stderr) {
        Some((panic, location, others)) => format!(
            "plugin {plugin}: `{call}` panicked: {panic} (at {location}; trap: {message}){backtrace}{}",
            stderr_note(&others)
        ),
        None => format!(
            "plugin {plugin}: `{call}` failed: trap: {message}{}{backtrace}",
            stderr_note(stderr)
        ),
    }
}

/// How a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    #[error("timeout: still running after the {}ms deadline", .deadline.as_millis())]
    Timeout { deadline: Duration },
    #[error("memory limit: the plugin tried to grow its memory past {limit} bytes")]
    MemoryLimit { limit: u64 },
    #[error("out of fuel: the plugin used its {fuel} instructions")]
    OutOfFuel { fuel: u64 },
    /// The plugin trapped (a panic, `unreachable`, a stack overflow...).
    #[error("trap: {message}")]
    Trap {
        /// Why, from wasmtime, without the backtrace.
        message: String,
        /// Where in the plugin: the wasm backtrace, when wasmtime gives one.
        backtrace: Option<String>,
    },
    /// The plugin returned its own error.
    #[error("the plugin reports {kind}: {message}")]
    Plugin {
        kind: GuestErrorKind,
        message: String,
    },
    /// The plugin returned something the contract does not allow.
    #[error("malformed result: {0}")]
    Malformed(String),
    #[error("trace {trace} lacks {}, which the plugin needs", kinds(.missing))]
    MissingArtifacts {
        trace: String,
        missing: Vec<ArtifactKind>,
    },
    /// An earlier call on this instance failed; it is never entered again.
    #[error("an earlier call trapped or failed; the instance is not reused")]
    Poisoned,
}

fn kinds(k: &[ArtifactKind]) -> String {
    k.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
}

impl Failure {
    /// A stable short name for reports and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Timeout { .. } => "timeout",
            Failure::MemoryLimit { .. } => "memory_limit",
            Failure::OutOfFuel { .. } => "out_of_fuel",
            Failure::Trap { .. } => "trap",
            Failure::Plugin { .. } => "plugin_error",
            Failure::Malformed(_) => "malformed_result",
            Failure::MissingArtifacts { .. } => "missing_artifacts",
            Failure::Poisoned => "poisoned",
        }
    }
}

/// The plugin's own error variants (`plugin-error` in the WIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestErrorKind {
    BadConfig,
    Unsupported,
    Failed,
}

impl std::fmt::Display for GuestErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GuestErrorKind::BadConfig => "a bad config",
            GuestErrorKind::Unsupported => "unsupported input",
            GuestErrorKind::Failed => "a failure",
        })
    }
}

impl PluginError {
    /// The failure of a call, if this is one.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            PluginError::Call { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_panic_reads_first_with_its_location() {
        let stderr = "loading\nthread '<unnamed>' panicked at src/lib.rs:145:25:\nbad input\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            guest_panic(stderr),
            Some((
                "bad input".into(),
                "src/lib.rs:145:25".into(),
                "loading".into()
            ))
        );
        let e = PluginError::Call {
            plugin: "p".into(),
            call: "score",
            failure: Failure::Trap {
                message: "wasm trap: wasm `unreachable` instruction executed".into(),
                backtrace: Some("    0: 0x1 - p!score".into()),
            },
            stderr: stderr.into(),
        };
        assert_eq!(
            e.to_string(),
            "plugin p: `score` panicked: bad input (at src/lib.rs:145:25; trap: wasm trap: wasm \
             `unreachable` instruction executed)\n  wasm backtrace:\n        0: 0x1 - p!score\n  \
             plugin stderr:\n    loading"
        );
        // Not a panic: the trap, stderr, then the backtrace.
        assert_eq!(guest_panic("just text"), None);
    }
}
