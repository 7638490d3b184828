//! `steer-gate`: conditional steering. On each forward step, subtract
//! `alpha` times the direction's component from the tokens whose
//! projection onto it exceeds `threshold`; leave the others alone.
//!
//! Config: `direction` (the name the run binds to a direction file,
//! default "refusal"), `layers` (required), `threshold` (default 0),
//! `alpha` (default 1: remove the whole component).

use std::sync::OnceLock;

use serde::Deserialize;
use vauban_plugin_sdk::config;
use vauban_plugin_sdk::policy::{
    DirectionNeed, Guest, Mode, Observation, Op, PluginError, PolicyInfo,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_direction")]
    direction: String,
    layers: Vec<u32>,
    #[serde(default)]
    threshold: f32,
    #[serde(default = "one")]
    alpha: f32,
}

fn default_direction() -> String {
    "refusal".into()
}

fn one() -> f32 {
    1.0
}

static CONFIG: OnceLock<Config> = OnceLock::new();

fn config() -> Result<&'static Config, PluginError> {
    CONFIG
        .get()
        .ok_or_else(|| PluginError::BadConfig("steer-gate needs a config with `layers`".into()))
}

struct SteerGate;

impl Guest for SteerGate {
    fn describe() -> PolicyInfo {
        let (name, layers) = match CONFIG.get() {
            Some(c) => (c.direction.clone(), c.layers.clone()),
            None => (default_direction(), Vec::new()),
        };
        PolicyInfo {
            plugin: vauban_plugin_sdk::policy::PluginInfo {
                name: env!("CARGO_PKG_NAME").to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                description: "Subtract a direction only where its projection exceeds a threshold"
                    .into(),
            },
            directions: vec![DirectionNeed { name, layers }],
        }
    }

    fn configure(config_json: String) -> Result<(), PluginError> {
        let c: Config = config::parse(&config_json).map_err(PluginError::BadConfig)?;
        if c.layers.is_empty() {
            return Err(PluginError::BadConfig(
                "`layers` is empty; name the layers to gate".into(),
            ));
        }
        if !c.threshold.is_finite() || !c.alpha.is_finite() {
            return Err(PluginError::BadConfig(
                "`threshold` and `alpha` must be finite".into(),
            ));
        }
        CONFIG
            .set(c)
            .map_err(|_| PluginError::BadConfig("configure was called twice".into()))
    }

    fn decide(observations: Vec<Observation>) -> Result<Vec<Op>, PluginError> {
        let c = config()?;
        Ok(observations
            .iter()
            .filter(|o| o.direction == c.direction && c.layers.contains(&o.layer))
            .filter_map(|o| {
                let tokens: Vec<u32> = o
                    .projections
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| **p > c.threshold)
                    .map(|(i, _)| i as u32)
                    .collect();
                (!tokens.is_empty()).then(|| Op {
                    layer: o.layer,
                    direction: o.direction.clone(),
                    mode: Mode::Subtract,
                    alpha: c.alpha,
                    value: None,
                    tokens,
                })
            })
            .collect())
    }
}

vauban_plugin_sdk::policy::export_policy!(SteerGate);
