//! The `vauban` command line: argument parsing and the commands, each a thin
//! shell over the library. Errors leave as `anyhow` with context; the binary
//! prints them and exits non-zero.

mod adapter;
mod import;
mod inspect;
mod judge;
mod measure;
mod model;
mod plugin;
mod run;
mod serve;

pub use run::GatesFailed;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use vauban::bundle::Bundle;
use vauban::profile::{SweepAxis, SweepOptions, fit_usl, summarize_sweep};

/// `0.1.0 (commit 3d5c255)`: the commit the binary was built from (set by
/// build.rs; `-dirty` when the tree had changes, `unknown` without git).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("VAUBAN_COMMIT"),
    ")"
);

/// Audit how a language model's behaviour changed, and prove each claim with evidence.
///
/// vauban records an evidence-bearing trace of every run (trace bundles), and
/// bounds every claim of its report by what the traces actually contain.
#[derive(Debug, Parser)]
#[command(
    name = "vauban",
    version = VERSION,
    propagate_version = true,
    after_help = crate::exit::TABLE
)]
pub struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a config: trace the baseline and the candidate on a prompt
    /// suite, score, check claims, write report.json/.md/.html. Exit code
    /// 3 when a `fail` gate fails (after every report is written).
    #[command(after_help = crate::exit::TABLE)]
    Run(run::RunArgs),
    /// Build the report from two recorded bundles, with no model (replay).
    #[command(after_help = crate::exit::TABLE)]
    Diff(run::DiffArgs),
    /// Join the outputs of `vauban run CONFIG --shard K/N` (every K of N):
    /// checks they are one run's and cover the suite once, and writes the
    /// merged bundles for `vauban diff`.
    Merge(run::MergeArgs),
    /// Check a config without running it.
    Validate(run::ValidateArgs),
    /// Trace a model (`vauban trace --model PATH --prompt … --out BUNDLE`),
    /// or read and check trace bundles (`inspect`, `validate`, `sweep`).
    Trace(TraceArgs),
    /// Generate text from a model, with its chat template (or --raw),
    /// greedy or seeded sampling, and optional interventions.
    Generate(model::GenerateArgs),
    /// Serve a model behind an OpenAI-compatible endpoint (/v1/completions,
    /// /v1/chat/completions, /v1/models, /health; streaming), with
    /// --intervene or --policy applied to every request: steering as a
    /// service, for any OpenAI client.
    Serve(serve::ServeArgs),
    /// Change a model's weights and export the result.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Import another tool's eval log as a trace bundle (`inspect`), for
    /// `vauban diff` to compare.
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Judges: ask a model a judge's question (`ask`: a closed set's
    /// probabilities or a short generation), or measure its accuracy on
    /// labelled replies (`calibrate`).
    #[command(subcommand)]
    Judge(judge::JudgeCommand),
    /// Measure a model's refusal direction from a harmful and a harmless
    /// prompt set (difference of means, layer chosen on held-out prompts)
    /// and write it as a .safetensors direction file.
    Measure(measure::MeasureArgs),
    /// Test and inspect WebAssembly plugins (scorers, intervention
    /// policies, claim mappers), offline, in the sandbox.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Print the JSON Schema of the run config (for editor completion in
    /// TOML files) or of report.json; docs/ holds both, generated.
    Schema(SchemaArgs),
    /// Print a shell completion script: `vauban completions bash >
    /// ~/.local/share/bash-completion/completions/vauban` (zsh: a file
    /// `_vauban` on $fpath; fish: ~/.config/fish/completions/vauban.fish).
    Completions(CompletionsArgs),
    /// Print the man page (roff): `vauban manpage > vauban.1 && man
    /// ./vauban.1`.
    Manpage,
}

/// `vauban completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `vauban schema config|report`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Which schema.
    #[arg(value_enum)]
    pub which: SchemaKind,
}

/// A schema `vauban schema` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaKind {
    /// The run config (`vauban run CONFIG`), as docs/config.schema.json.
    Config,
    /// report.json, as docs/report.schema.json.
    Report,
}

/// `vauban trace`: run a model, or a bundle subcommand.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: Option<TraceCommand>,
    #[command(flatten)]
    pub run: model::TraceRunArgs,
}

/// `vauban model ...`
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Remove a direction from every matrix that writes into the residual
    /// stream (W ← W − r̂(r̂ᵀW) on attn_output and ffn_down; weight-level
    /// directional ablation) and write the model as an HF folder, or, with
    /// --lora, the edit as a rank-1 LoRA adapter.
    Orthogonalize(model::OrthogonalizeArgs),
    /// Write the model, unchanged, as an HF folder (f32 safetensors,
    /// config.json, tokenizer.json, the chat template): the baseline to
    /// compare an edited or fine-tuned HF folder against, or a GGUF's
    /// weights for tools that read HF folders.
    Export(model::ExportArgs),
    /// Extract the difference between a model and its fine-tune as a LoRA
    /// adapter of rank R per matrix (truncated SVD), written as a PEFT
    /// folder and a llama.cpp LoRA GGUF, and print the share of each
    /// difference's Frobenius norm the adapter keeps.
    Lora(adapter::LoraArgs),
}

/// `vauban trace ...`
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Print a readable summary of a trace bundle: traces, spans in order,
    /// artifact coverage per kind, missing and unsupported artifacts, and the
    /// profile summary. Raw tensors are never read.
    Inspect(InspectArgs),
    /// Check a bundle completely: manifest, every file's and every raw
    /// tensor's sha256, and every trace's rules. Exits non-zero, naming the
    /// problem, when the bundle is broken.
    Validate(ValidateArgs),
    /// Group a bundle's traces by one controlled axis (token_count,
    /// batch_size, queue_depth) and print each point's timing statistics.
    /// Refuses traces that recorded different artifacts (different work)
    /// unless --allow-unstable-coverage. Fits no scaling model.
    Sweep(SweepArgs),
}

/// Arguments of `vauban trace inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The bundle folder (the one holding manifest.json).
    pub bundle: PathBuf,
    /// Print JSON for machines instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `vauban trace validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The bundle folder (the one holding manifest.json).
    pub bundle: PathBuf,
}

/// Arguments of `vauban trace sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The bundle folder (the one holding manifest.json).
    pub bundle: PathBuf,
    /// The controlled axis: token_count, batch_size or queue_depth.
    #[arg(long, default_value = "token_count")]
    pub axis: SweepAxis,
    /// Accept traces whose artifact coverage differs (the points then mix different work).
    #[arg(long)]
    pub allow_unstable_coverage: bool,
    /// Fit a scaling model to the points: `usl`, the Universal Scalability
    /// Law, on a `batch_size` or `queue_depth` sweep (λ, σ, κ with 95%
    /// bootstrap intervals, the peak, and each point's residual).
    #[arg(long, value_parser = ["usl"])]
    pub fit: Option<String>,
    /// The bootstrap's seed, for `--fit`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print JSON for machines instead of text.
    #[arg(long)]
    pub json: bool,
}

impl Cli {
    /// The log filter these flags ask for.
    pub fn log_filter(&self) -> &'static str {
        match (self.quiet, self.verbose) {
            (true, _) => "error",
            (false, 0) => "warn,vauban::notice=info",
            (false, 1) => "debug",
            (false, _) => "trace",
        }
    }

    /// Runs the command, writing its output to `out`.
    pub fn run(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
        match &self.command {
            Command::Trace(t) => match &t.command {
                Some(TraceCommand::Inspect(args)) => inspect_bundle(args, out),
                Some(TraceCommand::Validate(args)) => validate_bundle(args, out),
                Some(TraceCommand::Sweep(args)) => sweep_bundle(args, out),
                None => model::trace(&t.run, out),
            },
            Command::Run(args) => run::run(args, out),
            Command::Diff(args) => run::diff(args, out),
            Command::Merge(args) => run::merge(args, out),
            Command::Validate(args) => run::validate(args, out),
            Command::Generate(args) => model::generate_text(args, out),
            Command::Serve(args) => serve::run(args, out),
            Command::Model(ModelCommand::Orthogonalize(args)) => model::orthogonalize(args, out),
            Command::Model(ModelCommand::Export(args)) => model::export(args, out),
            Command::Model(ModelCommand::Lora(args)) => adapter::extract(args, out),
            Command::Measure(args) => measure::run(args, out),
            Command::Judge(command) => judge::run(command, out),
            Command::Import(command) => import::run(command, out),
            Command::Plugin(command) => plugin::run(command, out),
            Command::Schema(args) => {
                let schema = match args.which {
                    SchemaKind::Config => vauban::config::schema(),
                    SchemaKind::Report => vauban::report::document::schema(),
                };
                out.write_all(schema.as_bytes())?;
                Ok(())
            }
            Command::Completions(args) => {
                let mut command = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(args.shell, &mut command, "vauban", out);
                Ok(())
            }
            Command::Manpage => {
                let command = <Cli as clap::CommandFactory>::command();
                clap_mangen::Man::new(command).render(out)?;
                Ok(())
            }
        }
    }
}

fn open(path: &std::path::Path) -> anyhow::Result<Bundle> {
    Bundle::open(path).with_context(|| format!("cannot read trace bundle {}", path.display()))
}

fn inspect_bundle(args: &InspectArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let bundle = open(&args.bundle)?;
    let report = inspect::BundleInspection::of(&bundle);
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        inspect::render_text(&report, out)?;
    }
    Ok(())
}

fn validate_bundle(args: &ValidateArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let bundle = open(&args.bundle)?;
    let verified = bundle
        .verify_all()
        .with_context(|| format!("trace bundle {} is damaged", args.bundle.display()))?;
    writeln!(
        out,
        "ok: {} holds {} valid traces; {} files ({} bytes) and {} raw tensors match their sha256",
        args.bundle.display(),
        bundle.traces().len(),
        verified.files,
        verified.bytes,
        verified.tensors
    )?;
    Ok(())
}

fn sweep_bundle(args: &SweepArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let bundle = open(&args.bundle)?;
    let options = SweepOptions {
        allow_unstable_coverage: args.allow_unstable_coverage,
    };
    let mut sweep = summarize_sweep(bundle.traces(), args.axis, options)
        .with_context(|| format!("cannot sweep the traces of {}", args.bundle.display()))?;
    if args.fit.is_some() {
        let fit = fit_usl(&sweep, args.seed)
            .with_context(|| format!("cannot fit the sweep of {}", args.bundle.display()))?;
        sweep.usl = Some(fit);
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &sweep)?;
        writeln!(out)?;
        return Ok(());
    }
    let coverage: Vec<&str> = sweep.coverage.iter().map(|k| k.as_str()).collect();
    writeln!(
        out,
        "sweep over {} ({} traces; coverage {}: {})",
        sweep.axis,
        bundle.traces().len(),
        if sweep.coverage_stable {
            "stable"
        } else {
            "UNSTABLE, points mix different work"
        },
        coverage.join(", ")
    )?;
    writeln!(
        out,
        "{:>12}  {:>7}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}",
        sweep.axis.as_str(),
        "traces",
        "mean ms",
        "std ms",
        "min ms",
        "max ms",
        "tok/s"
    )?;
    for p in &sweep.points {
        let rate = p
            .mean_tokens_per_s
            .map(|r| format!("{r:.1}"))
            .unwrap_or_else(|| "n/a".into());
        writeln!(
            out,
            "{:>12}  {:>7}  {:>12.3}  {:>12.3}  {:>12.3}  {:>12.3}  {:>12}",
            p.axis_value,
            p.samples,
            p.mean_duration_ns / 1e6,
            p.std_duration_ns / 1e6,
            p.min_duration_ns as f64 / 1e6,
            p.max_duration_ns as f64 / 1e6,
            rate
        )?;
    }
    if let Some(w) = &sweep.warning {
        writeln!(out, "warning: {w}")?;
    }
    if let Some(f) = &sweep.usl {
        print_usl(out, sweep.axis, f)?;
    }
    Ok(())
}

/// A USL fit in lines: the parameters with their intervals, the peak, and
/// each point measured against the curve.
fn print_usl(
    out: &mut dyn std::io::Write,
    axis: SweepAxis,
    f: &vauban::report::usl::UslFit,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "USL fit: X(N) = λN / (1 + σ(N−1) + κN(N−1)), N = {axis}, X in tokens/s ({} bootstrap resamples, seed {})",
        f.resamples, f.seed
    )?;
    for (name, what, e) in [
        ("λ", "one sequence's throughput", f.lambda),
        ("σ", "contention", f.sigma),
        ("κ", "coherency", f.kappa),
    ] {
        writeln!(
            out,
            "  {name} = {:.6}  95% CI [{:.6}, {:.6}]  ({what})",
            e.value, e.ci_low, e.ci_high
        )?;
    }
    match f.peak_n {
        Some(n) => writeln!(out, "  peak throughput at N ≈ {n:.1}")?,
        None if f.kappa.value < 0.0 || f.sigma.value < 0.0 => writeln!(
            out,
            "  no peak, and a negative parameter: throughput grows faster than the law's contention and coherency allow (a batch amortises weight reads); the curve describes these points, not a ceiling"
        )?,
        None => writeln!(
            out,
            "  no peak: without a coherency cost throughput never falls"
        )?,
    }
    writeln!(out, "  rmse {:.3} tokens/s, R² {:.4}", f.rmse, f.r_squared)?;
    writeln!(
        out,
        "{:>12}  {:>12}  {:>12}  {:>12}",
        axis.as_str(),
        "observed",
        "fitted",
        "residual"
    )?;
    for r in &f.residuals {
        writeln!(
            out,
            "{:>12}  {:>12.1}  {:>12.1}  {:>12.1}",
            r.n, r.observed, r.fitted, r.residual
        )?;
    }
    Ok(())
}
