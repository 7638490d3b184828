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
}

/// Arguments of an import.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The log file.
    pub log: PathBuf,
    /// The bundle to write (a folder that must not exist).
    #[arg(long, value_name = "BUNDLE")]
    pub out: PathBuf,
}

pub fn run(command: &ImportCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    let (args, imported) = match command {
        ImportCommand::Inspect(args) => (args, import::inspect::read(&args.log)?),
    };
    write(args, &imported, out)
}

fn write(args: &ImportArgs, imported: &Imported, out: &mut dyn Write) -> anyhow::Result<()> {
    let written = import::write_bundle(imported, &args.out)
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
    writeln!(out, "wrote {}", args.out.display())?;
    Ok(())
}
