//! A claim mapper built against `vauban:plugin@0.2.0`, run by a host of a
//! later version: it states every field of every kind of evidence it was
//! shown and cites one finding of each kind, so a test sees that the
//! host's conversion to 0.2's records lost nothing.

wit_bindgen::generate!({ path: "../../../wit/since_v0.2.0", world: "claim-mapper-plugin" });

use exports::vauban::plugin::claim_mapper::{Claim, EvidenceSet, Guest, Strength};
use vauban::plugin::types::{PluginError, PluginInfo};

struct Frozen;

impl Guest for Frozen {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "v0-2-claims".into(),
            version: "0.2.0".into(),
            description: "built against vauban:plugin@0.2.0".into(),
        }
    }

    fn configure(_: String) -> Result<(), PluginError> {
        Ok(())
    }

    fn propose(e: EvidenceSet) -> Result<Vec<Claim>, PluginError> {
        let mut seen = vec![format!(
            "{} {:?} kinds {}",
            e.access_level,
            e.claim_strength,
            e.kinds_in_both.len()
        )];
        for d in &e.deltas {
            seen.push(format!(
                "delta {} {} {:?} {} {} {} {:?} {:?} {:?} {} {:?} rests-on {}",
                d.id,
                d.metric,
                d.category,
                d.baseline_mean,
                d.candidate_mean,
                d.delta,
                d.ci_low,
                d.ci_high,
                d.p_value,
                d.n,
                d.polarity,
                d.rests_on.len()
            ));
        }
        for d in &e.distribution {
            seen.push(format!(
                "kl {} {} {} {}",
                d.id, d.measure, d.value, d.prompts
            ));
        }
        for a in &e.activations {
            seen.push(format!(
                "activation {} {} {} {} {} {}",
                a.id, a.layer, a.direction, a.baseline_mean, a.candidate_mean, a.prompts
            ));
        }
        for w in &e.weights {
            seen.push(format!(
                "weight {} {} {} {} {} {}",
                w.id,
                w.layer,
                w.matrix,
                w.baseline_l2_norm,
                w.candidate_l2_norm,
                w.summaries_differ
            ));
        }
        for i in &e.interventions {
            seen.push(format!(
                "intervention {} {} {} {} {:?} {:?} {:?}",
                i.id, i.side, i.prompt, i.mode, i.layer, i.direction, i.alpha
            ));
        }
        let mut cited = Vec::new();
        cited.extend(e.distribution.first().map(|d| d.id.clone()));
        Ok(vec![Claim {
            statement: seen.join("; "),
            strength: Strength::DistributionalDiff,
            evidence: cited,
            limitations: Vec::new(),
        }])
    }
}

export!(Frozen);
