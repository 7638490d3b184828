//! `vauban import`: another tool's eval log as a trace bundle, so `vauban
//! diff` compares two imported runs with the paired tests, the claim check
//! and the report of any run (issue 38).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use vauban::import::{self, Imported};

/// `vauban import ...`
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// An Inspect log (`.eval` archive or `.json`): each sample and epoch
    /// a trace, Inspect's scores as metrics.
    Inspect(ImportArgs),
    /// An lm-evaluation-harness samples file (`--log_samples`:
    /// samples_<task>_<date>.jsonl, with its run's results file beside
    /// it): each document a trace, its metrics per filter.
    #[command(name = "lm-eval")]
    LmEval(ImportArgs),
    /// A promptfoo results file (`promptfoo eval -o results.json`): one
    /// bundle per provider under --out, each test and repeat a trace,
    /// pass/fail and scores as metrics.
    Promptfoo(PromptfooArgs),
}

/// Arguments of an import.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The log file.
    pub log: PathBuf,
    /// The bundle to write (a folder that must not exist); for promptfoo,
    /// the folder that gets one bundle per provider.
    #[arg(long, value_name = "BUNDLE")]
    pub out: PathBuf,
}

/// Arguments of `vauban import promptfoo`.
#[derive(Debug, Args)]
pub struct PromptfooArgs {
    #[command(flatten)]
    pub import: ImportArgs,
    /// Know each test by its order (`test-1`, `test-2`...) instead of its
    /// description and variables, so that two runs whose tests were
    /// reworded still pair; the report states that the pairs rest on order.
    #[arg(long)]
    pub by_position: bool,
}

pub fn run(command: &ImportCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        ImportCommand::Inspect(args) => {
            let imported = import::inspect::read(&args.log)?;
            write(args, &imported, &args.out, out)
        }
        ImportCommand::LmEval(args) => {
            let imported = import::lm_eval::read(&args.log)?;
            write(args, &imported, &args.out, out)
        }
        ImportCommand::Promptfoo(PromptfooArgs {
            import: args,
            by_position,
        }) => {
            let columns = import::promptfoo::read(&args.log, *by_position)?;
            if args.out.exists() {
                anyhow::bail!(
                    "{} exists: give a new folder for the providers' bundles",
                    args.out.display()
                );
            }
            let mut names = std::collections::BTreeSet::new();
            for c in &columns {
                // A provider every call of which failed is said, not fatal:
                // the other providers' results are still evidence.
                if c.imported.samples.is_empty() {
                    let first = c.imported.from.missing.first();
                    writeln!(
                        out,
                        "no bundle for `{}`: none of its {} results can be imported{}",
                        c.name,
                        c.imported.from.missing.len(),
                        first
                            .map(|m| format!(
                                " (the first: {})",
                                m.reason.lines().next().unwrap_or("")
                            ))
                            .unwrap_or_default()
                    )?;
                    continue;
                }
                let mut name = folder_name(&c.name);
                while !names.insert(name.clone()) {
                    name.push('_');
                }
                write(args, &c.imported, &args.out.join(name), out)?;
            }
            if names.is_empty() {
                anyhow::bail!(
                    "{}: no provider's results can be imported",
                    args.log.display()
                );
            }
            Ok(())
        }
    }
}

/// A provider's name as a folder name: what a path may not hold becomes `_`.
fn folder_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    match s.trim_matches('.').is_empty() {
        true => "provider".into(),
        false => s,
    }
}

fn write(
    args: &ImportArgs,
    imported: &Imported,
    to: &std::path::Path,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let written = import::write_bundle(imported, to)
        .with_context(|| format!("importing {}", args.log.display()))?;
    let from = &imported.from;
    writeln!(
        out,
        "{} {} log of task `{}` on `{}` ({} traces of {} samples)",
        from.tool,
        from.tool_version.as_deref().unwrap_or(""),
        from.task,
        from.model,
        written.traces,
        written.prompts
    )?;
    writeln!(out, "  metrics: {}", written.metrics.join(", "))?;
    for m in &from.missing {
        writeln!(
            out,
            "  left out: sample {}{}: {}",
            m.sample,
            m.epoch.map(|e| format!(" epoch {e}")).unwrap_or_default(),
            m.reason
        )?;
    }
    writeln!(out, "wrote {}", to.display())?;
    Ok(())
}
