//! Stopping a run between prompts when the user asks (Ctrl-C), keeping
//! what was recorded.
//!
//! The binary's signal handler calls [`request`]; the trace stage checks
//! [`requested`] before each prompt it would record, measuring before each
//! prompt and layer, and the pipeline before each stage. A stopped run returns [`Interrupted`], which
//! says what was kept: every finished trace is already in the trace cache
//! (written atomically as it is made), so the same command resumes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks the running pipeline to stop at its next check.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// One side's traces at the moment of the stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// `baseline` or `candidate` (the side's name in the config).
    pub side: String,
    /// Traces of this side in the cache: reused or recorded by this run.
    pub kept: usize,
    /// Prompts in the suite.
    pub of: usize,
}

/// The run stopped because the user asked; nothing kept was lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Interrupted {
    /// Where it stopped, in words: `while tracing`, `before the stage
    /// \`score\``.
    pub at: String,
    /// Each side traced so far, in order.
    pub kept: Vec<Kept>,
    /// Where the traces are kept.
    pub cache: PathBuf,
}

impl Interrupted {
    /// `interrupted while tracing: 3 of 6 baseline traces kept in
    /// out/traces/cache; run the same command to resume`.
    pub fn message(&self) -> String {
        let sides: Vec<String> = self
            .kept
            .iter()
            .map(|k| match k.kept == k.of {
                true => format!("all {} {} traces", k.of, k.side),
                false => format!("{} of {} {} traces", k.kept, k.of, k.side),
            })
            .collect();
        let kept = match sides.as_slice() {
            [] => "nothing was recorded yet".to_owned(),
            [one] => format!("{one} kept in {}", self.cache.display()),
            many => format!("{} kept in {}", many.join(" and "), self.cache.display()),
        };
        format!(
            "interrupted {}: {kept}; run the same command to resume",
            self.at
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_says_what_was_kept_and_how_to_resume() {
        let k = |side: &str, kept, of| Kept {
            side: side.into(),
            kept,
            of,
        };
        let i = |kept| Interrupted {
            at: "while tracing".into(),
            kept,
            cache: PathBuf::from("out/traces/cache"),
        };
        assert_eq!(
            i(vec![k("baseline", 3, 6)]).to_string(),
            "interrupted while tracing: 3 of 6 baseline traces kept in out/traces/cache; \
             run the same command to resume"
        );
        assert_eq!(
            i(vec![k("baseline", 6, 6), k("candidate", 0, 6)]).to_string(),
            "interrupted while tracing: all 6 baseline traces and 0 of 6 candidate traces \
             kept in out/traces/cache; run the same command to resume"
        );
        assert!(i(vec![]).to_string().contains("nothing was recorded yet"));
    }
}
