//! What identifies a local model in its traces: the sha256 of its weights
//! and of its vocabulary (each computed once, on first use, and remembered
//! across runs by the digest cache), and whether the weights were changed
//! in memory after loading. Shared by every local backend.

use std::sync::OnceLock;

use crate::model::assets::ModelAssets;
use crate::trace::ModelRef;

/// A local model's digests and changes.
#[derive(Debug, Default)]
pub struct ModelIdentity {
    weights: OnceLock<Option<String>>,
    vocabulary: OnceLock<String>,
    /// How the weights were changed in memory after loading (`orthogonalized`),
    /// so the file's hash no longer describes them.
    pub modified: Option<String>,
}

impl ModelIdentity {
    /// Records a change made in memory (`orthogonalized`, `LoRA …`), after
    /// any made before it.
    pub fn record_change(&mut self, how: &str) {
        self.modified = Some(match self.modified.take() {
            None => how.to_owned(),
            Some(before) => format!("{before}, then {how}"),
        });
    }

    /// sha256 of the weights as loaded (see [`ModelAssets::weights_sha256`]).
    pub fn weights_sha256(&self, assets: &ModelAssets) -> Option<String> {
        self.weights.get_or_init(|| assets.weights_sha256()).clone()
    }

    /// The model as its traces name it: a changed model keeps no file hash,
    /// which would claim weights the run did not use.
    pub fn model_ref(&self, assets: &ModelAssets) -> ModelRef {
        let (name, sha256) = match &self.modified {
            None => (assets.name.clone(), self.weights_sha256(assets)),
            Some(how) => (format!("{} ({how})", assets.name), None),
        };
        ModelRef {
            name,
            path: Some(assets.path.display().to_string()),
            sha256,
            tokenizer_sha256: Some(
                self.vocabulary
                    .get_or_init(|| assets.vocabulary_sha256())
                    .clone(),
            ),
        }
    }
}
