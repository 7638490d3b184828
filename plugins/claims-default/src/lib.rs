//! `claims-default`: each metric delta that is significant (p below
//! `alpha`, default 0.05, and a confidence interval that excludes 0 when
//! one is given) becomes a claim, at the strongest level the evidence
//! allows for that kind of metric: behavioural metrics at most a black-box
//! behavioural diff, logprob metrics a distributional diff, activation
//! metrics an activation diagnostic; never above the evidence set's cap.
//! When nothing is significant, one claim says so.

use std::sync::OnceLock;

use serde::Deserialize;
use vauban_plugin_sdk::claims::{
    Claim, EvidenceSet, Guest, MetricDelta, PluginError, PluginInfo, Strength,
};
use vauban_plugin_sdk::config;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_alpha")]
    alpha: f64,
}

fn default_alpha() -> f64 {
    0.05
}

static ALPHA: OnceLock<f64> = OnceLock::new();

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

/// The strongest claim a metric of this name can carry by itself.
fn natural_strength(metric: &str) -> Strength {
    let m = metric.to_ascii_lowercase();
    if ["logprob", "perplexity", "kl", "entropy"]
        .iter()
        .any(|k| m.contains(k))
    {
        Strength::DistributionalDiff
    } else if ["projection", "activation", "residual"]
        .iter()
        .any(|k| m.contains(k))
    {
        Strength::ActivationDiagnostic
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
        "{}{scope} {dir} from {:.3} to {:.3} (delta {:+.3}{ci}{p}, n = {})",
        d.metric, d.baseline_mean, d.candidate_mean, d.delta, d.n
    )
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
        ALPHA
            .set(c.alpha)
            .map_err(|_| PluginError::BadConfig("configure was called twice".into()))
    }

    fn propose(evidence: EvidenceSet) -> Result<Vec<Claim>, PluginError> {
        let alpha = *ALPHA.get().unwrap_or(&default_alpha());
        let cap = evidence.claim_strength;
        let mut claims: Vec<Claim> = evidence
            .deltas
            .iter()
            .filter(|d| significant(d, alpha))
            .map(|d| Claim {
                statement: statement(d),
                strength: weaker(natural_strength(&d.metric), cap),
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
        Ok(claims)
    }
}

vauban_plugin_sdk::claims::export_claim_mapper!(ClaimsDefault);
