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
//! Vauban does not fit a Universal Scalability Law (USL) model, or any other
//! model, to a sweep: it only groups comparable points and reports their
//! statistics. Fitting, and judging whether a fit means anything, is left to
//! whoever reads the points.
//!
//! [`StageProfile`]: crate::trace::StageProfile

mod summary;
mod sweep;

pub use summary::{StageTotal, TraceProfileSummary, summarize_trace};
pub use sweep::{
    Sweep, SweepAxis, SweepError, SweepOptions, SweepPoint, UnknownSweepAxis, summarize_sweep,
};

/// Valid traces built from a list of spans, for this module's tests.
#[cfg(test)]
mod test_support {
    use crate::trace::{
        ArtifactData, ArtifactKind, Capabilities, DeviceKind, ModelRef, Stage, StageProfile,
        SupportLevel, TensorData, Trace, TraceBuilder, TraceRequest,
    };

    /// One span to build: its stage and profile.
    pub struct Step(pub Stage, pub StageProfile);

    /// A valid trace `id` with `steps` as its spans; the first span produces
    /// one artifact of each kind in `observe` (text, tokens or activation).
    pub fn trace(id: &str, observe: &[ArtifactKind], steps: Vec<Step>) -> Trace {
        let request = TraceRequest {
            prompt_id: Some("p1".into()),
            category: None,
            expected_behavior: None,
            text: Some("The capital of France is".into()),
            token_ids: None,
            observe: observe.to_vec(),
            layers: vec![0],
            raw_tensors: false,
        };
        let model = ModelRef {
            name: "tiny".into(),
            path: None,
            sha256: None,
            tokenizer_sha256: None,
        };
        let caps = Capabilities::uniform("test", &[DeviceKind::Cpu], SupportLevel::Full);
        let mut b = TraceBuilder::new(id, model, caps, "cpu", request);
        let spans: Vec<String> = steps
            .into_iter()
            .map(|Step(stage, profile)| b.span(stage, profile))
            .collect();
        let producer = spans.first().expect("a trace needs a span");
        for &kind in observe {
            // Activations are per layer: one at the requested layer 0.
            let layer = (kind == ArtifactKind::Activation).then_some(0);
            let data = match kind {
                ArtifactKind::Text => ArtifactData::Text {
                    text: "The capital of France is".into(),
                },
                ArtifactKind::Tokens => ArtifactData::TokenIds { ids: vec![1, 2, 3] },
                ArtifactKind::Activation => {
                    let t = TensorData::from_f32(vec![1, 2], &[0.5, -0.5]).unwrap();
                    ArtifactData::tensor(t.as_ref(), false)
                }
                other => panic!("test_support cannot make `{other}` artifacts"),
            };
            b.artifact_with(producer, kind, data, layer, Default::default());
        }
        b.finish().expect("test traces are valid")
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
