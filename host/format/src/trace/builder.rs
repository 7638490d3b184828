//! Building a trace span by span, so ids and producer links are consistent
//! by construction (executors and fixtures use this; bundles are validated
//! again on load anyway).

use std::collections::BTreeMap;

use super::{
    Artifact, ArtifactData, ArtifactKind, Capabilities, MissingArtifact, ModelRef, Problem, Span,
    Stage, StageProfile, SupportLevel, Trace, TraceError, TraceRequest,
};

/// Accumulates spans and artifacts; [`TraceBuilder::finish`] validates.
#[derive(Debug, Clone)]
pub struct TraceBuilder {
    trace: Trace,
    /// Span ids the caller named that were never created (a bug in the
    /// caller, reported by `finish` rather than dropped).
    unknown_spans: Vec<String>,
}

impl TraceBuilder {
    /// An empty trace for `request` on `model`.
    pub fn new(
        id: impl Into<String>,
        model: ModelRef,
        capabilities: Capabilities,
        device: impl Into<String>,
        request: TraceRequest,
    ) -> Self {
        TraceBuilder {
            trace: Trace {
                id: id.into(),
                model,
                capabilities,
                device: device.into(),
                request,
                spans: Vec::new(),
                artifacts: Vec::new(),
                missing: Vec::new(),
                unsupported: Vec::new(),
            },
            unknown_spans: Vec::new(),
        }
    }

    /// Appends a span and returns its id (`s<n>-<stage>`).
    pub fn span(&mut self, stage: Stage, profile: StageProfile) -> String {
        let id = format!("s{}-{}", self.trace.spans.len(), stage);
        self.trace.spans.push(Span {
            id: id.clone(),
            stage,
            inputs: Vec::new(),
            outputs: Vec::new(),
            profile,
        });
        id
    }

    /// Records that `span` consumed `artifact`.
    pub fn input(&mut self, span: &str, artifact: &str) {
        match self.trace.spans.iter_mut().find(|s| s.id == span) {
            Some(s) => s.inputs.push(artifact.to_owned()),
            None => self.unknown_spans.push(span.to_owned()),
        }
    }

    /// Adds an artifact produced by `span` and returns its id (`a<n>-<kind>`).
    pub fn artifact(&mut self, span: &str, kind: ArtifactKind, data: ArtifactData) -> String {
        self.artifact_with(span, kind, data, None, BTreeMap::new())
    }

    /// Adds an artifact with a layer and labels.
    pub fn artifact_with(
        &mut self,
        span: &str,
        kind: ArtifactKind,
        data: ArtifactData,
        layer: Option<usize>,
        labels: BTreeMap<String, String>,
    ) -> String {
        let id = format!("a{}-{}", self.trace.artifacts.len(), kind);
        match self.trace.spans.iter_mut().find(|s| s.id == span) {
            Some(s) => s.outputs.push(id.clone()),
            None => self.unknown_spans.push(span.to_owned()),
        }
        self.trace.artifacts.push(Artifact {
            id: id.clone(),
            kind,
            producer: span.to_owned(),
            layer,
            labels,
            data,
        });
        id
    }

    /// Records a requested kind the run did not produce, and why.
    pub fn missing(&mut self, kind: ArtifactKind, reason: impl Into<String>) {
        self.trace.missing.push(MissingArtifact {
            kind,
            layer: None,
            reason: reason.into(),
        });
    }

    /// Records one requested layer of a per-layer kind that was not produced.
    pub fn missing_layer(&mut self, kind: ArtifactKind, layer: usize, reason: impl Into<String>) {
        self.trace.missing.push(MissingArtifact {
            kind,
            layer: Some(layer),
            reason: reason.into(),
        });
    }

    /// Validates and returns the trace. Requested kinds the executor declares
    /// unsupported and that were not produced are recorded as unsupported
    /// here, since the declaration already says why; a supported kind that
    /// was requested and not produced must have been recorded with
    /// [`TraceBuilder::missing`], or validation fails.
    pub fn finish(mut self) -> Result<Trace, TraceError> {
        let t = &mut self.trace;
        for &kind in &t.request.observe {
            let declared = t.capabilities.support(kind) == SupportLevel::Unsupported;
            let present = t.artifacts.iter().any(|a| a.kind == kind);
            if declared && !present && !t.unsupported.contains(&kind) {
                t.unsupported.push(kind);
            }
        }
        let mut problems: Vec<Problem> = self
            .unknown_spans
            .iter()
            .map(|span| Problem::NoSuchSpan(span.clone()))
            .collect();
        if let Err(e) = self.trace.validate() {
            problems.extend(e.problems);
        }
        if problems.is_empty() {
            Ok(self.trace)
        } else {
            Err(TraceError {
                trace: self.trace.id,
                problems,
            })
        }
    }
}
