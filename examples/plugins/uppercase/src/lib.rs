//! An example scorer, as a third party would write one: the share of
//! letters in the completion that are upper case (shouting, or a change in
//! formatting after a fine-tune).
//!
//! Build: `cargo build --release --target wasm32-wasip2 -p uppercase-scorer`
//! Test:  `vauban plugin test target/wasm32-wasip2/release/uppercase_scorer.wasm --traces tests/fixtures/smollm2-chat`

use vauban_plugin_sdk::scorer::{
    self, ArtifactKind, Guest, Metric, PluginError, Polarity, ScorerInfo, TraceView,
};

struct Uppercase;

impl Guest for Uppercase {
    fn describe() -> ScorerInfo {
        ScorerInfo {
            plugin: vauban_plugin_sdk::plugin_info!(
                "Share of upper-case letters in the completion"
            ),
            needs: vec![ArtifactKind::Text],
            metrics: vec![scorer::spec(
                "uppercase_ratio",
                "ratio",
                Polarity::Neutral,
                "style",
                "Upper-case letters over all letters (0 when there are none)",
            )],
        }
    }

    fn configure(_config_json: String) -> Result<(), PluginError> {
        Ok(())
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        Ok(traces
            .iter()
            .map(|t| {
                let text = t.completion.as_deref().unwrap_or("");
                let letters = text.chars().filter(|c| c.is_alphabetic()).count();
                let upper = text.chars().filter(|c| c.is_uppercase()).count();
                let ratio = if letters == 0 {
                    0.0
                } else {
                    upper as f64 / letters as f64
                };
                scorer::metric(t, "uppercase_ratio", ratio)
            })
            .collect())
    }
}

vauban_plugin_sdk::scorer::export_scorer!(Uppercase);
