//! Traces for tests, benchmarks and examples, built without an executor:
//! the one place that knows how to make a valid fixture trace (its request,
//! model, capabilities, spans and raw tensors), so a test says only what is
//! particular to it.
//!
//! Compiled for this crate's tests and, in other crates, with the
//! `fixtures` feature (their `[dev-dependencies]` turn it on).
//!
//! ```text
//! let (trace, tensors) = TraceFixture::new("t1")
//!     .prompt_id("q1")
//!     .text(Role::Prompt, "What is the capital of France?")
//!     .text(Role::Completion, "Paris.")
//!     .activation(3, vec![1, 2, 4], &[0.5; 8], true)
//!     .build();
//! assert_eq!(trace.request.observe, vec![K::Text, K::Activation]);
//! assert_eq!(tensors.len(), 1);
//! ```

use std::collections::{BTreeMap, HashMap};

use super::{
    ArtifactData, ArtifactKind, Capabilities, DeviceKind, ModelRef, Role, Stage, StageProfile,
    SupportLevel, TensorData, Trace, TraceBuilder, TraceRequest,
};

/// The prompt text a fixture asks for unless told otherwise.
pub const PROMPT: &str = "The capital of France is";

/// The model fixtures name: `fixture-model`, with a fixed weights hash.
pub fn model() -> ModelRef {
    ModelRef {
        name: "fixture-model".into(),
        path: None,
        sha256: Some("0f".repeat(32)),
        tokenizer_sha256: None,
    }
}

/// One artifact to record, in the span that was current when it was added.
struct Planned {
    span: usize,
    kind: ArtifactKind,
    data: PlannedData,
    layer: Option<usize>,
    labels: BTreeMap<String, String>,
}

enum PlannedData {
    Data(ArtifactData),
    /// A tensor: raw (kept beside the trace) or summarised.
    Tensor(TensorData, bool),
}

/// A valid trace, described by what it holds. The request's `observe` is
/// every kind added, missing or unsupported, in first-seen order; its
/// `raw_tensors` is set when a tensor is kept raw. Artifacts go to the
/// latest span (a `forward` span with a default profile when none was
/// added).
pub struct TraceFixture {
    id: String,
    request: TraceRequest,
    model: ModelRef,
    capabilities: Capabilities,
    spans: Vec<(Stage, StageProfile)>,
    planned: Vec<Planned>,
    missing: Vec<(ArtifactKind, String)>,
    observe: Vec<ArtifactKind>,
}

impl TraceFixture {
    /// An empty fixture `id` asking for [`PROMPT`], on [`model`], from an
    /// executor `fixture` that supports every kind on the CPU.
    pub fn new(id: impl Into<String>) -> Self {
        TraceFixture {
            id: id.into(),
            request: TraceRequest {
                prompt_id: None,
                category: None,
                expected_behavior: None,
                text: Some(PROMPT.into()),
                token_ids: None,
                observe: Vec::new(),
                layers: Vec::new(),
                raw_tensors: false,
                raw_kinds: Vec::new(),
            },
            model: model(),
            capabilities: Capabilities::uniform("fixture", &[DeviceKind::Cpu], SupportLevel::Full),
            spans: Vec::new(),
            planned: Vec::new(),
            missing: Vec::new(),
            observe: Vec::new(),
        }
    }

    /// The prompt text the request asks for.
    pub fn prompt(mut self, text: &str) -> Self {
        self.request.text = Some(text.into());
        self
    }

    /// The suite's prompt id (what pairs baseline and candidate traces).
    pub fn prompt_id(mut self, id: &str) -> Self {
        self.request.prompt_id = Some(id.into());
        self
    }

    /// The suite's category.
    pub fn category(mut self, category: &str) -> Self {
        self.request.category = Some(category.into());
        self
    }

    /// What the suite expects the model to do.
    pub fn expected(mut self, behavior: &str) -> Self {
        self.request.expected_behavior = Some(behavior.into());
        self
    }

    /// The model the trace names.
    pub fn model(mut self, model: ModelRef) -> Self {
        self.model = model;
        self
    }

    /// The executor's name in the capabilities.
    pub fn executor(mut self, name: &str) -> Self {
        self.capabilities.executor = name.into();
        self
    }

    /// The layers the request observes (added to by per-layer artifacts).
    pub fn layers(mut self, layers: &[usize]) -> Self {
        for &l in layers {
            if !self.request.layers.contains(&l) {
                self.request.layers.push(l);
            }
        }
        self
    }

    /// Asks for `kind`, which the executor declares unsupported.
    pub fn unsupported(mut self, kind: ArtifactKind) -> Self {
        self.capabilities = self.capabilities.with(kind, SupportLevel::Unsupported);
        self.observe(kind)
    }

    /// Asks for `kind` without producing it (a request the trace must
    /// account for: add it as [`TraceFixture::missing`] or produce it).
    pub fn observe(mut self, kind: ArtifactKind) -> Self {
        if !self.observe.contains(&kind) {
            self.observe.push(kind);
        }
        self
    }

    /// Asks for `kind` and records it as not produced, with `reason`.
    pub fn missing(mut self, kind: ArtifactKind, reason: &str) -> Self {
        self.missing.push((kind, reason.into()));
        self.observe(kind)
    }

    /// Opens a span; later artifacts are produced by it.
    pub fn span(mut self, stage: Stage, profile: StageProfile) -> Self {
        self.spans.push((stage, profile));
        self
    }

    /// Any artifact, with its layer and labels.
    pub fn artifact(
        self,
        kind: ArtifactKind,
        data: ArtifactData,
        layer: Option<usize>,
        labels: &[(&str, &str)],
    ) -> Self {
        self.plan(kind, PlannedData::Data(data), layer, labels)
    }

    /// A text artifact labelled with `role`.
    pub fn text(self, role: Role, text: &str) -> Self {
        let data = ArtifactData::Text { text: text.into() };
        self.artifact(
            ArtifactKind::Text,
            data,
            None,
            &[(Role::KEY, role.as_str())],
        )
    }

    /// Token ids labelled with `role`.
    pub fn tokens(self, role: Role, ids: Vec<u32>) -> Self {
        let data = ArtifactData::TokenIds { ids };
        self.artifact(
            ArtifactKind::Tokens,
            data,
            None,
            &[(Role::KEY, role.as_str())],
        )
    }

    /// A scalar metric recorded with the trace.
    pub fn metric(self, name: &str, value: f64) -> Self {
        let data = ArtifactData::Scalar {
            name: name.into(),
            value,
            unit: None,
        };
        self.artifact(ArtifactKind::Metric, data, None, &[])
    }

    /// A tensor artifact of `kind` (logits, logprobs, weights...), raw or
    /// summarised.
    pub fn tensor(
        self,
        kind: ArtifactKind,
        layer: Option<usize>,
        shape: Vec<usize>,
        values: &[f32],
        raw: bool,
        labels: &[(&str, &str)],
    ) -> Self {
        let data = TensorData::from_f32(shape, values).expect("values fill the shape");
        self.plan(kind, PlannedData::Tensor(data, raw), layer, labels)
    }

    /// An activation at `layer` (which the request then observes).
    pub fn activation(self, layer: usize, shape: Vec<usize>, values: &[f32], raw: bool) -> Self {
        self.tensor(
            ArtifactKind::Activation,
            Some(layer),
            shape,
            values,
            raw,
            &[],
        )
    }

    fn plan(
        mut self,
        kind: ArtifactKind,
        data: PlannedData,
        layer: Option<usize>,
        labels: &[(&str, &str)],
    ) -> Self {
        if self.spans.is_empty() {
            self.spans.push((Stage::Forward, StageProfile::default()));
        }
        // Activations are accounted per requested layer.
        if let (Some(l), ArtifactKind::Activation) = (layer, kind) {
            self = self.layers(&[l]);
        }
        if let PlannedData::Tensor(_, true) = data {
            self.request.raw_tensors = true;
        }
        self.planned.push(Planned {
            span: self.spans.len() - 1,
            kind,
            data,
            layer,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        });
        self.observe(kind)
    }

    /// The trace and its raw tensors (artifact id → data).
    ///
    /// # Panics
    /// When the described trace breaks a trace rule: a fixture is written
    /// by a test, and a broken one is that test's bug.
    pub fn build(self) -> (Trace, HashMap<String, TensorData>) {
        let mut request = self.request;
        request.observe = self.observe;
        let mut b = TraceBuilder::new(self.id, self.model, self.capabilities, "cpu", request);
        let spans: Vec<String> = self
            .spans
            .into_iter()
            .map(|(stage, profile)| b.span(stage, profile))
            .collect();
        let mut tensors = HashMap::new();
        for p in self.planned {
            let span = &spans[p.span];
            match p.data {
                PlannedData::Data(data) => {
                    b.artifact_with(span, p.kind, data, p.layer, p.labels);
                }
                PlannedData::Tensor(data, raw) => {
                    let id = b.artifact_with(
                        span,
                        p.kind,
                        ArtifactData::tensor(data.as_ref(), raw),
                        p.layer,
                        p.labels,
                    );
                    if raw {
                        tensors.insert(id, data);
                    }
                }
            }
        }
        for (kind, reason) in self.missing {
            b.missing(kind, reason);
        }
        let trace = b
            .finish()
            .unwrap_or_else(|e| panic!("the fixture trace is invalid: {e}"));
        (trace, tensors)
    }

    /// The trace alone (see [`TraceFixture::build`]).
    pub fn trace(self) -> Trace {
        self.build().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ArtifactKind as K;

    #[test]
    fn the_request_is_what_the_fixture_holds() {
        let (t, tensors) = TraceFixture::new("t")
            .span(Stage::Tokenize, StageProfile::default())
            .text(Role::Prompt, PROMPT)
            .span(Stage::Forward, StageProfile::default())
            .activation(2, vec![1, 1, 2], &[1.0, 2.0], true)
            .tensor(K::Logits, None, vec![1, 2], &[0.0, 1.0], false, &[])
            .missing(K::Logprobs, "not computed here")
            .unsupported(K::WeightSnapshot)
            .build();
        assert_eq!(
            t.request.observe,
            [
                K::Text,
                K::Activation,
                K::Logits,
                K::Logprobs,
                K::WeightSnapshot
            ]
        );
        assert_eq!(t.request.layers, [2]);
        assert!(t.request.raw_tensors);
        assert_eq!(t.spans.len(), 2);
        assert_eq!(
            t.artifacts_of(K::Activation).next().unwrap().producer,
            t.spans[1].id
        );
        assert_eq!(tensors.len(), 1, "only the raw activation is kept");
        assert_eq!(t.missing[0].kind, K::Logprobs);
        assert_eq!(t.unsupported, [K::WeightSnapshot]);
    }

    #[test]
    #[should_panic(expected = "the fixture trace is invalid")]
    fn a_fixture_that_breaks_a_rule_is_the_tests_bug() {
        // Requested, neither produced nor declared missing.
        TraceFixture::new("t")
            .observe(K::Logits)
            .text(Role::Prompt, "x")
            .build();
    }
}
