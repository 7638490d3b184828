//! The guest side of vauban's plugin contract (`wit/plugin.wit`).
//!
//! A plugin is a `cdylib` crate built with
//! `cargo build --release --target wasm32-wasip2`, which emits a
//! WebAssembly component directly. Implement the world's `Guest` trait and
//! export it:
//!
//! ```ignore
//! use vauban_plugin_sdk::scorer::{self, Guest, Metric, ScorerInfo, TraceView};
//!
//! struct Length;
//! impl Guest for Length {
//!     fn describe() -> ScorerInfo { /* name, version, needs, metric specs */ }
//!     fn configure(_json: String) -> Result<(), scorer::PluginError> { Ok(()) }
//!     fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, scorer::PluginError> {
//!         Ok(traces.iter().map(|t| scorer::metric(t, "length", t.completion_tokens.len() as f64)).collect())
//!     }
//! }
//! vauban_plugin_sdk::export_scorer!(Length);
//! ```
//!
//! Each world has its own module (the shared WIT types are generated once per
//! world). Plugin state lives in statics: the host makes a fresh instance for
//! every job, calls `configure` once, then the world's entry point.

pub mod config;
pub mod refusal;
pub mod text;

/// Re-exported so the export macros resolve from a plugin crate.
#[doc(hidden)]
pub use wit_bindgen;

/// Scorers: `describe`, `configure`, `score`.
pub mod scorer {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "scorer-plugin",
        pub_export_macro: true,
        export_macro_name: "export_scorer",
        default_bindings_module: "vauban_plugin_sdk::scorer",
    });

    pub use exports::vauban::plugin::scorer::Guest;
    pub use vauban::plugin::scoring::{Metric, MetricSpec, ScorerInfo, TraceView};
    pub use vauban::plugin::tensors::{Tensor, TensorInfo, open};
    pub use vauban::plugin::types::{
        ArtifactKind, PluginError, PluginInfo, Polarity, TensorSummary,
    };

    /// One metric value for `trace`.
    pub fn metric(trace: &TraceView, name: &str, value: f64) -> Metric {
        Metric {
            trace_id: trace.id.clone(),
            name: name.to_owned(),
            value,
        }
    }

    /// A metric spec, in the order the WIT record declares its fields.
    pub fn spec(
        name: &str,
        unit: &str,
        polarity: Polarity,
        family: &str,
        description: &str,
    ) -> MetricSpec {
        MetricSpec {
            name: name.to_owned(),
            unit: unit.to_owned(),
            polarity,
            family: family.to_owned(),
            description: description.to_owned(),
        }
    }

    /// Who the plugin is, from its crate's Cargo.toml.
    #[macro_export]
    macro_rules! plugin_info {
        ($description:expr) => {
            $crate::scorer::PluginInfo {
                name: env!("CARGO_PKG_NAME").to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                description: ($description).to_owned(),
            }
        };
    }
}

/// Intervention policies: `describe`, `configure`, `decide`.
pub mod policy {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "intervention-policy-plugin",
        pub_export_macro: true,
        export_macro_name: "export_policy",
        default_bindings_module: "vauban_plugin_sdk::policy",
    });

    pub use exports::vauban::plugin::intervention_policy::{
        DirectionNeed, Guest, Mode, Observation, Op, PolicyInfo,
    };
    pub use vauban::plugin::types::{PluginError, PluginInfo};
}

/// Claim mappers: `describe`, `configure`, `propose`.
pub mod claims {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "claim-mapper-plugin",
        pub_export_macro: true,
        export_macro_name: "export_claim_mapper",
        default_bindings_module: "vauban_plugin_sdk::claims",
    });

    pub use exports::vauban::plugin::claim_mapper::{
        ActivationFinding, Claim, DistributionFinding, EvidenceSet, Guest, InterventionRecord,
        MetricDelta, Strength, WeightFinding,
    };
    pub use vauban::plugin::types::{ArtifactKind, PluginError, PluginInfo, Polarity};
}
