//! The `vauban` binary: parse, set up logging, run, and turn an error into
//! a message and a non-zero exit code.

use std::process::ExitCode;

use clap::Parser;
use commands::Cli;
use exit::Exit;

mod commands;
mod exit;

fn main() -> ExitCode {
    // SAFETY: first thing in main; no other thread exists yet to read the environment.
    unsafe { vauban::executor::pin_thread_count() };
    let cli = Cli::parse();
    logging(cli.log_filter());
    if cli.quiet {
        vauban::pipeline::progress::hide();
    }

    // Everything printed passes through `printable`: plugins, models and
    // bundles supply text, and none of it may drive the terminal.
    let mut stdout = vauban::text::PrintableWriter::new(std::io::stdout().lock());
    // A usage error never reaches here: clap prints it and exits with
    // `Exit::Usage` (2) while parsing.
    let exit = match cli.run(&mut stdout) {
        Ok(()) => Exit::Success,
        // A closed pipe (`vauban trace inspect B | head`) is the reader's choice, not an error.
        Err(err) if is_broken_pipe(&err) => Exit::Success,
        // Failed regression gates: the reports are written.
        Err(err) if err.downcast_ref::<commands::GatesFailed>().is_some() => {
            eprintln!("{}", vauban::text::printable(&err.to_string()));
            Exit::GateFailed
        }
        Err(err) => match interrupted(&err) {
            // Ctrl-C: the pipeline's own words say what was kept.
            Some(stop) => {
                eprintln!("{}", vauban::text::printable(&stop.to_string()));
                Exit::Interrupted
            }
            None => {
                eprintln!("error: {}", vauban::text::printable(&message(&err)));
                Exit::Error
            }
        },
    };
    ExitCode::from(exit)
}

/// Logs on stderr: the pipeline's notices ("reusing 3 of 6 recorded
/// baseline traces") as plain lines, everything else with time, level and
/// target; colour only on a terminal, so a log file holds no escape codes.
/// `RUST_LOG` replaces `default` (`-q` and `-v` set it).
fn logging(default: &str) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::prelude::*;
    use vauban::pipeline::NOTICE;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::io::stderr().is_terminal();
    let notices = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == NOTICE
        }));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() != NOTICE
        }));
    tracing_subscriber::registry()
        .with(filter)
        .with(notices)
        .with(logs)
        .init();
}

fn interrupted(err: &anyhow::Error) -> Option<&vauban::interrupt::Interrupted> {
    err.chain().find_map(|c| c.downcast_ref())
}

/// The error and its causes, joined by `: `, leaving out a cause whose text
/// its parent already ends with (errors that print their source inline).
fn message(err: &anyhow::Error) -> String {
    let mut out = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// A write to a closed pipe, whether it failed in our own writes or inside
/// serde_json's (`--json | head`), which wraps the I/O error in its own.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(BrokenPipe))
    })
}
