//! `vauban:plugin@0.2.0` (`wit/since_v0.2.0/plugin.wit`, frozen): bindings,
//! and conversions to and from the current version's types. Its `types`
//! interface is the current one, so it is mapped onto the current types;
//! its scorer, policy and claim-mapper records have the current shapes
//! under 0.2's names, converted field by field here.

use wasmtime::component::Resource;

use super::current;
use crate::sandbox::SandboxState;
use crate::tensors::TensorHandle;

pub mod scorer {
    wasmtime::component::bindgen!({
        path: "../../wit/since_v0.2.0",
        world: "scorer-plugin",
        imports: { default: trappable },
        with: {
            "vauban:plugin/types": crate::wit::current::scorer::vauban::plugin::types,
            "vauban:plugin/tensors.tensor": crate::tensors::TensorHandle,
        },
    });
}

pub mod policy {
    wasmtime::component::bindgen!({
        path: "../../wit/since_v0.2.0",
        world: "intervention-policy-plugin",
        with: {
            "vauban:plugin/types": crate::wit::current::policy::vauban::plugin::types,
        },
    });
}

pub mod claims {
    wasmtime::component::bindgen!({
        path: "../../wit/since_v0.2.0",
        world: "claim-mapper-plugin",
        with: {
            "vauban:plugin/types": crate::wit::current::claims::vauban::plugin::types,
        },
    });
}

// ---- scorer --------------------------------------------------------------

use current::scorer::vauban::plugin::scoring as ws;
use current::scorer::vauban::plugin::tensors as wt;
use scorer::exports::vauban::plugin::scorer as os;
use scorer::vauban::plugin::tensors as ot;

/// A current trace view as 0.2 spelled it (the same fields).
pub fn trace_view(v: &ws::TraceView) -> os::TraceView {
    os::TraceView {
        id: v.id.clone(),
        prompt_id: v.prompt_id.clone(),
        category: v.category.clone(),
        expected_behavior: v.expected_behavior.clone(),
        prompt: v.prompt.clone(),
        completion: v.completion.clone(),
        prompt_tokens: v.prompt_tokens.clone(),
        completion_tokens: v.completion_tokens.clone(),
        completion_logprobs: v.completion_logprobs.clone(),
        tensors: v
            .tensors
            .iter()
            .map(|t| ot::TensorInfo {
                id: t.id.clone(),
                kind: t.kind,
                layer: t.layer,
                labels: t.labels.clone(),
                summary: t.summary.clone(),
                raw: t.raw,
            })
            .collect(),
        metrics: v.metrics.clone(),
        kinds: v.kinds.clone(),
    }
}

impl From<os::ScorerInfo> for ws::ScorerInfo {
    fn from(i: os::ScorerInfo) -> ws::ScorerInfo {
        ws::ScorerInfo {
            plugin: i.plugin,
            needs: i.needs,
            metrics: i
                .metrics
                .into_iter()
                .map(|m| ws::MetricSpec {
                    name: m.name,
                    unit: m.unit,
                    polarity: m.polarity,
                    family: m.family,
                    description: m.description,
                })
                .collect(),
        }
    }
}

impl From<os::Metric> for ws::Metric {
    fn from(m: os::Metric) -> ws::Metric {
        ws::Metric {
            trace_id: m.trace_id,
            name: m.name,
            value: m.value,
        }
    }
}

type Answer<T> = wasmtime::Result<Result<T, String>>;

/// 0.2's `tensors` import is the current one: the same host functions.
impl ot::HostTensor for SandboxState {
    fn rows(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<u64> {
        wt::HostTensor::rows(self, this)
    }
    fn width(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<u64> {
        wt::HostTensor::width(self, this)
    }
    fn read_rows(
        &mut self,
        this: Resource<TensorHandle>,
        start: u64,
        count: u64,
    ) -> Answer<Vec<f32>> {
        wt::HostTensor::read_rows(self, this, start, count)
    }
    fn project(&mut self, this: Resource<TensorHandle>, vector: Vec<f32>) -> Answer<Vec<f32>> {
        wt::HostTensor::project(self, this, vector)
    }
    fn top_k(&mut self, this: Resource<TensorHandle>, row: u64, k: u32) -> Answer<Vec<(u32, f32)>> {
        wt::HostTensor::top_k(self, this, row, k)
    }
    fn logsumexp(&mut self, this: Resource<TensorHandle>) -> Answer<Vec<f32>> {
        wt::HostTensor::logsumexp(self, this)
    }
    fn drop(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<()> {
        wt::HostTensor::drop(self, this)
    }
}

impl ot::Host for SandboxState {
    fn open(&mut self, trace_id: String, artifact_id: String) -> Answer<Resource<TensorHandle>> {
        wt::Host::open(self, trace_id, artifact_id)
    }
}

// ---- intervention policy -------------------------------------------------

use current::policy::exports::vauban::plugin::intervention_policy as wp;
use policy::exports::vauban::plugin::intervention_policy as op;

pub fn observation(o: &wp::Observation) -> op::Observation {
    op::Observation {
        layer: o.layer,
        direction: o.direction.clone(),
        offset: o.offset,
        projections: o.projections.clone(),
    }
}

impl From<op::PolicyInfo> for wp::PolicyInfo {
    fn from(i: op::PolicyInfo) -> wp::PolicyInfo {
        wp::PolicyInfo {
            plugin: i.plugin,
            directions: i
                .directions
                .into_iter()
                .map(|d| wp::DirectionNeed {
                    name: d.name,
                    layers: d.layers,
                })
                .collect(),
        }
    }
}

impl From<op::Op> for wp::Op {
    fn from(o: op::Op) -> wp::Op {
        wp::Op {
            layer: o.layer,
            direction: o.direction,
            mode: match o.mode {
                op::Mode::Project => wp::Mode::Project,
                op::Mode::Subtract => wp::Mode::Subtract,
                op::Mode::Add => wp::Mode::Add,
                op::Mode::SubspaceProject => wp::Mode::SubspaceProject,
                op::Mode::SubspaceRemove => wp::Mode::SubspaceRemove,
                op::Mode::SubspaceAdd => wp::Mode::SubspaceAdd,
                op::Mode::Clamp => wp::Mode::Clamp,
                op::Mode::Steer => wp::Mode::Steer,
            },
            alpha: o.alpha,
            value: o.value,
            tokens: o.tokens,
        }
    }
}

// ---- claim mapper --------------------------------------------------------

use claims::exports::vauban::plugin::claim_mapper as oc;
use current::claims::exports::vauban::plugin::claim_mapper as wc;

fn strength_to(s: wc::Strength) -> oc::Strength {
    match s {
        wc::Strength::BehavioralProfile => oc::Strength::BehavioralProfile,
        wc::Strength::BlackBoxBehavioralDiff => oc::Strength::BlackBoxBehavioralDiff,
        wc::Strength::DistributionalDiff => oc::Strength::DistributionalDiff,
        wc::Strength::WeightDiff => oc::Strength::WeightDiff,
        wc::Strength::ActivationDiagnostic => oc::Strength::ActivationDiagnostic,
        wc::Strength::ModelChangeAudit => oc::Strength::ModelChangeAudit,
    }
}

fn strength_from(s: oc::Strength) -> wc::Strength {
    match s {
        oc::Strength::BehavioralProfile => wc::Strength::BehavioralProfile,
        oc::Strength::BlackBoxBehavioralDiff => wc::Strength::BlackBoxBehavioralDiff,
        oc::Strength::DistributionalDiff => wc::Strength::DistributionalDiff,
        oc::Strength::WeightDiff => wc::Strength::WeightDiff,
        oc::Strength::ActivationDiagnostic => wc::Strength::ActivationDiagnostic,
        oc::Strength::ModelChangeAudit => wc::Strength::ModelChangeAudit,
    }
}

/// The current evidence set as 0.2 spelled it: the same records.
pub fn evidence_set(e: &wc::EvidenceSet) -> oc::EvidenceSet {
    oc::EvidenceSet {
        access_level: e.access_level.clone(),
        claim_strength: strength_to(e.claim_strength),
        kinds_in_both: e.kinds_in_both.clone(),
        deltas: e
            .deltas
            .iter()
            .map(|d| oc::MetricDelta {
                id: d.id.clone(),
                metric: d.metric.clone(),
                category: d.category.clone(),
                baseline_mean: d.baseline_mean,
                candidate_mean: d.candidate_mean,
                delta: d.delta,
                ci_low: d.ci_low,
                ci_high: d.ci_high,
                p_value: d.p_value,
                n: d.n,
                polarity: d.polarity,
                rests_on: d.rests_on.clone(),
            })
            .collect(),
        distribution: e
            .distribution
            .iter()
            .map(|d| oc::DistributionFinding {
                id: d.id.clone(),
                measure: d.measure.clone(),
                value: d.value,
                prompts: d.prompts,
            })
            .collect(),
        activations: e
            .activations
            .iter()
            .map(|a| oc::ActivationFinding {
                id: a.id.clone(),
                layer: a.layer,
                direction: a.direction.clone(),
                baseline_mean: a.baseline_mean,
                candidate_mean: a.candidate_mean,
                prompts: a.prompts,
            })
            .collect(),
        weights: e
            .weights
            .iter()
            .map(|w| oc::WeightFinding {
                id: w.id.clone(),
                layer: w.layer,
                matrix: w.matrix.clone(),
                baseline_l2_norm: w.baseline_l2_norm,
                candidate_l2_norm: w.candidate_l2_norm,
                summaries_differ: w.summaries_differ,
            })
            .collect(),
        interventions: e
            .interventions
            .iter()
            .map(|i| oc::InterventionRecord {
                id: i.id.clone(),
                side: i.side.clone(),
                prompt: i.prompt.clone(),
                mode: i.mode.clone(),
                layer: i.layer,
                direction: i.direction.clone(),
                alpha: i.alpha,
            })
            .collect(),
    }
}

impl From<oc::Claim> for wc::Claim {
    fn from(c: oc::Claim) -> wc::Claim {
        wc::Claim {
            statement: c.statement,
            strength: strength_from(c.strength),
            evidence: c.evidence,
            limitations: c.limitations,
        }
    }
}
