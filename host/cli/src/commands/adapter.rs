//! LoRA adapters from the command line: `vauban model orthogonalize
//! --lora DIR` (an edit as a rank-1 adapter) and `vauban model lora` (a
//! fine-tune's difference from its base as a rank-r adapter, with what the
//! rank keeps). Both read the models' weights on the host as stored (a
//! quantized GGUF dequantized by vauban's reader); no executor is loaded.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use vauban::model::Matrix;
use vauban::model::assets::ModelAssets;
use vauban::model::host_weights::HostWeights;
use vauban::model::lora::{self, Adapter, Extraction};

use super::model::{OrthogonalizeArgs, layer_directions, orthogonalized_layers, tensors_used};

/// The model's assets, named in errors as the flag that gave it.
fn assets(flag: &str, path: &Path) -> anyhow::Result<ModelAssets> {
    ModelAssets::load(path).with_context(|| format!("{flag} {}", path.display()))
}

/// `model orthogonalize --lora DIR`: the edit `W ← W − r̂(r̂ᵀW)` of every
/// residual writer as a rank-1 adapter, in both formats.
pub fn orthogonalization_adapter(
    args: &OrthogonalizeArgs,
    dir: &Path,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let Some(path) = &args.model.model else {
        bail!("--model PATH is required: a .gguf file or an HF model folder");
    };
    let assets = assets("--model", path)?;
    let c = &assets.config;
    let layers = orthogonalized_layers(args, c.layers)?;
    if let Some(&bad) = layers.iter().find(|&&l| l >= c.layers) {
        bail!(
            "--layers: layer {bad} is out of range: the model has {} layers (0..{})",
            c.layers,
            c.layers - 1
        );
    }
    if let Some(why) = c.weight_edit_limitation() {
        writeln!(out, "limitation: {why}")?;
    }
    let directions = layer_directions(args, &layers)?;
    let by_layer: Vec<(usize, Vec<f32>)> = directions
        .iter()
        .map(|(layer, d)| match d.rows() {
            1 => Ok((*layer, d.basis.clone())),
            n => bail!(
                "--direction for layer {layer}: tensor `{}` has {n} rows; orthogonalization needs one direction per layer",
                d.tensor
            ),
        })
        .collect::<anyhow::Result<_>>()?;
    let mut weights = HostWeights::open(&assets).context("cannot read the model's weights")?;
    let adapter = Adapter::orthogonalization(&mut weights, c, &by_layer)?;
    adapter.write(c, path, dir)?;
    let total = adapter
        .change_norms()
        .iter()
        .map(|n| f64::from(*n).powi(2))
        .sum::<f64>()
        .sqrt();
    writeln!(
        out,
        "wrote a rank-1 LoRA adapter of {} matrices in {} layers along {} (total change, Frobenius: {total:.4}) to {}",
        adapter.matrices.len(),
        layers.len(),
        tensors_used(&directions, &args.direction),
        dir.display()
    )?;
    writeln!(out, "{}", formats_written(dir))?;
    Ok(())
}

/// The two forms an adapter folder holds, and the commands that load them.
fn formats_written(dir: &Path) -> String {
    format!(
        "  PEFT: {d}/{} and {d}/{} (peft.PeftModel.from_pretrained(model, \"{d}\"))\n  llama.cpp: {d}/{} (llama-server -m MODEL.gguf --lora {d}/{})",
        lora::PEFT_CONFIG,
        lora::PEFT_WEIGHTS,
        lora::GGUF_FILE,
        lora::GGUF_FILE,
        d = dir.display()
    )
}

/// Arguments of `vauban model lora`.
#[derive(Debug, Args)]
pub struct LoraArgs {
    /// The base model (a .gguf file or an HF folder).
    #[arg(long, value_name = "PATH")]
    pub base: PathBuf,
    /// The changed model of the same shape (a fine-tune of the base).
    #[arg(long, value_name = "PATH")]
    pub tuned: PathBuf,
    /// The adapter's rank per matrix (at least 1, at most the matrix's
    /// smaller side).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub rank: u32,
    /// The matrices to extract, by GGUF stem (default: all seven of a
    /// block: attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
    /// ffn_down).
    #[arg(long, value_delimiter = ',', value_parser = matrix)]
    pub matrices: Vec<Matrix>,
    /// The adapter folder to write (must not exist).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Print what the adapter keeps as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A matrix by its GGUF stem.
fn matrix(s: &str) -> Result<Matrix, String> {
    Matrix::ALL
        .into_iter()
        .find(|m| m.gguf_stem() == s)
        .ok_or_else(|| {
            let all: Vec<&str> = Matrix::ALL.iter().map(|m| m.gguf_stem()).collect();
            format!("`{s}` is not a block matrix; use one of {}", all.join(", "))
        })
}

/// `vauban model lora`: `tuned − base` as a rank-r adapter per matrix, and
/// the share of each difference's Frobenius norm it keeps.
pub fn extract(args: &LoraArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.out.exists() {
        bail!(
            "{} exists; choose a new folder for the adapter",
            args.out.display()
        );
    }
    let base = assets("--base", &args.base)?;
    let tuned = assets("--tuned", &args.tuned)?;
    let targets = match args.matrices.is_empty() {
        true => Matrix::ALL.to_vec(),
        false => args.matrices.clone(),
    };
    let mut wb = HostWeights::open(&base).context("--base: cannot read the weights")?;
    let mut wt = HostWeights::open(&tuned).context("--tuned: cannot read the weights")?;
    let extraction = lora::extract(
        &mut wb,
        &mut wt,
        (&base.config, &tuned.config),
        args.rank as usize,
        &targets,
    )?;
    extraction
        .adapter
        .write(&base.config, &args.base, &args.out)?;
    match args.json {
        true => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&to_json(&extraction, args))?
        )?,
        false => print_kept(&extraction, args, out)?,
    }
    Ok(())
}

/// What the adapter keeps, per matrix and in total, as a table.
fn print_kept(e: &Extraction, args: &LoraArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let same = e.kept.iter().filter(|k| k.difference == 0.0).count();
    writeln!(
        out,
        "rank-{} LoRA adapter of {} matrices: keeps {:.4} of the difference's Frobenius norm (‖BA‖/‖Δ‖ over all of them)",
        args.rank,
        e.adapter.matrices.len(),
        e.total_share()
    )?;
    if same > 0 {
        writeln!(
            out,
            "{same} of the {} matrices compared are the same in both models (not in the adapter)",
            e.kept.len()
        )?;
    }
    writeln!(
        out,
        "{:>5}  {:<12} {:>12} {:>12} {:>8}",
        "layer", "matrix", "‖Δ‖", "‖Δ−BA‖", "kept"
    )?;
    for k in e.kept.iter().filter(|k| k.difference > 0.0) {
        writeln!(
            out,
            "{:>5}  {:<12} {:>12.5} {:>12.5} {:>8.4}",
            k.layer,
            k.matrix.gguf_stem(),
            k.difference,
            k.residual,
            k.share()
        )?;
    }
    if !e.outside.is_empty() {
        writeln!(
            out,
            "not carried (an adapter changes block matrices only; these differ too):"
        )?;
        for (name, d) in &e.outside {
            writeln!(out, "  {name}: ‖Δ‖ = {d:.5}")?;
        }
    }
    writeln!(out, "wrote {}", args.out.display())?;
    writeln!(out, "{}", formats_written(&args.out))?;
    Ok(())
}

/// The same as JSON, for scripts and for a report's weight evidence.
fn to_json(e: &Extraction, args: &LoraArgs) -> serde_json::Value {
    serde_json::json!({
        "rank": args.rank,
        "base": args.base.display().to_string(),
        "tuned": args.tuned.display().to_string(),
        "adapter": args.out.display().to_string(),
        "kept_share": e.total_share(),
        "matrices": e.kept.iter().map(|k| serde_json::json!({
            "layer": k.layer,
            "matrix": k.matrix.gguf_stem(),
            "difference_norm": k.difference,
            "kept_norm": k.kept,
            "residual_norm": k.residual,
            "kept_share": k.share(),
            "in_adapter": k.difference > 0.0,
        })).collect::<Vec<_>>(),
        "not_carried": e.outside.iter().map(|(name, d)| serde_json::json!({
            "tensor": name,
            "difference_norm": d,
        })).collect::<Vec<_>>(),
    })
}
