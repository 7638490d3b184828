//! An example scorer, as a third party would write one: the share of
//! letters in the completion that are upper case (shouting, or a change in
//! formatting after a fine-tune).
//!
//! Build: `cargo build --release --target wasm32-wasip2 -p uppercase-scorer`
//! Test:  `vauban plugin test target/wasm32-wasip2/release/uppercase_scorer.wasm --traces tests/fixtures/smollm2-chat`

use std::sync::OnceLock;

use serde::Deserialize;
use vauban_plugin_sdk::config;
use vauban_plugin_sdk::scorer::{
    self, ArtifactKind, Guest, Metric, PluginError, Polarity, ScorerInfo, TraceView,
};

/// The plugin's config: `config = { skip_code = true }` in a run config's
/// `[[scorers]]` table, or a file holding `skip_code = true` given to
/// `vauban plugin test --config FILE`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Leave out text between backticks (code is often upper case).
    #[serde(default)]
    skip_code: bool,
}

/// Set once per instance, by `configure`.
static CONFIG: OnceLock<Config> = OnceLock::new();

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

    fn configure(config_json: String) -> Result<(), PluginError> {
        let config: Config = config::parse(&config_json).map_err(PluginError::BadConfig)?;
        // Every job gets a fresh instance, configured once.
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        let skip_code = CONFIG.get().is_some_and(|c| c.skip_code);
        Ok(traces
            .iter()
            .map(|t| {
                let completion = t.completion.as_deref().unwrap_or("");
                // Between backticks is every other piece of the split.
                let text: String = match skip_code {
                    true => completion.split('`').step_by(2).collect(),
                    false => completion.to_owned(),
                };
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
