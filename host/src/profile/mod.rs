//! Profile summaries: per trace and per controlled sweep (how a run's cost
//! scales with prompt length, generated tokens and observed layers).
//!
//! - [`summarize_trace`] folds a trace's span profiles ([`StageProfile`])
//!   into one [`TraceProfileSummary`]: total time, tokens through the model,
//!   throughput, peak memory, bytes moved, copies, syncs, queue depth, and
//!   totals per stage.
//! - [`summarize_sweep`] groups traces by one controlled axis (token count,
//!   batch size or queue depth) into [`SweepPoint`]s with duration statistics,
//!   and refuses to mix traces that recorded different artifacts (different
//!   work) unless told to.
//!
//! - [`fit_usl`] fits the Universal Scalability Law to a concurrency sweep
//!   (batch size or queue depth): λ, σ and κ with bootstrap intervals and
//!   the residuals, so a reader can judge the fit; it refuses a sweep that
//!   cannot support one, saying why.
//!
//! [`StageProfile`]: crate::trace::StageProfile

mod summary;
mod sweep;

pub use summary::{StageTotal, TraceProfileSummary, summarize_trace};
pub use sweep::{
    FitError, Sweep, SweepAxis, SweepError, SweepOptions, SweepPoint, UnknownSweepAxis, fit_usl,
    summarize_sweep,
};

/// Valid traces built from a list of spans, for this module's tests.
#[cfg(test)]
mod test_support {
    use crate::trace::fixture::TraceFixture;
    use crate::trace::{ArtifactData, ArtifactKind, Role, Stage, StageProfile, Trace};

    /// One span to build: its stage and profile.
    pub struct Step(pub Stage, pub StageProfile);

    /// A valid trace `id` with `steps` as its spans; the first span produces
    /// one artifact of each kind in `observe` (text, tokens or activation).
    pub fn trace(id: &str, observe: &[ArtifactKind], steps: Vec<Step>) -> Trace {
        let mut steps = steps.into_iter();
        let Step(stage, profile) = steps.next().expect("a trace needs a span");
        let mut f = TraceFixture::new(id)
            .prompt_id("p1")
            .layers(&[0])
            .span(stage, profile);
        for &kind in observe {
            f = match kind {
                ArtifactKind::Text => f.text(Role::Prompt, "The capital of France is"),
                ArtifactKind::Tokens => f.artifact(
                    kind,
                    ArtifactData::TokenIds { ids: vec![1, 2, 3] },
                    None,
                    &[],
                ),
                // Activations are per layer: one at the requested layer 0.
                ArtifactKind::Activation => f.activation(0, vec![1, 2], &[0.5, -0.5], false),
                other => panic!("test_support cannot make `{other}` artifacts"),
            };
        }
        for Step(stage, profile) in steps {
            f = f.span(stage, profile);
        }
        f.trace()
    }

    /// `actual` equals `expected` up to float rounding (relative 1e-12).
    pub fn assert_close(actual: f64, expected: f64) {
        let tolerance = expected.abs().max(1.0) * 1e-12;
        assert!(
            (actual - expected).abs() <= tolerance,
            "{actual} is not {expected} (±{tolerance})"
        );
    }
}
