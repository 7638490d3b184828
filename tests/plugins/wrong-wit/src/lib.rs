//! A claim mapper built against `vauban:plugin@0.9.0` (a copy of the WIT
//! with only the version changed): the host must refuse it by version.

wit_bindgen::generate!({ path: "wit", world: "claim-mapper-plugin" });

use exports::vauban::plugin::claim_mapper::{Claim, EvidenceSet, Guest};
use vauban::plugin::types::{PluginError, PluginInfo};

struct Future;

impl Guest for Future {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "wrong-wit".into(),
            version: "0.1.0".into(),
            description: "built for a future WIT".into(),
        }
    }
    fn configure(_: String) -> Result<(), PluginError> {
        Ok(())
    }
    fn propose(_: EvidenceSet) -> Result<Vec<Claim>, PluginError> {
        Ok(Vec::new())
    }
}

export!(Future);
