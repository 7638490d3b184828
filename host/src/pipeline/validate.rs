//! What `vauban validate --online` checks of a plan's endpoints.

use anyhow::Context;

use super::Plan;
use crate::config::file::ExecutorKind;

/// Connects to every `executor = "http"` side's endpoint and probes it
/// (`vauban validate --online`): one line per endpoint saying what it
/// serves and returns, and a warning where the run would get less
/// evidence than the config asks for. An endpoint that cannot be reached
/// is an error naming the side.
pub fn probe_endpoints(plan: &Plan) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for side in [&plan.baseline, &plan.candidate] {
        let Some(spec) = side
            .http
            .as_ref()
            .filter(|_| side.backend == ExecutorKind::Http)
        else {
            continue;
        };
        let name = side.name.as_str();
        let exec = crate::executor::http::HttpExecutor::connect(spec)
            .with_context(|| format!("{name}: probing {}", spec.url))?;
        let p = exec.probe();
        lines.push(format!(
            "{name}: {} serves `{}`{}; log-probabilities: {}; token ids: {}; prompt log-probabilities (echo): {}",
            exec.base_url(),
            p.served_model.as_deref().unwrap_or(&spec.model),
            p.system_fingerprint
                .as_deref()
                .map(|f| format!(" (fingerprint {f})"))
                .unwrap_or_default(),
            match p.top_logprobs {
                0 => "none".to_owned(),
                k => format!("top {k} per generated position"),
            },
            if p.token_ids { "yes" } else { "no" },
            if p.prompt_logprobs { "yes" } else { "no" },
        ));
        let o = &plan.config.observe;
        if o.logprobs && p.top_logprobs == 0 {
            lines.push(format!(
                "warning: {name}: observe.logprobs is set, but the endpoint returns no log-probabilities: the report will narrow to black_box (text only)"
            ));
        } else if o.logprobs && p.top_logprobs < o.top_logprobs {
            lines.push(format!(
                "warning: {name}: observe.top_logprobs = {}, but the endpoint returns at most {}: the KL covers fewer tokens (still a lower bound)",
                o.top_logprobs, p.top_logprobs
            ));
        }
        if o.logprobs && p.top_logprobs > 0 && (!p.token_ids || spec.tokenizer.is_none()) {
            lines.push(format!(
                "warning: {name}: {}: no next-token KL can be computed (it needs token ids and the served model's vocabulary)",
                match (p.token_ids, spec.tokenizer.is_some()) {
                    (false, _) => "the endpoint returns no token ids",
                    _ => "no `tokenizer` is declared",
                }
            ));
        }
        if !o.layers.is_empty() || o.weights {
            lines.push(format!(
                "warning: {name}: observe.layers/weights ask for activations or weights, which an endpoint never gives: recorded as unsupported"
            ));
        }
    }
    Ok(lines)
}
