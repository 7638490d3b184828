//! The main job: plan → trace both models (reusing
//! recorded traces) → score with plugins → paired statistics → evidence
//! set → claim mappers → the host's check of every claim → render →
//! regression gates. Each stage is timed; the report's reproducibility
//! section lists them.
//!
//! This is orchestration at the edge of the binary: its errors are
//! `anyhow` with the stage as context; the pieces it calls have typed ones.

pub mod analyze;
mod claims;
mod evidence;
mod gather;
mod judges;
pub mod plan;
mod plugins;
pub mod progress;
pub mod record;
mod recorded;
mod report;
mod score;
pub mod shard;
pub mod sides;
mod validate;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use crate::interrupt;
use crate::report::document::{Report, StageRecord};

pub use plan::Plan;
pub use plugins::check_plugins;
pub use recorded::write_diff_config;
pub use sides::{SideName, Sides};
pub use validate::probe_endpoints;

/// The `tracing` target of what a user should see by default (not a
/// warning, not a debug detail): "reusing 3 of 6 recorded baseline traces".
/// The binary prints these as plain lines; `-q` hides them.
pub const NOTICE: &str = "vauban::notice";

/// What a finished run produced.
pub struct Outcome {
    pub report: Report,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// Gates whose failure sets exit code 3.
    pub failed_gates: usize,
}

/// Times the stages of a run, and stops before the next one when the
/// user asked ([`interrupt`]).
#[derive(Default)]
pub(crate) struct Stages {
    records: Vec<StageRecord>,
    kept: Kept,
}

/// What the trace stage has kept, for the message of a stop after it.
#[derive(Default)]
struct Kept {
    sides: Vec<interrupt::Kept>,
    cache: PathBuf,
}

impl Stages {
    pub(crate) fn run<T>(
        &mut self,
        stage: &str,
        f: impl FnOnce(&mut String) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        if interrupt::requested() {
            return Err(interrupt::Interrupted {
                at: format!("before the stage `{stage}`"),
                kept: self.kept.sides.clone(),
                cache: self.kept.cache.clone(),
            }
            .into());
        }
        let start = Instant::now();
        let _span = tracing::info_span!("stage", stage).entered();
        let mut note = String::new();
        let out = f(&mut note).with_context(|| format!("stage `{stage}`"))?;
        let seconds = start.elapsed().as_secs_f64();
        tracing::info!("{stage}: {seconds:.2} s {note}");
        self.records.push(StageRecord {
            stage: stage.to_owned(),
            seconds,
            note,
        });
        Ok(out)
    }
}

/// The bar every long command shows ([`progress::bar`]).
pub use progress::bar as progress_bar;

/// Runs the plan and writes the report files into the plan's output folder.
/// Each side is served by its executor: the model, run and traced (`vauban
/// run`), or a recorded bundle replayed (`vauban diff`, or
/// `executor = "replay"`); everything after the traces is the same code.
/// Each stage takes the values of the stages before it and returns its
/// own; none reaches into another's internals.
pub fn run(plan: &Plan, command: &str) -> anyhow::Result<Outcome> {
    let mut stages = Stages::default();
    std::fs::create_dir_all(&plan.output)
        .with_context(|| format!("cannot create the output folder {}", plan.output.display()))?;
    let gathered = gather::gather(plan, &mut stages)?;
    let traces = gather::SuiteTraces::of(&plan.suite, &gathered.bundles)?;
    let host = plugins::host()?;
    let scores = score::score(plan, &host, &gathered, &traces, &mut stages)?;
    let analysis = analyze::analyze(plan, &gathered, &traces, &scores, &mut stages)?;
    let evidence = evidence::evidence_set(&analysis, &traces)?;
    let claims = claims::check(plan, &host, &evidence, &mut stages)?;
    let (declared, values) = (scores.declared.clone(), scores.values.clone());
    let inputs = report::Inputs {
        plan,
        command,
        gathered: &gathered,
        traces: &traces,
        scores,
        analysis,
        evidence,
        claims,
    };
    let mut report = report::build(inputs, &stages.records)?;
    let files = stages.run("render", |note| {
        let mut files = report::write(plan, &mut report)?;
        files.push(report::write_scores(plan, &declared, &values)?);
        *note = format!("{} file(s)", files.len());
        Ok(files)
    })?;
    Ok(Outcome {
        failed_gates: report.summary.gates_failed,
        report,
        files,
    })
}

/// The output folder's report file for a format.
pub fn report_path(out: &Path, ext: &str) -> PathBuf {
    out.join(format!("report.{ext}"))
}
