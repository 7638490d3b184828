//! `vauban measure`: the refusal direction of a model, from a harmful and a
//! harmless prompt set, written as a `.safetensors` direction file.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use super::model::ModelArgs;
use vauban::config::Suite;
use vauban::executor::LocalModel;
use vauban::measure::{
    DEFAULT_HOLDOUT, DEFAULT_MAX_KL, LayerScore, MeasureError, MeasureOptions, Phase, Progress,
    Provenance, holdout_split, measure,
};
use vauban::pipeline::progress_bar;

/// Arguments of `vauban measure`.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The harmful prompt set: a suite file (.jsonl or .toml), prompts the
    /// model should refuse.
    #[arg(long, value_name = "FILE")]
    pub harmful: PathBuf,
    /// The harmless prompt set: a suite file (.jsonl or .toml), prompts of
    /// the same form the model should answer.
    #[arg(long, value_name = "FILE")]
    pub harmless: PathBuf,
    /// The direction file to write, replaced if it exists: .safetensors
    /// (the chosen direction and every layer's, with their scores) or .gguf
    /// (a llama.cpp control vector: direction.L for every layer L ≥ 1).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The share of each set held out for choosing the layer (every k-th
    /// prompt; at least one per set).
    #[arg(long, default_value_t = DEFAULT_HOLDOUT)]
    pub holdout: f64,
    /// The candidate layers: A..B (B excluded), A..=B, or a list such as
    /// 6,9,12 (default: 20% to 80% of the depth).
    #[arg(long, value_name = "LAYERS", value_parser = parse_layers, conflicts_with = "layer")]
    pub layers: Option<LayerList>,
    /// Use this layer without choosing (its scores are still measured).
    #[arg(long, value_name = "L")]
    pub layer: Option<usize>,
    /// The largest mean KL divergence (nats) of the next-token distribution
    /// on held-out harmless prompts that a chosen layer's ablation may cause.
    #[arg(long, default_value_t = DEFAULT_MAX_KL, value_name = "NATS")]
    pub max_kl: f64,
    /// A text whose first token starts a refusal (repeatable; replaces the
    /// default set: "I'm sorry", "I cannot", "Sorry", "As an AI", …).
    #[arg(long = "refusal-token", value_name = "TEXT")]
    pub refusal_token: Vec<String>,
    /// Send the prompts as plain text, without the model's chat template
    /// (a base model, or one whose files ship no template).
    #[arg(long, conflicts_with = "system")]
    pub raw: bool,
    /// A system message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    /// Print the measurement as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Layers given as a range or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerList(pub Vec<usize>);

/// Parses `A..B` (B excluded), `A..=B` or `A,B,C`.
fn parse_layers(s: &str) -> Result<LayerList, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<usize>()
            .map_err(|_| format!("`{s}`: write layers as A..B (B excluded), A..=B, or A,B,C"))
    };
    let layers: Vec<usize> = if let Some((a, b)) = s.split_once("..=") {
        (num(a)?..=num(b)?).collect()
    } else if let Some((a, b)) = s.split_once("..") {
        (num(a)?..num(b)?).collect()
    } else {
        s.split(',').map(num).collect::<Result<_, _>>()?
    };
    if layers.is_empty() {
        return Err(format!(
            "`{s}` selects no layer (in A..B the end is excluded)"
        ));
    }
    Ok(LayerList(layers))
}

fn load_set(path: &Path, set: &'static str, holdout: f64) -> anyhow::Result<Suite> {
    let suite = Suite::load(path).with_context(|| format!("--{set} {}", path.display()))?;
    holdout_split(set, suite.prompts.len(), holdout)
        .with_context(|| format!("--{set} {}", path.display()))?;
    Ok(suite)
}

/// `vauban measure`: measures, writes the file, prints the table or JSON.
pub fn run(args: &MeasureArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if !args
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors") || e.eq_ignore_ascii_case("gguf"))
    {
        bail!(
            "--out {}: the direction file must end in .safetensors (the chosen direction and every layer's, with their scores) or .gguf (a llama.cpp control vector), e.g. refusal.safetensors",
            args.out.display()
        );
    }
    let options = MeasureOptions {
        holdout: args.holdout,
        candidates: args.layers.clone().map(|l| l.0).unwrap_or_default(),
        layer: args.layer,
        max_kl: args.max_kl,
        refusal_texts: args.refusal_token.clone(),
        prompt: match args.raw {
            true => vauban::executor::PromptForm::Raw,
            false => vauban::executor::PromptForm::Chat {
                system: args.system.clone(),
            },
        },
    };
    // Everything that needs no model fails before the model loads.
    options.check()?;
    let harmful = load_set(&args.harmful, "harmful", args.holdout)?;
    let harmless = load_set(&args.harmless, "harmless", args.holdout)?;
    let exec = args.model.load()?;
    options.candidate_layers(exec.dims().layers)?;
    let provenance = Provenance::of_files(&exec, &args.harmful, &args.harmless)?;
    super::run::stop_between_prompts_on_ctrl_c();

    let bar: RefCell<Option<(Phase, indicatif::ProgressBar)>> = RefCell::new(None);
    let progress = |p: Progress| {
        let mut bar = bar.borrow_mut();
        if bar.as_ref().is_none_or(|(phase, _)| *phase != p.phase) {
            if let Some((_, old)) = bar.take() {
                old.finish_and_clear();
            }
            let what = match p.phase {
                Phase::Collect => "collecting activations",
                Phase::Select => "selecting the layer",
            };
            *bar = Some((p.phase, progress_bar(p.total as u64, what)));
        }
        if let Some((_, b)) = bar.as_ref() {
            b.set_position(p.done as u64);
        }
    };
    let start = std::time::Instant::now();
    let result = measure(&exec, &harmful, &harmless, &options, &progress);
    if let Some((_, b)) = bar.take() {
        b.finish_and_clear();
    }
    let m = match result {
        Ok(m) => m,
        Err(e) => {
            if let MeasureError::NoLayerWithinKl {
                candidates,
                baseline_refusal_score,
                max_kl,
                ..
            } = &e
                && !args.json
            {
                table(out, candidates, None, *baseline_refusal_score, *max_kl)?;
            }
            return Err(e).context("cannot measure the refusal direction");
        }
    };
    tracing::info!("measured in {:.1} s", start.elapsed().as_secs_f64());
    m.save(&args.out, &provenance)?;

    let s = &m.scores;
    if args.json {
        let doc = serde_json::json!({
            "out": args.out.display().to_string(),
            "model": provenance.model,
            "model_sha256": provenance.model_sha256,
            "harmful_sha256": provenance.harmful_sha256,
            "harmless_sha256": provenance.harmless_sha256,
            "method": vauban::measure::METHOD,
            "scores": s,
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    table(
        out,
        &s.candidates,
        Some(s.chosen_layer),
        s.baseline_refusal_score,
        s.max_kl,
    )?;
    let c = s.chosen();
    writeln!(
        out,
        "held out: {} of {} harmful, {} of {} harmless prompts; refusal tokens: {}",
        s.counts.harmful_holdout,
        s.counts.harmful_holdout + s.counts.harmful_train,
        s.counts.harmless_holdout,
        s.counts.harmless_holdout + s.counts.harmless_train,
        vauban::text::list(
            &s.refusal_tokens
                .iter()
                .map(|t| format!("{:?}", t.token))
                .collect::<Vec<_>>()
        )
    )?;
    writeln!(
        out,
        "chosen layer {} ({}): refusal score {:.3} -> {:.3} with the direction ablated, harmless KL {:.4} nats (bound {})",
        c.layer,
        match s.selection {
            vauban::measure::Selection::Fixed => "given by --layer",
            vauban::measure::Selection::LowestRefusalWithinKl =>
                "lowest refusal score within the KL bound",
        },
        s.baseline_refusal_score,
        c.refusal_score,
        c.kl,
        s.max_kl
    )?;
    if args
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        writeln!(
            out,
            "wrote {0}: a llama.cpp control vector, `direction.1` to `direction.{1}` [{2}] (layer 0 cannot be steered there); ablate the chosen layer's with --intervene layer={3},mode=subtract,direction={0}, or steer llama.cpp with --control-vector-scaled {0}:SCALE (negative: away from refusal)",
            args.out.display(),
            s.n_layers.saturating_sub(1),
            s.d_model,
            c.layer,
        )?;
    } else {
        writeln!(
            out,
            "wrote {0}: `direction` [{1}] (layer {2}) and `per_layer` [{3}, {1}]; ablate it with --intervene layer=L,mode=subtract,direction={0} at every layer L",
            args.out.display(),
            s.d_model,
            c.layer,
            s.n_layers
        )?;
    }
    Ok(())
}

/// The per-layer table: norm, ablated refusal score, its change from the
/// baseline, KL, and a marker on the chosen layer or over the bound.
fn table(
    out: &mut dyn Write,
    rows: &[LayerScore],
    chosen: Option<usize>,
    baseline: f64,
    max_kl: f64,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "{:>5}  {:>9}  {:>9}  {:>9}  {:>10}",
        "layer", "norm", "refusal", "change", "KL (nats)"
    )?;
    for r in rows {
        let mark = if Some(r.layer) == chosen {
            "  <- chosen"
        } else if r.kl > max_kl || r.kl.is_nan() {
            "  (KL over the bound)"
        } else {
            ""
        };
        writeln!(
            out,
            "{:>5}  {:>9.3}  {:>9.3}  {:>+9.3}  {:>10.5}{mark}",
            r.layer,
            r.norm,
            r.refusal_score,
            r.refusal_score - baseline,
            r.kl
        )?;
    }
    writeln!(
        out,
        "baseline refusal score (no ablation): {baseline:.3} (mean log-odds of a refusal-start token on held-out harmful prompts)"
    )?;
    Ok(())
}
