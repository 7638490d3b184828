//! A claim mapper built against `vauban:plugin@0.1.0`, which saw only metric
//! deltas and intervention ids: it claims an activation diagnostic from
//! every delta and the first intervention id. The host must run it, show it
//! what 0.1 carried, and bound its claim by what it cites.

wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "claim-mapper-plugin" });

use exports::vauban::plugin::claim_mapper::{Claim, EvidenceSet, Guest, Strength};
use vauban::plugin::types::{PluginError, PluginInfo};

struct Legacy;

impl Guest for Legacy {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "v0-1-claims".into(),
            version: "0.1.0".into(),
            description: "built against vauban:plugin@0.1.0".into(),
        }
    }

    fn configure(_: String) -> Result<(), PluginError> {
        Ok(())
    }

    fn propose(evidence: EvidenceSet) -> Result<Vec<Claim>, PluginError> {
        let mut cited: Vec<String> = evidence.deltas.iter().map(|d| d.id.clone()).collect();
        cited.extend(evidence.interventions.first().cloned());
        Ok(vec![Claim {
            statement: format!(
                "{} deltas ({}) and {} intervention record(s) seen",
                evidence.deltas.len(),
                evidence
                    .deltas
                    .iter()
                    .map(|d| d.polarity.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                evidence.interventions.len()
            ),
            strength: Strength::ActivationDiagnostic,
            evidence: cited,
            limitations: Vec::new(),
        }])
    }
}

export!(Legacy);
