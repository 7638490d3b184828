//! A judged scorer that misuses its judges, one way per `mode`:
//! - `honest`: one yes/no question per trace; `answered` is 1 when it got
//!   an answer, `said_yes` the probability of "yes";
//! - `flood`: 100 requests per trace (over the host's per-trace bound);
//! - `spend`: 8 requests per trace (within the bound, over a small budget);
//! - `undeclared`: asks a judge it never declared;
//! - `huge`: a prompt of 1 MiB;
//! - `loop`: plans honestly, then spins forever in `score`.
//!
//! `answered` counts what the host answered, so a test sees the refusals
//! from the guest's side too.

use std::sync::Mutex;

use serde::Deserialize;
use vauban_plugin_sdk::config;
use vauban_plugin_sdk::judged::{
    self, ArtifactKind, Guest, JudgeAnswer, JudgeNeed, JudgeRequest, JudgedScorerInfo, Metric,
    PluginError, Polarity, ScorerInfo, TraceView,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    mode: String,
}

static MODE: Mutex<String> = Mutex::new(String::new());

struct Abuse;

fn question(t: &TraceView, tag: &str, judge: &str, prompt: String) -> JudgeRequest {
    judged::choose(t, tag, judge, prompt, None, &["yes", "no"])
}

impl Guest for Abuse {
    fn describe() -> JudgedScorerInfo {
        JudgedScorerInfo {
            scorer: ScorerInfo {
                plugin: vauban_plugin_sdk::plugin_info!("misuses its judges"),
                needs: vec![ArtifactKind::Text],
                metrics: vec![
                    judged::spec("answered", "rate", Polarity::Neutral, "judge", "answered"),
                    judged::spec(
                        "said_yes",
                        "probability",
                        Polarity::Neutral,
                        "judge",
                        "p(yes)",
                    ),
                ],
            },
            judges: vec![JudgeNeed {
                name: "judge".into(),
                description: "answers yes or no".into(),
            }],
        }
    }

    fn configure(config_json: String) -> Result<(), PluginError> {
        let c: Config = config::parse(&config_json).map_err(PluginError::BadConfig)?;
        *MODE.lock().unwrap() = c.mode;
        Ok(())
    }

    fn plan(traces: Vec<TraceView>) -> Result<Vec<JudgeRequest>, PluginError> {
        let mode = MODE.lock().unwrap().clone();
        let mut out = Vec::new();
        for t in &traces {
            let reply = t.completion.clone().unwrap_or_default();
            let honest = format!("Is this reply polite? Answer yes or no.\n\n{reply}");
            match mode.as_str() {
                "honest" | "loop" => out.push(question(t, "q", "judge", honest)),
                "flood" => (0..100)
                    .for_each(|i| out.push(question(t, &i.to_string(), "judge", honest.clone()))),
                "spend" => (0..8)
                    .for_each(|i| out.push(question(t, &i.to_string(), "judge", honest.clone()))),
                "undeclared" => out.push(question(t, "q", "oracle", honest)),
                "huge" => out.push(question(t, "q", "judge", "x".repeat(1 << 20))),
                other => return Err(PluginError::BadConfig(format!("unknown mode {other}"))),
            }
        }
        Ok(out)
    }

    fn score(
        traces: Vec<TraceView>,
        answers: Vec<JudgeAnswer>,
    ) -> Result<Vec<Metric>, PluginError> {
        if MODE.lock().unwrap().as_str() == "loop" {
            let mut n = 0u64;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        let mut out = Vec::new();
        for t in &traces {
            let prefix = format!("{}#", t.id);
            let mine: Vec<&JudgeAnswer> = answers
                .iter()
                .filter(|a| a.id.starts_with(&prefix))
                .collect();
            let answered = mine.iter().filter(|a| a.answer.is_ok()).count();
            out.push(judged::metric(
                t,
                "answered",
                answered as f64 / mine.len().max(1) as f64,
            ));
            if let Some(a) = mine.iter().find_map(|a| a.answer.as_ref().ok()) {
                out.push(judged::metric(t, "said_yes", judged::probability(a, "yes")));
            }
        }
        Ok(out)
    }
}

vauban_plugin_sdk::judged::export_judged_scorer!(Abuse);
