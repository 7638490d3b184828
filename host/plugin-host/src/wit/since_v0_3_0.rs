//! Bindings of the current WIT, `vauban:plugin@0.3.0` (`wit/plugin.wit`),
//! one module per world. The host's plugin code speaks these types; older
//! versions convert to them ([`super::since_v0_1_0`],
//! [`super::since_v0_2_0`]).

/// The scorer world: imports `tensors` (host-owned tensor handles).
pub mod scorer {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "scorer-plugin",
        imports: { default: trappable },
        with: { "vauban:plugin/tensors.tensor": crate::tensors::TensorHandle },
    });
}

/// The judged scorer world: a scorer that asks judges through the host
/// (`plan`, then `score` with the answers); imports `tensors` too.
pub mod judged {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "judged-scorer-plugin",
        imports: { default: trappable },
        with: {
            "vauban:plugin/types": crate::wit::current::scorer::vauban::plugin::types,
            "vauban:plugin/scoring": crate::wit::current::scorer::vauban::plugin::scoring,
            "vauban:plugin/tensors": crate::wit::current::scorer::vauban::plugin::tensors,
        },
    });
}

pub mod policy {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "intervention-policy-plugin",
    });
}

pub mod claims {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "claim-mapper-plugin",
    });
}

/// Conversions between the trace's types and the WIT's.
pub mod convert {
    use super::scorer::vauban::plugin::types as t;
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
