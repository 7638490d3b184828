//! `vauban run`, `vauban diff` and `vauban validate`: the report commands.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::Args;

use vauban::pipeline::{self, Plan};
use vauban::report::document::Report;
use vauban::report::render::words;

/// Arguments of `vauban run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The run's config (TOML; see docs/config.md).
    pub config: PathBuf,
    /// The output folder (default: the config's `output`; with --shard,
    /// its `shards/K-of-N/`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Trace only the K-th of N slices of the suite (by prompt id: the
    /// same slices whichever machine runs which) into a partial output;
    /// `vauban merge` joins the N parts. No report is written.
    #[arg(long, value_name = "K/N", conflicts_with = "measure_only")]
    pub shard: Option<vauban::pipeline::shard::Shard>,
    /// Only the `[measure]` stage: the direction measured once into the
    /// config's output, for every shard to reuse (shards never measure).
    #[arg(long)]
    pub measure_only: bool,
}

/// Arguments of `vauban merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' output folders (each with its shard.json).
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Where the merged bundles go (`OUT/traces/{baseline,candidate}`).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Arguments of `vauban diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline's trace bundle.
    pub baseline: PathBuf,
    /// The candidate's trace bundle (same prompts, same ids).
    pub candidate: PathBuf,
    /// The config naming the suite, scorers, claim mappers, gates and
    /// report settings. Without it: every prompt the bundles hold, the
    /// metrics they recorded (an imported eval's scores), the default
    /// claim mapper, the config written to OUT/diff.toml.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The output folder (default: the config's `output`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where the judges' recorded answers are (a judged run's
    /// `traces/judges/`; default: the `judges/` folder beside the
    /// baseline's bundle). Judged scorers are answered from it alone: no
    /// judge model is loaded.
    #[arg(long, value_name = "DIR")]
    pub judges: Option<PathBuf>,
}

/// Arguments of `vauban validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The config to check.
    pub config: PathBuf,
    /// Check the file only: no plugin is loaded.
    #[arg(long, conflicts_with = "online")]
    pub offline: bool,
    /// Also connect to each `executor = "http"` endpoint and probe it:
    /// the model it serves, whether it returns log-probabilities (how many,
    /// with token ids or not); a warning when the run would get less
    /// evidence than the config asks for.
    #[arg(long)]
    pub online: bool,
}

/// Failed regression gates: the reports are written, the exit code is 3
/// (`Exit::GateFailed`).
#[derive(Debug, thiserror::Error)]
#[error("{failed} regression gate(s) failed; the reports are written ({files})")]
pub struct GatesFailed {
    pub failed: usize,
    pub files: String,
}

fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.chars().any(|c| c.is_whitespace() || c == '"') {
                format!("{a:?}")
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `vauban run CONFIG`.
pub fn run(args: &RunArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.measure_only {
        let plan = Plan::from_file(&args.config, None, false)?;
        let path = vauban::pipeline::shard::measure_only(&plan)?;
        writeln!(out, "the direction: {}", path.display())?;
        return Ok(());
    }
    if let Some(shard) = args.shard {
        let mut plan = Plan::from_file(&args.config, args.out.as_deref(), false)?;
        // The direction is the config's own output's, measured once.
        if let Some(m) = plan.measure.as_mut() {
            let whole = Plan::from_file(&args.config, None, false)?;
            m.out = whole.measure.expect("the same config").out;
            m.reuse_only = true;
        }
        if args.out.is_none() {
            plan.output = plan
                .output
                .join("shards")
                .join(format!("{}-of-{}", shard.k, shard.n));
        }
        stop_between_prompts_on_ctrl_c();
        let record = vauban::pipeline::shard::trace_shard(&plan, shard)?;
        writeln!(
            out,
            "shard {shard}: {} of the suite's {} prompts traced into {}",
            record.prompts.len(),
            record.suite.len(),
            plan.output.display()
        )?;
        return Ok(());
    }
    let plan = Plan::from_file(&args.config, args.out.as_deref(), false)?;
    if let Some(w) = plan.claim_strength_warning() {
        tracing::warn!("{w}");
    }
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }
    stop_between_prompts_on_ctrl_c();
    finish(pipeline::run(&plan, &command_line())?, out)
}

/// The first Ctrl-C asks the pipeline to stop before its next prompt or
/// stage (it then says what it kept, and `vauban` exits 130); a second one
/// stops at once (the prompt in flight is lost; every file written so far
/// is whole, since each is written atomically).
pub(crate) fn stop_between_prompts_on_ctrl_c() {
    let installed = ctrlc::set_handler(|| {
        if vauban::interrupt::requested() {
            std::process::exit(i32::from(crate::exit::Exit::Interrupted.code()));
        }
        vauban::interrupt::request();
        eprintln!("stopping after the prompt in flight (Ctrl-C again to stop at once)");
    });
    if let Err(e) = installed {
        tracing::warn!("Ctrl-C will stop the run at once, keeping finished traces: {e}");
    }
}

/// `vauban merge SHARD... --out DIR`.
pub fn merge(args: &MergeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let m = vauban::pipeline::shard::merge(&args.shards, &args.out)?;
    writeln!(
        out,
        "merged {} shards: {} prompts, {} baseline and {} candidate traces into {}",
        m.shards,
        m.prompts,
        m.traces[0],
        m.traces[1],
        args.out.join("traces").display()
    )?;
    writeln!(
        out,
        "report: vauban diff {0}/baseline {0}/candidate --config CONFIG",
        args.out.join("traces").display()
    )?;
    Ok(())
}

/// `vauban diff BASELINE CANDIDATE [--config CONFIG]`.
pub fn diff(args: &DiffArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(c) => c.clone(),
        None => {
            let dir = args
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from("out/diff"));
            let path = vauban::pipeline::write_diff_config(&args.baseline, &args.candidate, &dir)?;
            writeln!(
                out,
                "wrote {} (the comparison's config; edit it and pass it with --config)",
                path.display()
            )?;
            path
        }
    };
    let mut plan = Plan::from_file(&config, args.out.as_deref(), true)?;
    // A measured direction is the config's output's when the diff's own
    // output has none (merged shards: measured once, by --measure-only).
    if args.out.is_some()
        && let Some(m) = plan.measure.as_mut()
        && !m.out.is_file()
        && let Some(theirs) = Plan::from_file(&config, None, true)?.measure
        && theirs.out.is_file()
    {
        m.out = theirs.out;
    }
    // `diff` is `run` with both sides replayed from their bundles.
    plan.baseline.replay(args.baseline.clone());
    plan.candidate.replay(args.candidate.clone());
    // A judged run's answers are kept beside its bundles
    // (`OUTPUT/traces/judges/` next to `OUTPUT/traces/baseline/`).
    plan.judge_record = Some(match &args.judges {
        Some(dir) => {
            if !dir.is_dir() {
                bail!(
                    "--judges {}: not a folder (a judged run keeps its judges' answers in OUTPUT/traces/judges/)",
                    dir.display()
                );
            }
            dir.clone()
        }
        None => args
            .baseline
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("judges"),
    });
    // Imported logs pair by sample id; the unpaired are stated, not matched.
    plan.pair_imported()?;
    plan.state_sharding()?;
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }
    stop_between_prompts_on_ctrl_c();
    finish(pipeline::run(&plan, &command_line())?, out)
}

fn finish(o: pipeline::Outcome, out: &mut dyn Write) -> anyhow::Result<()> {
    summary(&o.report, out)?;
    for f in &o.files {
        writeln!(out, "wrote {}", f.display())?;
    }
    if o.failed_gates > 0 {
        return Err(GatesFailed {
            failed: o.failed_gates,
            files: o
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
        .into());
    }
    Ok(())
}

/// The one-screen summary, in the report's own words and number forms
/// (`render::words`, which the Markdown and HTML printers use too).
fn summary(r: &Report, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(out, "{}", r.title)?;
    writeln!(out, "{}", r.summary.headline)?;
    writeln!(
        out,
        "access     {} (claims up to {}); kinds in both: {}",
        r.access.level,
        r.access.claim_strength,
        r.evidence
            .kinds_in_both
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    writeln!(out, "deltas")?;
    for d in r
        .metric_deltas
        .iter()
        .filter(|d| d.category.is_none() || d.significant)
        .take(14)
    {
        writeln!(
            out,
            "  {:<34} {:>9} → {:>9}  {:>9}  p={:<8} adj={:<8} {}{}",
            d.id,
            words::num(d.baseline_mean),
            words::num(d.candidate_mean),
            words::signed(d.delta),
            words::p_value(d.p_value),
            words::p_value(d.p_adjusted),
            words::quality(d.quality),
            if d.significant { " *" } else { "" }
        )?;
    }
    if let Some(k) = &r.distribution {
        writeln!(
            out,
            "KL         first token {} nats, continuation mean {} nats",
            words::num(k.first_token_kl_mean),
            words::num(k.mean_kl)
        )?;
    }
    writeln!(
        out,
        "claims     {} accepted, {} downgraded, {} rejected",
        r.summary.claims_accepted, r.summary.claims_downgraded, r.summary.claims_rejected
    )?;
    for c in &r.claims {
        writeln!(
            out,
            "  [{}] {} ({})",
            words::claim_status(c.status),
            vauban::text::excerpt(&c.statement, 100),
            c.strength.map_or("no strength", |s| s.as_str())
        )?;
    }
    for g in &r.gates {
        writeln!(
            out,
            "gate       {}: {} ({})",
            g.name,
            words::gate_outcome(g.outcome),
            g.message
        )?;
    }
    for f in &r.evidence.plugin_failures {
        writeln!(
            out,
            "plugin     {} failed at {}: {}",
            f.plugin, f.stage, f.message
        )?;
    }
    Ok(())
}

/// `vauban validate CONFIG`.
pub fn validate(args: &ValidateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let plan = Plan::from_file(&args.config, None, false)?;
    writeln!(
        out,
        "{}: {} prompts, {} categories, baseline {}, candidate {}{}",
        args.config.display(),
        plan.suite.prompts.len(),
        plan.suite.categories().len(),
        plan.baseline.label,
        plan.candidate.label,
        plan.candidate
            .transform
            .as_ref()
            .map(|t| format!(" ({})", t.kind.as_str()))
            .unwrap_or_default()
    )?;
    if !args.offline {
        for line in pipeline::check_plugins(&plan)? {
            writeln!(out, "  {line}")?;
        }
    }
    if args.online {
        for line in pipeline::probe_endpoints(&plan)? {
            writeln!(out, "  {line}")?;
        }
    }
    writeln!(
        out,
        "  expected evidence level at best: {} (claims up to {})",
        plan.expected_level(),
        plan.expected_level().strongest_claim()
    )?;
    if let Some(w) = plan.claim_strength_warning() {
        writeln!(out, "  warning: {w}")?;
    }
    for w in &plan.warnings {
        writeln!(out, "  warning: {w}")?;
    }
    writeln!(out, "ok")?;
    Ok(())
}
