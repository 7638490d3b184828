//! The WebAssembly plugin host (DESIGN.md section 8).
//!
//! Scorers, intervention policies and claim mappers are components of the
//! `vauban:plugin` WIT package (`wit/plugin.wit`). Loading one reads its
//! declared world, WIT version and imports before compiling anything
//! ([`component`]); every job runs in a fresh sandboxed store ([`sandbox`]);
//! anything a plugin does wrong becomes a [`PluginError`] and the host goes
//! on.

mod bindings;
pub mod claims;
pub mod component;
mod error;
mod host;
pub mod policy;
pub mod sandbox;
pub mod scorer;
pub mod tensors;

pub use claims::ClaimMapper;
pub use component::{ComponentFacts, WIT_PACKAGE, WIT_VERSION, World};
pub use error::{Failure, GuestErrorKind, PluginError};
pub use host::{EPOCH_TICK, HostOptions, Plugin, PluginHost};
pub use policy::Policy;
pub use sandbox::SandboxOptions;
pub use scorer::Scorer;

use wasmtime::Store;

use sandbox::SandboxState;

/// One call into a guest: arms the deadline, runs `f`, and turns a trap,
/// timeout or memory refusal into a [`PluginError`] with the plugin's
/// captured stderr.
fn call<T>(
    plugin: &str,
    name: &'static str,
    store: &mut Store<SandboxState>,
    sandbox: &SandboxOptions,
    f: impl FnOnce(&mut Store<SandboxState>) -> wasmtime::Result<T>,
) -> Result<T, PluginError> {
    let r = host::arm(store, sandbox).and_then(|()| f(store));
    r.map_err(|e| PluginError::Call {
        plugin: plugin.to_owned(),
        call: name,
        failure: host::classify(&e, sandbox),
        stderr: store.data().stderr.contents(),
    })
}

/// The plugin's own error, whichever world's bindings it came from.
struct GuestError(GuestErrorKind, String);

fn guest_failure(e: GuestError) -> Failure {
    let GuestError(kind, mut message) = e;
    if message.len() > 4096 {
        message.truncate(message.floor_char_boundary(4096));
        message.push_str(" [...]");
    }
    Failure::Plugin { kind, message }
}

macro_rules! guest_error_from {
    ($($path:path),*) => {$(
        impl From<$path> for GuestError {
            fn from(e: $path) -> GuestError {
                use $path as E;
                match e {
                    E::BadConfig(m) => GuestError(GuestErrorKind::BadConfig, m),
                    E::Unsupported(m) => GuestError(GuestErrorKind::Unsupported, m),
                    E::Failed(m) => GuestError(GuestErrorKind::Failed, m),
                }
            }
        }
    )*};
}

guest_error_from!(
    bindings::scorer::vauban::plugin::types::PluginError,
    bindings::policy::vauban::plugin::types::PluginError,
    bindings::claims::vauban::plugin::types::PluginError
);

/// Bounds on what a plugin says about itself.
fn check_info(info: &scorer::PluginInfo) -> Result<(), String> {
    let name_ok = !info.name.is_empty()
        && info.name.len() <= 64
        && info
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(format!(
            "plugin name {:?} is not 1-64 characters of letters, digits, '-', '_' and '.'",
            &info.name[..info.name.floor_char_boundary(80)]
        ));
    }
    if info.version.is_empty() || info.version.len() > 64 {
        return Err("plugin version must be 1-64 characters".into());
    }
    if info.description.len() > 2048 {
        return Err("plugin description is over 2048 bytes".into());
    }
    Ok(())
}

/// Conversions between the trace's types and the WIT's.
mod wit {
    use super::bindings::scorer::vauban::plugin::types as t;
    use crate::trace::ArtifactKind as K;
    use crate::trace::TensorSummary;

    pub fn kind_to(k: K) -> t::ArtifactKind {
        match k {
            K::Text => t::ArtifactKind::Text,
            K::Tokens => t::ArtifactKind::Tokens,
            K::Logits => t::ArtifactKind::Logits,
            K::Logprobs => t::ArtifactKind::Logprobs,
            K::Activation => t::ArtifactKind::Activation,
            K::InterventionResult => t::ArtifactKind::InterventionResult,
            K::WeightSnapshot => t::ArtifactKind::WeightSnapshot,
            K::Metric => t::ArtifactKind::Metric,
            K::ReportEvidence => t::ArtifactKind::ReportEvidence,
            K::Profile => t::ArtifactKind::Profile,
        }
    }

    pub fn kind_from(k: t::ArtifactKind) -> K {
        match k {
            t::ArtifactKind::Text => K::Text,
            t::ArtifactKind::Tokens => K::Tokens,
            t::ArtifactKind::Logits => K::Logits,
            t::ArtifactKind::Logprobs => K::Logprobs,
            t::ArtifactKind::Activation => K::Activation,
            t::ArtifactKind::InterventionResult => K::InterventionResult,
            t::ArtifactKind::WeightSnapshot => K::WeightSnapshot,
            t::ArtifactKind::Metric => K::Metric,
            t::ArtifactKind::ReportEvidence => K::ReportEvidence,
            t::ArtifactKind::Profile => K::Profile,
        }
    }

    pub fn summary_to(s: &TensorSummary) -> t::TensorSummary {
        t::TensorSummary {
            shape: s.shape.iter().map(|&d| d as u64).collect(),
            dtype: s.dtype.to_string(),
            numel: s.numel,
            non_finite: s.non_finite,
            mean: s.mean,
            std: s.std,
            min: s.min,
            max: s.max,
            l2_norm: s.l2_norm,
        }
    }
}
