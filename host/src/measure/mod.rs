//! The refusal direction: "refusal is mediated by a single direction"
//! (Arditi et al. 2024), measured on a model from a harmful and a harmless
//! prompt set.
//!
//! 1. Every prompt is rendered with the model's chat template and run once;
//!    the residual stream after every block is read at the last prompt
//!    token (the position that predicts the first answer token).
//! 2. Each set is split deterministically into a train part and a held-out
//!    part ([`holdout_split`]). Per layer, `r_l = mean(harmful) −
//!    mean(harmless)` over the train parts; its norm is kept and it is
//!    normalised to unit length.
//! 3. Each candidate layer's `r̂_l` is ablated at every layer (the
//!    activation primitive's `subtract` mode, α = 1, all positions), and on
//!    the held-out parts two numbers are measured: the refusal score (mean
//!    log-odds that the first answer token starts a refusal) on harmful
//!    prompts, and the KL divergence of the next-token distribution from
//!    the unablated model on harmless prompts. The chosen layer has the
//!    lowest refusal score among those within the KL bound.
//!
//! - [`measure`] runs it on a loaded model and returns a [`Measurement`];
//! - [`Measurement::save`] writes the directions and their provenance as a
//!   `.safetensors` file that `--intervene …,direction=FILE`, `vauban model
//!   orthogonalize --direction FILE` and a config's transform read as-is
//!   (`direction` is the tensor they take when none is named);
//! - [`read_metadata`] and [`Provenance::matches`] tell a caller whether a
//!   saved direction was measured from the same model and prompt files.

mod collect;
mod file;
mod select;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::Suite;
use crate::executor::{ExecutorError, LocalBackend, LocalModel, PromptForm};

pub use collect::{RefusalToken, refusal_score, refusal_tokens};
pub use file::{Provenance, read_metadata};
pub use select::{default_candidates, holdout_split};

/// The held-out share of each prompt set when none is given.
pub const DEFAULT_HOLDOUT: f64 = 0.25;

/// The KL bound (nats) when none is given. On SmolLM2-135M-Instruct with
/// the example prompt sets the chosen layers sit far below it (see
/// docs/measure.md); ablating a direction that matters for ordinary text
/// goes well above it.
pub const DEFAULT_MAX_KL: f64 = 0.1;

/// Texts whose first token starts a refusal, when none are given. Only the
/// first token of each counts (the score is about the first answer token),
/// so several collapse into one; the list is deduplicated by token id.
pub const DEFAULT_REFUSAL_TEXTS: [&str; 10] = [
    "I'm sorry",
    " I'm sorry",
    "I cannot",
    "I can't",
    "I am unable",
    "I apologize",
    "Sorry",
    " Sorry",
    "As an AI",
    " As an AI",
];

/// The value of the `vauban.kind` metadata key.
pub const KIND: &str = "refusal_direction";

/// The value of the `vauban.method` metadata key: what was averaged, where,
/// and how the layer was chosen (docs/measure.md spells it out).
pub const METHOD: &str = "difference_of_means/resid_post/last_prompt_token; layer: min held-out refusal log-odds under ablation at every layer, harmless KL <= max_kl (Arditi et al. 2024)";

/// How to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureOptions {
    /// The share of each prompt set held out for choosing the layer,
    /// strictly between 0 and 1; at least one prompt of each set is held
    /// out and at least one is kept for the direction.
    pub holdout: f64,
    /// The layers to choose from; empty: [`default_candidates`] (20% to
    /// 80% of the depth).
    pub candidates: Vec<usize>,
    /// Use this layer without choosing (its scores are still measured).
    pub layer: Option<usize>,
    /// The largest mean held-out harmless KL (nats) a chosen layer may have.
    pub max_kl: f64,
    /// Texts whose first token starts a refusal; empty:
    /// [`DEFAULT_REFUSAL_TEXTS`].
    pub refusal_texts: Vec<String>,
    /// How a prompt's text becomes tokens (the chat template by default).
    pub prompt: PromptForm,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            holdout: DEFAULT_HOLDOUT,
            candidates: Vec::new(),
            layer: None,
            max_kl: DEFAULT_MAX_KL,
            refusal_texts: Vec::new(),
            prompt: PromptForm::Chat { system: None },
        }
    }
}

/// Which part of the work a progress report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Running every prompt once and reading its activations.
    Collect,
    /// Running the held-out prompts with each candidate direction ablated.
    Select,
}

/// How far a phase has come: `done` forward passes of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The phase this report is about.
    pub phase: Phase,
    /// Forward passes finished in this phase.
    pub done: usize,
    /// Forward passes this phase will run.
    pub total: usize,
}

/// One candidate layer's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerScore {
    /// The layer the direction was measured at (0-based block index).
    pub layer: usize,
    /// `‖mean(harmful) − mean(harmless)‖` at this layer, before normalising.
    pub norm: f64,
    /// Mean refusal log-odds on the held-out harmful prompts with this
    /// layer's unit direction ablated at every layer.
    pub refusal_score: f64,
    /// Mean KL(original ‖ ablated) of the next-token distribution at the
    /// last prompt position on the held-out harmless prompts, in nats.
    pub kl: f64,
}

/// How the layer was picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// The lowest refusal score among the candidates within the KL bound.
    LowestRefusalWithinKl,
    /// Given by the caller (`--layer`).
    Fixed,
}

/// How many prompts each part of each set had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Harmful prompts the direction was computed from.
    pub harmful_train: usize,
    /// Harmful prompts the refusal score was measured on.
    pub harmful_holdout: usize,
    /// Harmless prompts the direction was computed from.
    pub harmless_train: usize,
    /// Harmless prompts the KL divergence was measured on.
    pub harmless_holdout: usize,
}

/// Which prompts (by id) went where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    /// Ids of the harmful prompts the direction was computed from.
    pub harmful_train: Vec<String>,
    /// Ids of the held-out harmful prompts.
    pub harmful_holdout: Vec<String>,
    /// Ids of the harmless prompts the direction was computed from.
    pub harmless_train: Vec<String>,
    /// Ids of the held-out harmless prompts.
    pub harmless_holdout: Vec<String>,
}

/// Everything measured except the directions themselves: what `--json`
/// prints and what the file's `vauban.scores` metadata holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// The layer whose direction is the file's `direction` tensor.
    pub chosen_layer: usize,
    /// How the layer was picked.
    pub selection: Selection,
    /// The model's depth (blocks).
    pub n_layers: usize,
    /// The model's width (the residual stream's size).
    pub d_model: usize,
    /// Mean refusal log-odds on the held-out harmful prompts, no ablation.
    pub baseline_refusal_score: f64,
    /// The measured candidates, in layer order.
    pub candidates: Vec<LayerScore>,
    /// Every layer's difference-of-means norm, by layer.
    pub norms: Vec<f64>,
    /// The KL bound the choice used (nats).
    pub max_kl: f64,
    /// The held-out share asked for.
    pub holdout: f64,
    /// How many prompts each part had.
    pub counts: Counts,
    /// Which prompts went where.
    pub split: Split,
    /// The tokens whose total probability is the refusal probability.
    pub refusal_tokens: Vec<RefusalToken>,
}

impl Scores {
    /// The chosen layer's figures.
    pub fn chosen(&self) -> &LayerScore {
        self.candidates
            .iter()
            .find(|c| c.layer == self.chosen_layer)
            .expect("the chosen layer is always a measured candidate")
    }
}

/// A measured refusal direction: every layer's unit direction and the
/// figures behind the choice of one.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// `[n_layers][d_model]`: every layer's unit difference-of-means direction.
    pub per_layer: Vec<Vec<f32>>,
    /// The figures behind the choice.
    pub scores: Scores,
}

impl Measurement {
    /// The layer whose direction was chosen.
    pub fn chosen_layer(&self) -> usize {
        self.scores.chosen_layer
    }

    /// The chosen unit direction, `[d_model]`.
    pub fn direction(&self) -> &[f32] {
        &self.per_layer[self.scores.chosen_layer]
    }
}

/// Why a measurement could not be made, read or written. Each message names
/// the input at fault and the fix.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(
        "the {set} prompt set has {count} prompt(s); measuring needs at least 2 in each set (one for the direction, one held out to choose the layer); add prompts"
    )]
    TooFewPrompts { set: &'static str, count: usize },
    #[error(
        "holdout {0} is not a fraction strictly between 0 and 1; e.g. 0.25 holds out every fourth prompt"
    )]
    Holdout(f64),
    #[error("max_kl {0} is not a finite number >= 0 (a KL divergence in nats); e.g. 0.1")]
    MaxKl(f64),
    #[error(
        "{what}: layer {layer} is out of range: the model has {layers} layers (0 to {}); choose layers in that range",
        layers.saturating_sub(1)
    )]
    LayerOutOfRange {
        what: &'static str,
        layer: usize,
        layers: usize,
    },
    #[error("candidate layer {0} is listed twice; list each layer once")]
    DuplicateLayer(usize),
    #[error("the refusal text {0:?} encodes to no token; give a non-empty text")]
    EmptyRefusalText(String),
    #[error("prompt `{id}` of the {set} set: {source}")]
    Prompt {
        set: &'static str,
        id: String,
        #[source]
        source: Box<ExecutorError>,
    },
    #[error(
        "the harmful and harmless means coincide at layer {layer} (difference norm {norm}), so there is no direction to normalise; use prompt sets that differ"
    )]
    Degenerate { layer: usize, norm: f64 },
    #[error(
        "{what} is {value} at layer {layer}; the model produced non-finite values, so nothing can be measured (try --weights f32)"
    )]
    NotFinite {
        what: &'static str,
        layer: usize,
        value: f64,
    },
    #[error(
        "no candidate layer keeps the held-out harmless KL within max_kl {max_kl} nats: the smallest is {smallest:.4} at layer {layer}; raise --max-kl (max_kl in a config) above it, or choose a layer with --layer L"
    )]
    NoLayerWithinKl {
        max_kl: f64,
        smallest: f64,
        layer: usize,
        /// Every candidate's figures, so a caller can show them.
        candidates: Vec<LayerScore>,
        baseline_refusal_score: f64,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: a direction file must end in .safetensors (vauban's file: the chosen direction and every layer's) or .gguf (a llama.cpp control vector); name it e.g. refusal.safetensors"
    )]
    Extension { path: PathBuf },
    #[error("{path} is not a readable {format} file: {message}")]
    Read {
        path: PathBuf,
        format: &'static str,
        message: String,
    },
    #[error("cannot encode the direction file {path}: {message}")]
    Encode { path: PathBuf, message: String },
    #[error(transparent)]
    Executor(Box<ExecutorError>),
    /// The user asked to stop (Ctrl-C); nothing was written.
    #[error("{0}")]
    Interrupted(#[source] crate::interrupt::Interrupted),
}

impl From<ExecutorError> for MeasureError {
    fn from(e: ExecutorError) -> Self {
        MeasureError::Executor(Box::new(e))
    }
}

impl MeasureOptions {
    /// Checks the numbers that need no model.
    pub fn check(&self) -> Result<(), MeasureError> {
        if !(self.holdout > 0.0 && self.holdout < 1.0) {
            return Err(MeasureError::Holdout(self.holdout));
        }
        if !(self.max_kl.is_finite() && self.max_kl >= 0.0) {
            return Err(MeasureError::MaxKl(self.max_kl));
        }
        Ok(())
    }

    /// The layers to measure on a model of `layers` blocks: the fixed
    /// layer, the given candidates, or the default range; each checked.
    pub fn candidate_layers(&self, layers: usize) -> Result<Vec<usize>, MeasureError> {
        let out_of_range = |what, layer| MeasureError::LayerOutOfRange {
            what,
            layer,
            layers,
        };
        if let Some(l) = self.layer {
            return match l < layers {
                true => Ok(vec![l]),
                false => Err(out_of_range("--layer", l)),
            };
        }
        if self.candidates.is_empty() {
            return Ok(default_candidates(layers));
        }
        let mut seen = std::collections::BTreeSet::new();
        for &l in &self.candidates {
            if l >= layers {
                return Err(out_of_range("--layers", l));
            }
            if !seen.insert(l) {
                return Err(MeasureError::DuplicateLayer(l));
            }
        }
        Ok(seen.into_iter().collect())
    }
}

/// Measures the refusal direction of `exec`'s model from the two prompt
/// sets; `progress` hears after every forward pass.
///
/// Fails before any forward pass on bad options, a set of fewer than two
/// prompts, or a layer out of range.
pub fn measure(
    exec: &LocalBackend,
    harmful: &Suite,
    harmless: &Suite,
    options: &MeasureOptions,
    progress: &dyn Fn(Progress),
) -> Result<Measurement, MeasureError> {
    options.check()?;
    let dims = exec.dims();
    let candidates = options.candidate_layers(dims.layers)?;
    let harmful_split = set_split(harmful, "harmful", options.holdout)?;
    let harmless_split = set_split(harmless, "harmless", options.holdout)?;
    let texts: Vec<String> = match options.refusal_texts.is_empty() {
        true => DEFAULT_REFUSAL_TEXTS.map(str::to_owned).to_vec(),
        false => options.refusal_texts.clone(),
    };
    let refusal = refusal_tokens(exec, &texts)?;
    let ids: Vec<u32> = refusal.iter().map(|t| t.id).collect();
    tracing::info!(
        "refusal tokens: {}",
        crate::text::list(
            &refusal
                .iter()
                .map(|t| format!("{} {:?}", t.id, t.token))
                .collect::<Vec<_>>()
        )
    );

    let harmful_set = collect::Set::new(exec, harmful, "harmful", &harmful_split, options)?;
    let harmless_set = collect::Set::new(exec, harmless, "harmless", &harmless_split, options)?;
    let collected = collect::collect(exec, &harmful_set, &harmless_set, progress)?;
    let baseline = collected
        .harmful_holdout_logprobs
        .iter()
        .map(|lp| refusal_score(lp, &ids))
        .sum::<f64>()
        / collected.harmful_holdout_logprobs.len() as f64;
    tracing::info!("baseline refusal score (no ablation): {baseline:.4}");

    let scored = select::score_candidates(
        exec,
        &candidates,
        &collected,
        &harmful_set,
        &harmless_set,
        &ids,
        progress,
    )?;
    let (chosen, selection) = match options.layer {
        Some(l) => (l, Selection::Fixed),
        None => (
            select::choose(&scored, options.max_kl).map_err(|(smallest, layer)| {
                MeasureError::NoLayerWithinKl {
                    max_kl: options.max_kl,
                    smallest,
                    layer,
                    candidates: scored.clone(),
                    baseline_refusal_score: baseline,
                }
            })?,
            Selection::LowestRefusalWithinKl,
        ),
    };
    let names = |s: &collect::Set, holdout: bool| -> Vec<String> {
        s.prompts
            .iter()
            .filter(|p| p.holdout == holdout)
            .map(|p| p.id.clone())
            .collect()
    };
    let split = Split {
        harmful_train: names(&harmful_set, false),
        harmful_holdout: names(&harmful_set, true),
        harmless_train: names(&harmless_set, false),
        harmless_holdout: names(&harmless_set, true),
    };
    let scores = Scores {
        chosen_layer: chosen,
        selection,
        n_layers: dims.layers,
        d_model: dims.hidden,
        baseline_refusal_score: baseline,
        candidates: scored,
        norms: collected.norms.clone(),
        max_kl: options.max_kl,
        holdout: options.holdout,
        counts: Counts {
            harmful_train: split.harmful_train.len(),
            harmful_holdout: split.harmful_holdout.len(),
            harmless_train: split.harmless_train.len(),
            harmless_holdout: split.harmless_holdout.len(),
        },
        split,
        refusal_tokens: refusal,
    };
    Ok(Measurement {
        per_layer: collected.directions,
        scores,
    })
}

/// Which prompts of a set are held out: `true` at held-out indices.
fn set_split(suite: &Suite, set: &'static str, holdout: f64) -> Result<Vec<bool>, MeasureError> {
    let n = suite.prompts.len();
    let mut out = vec![false; n];
    for i in holdout_split(set, n, holdout)? {
        out[i] = true;
    }
    Ok(out)
}
