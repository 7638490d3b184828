//! The exit codes, in one place: each outcome a CI job needs to tell apart
//! has its own code, and no two outcomes share one.

use std::process::ExitCode;

/// How `vauban` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; with `run` or `diff`, every gate passed or only warned.
    Success,
    /// The command failed: a config, model, plugin, bundle or file error
    /// (the message says which, and where).
    Error,
    /// The command line is wrong: an unknown flag, a missing argument, a
    /// bad value (clap's own code).
    Usage,
    /// `run` or `diff` finished and wrote every report, and a gate with
    /// `severity = "fail"` failed: the model regressed by the config's own
    /// measure.
    GateFailed,
    /// `run` or `diff` stopped on Ctrl-C (SIGINT) between prompts; every
    /// finished trace is kept and the same command resumes. 128 + 2, as a
    /// shell reports a process SIGINT ended.
    Interrupted,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Error => 1,
            Exit::Usage => 2,
            Exit::GateFailed => 3,
            Exit::Interrupted => 130,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// The table `vauban --help` ends with (the README has the same).
pub const TABLE: &str = "\
Exit codes:
  0  success; with run/diff, no `fail` gate failed
  1  error: config, model, plugin, bundle or file (the message names it)
  2  usage: unknown flag, missing argument, bad value
  3  run/diff wrote every report and a `severity = \"fail\"` gate failed
  130  interrupted (Ctrl-C): finished traces are kept; run the same command to resume";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_its_own_code_and_a_line_in_the_table() {
        let all = [
            Exit::Success,
            Exit::Error,
            Exit::Usage,
            Exit::GateFailed,
            Exit::Interrupted,
        ];
        let mut codes: Vec<u8> = all.iter().map(|e| e.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), all.len(), "{codes:?}");
        for code in codes {
            assert!(
                TABLE.contains(&format!("\n  {code}  ")),
                "{code} missing from the table"
            );
        }
        // clap exits 2 on a usage error; that code is clap's, not ours to reuse.
        assert_eq!(Exit::Usage.code(), 2);
    }
}
