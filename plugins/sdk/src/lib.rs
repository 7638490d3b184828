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
pub mod rubric;
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

/// Judged scorers: `describe`, `configure`, `plan` (the judge requests for
/// a batch of traces), then `score` with the host's answers. The scorer
/// records are the plain scorer's ([`scorer`]): one set of types serves
/// both worlds.
pub mod judged {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "judged-scorer-plugin",
        pub_export_macro: true,
        export_macro_name: "export_judged_scorer",
        default_bindings_module: "vauban_plugin_sdk::judged",
        with: {
            "vauban:plugin/types@0.3.0": crate::scorer::vauban::plugin::types,
            "vauban:plugin/tensors@0.3.0": crate::scorer::vauban::plugin::tensors,
            "vauban:plugin/scoring@0.3.0": crate::scorer::vauban::plugin::scoring,
        },
    });

    pub use crate::scorer::{
        ArtifactKind, Metric, MetricSpec, PluginError, PluginInfo, Polarity, ScorerInfo, TraceView,
        metric, spec,
    };
    pub use exports::vauban::plugin::judged_scorer::{
        Guest, JudgeAnswer, JudgeAsk, JudgeChoice, JudgeNeed, JudgeRequest, Judged,
        JudgedScorerInfo,
    };

    /// A closed-set question to `judge` about one trace: the request's id
    /// is the trace's id and `tag` (unique when a trace asks several).
    pub fn choose(
        trace: &TraceView,
        tag: &str,
        judge: &str,
        prompt: String,
        system: Option<String>,
        options: &[&str],
    ) -> JudgeRequest {
        JudgeRequest {
            id: format!("{}#{tag}", trace.id),
            judge: judge.to_owned(),
            prompt,
            system,
            ask: JudgeAsk::Choices(options.iter().map(|o| (*o).to_owned()).collect()),
        }
    }

    /// The answer to the request `choose` made for `trace` and `tag`, if the
    /// host gave one (an error leaves the trace unscored by it).
    pub fn answer_for<'a>(
        answers: &'a [JudgeAnswer],
        trace: &TraceView,
        tag: &str,
    ) -> Option<&'a Judged> {
        let id = format!("{}#{tag}", trace.id);
        answers
            .iter()
            .find(|a| a.id == id)
            .and_then(|a| a.answer.as_ref().ok())
    }

    /// The most probable answer of a closed set (an answer scored exactly
    /// before a bounded one it ties with), as the host's `verdict`.
    pub fn verdict(judged: &Judged) -> Option<&str> {
        judged
            .choices
            .iter()
            .max_by(|x, y| {
                x.logprob
                    .total_cmp(&y.logprob)
                    .then(y.bounded.cmp(&x.bounded))
            })
            .map(|c| c.answer.as_str())
    }

    /// The probability a closed-set answer gives `option` (0 when absent).
    pub fn probability(judged: &Judged, option: &str) -> f64 {
        judged
            .choices
            .iter()
            .find(|c| c.answer == option)
            .map_or(0.0, |c| c.probability)
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
