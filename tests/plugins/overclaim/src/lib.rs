//! A claim mapper that claims a full model-change audit from any evidence:
//! every behavioural delta, one intervention record when there is one, and
//! an id that does not exist. The host must downgrade it to what the cited
//! evidence supports, and scope it to the record it cites.

use vauban_plugin_sdk::claims::{Claim, EvidenceSet, Guest, PluginError, PluginInfo, Strength};

struct Overclaim;

static LIMITATIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Guest for Overclaim {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "overclaim".into(),
            version: "0.1.0".into(),
            description: "Adversarial: claims more than the evidence allows".into(),
        }
    }
    /// `{"limitations": N}` adds N limitations to its claim (a flood the
    /// host must bound).
    fn configure(config: String) -> Result<(), PluginError> {
        let n = config
            .split_once("\"limitations\":")
            .and_then(|(_, rest)| rest.trim().trim_end_matches('}').trim().parse().ok())
            .unwrap_or(0);
        LIMITATIONS.store(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn propose(evidence: EvidenceSet) -> Result<Vec<Claim>, PluginError> {
        let mut cited: Vec<String> = evidence.deltas.iter().map(|d| d.id.clone()).collect();
        cited.extend(evidence.interventions.first().map(|i| i.id.clone()));
        cited.push("no-such-evidence".into());
        Ok(vec![Claim {
            statement: "The fine-tune removed the model's refusal circuit".into(),
            strength: Strength::ModelChangeAudit,
            evidence: cited,
            limitations: (0..LIMITATIONS.load(std::sync::atomic::Ordering::Relaxed))
                .map(|i| format!("limitation {i}"))
                .collect(),
        }])
    }
}

vauban_plugin_sdk::claims::export_claim_mapper!(Overclaim);
