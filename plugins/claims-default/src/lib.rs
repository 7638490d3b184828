//! `claims-default`: each metric delta that is significant (its p-value,
//! which the host has adjusted for every test of the report, below `alpha`,
//! default 0.05, and a confidence interval that excludes 0 when one is
//! given) becomes a claim, at the strongest level what the metric
//! rests on supports (its scorer's `rests-on` kinds: text gives a black-box
//! behavioural diff, logprobs or logits a distributional diff, activations
//! an activation diagnostic); never above the evidence set's cap. When
//! nothing is significant, one claim says so.
//!
//! Findings become descriptive claims, citing them: a next-token KL of at
//! least `min_kl` nats (default 0.01) a distributional diff; the layer whose
//! mean projection moved most, when it moved by at least
//! `min_relative_shift` of the larger side (default 0.1), an activation
//! diagnostic; weight matrices whose recorded summaries differ, a weight
//! diff. No statistical test stands behind a finding: each such claim says
//! so in its limitations.

use std::sync::OnceLock;

use serde::Deserialize;
use vauban_plugin_sdk::claims::{
    ArtifactKind, Claim, EvidenceSet, Guest, MetricDelta, PluginError, PluginInfo, Strength,
};
use vauban_plugin_sdk::config;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_alpha")]
    alpha: f64,
    #[serde(default = "default_min_kl")]
    min_kl: f64,
    #[serde(default = "default_min_relative_shift")]
    min_relative_shift: f64,
}

fn default_alpha() -> f64 {
    0.05
}

fn default_min_kl() -> f64 {
    0.01
}

fn default_min_relative_shift() -> f64 {
    0.1
}

impl Default for Config {
    fn default() -> Config {
        Config {
            alpha: default_alpha(),
            min_kl: default_min_kl(),
            min_relative_shift: default_min_relative_shift(),
        }
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

fn rank(s: Strength) -> u8 {
    match s {
        Strength::BehavioralProfile => 0,
        Strength::BlackBoxBehavioralDiff => 1,
        Strength::DistributionalDiff => 2,
        Strength::WeightDiff => 3,
        Strength::ActivationDiagnostic => 4,
        Strength::ModelChangeAudit => 5,
    }
}

fn weaker(a: Strength, b: Strength) -> Strength {
    if rank(a) <= rank(b) { a } else { b }
}

/// The strongest claim a metric can carry by itself: what its scorer read.
fn natural_strength(d: &MetricDelta) -> Strength {
    let read = |k: ArtifactKind| d.rests_on.contains(&k);
    if read(ArtifactKind::Activation) {
        Strength::ActivationDiagnostic
    } else if read(ArtifactKind::WeightSnapshot) {
        Strength::WeightDiff
    } else if read(ArtifactKind::Logprobs) || read(ArtifactKind::Logits) {
        Strength::DistributionalDiff
    } else {
        Strength::BlackBoxBehavioralDiff
    }
}

fn significant(d: &MetricDelta, alpha: f64) -> bool {
    let p_ok = d.p_value.is_some_and(|p| p < alpha);
    let ci_ok = match (d.ci_low, d.ci_high) {
        (Some(lo), Some(hi)) => lo > 0.0 || hi < 0.0,
        _ => true,
    };
    p_ok && ci_ok && d.delta != 0.0
}

fn statement(d: &MetricDelta) -> String {
    let dir = if d.delta > 0.0 { "rose" } else { "fell" };
    let scope = d
        .category
        .as_deref()
        .map(|c| format!(" on {c} prompts"))
        .unwrap_or_default();
    let p = d
        .p_value
        .map(|p| format!(", p = {p:.3}"))
        .unwrap_or_default();
    let ci = match (d.ci_low, d.ci_high) {
        (Some(lo), Some(hi)) => format!(", 95% CI [{lo:+.3}, {hi:+.3}]"),
        _ => String::new(),
    };
    format!(
        "{}{scope} {dir} from {} to {} (delta {:+.3}{ci}{p}, n = {})",
        d.metric,
        fixed3(d.baseline_mean),
        fixed3(d.candidate_mean),
        d.delta,
        d.n
    )
}

/// `x` to three decimals, without the sign of a value that rounds to
/// zero (a projection ablated to -1e-9 reads `0.000`, not `-0.000`).
fn fixed3(x: f64) -> String {
    match format!("{x:.3}") {
        s if s == "-0.000" => "0.000".into(),
        s => s,
    }
}

struct ClaimsDefault;

impl Guest for ClaimsDefault {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: env!("CARGO_PKG_NAME").to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description:
                "Significant deltas become claims at the strongest level the evidence allows".into(),
        }
    }

    fn configure(config_json: String) -> Result<(), PluginError> {
        let c: Config = config::parse(&config_json).map_err(PluginError::BadConfig)?;
        if !(c.alpha > 0.0 && c.alpha < 1.0) {
            return Err(PluginError::BadConfig(format!(
                "alpha must be in (0, 1), not {}",
                c.alpha
            )));
        }
        if !(c.min_kl >= 0.0 && c.min_kl.is_finite()) {
            return Err(PluginError::BadConfig(format!(
                "min_kl must be a finite number >= 0, not {}",
                c.min_kl
            )));
        }
        if !(c.min_relative_shift >= 0.0 && c.min_relative_shift.is_finite()) {
            return Err(PluginError::BadConfig(format!(
                "min_relative_shift must be a finite number >= 0, not {}",
                c.min_relative_shift
            )));
        }
        CONFIG
            .set(c)
            .map_err(|_| PluginError::BadConfig("configure was called twice".into()))
    }

    fn propose(evidence: EvidenceSet) -> Result<Vec<Claim>, PluginError> {
        let c = CONFIG.get_or_init(Config::default);
        let alpha = c.alpha;
        let cap = evidence.claim_strength;
        let mut claims: Vec<Claim> = evidence
            .deltas
            .iter()
            .filter(|d| significant(d, alpha))
            .map(|d| Claim {
                statement: statement(d),
                strength: weaker(natural_strength(d), cap),
                evidence: vec![d.id.clone()],
                limitations: vec![format!(
                    "{} paired prompts; significance at alpha = {alpha} without correction for the {} metrics compared",
                    d.n,
                    evidence.deltas.len()
                )],
            })
            .collect();
        if claims.is_empty() && !evidence.deltas.is_empty() {
            claims.push(Claim {
                statement: format!(
                    "No significant change in the {} metrics compared (alpha = {alpha})",
                    evidence.deltas.len()
                ),
                strength: weaker(Strength::BlackBoxBehavioralDiff, cap),
                evidence: evidence.deltas.iter().map(|d| d.id.clone()).collect(),
                limitations: vec![
                    "absence of evidence at this sample size is not evidence of absence".into(),
                ],
            });
        }
        claims.extend(distribution_claim(&evidence, c.min_kl));
        claims.extend(activation_claim(&evidence, c.min_relative_shift));
        claims.extend(weight_claim(&evidence));
        Ok(claims)
    }
}

const NO_TEST: &str = "a descriptive finding: no statistical test stands behind it";

/// The next-token distributions moved by at least `min_kl` nats.
fn distribution_claim(e: &EvidenceSet, min_kl: f64) -> Option<Claim> {
    let first = e.distribution.iter().find(|d| d.id == "kl:first_token");
    let cont = e.distribution.iter().find(|d| d.id == "kl:continuation");
    let largest = first
        .iter()
        .chain(cont.iter())
        .map(|d| d.value)
        .fold(0.0, f64::max);
    if largest < min_kl || (first.is_none() && cont.is_none()) {
        return None;
    }
    let mut parts = Vec::new();
    let mut cited = Vec::new();
    for (d, what) in [
        (first, "on the first generated token"),
        (cont, "over the continuation"),
    ] {
        if let Some(d) = d {
            parts.push(format!("{:.4} nats {what}", d.value));
            cited.push(d.id.clone());
        }
    }
    let prompts = first.or(cont).map_or(0, |d| d.prompts);
    Some(Claim {
        statement: format!(
            "The candidate's next-token distributions differ from the baseline's: mean KL(baseline || candidate) {} on {prompts} prompts",
            parts.join(" and ")
        ),
        strength: weaker(Strength::DistributionalDiff, e.claim_strength),
        evidence: cited,
        limitations: vec![NO_TEST.into()],
    })
}

/// The layer whose mean projection moved most, if it moved enough.
fn activation_claim(e: &EvidenceSet, min_relative_shift: f64) -> Option<Claim> {
    let a = e.activations.iter().max_by(|x, y| {
        let dx = (x.candidate_mean - x.baseline_mean).abs();
        let dy = (y.candidate_mean - y.baseline_mean).abs();
        dx.total_cmp(&dy)
    })?;
    let shift = a.candidate_mean - a.baseline_mean;
    let scale = a.baseline_mean.abs().max(a.candidate_mean.abs());
    if shift == 0.0 || shift.abs() < min_relative_shift * scale {
        return None;
    }
    Some(Claim {
        statement: format!(
            "At layer {}, the mean projection of the last prompt token onto {} moved from {} to {} ({:+.3}) over {} prompts",
            a.layer,
            a.direction,
            fixed3(a.baseline_mean),
            fixed3(a.candidate_mean),
            shift,
            a.prompts
        ),
        strength: weaker(Strength::ActivationDiagnostic, e.claim_strength),
        evidence: vec![a.id.clone()],
        limitations: vec![
            NO_TEST.into(),
            "one direction at one layer: other directions and layers are not described".into(),
        ],
    })
}

/// Weight matrices whose recorded summaries differ.
fn weight_claim(e: &EvidenceSet) -> Option<Claim> {
    let changed: Vec<_> = e.weights.iter().filter(|w| w.summaries_differ).collect();
    if changed.is_empty() {
        return None;
    }
    let mut layers: Vec<u32> = changed.iter().map(|w| w.layer).collect();
    layers.dedup();
    Some(Claim {
        statement: format!(
            "{} of the {} recorded weight matrices differ between the models (layers {})",
            changed.len(),
            e.weights.len(),
            layers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        strength: weaker(Strength::WeightDiff, e.claim_strength),
        evidence: changed.iter().map(|w| w.id.clone()).collect(),
        limitations: vec![
            "compared by their recorded summaries (norm, mean, spread, range)".into(),
            "only the recorded layers and matrices".into(),
        ],
    })
}

vauban_plugin_sdk::claims::export_claim_mapper!(ClaimsDefault);
