//! `logprob`: how likely the model found its own continuation.
//!
//! - `mean_token_logprob` (nats): the mean log-probability of the generated
//!   tokens;
//! - `perplexity`: exp(−mean).
//!
//! From the per-token values when the trace kept them raw, otherwise from
//! the recorded summary of the completion's chosen-token logprobs (its mean
//! is the same number). Traces without a generated continuation get no value.

use vauban_plugin_sdk::scorer::{
    self, ArtifactKind, Guest, Metric, PluginError, Polarity, ScorerInfo, TraceView,
};

/// The mean chosen-token logprob of the completion, if the trace has one.
fn mean_logprob(t: &TraceView) -> Option<f64> {
    if let Some(v) = &t.completion_logprobs
        && !v.is_empty()
    {
        return Some(v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64);
    }
    t.tensors
        .iter()
        .find(|i| {
            i.kind == ArtifactKind::Logprobs
                && i.labels
                    .iter()
                    .any(|(k, v)| k == "role" && v == "completion")
                && i.summary.non_finite == 0
        })
        .and_then(|i| i.summary.mean)
}

struct Logprob;

impl Guest for Logprob {
    fn describe() -> ScorerInfo {
        ScorerInfo {
            plugin: vauban_plugin_sdk::plugin_info!(
                "Mean token logprob and perplexity of the continuation"
            ),
            needs: vec![ArtifactKind::Logprobs],
            metrics: vec![
                scorer::spec(
                    "mean_token_logprob",
                    "nats",
                    Polarity::Neutral,
                    "fluency",
                    "Mean log-probability of the generated tokens",
                ),
                scorer::spec(
                    "perplexity",
                    "ratio",
                    Polarity::Neutral,
                    "fluency",
                    "exp(-mean_token_logprob) of the generated tokens",
                ),
            ],
        }
    }

    fn configure(config_json: String) -> Result<(), PluginError> {
        match config_json.trim() {
            "" | "{}" | "null" => Ok(()),
            other => Err(PluginError::BadConfig(format!(
                "logprob takes no options; got {other}"
            ))),
        }
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        let mut out = Vec::new();
        for t in &traces {
            if let Some(m) = mean_logprob(t) {
                out.push(scorer::metric(t, "mean_token_logprob", m));
                out.push(scorer::metric(t, "perplexity", (-m).exp()));
            }
        }
        Ok(out)
    }
}

vauban_plugin_sdk::scorer::export_scorer!(Logprob);
