//! An intervention policy built against `vauban:plugin@0.1.0`: subtracts the
//! `refusal` direction at every watched layer on every token whose
//! projection is above 0 (a 0.1 policy the host must still run).

wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "intervention-policy-plugin" });

use exports::vauban::plugin::intervention_policy::{
    DirectionNeed, Guest, Mode, Observation, Op, PolicyInfo,
};
use vauban::plugin::types::{PluginError, PluginInfo};

struct Legacy;

impl Guest for Legacy {
    fn describe() -> PolicyInfo {
        PolicyInfo {
            plugin: PluginInfo {
                name: "v0-1-policy".into(),
                version: "0.1.0".into(),
                description: "built against vauban:plugin@0.1.0".into(),
            },
            directions: vec![DirectionNeed {
                name: "refusal".into(),
                layers: vec![1],
            }],
        }
    }

    fn configure(_: String) -> Result<(), PluginError> {
        Ok(())
    }

    fn decide(observations: Vec<Observation>) -> Result<Vec<Op>, PluginError> {
        Ok(observations
            .iter()
            .filter_map(|o| {
                let tokens: Vec<u32> = o
                    .projections
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| **p > 0.0)
                    .map(|(i, _)| i as u32)
                    .collect();
                (!tokens.is_empty()).then(|| Op {
                    layer: o.layer,
                    direction: o.direction.clone(),
                    mode: Mode::Subtract,
                    alpha: 1.0,
                    value: None,
                    tokens,
                })
            })
            .collect())
    }
}

export!(Legacy);
