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
    #[error("plugin {plugin}: `{call}` failed: {failure}{}", stderr_note(stderr))]
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

/// How a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    #[error("timeout: still running after the {}ms deadline", .deadline.as_millis())]
    Timeout { deadline: Duration },
    #[error("memory limit: the plugin tried to grow its memory past {limit} bytes")]
    MemoryLimit { limit: u64 },
    #[error("out of fuel: the plugin used its {fuel} instructions")]
    OutOfFuel { fuel: u64 },
    #[error("trap: {message}")]
    Trap { message: String },
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
