//! The rules a trace obeys, checked when a trace is built and again when
//! one is read from a bundle. All problems are collected, so one run of
//! `vauban trace validate` lists every one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use super::{
    ArtifactData, ArtifactKind, Role, Site, SupportLevel, Trace, TraceRequest, is_sha256_hex,
};

/// One broken rule, phrased so the message names the problem and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The request gives the prompt neither as text nor as token ids (or
    /// gives both empty).
    #[error("the request has neither text nor token ids; give the prompt as `text` or `token_ids`")]
    EmptyRequest,
    /// The request's `observe` lists a kind more than once; holds that kind.
    #[error("the request asks for `{0}` more than once; list each artifact kind once")]
    DuplicateRequestedKind(ArtifactKind),
    /// A span or an artifact has an empty id; holds which (`span` or
    /// `artifact`).
    #[error("a {0} has an empty id; every span and artifact needs an id")]
    EmptyId(&'static str),
    /// Two spans share an id; holds that id.
    #[error("span id `{0}` is used by more than one span; span ids must be unique within a trace")]
    DuplicateSpanId(String),
    /// A tensor artifact is marked `raw: true` though the request did not
    /// set `raw_tensors` (the next-token KL rows are exempt: they are
    /// always kept raw).
    #[error(
        "artifact `{artifact}` keeps its raw tensor, but the request did not ask for raw tensors (`raw_tensors`)"
    )]
    RawNotRequested {
        /// The artifact's id.
        artifact: String,
    },
    /// A kind other than `activation` is recorded as missing at one layer.
    #[error(
        "`{kind}` is recorded as missing at layer {layer}, but only activations are recorded per layer"
    )]
    LayerOfUnlayeredKind {
        /// The kind recorded as missing.
        kind: ArtifactKind,
        /// The layer it names.
        layer: usize,
    },
    /// Two artifacts share an id; holds that id.
    #[error(
        "artifact id `{0}` is used by more than one artifact; artifact ids must be unique within a trace"
    )]
    DuplicateArtifactId(String),
    /// An artifact names a producer span the trace does not hold.
    #[error("artifact `{artifact}` names producer span `{producer}`, which is not in the trace")]
    UnknownProducer {
        /// The artifact's id.
        artifact: String,
        /// The span id it names as its producer.
        producer: String,
    },
    /// An artifact's producer span exists but does not list the artifact
    /// among its outputs.
    #[error(
        "artifact `{artifact}` names span `{producer}` as its producer, but that span does not list it among its outputs"
    )]
    NotInProducerOutputs {
        /// The artifact's id.
        artifact: String,
        /// The id of the span it names as its producer.
        producer: String,
    },
    /// A span lists an output the trace's artifacts do not hold.
    #[error("span `{span}` lists output `{artifact}`, which is not in the trace's artifacts")]
    OutputNotFound {
        /// The span's id.
        span: String,
        /// The artifact id it lists as an output.
        artifact: String,
    },
    /// A span lists as its output an artifact that names another span as
    /// its producer.
    #[error(
        "span `{span}` lists `{artifact}` as an output, but artifact `{artifact}` says it was produced by span `{producer}`"
    )]
    OutputOfOtherSpan {
        /// The id of the span listing the output.
        span: String,
        /// The artifact's id.
        artifact: String,
        /// The span the artifact names as its producer.
        producer: String,
    },
    /// A span lists an input the trace's artifacts do not hold.
    #[error("span `{span}` lists input `{artifact}`, which is not in the trace's artifacts")]
    InputNotFound {
        /// The span's id.
        span: String,
        /// The artifact id it lists as an input.
        artifact: String,
    },
    /// An artifact's data variant cannot carry its kind (see
    /// [`ArtifactData::fits`]).
    #[error(
        "artifact `{artifact}` is of kind `{kind}` but carries `{data}` data; `{kind}` cannot be carried that way"
    )]
    DataDoesNotFitKind {
        /// The artifact's id.
        artifact: String,
        /// The artifact's kind.
        kind: ArtifactKind,
        /// The data variant's JSON name (`text`, `token_ids`, `tensor`,
        /// `scalar`, `record`).
        data: &'static str,
    },
    /// An artifact of a kind vauban reads by its role (`text`, `tokens`,
    /// `logprobs`) has a `role` label that is not one of [`Role`]'s.
    #[error(
        "artifact `{artifact}` ({kind}) has role `{role}`, which vauban does not read; \
         a {kind} artifact's role is one of: {}",
        Role::valid()
    )]
    UnknownRole {
        /// The artifact's id.
        artifact: String,
        /// The artifact's kind.
        kind: ArtifactKind,
        /// The role as given.
        role: String,
    },
    /// An activation's `site` label is not one of [`Site`]'s.
    #[error(
        "artifact `{artifact}` (activation) has site `{site}`, which vauban does not read; \
         an activation's site is one of: {}",
        Site::valid()
    )]
    UnknownSite {
        /// The artifact's id.
        artifact: String,
        /// The site as given.
        site: String,
    },
    /// A tensor summary's `numel` is not the product of its shape.
    #[error(
        "artifact `{artifact}`'s tensor summary says {numel} elements but its shape {shape:?} holds {expected}"
    )]
    SummaryShape {
        /// The artifact's id.
        artifact: String,
        /// The shape the summary records.
        shape: Vec<usize>,
        /// The element count the summary records.
        numel: u64,
        /// The product of the shape (`u64::MAX` when it overflows).
        expected: u64,
    },
    /// A scalar (metric) artifact holds NaN or an infinity.
    #[error(
        "metric artifact `{artifact}` has a non-finite value; a metric must be a finite number"
    )]
    NonFiniteMetric {
        /// The artifact's id.
        artifact: String,
    },
    /// A requested kind is neither present, nor recorded as missing (as a
    /// whole or at some layer), nor recorded as unsupported; holds that
    /// kind.
    #[error(
        "`{0}` was requested but the trace neither holds it nor records it as missing or unsupported; record what happened instead of dropping it"
    )]
    RequestedNotAccounted(ArtifactKind),
    /// A kind is recorded as missing as a whole, yet the trace holds
    /// artifacts of it; holds that kind.
    #[error("`{0}` is recorded as missing, but the trace holds artifacts of that kind")]
    MissingButPresent(ArtifactKind),
    /// A requested layer of a per-layer kind is neither present nor
    /// recorded as missing.
    #[error(
        "`{kind}` at layer {layer} was requested but the trace neither holds it nor records that layer as missing"
    )]
    RequestedLayerNotAccounted {
        /// The per-layer kind (`activation`).
        kind: ArtifactKind,
        /// The requested layer.
        layer: usize,
    },
    /// A layer is recorded as missing, yet the trace holds that kind at
    /// that layer.
    #[error("`{kind}` at layer {layer} is recorded as missing, but the trace holds it")]
    MissingLayerButPresent {
        /// The per-layer kind (`activation`).
        kind: ArtifactKind,
        /// The layer recorded as missing.
        layer: usize,
    },
    /// A layer is recorded as missing that the request's `layers` does not
    /// list.
    #[error(
        "`{kind}` at layer {layer} is recorded as missing, but layer {layer} was not requested"
    )]
    MissingLayerNotRequested {
        /// The per-layer kind (`activation`).
        kind: ArtifactKind,
        /// The layer recorded as missing.
        layer: usize,
    },
    /// [`TraceBuilder`](super::TraceBuilder) was given a span id it never
    /// created; holds that id.
    #[error("the trace builder was given span `{0}`, which it never created")]
    NoSuchSpan(String),
    /// A kind is recorded as unsupported, yet the trace holds artifacts of
    /// it; holds that kind.
    #[error("`{0}` is recorded as unsupported, but the trace holds artifacts of that kind")]
    UnsupportedButPresent(ArtifactKind),
    /// A kind is recorded as missing or unsupported that the request did
    /// not ask for.
    #[error("`{kind}` is recorded as {listed}, but it was never requested")]
    RecordedButNotRequested {
        /// The kind recorded.
        kind: ArtifactKind,
        /// Where it is recorded: `missing` or `unsupported`.
        listed: &'static str,
    },
    /// A kind appears more than once in the same list.
    #[error("`{kind}` is recorded as {listed} more than once")]
    RecordedTwice {
        /// The kind repeated.
        kind: ArtifactKind,
        /// The list: `missing`, `unsupported`, or `missing at the same
        /// layer`.
        listed: &'static str,
    },
    /// A missing entry has an empty or blank reason; holds its kind.
    #[error("`{0}` is recorded as missing without a reason; say why it was not produced")]
    MissingWithoutReason(ArtifactKind),
    /// A kind is recorded as missing though the executor declares it
    /// unsupported: it belongs under `unsupported`.
    #[error(
        "`{kind}` is recorded as missing, but executor `{executor}` declares it unsupported; record it as unsupported"
    )]
    MissingButDeclaredUnsupported {
        /// The kind recorded as missing.
        kind: ArtifactKind,
        /// The executor's name.
        executor: String,
    },
    /// A kind is recorded as unsupported though the executor declares
    /// partial or full support: it belongs under `missing`, with a reason.
    #[error(
        "`{kind}` is recorded as unsupported, but executor `{executor}` declares it {level}; record it as missing with a reason"
    )]
    UnsupportedButDeclared {
        /// The kind recorded as unsupported.
        kind: ArtifactKind,
        /// The executor's name.
        executor: String,
        /// The support the executor declares for the kind.
        level: SupportLevel,
    },
    /// The trace holds an artifact of a kind its executor declares
    /// unsupported.
    #[error(
        "artifact `{artifact}` is `{kind}`, which executor `{executor}` declares unsupported; the capability declaration or the trace is wrong"
    )]
    ProducedButDeclaredUnsupported {
        /// The artifact's id.
        artifact: String,
        /// The artifact's kind.
        kind: ArtifactKind,
        /// The executor's name.
        executor: String,
    },
    /// The executor's capabilities leave some artifact kinds out.
    #[error(
        "executor `{executor}` does not declare its support for: {kinds}; list every artifact kind as unsupported, partial or full"
    )]
    UndeclaredCapabilities {
        /// The executor's name.
        executor: String,
        /// The kinds left out, comma-separated.
        kinds: String,
    },
    /// The model's `sha256` is not 64 lowercase hex digits.
    #[error("model `{model}` has sha256 `{sha256}`, which is not 64 lowercase hex digits")]
    BadModelHash {
        /// The model's name.
        model: String,
        /// The hash as recorded.
        sha256: String,
    },
}

/// A trace that breaks one or more rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TraceError {
    /// The trace's id.
    pub trace: String,
    /// Every rule the trace breaks, in the order checked; never empty.
    pub problems: Vec<Problem>,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problems.as_slice() {
            [one] => write!(f, "trace `{}` is invalid: {one}", self.trace),
            many => {
                write!(
                    f,
                    "trace `{}` is invalid ({} problems):",
                    self.trace,
                    many.len()
                )?;
                for p in many {
                    write!(f, "\n  - {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl TraceRequest {
    /// The request's own rules: an input, each kind once, logits with logprobs.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let has_text = self.text.as_deref().is_some_and(|t| !t.is_empty());
        let has_ids = self.token_ids.as_deref().is_some_and(|t| !t.is_empty());
        if !has_text && !has_ids {
            problems.push(Problem::EmptyRequest);
        }
        let mut seen = BTreeSet::new();
        for &kind in &self.observe {
            if !seen.insert(kind) && !problems.contains(&Problem::DuplicateRequestedKind(kind)) {
                problems.push(Problem::DuplicateRequestedKind(kind));
            }
        }
        problems
    }

    /// Checks the request alone (executors call this before running).
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

impl Trace {
    /// Checks every rule; the error lists all broken ones.
    pub fn validate(&self) -> Result<(), TraceError> {
        let mut p = self.request.problems();
        self.check_ids(&mut p);
        self.check_links(&mut p);
        self.check_data(&mut p);
        self.check_accounting(&mut p);
        self.check_capabilities(&mut p);
        if let Some(sha) = &self.model.sha256
            && !is_sha256_hex(sha)
        {
            p.push(Problem::BadModelHash {
                model: self.model.name.clone(),
                sha256: sha.clone(),
            });
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(TraceError {
                trace: self.id.clone(),
                problems: p,
            })
        }
    }

    fn check_ids(&self, p: &mut Vec<Problem>) {
        let mut spans = HashSet::new();
        for s in &self.spans {
            if s.id.is_empty() {
                p.push(Problem::EmptyId("span"));
            } else if !spans.insert(s.id.as_str()) {
                p.push(Problem::DuplicateSpanId(s.id.clone()));
            }
        }
        let mut artifacts = HashSet::new();
        for a in &self.artifacts {
            if a.id.is_empty() {
                p.push(Problem::EmptyId("artifact"));
            } else if !artifacts.insert(a.id.as_str()) {
                p.push(Problem::DuplicateArtifactId(a.id.clone()));
            }
        }
    }

    fn check_links(&self, p: &mut Vec<Problem>) {
        let spans: HashMap<&str, _> = self.spans.iter().map(|s| (s.id.as_str(), s)).collect();
        let artifacts: HashMap<&str, _> =
            self.artifacts.iter().map(|a| (a.id.as_str(), a)).collect();
        // (span, output) pairs, so each check is a lookup: linear in the
        // trace's size, however many outputs one span lists.
        let outputs: HashSet<(&str, &str)> = self
            .spans
            .iter()
            .flat_map(|s| s.outputs.iter().map(|o| (s.id.as_str(), o.as_str())))
            .collect();
        for a in &self.artifacts {
            match spans.get(a.producer.as_str()) {
                None => p.push(Problem::UnknownProducer {
                    artifact: a.id.clone(),
                    producer: a.producer.clone(),
                }),
                Some(s) if !outputs.contains(&(s.id.as_str(), a.id.as_str())) => {
                    p.push(Problem::NotInProducerOutputs {
                        artifact: a.id.clone(),
                        producer: a.producer.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        for s in &self.spans {
            for out in &s.outputs {
                match artifacts.get(out.as_str()) {
                    None => p.push(Problem::OutputNotFound {
                        span: s.id.clone(),
                        artifact: out.clone(),
                    }),
                    Some(a) if a.producer != s.id => p.push(Problem::OutputOfOtherSpan {
                        span: s.id.clone(),
                        artifact: out.clone(),
                        producer: a.producer.clone(),
                    }),
                    Some(_) => {}
                }
            }
            for input in &s.inputs {
                if !artifacts.contains_key(input.as_str()) {
                    p.push(Problem::InputNotFound {
                        span: s.id.clone(),
                        artifact: input.clone(),
                    });
                }
            }
        }
    }

    fn check_data(&self, p: &mut Vec<Problem>) {
        for a in &self.artifacts {
            if matches!(a.data, ArtifactData::Tensor { raw: true, .. })
                && !self.request.raw_tensors
                && !a.is_kl_rows()
            {
                p.push(Problem::RawNotRequested {
                    artifact: a.id.clone(),
                });
            }
            let read_by_role = matches!(
                a.kind,
                ArtifactKind::Text | ArtifactKind::Tokens | ArtifactKind::Logprobs
            );
            if let Some(role) = a
                .role_label()
                .filter(|_| read_by_role && a.role().is_none())
            {
                p.push(Problem::UnknownRole {
                    artifact: a.id.clone(),
                    kind: a.kind,
                    role: role.to_owned(),
                });
            }
            if let Some(site) = a.labels.get(Site::KEY)
                && a.kind == ArtifactKind::Activation
                && a.site().is_none()
            {
                p.push(Problem::UnknownSite {
                    artifact: a.id.clone(),
                    site: site.clone(),
                });
            }
            if !a.data.fits(a.kind) {
                p.push(Problem::DataDoesNotFitKind {
                    artifact: a.id.clone(),
                    kind: a.kind,
                    data: a.data.type_name(),
                });
            }
            match &a.data {
                ArtifactData::Tensor { summary, .. } => {
                    let expected = summary
                        .shape
                        .iter()
                        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
                    if expected != Some(summary.numel) {
                        let expected = expected.unwrap_or(u64::MAX);
                        p.push(Problem::SummaryShape {
                            artifact: a.id.clone(),
                            shape: summary.shape.clone(),
                            numel: summary.numel,
                            expected,
                        });
                    }
                }
                ArtifactData::Scalar { value, .. } if !value.is_finite() => {
                    p.push(Problem::NonFiniteMetric {
                        artifact: a.id.clone(),
                    });
                }
                _ => {}
            }
        }
    }

    /// Every requested kind is present, missing with a reason, or unsupported;
    /// never more than one of these, and nothing recorded that was not asked.
    /// Activations are accounted per requested layer.
    fn check_accounting(&self, p: &mut Vec<Problem>) {
        let present = self.coverage();
        let whole_missing: Vec<ArtifactKind> = self
            .missing
            .iter()
            .filter(|m| m.layer.is_none())
            .map(|m| m.kind)
            .collect();
        for (listed, kinds) in [
            ("missing", &whole_missing),
            ("unsupported", &self.unsupported),
        ] {
            let mut seen = BTreeSet::new();
            for &kind in kinds.iter() {
                if !seen.insert(kind) {
                    p.push(Problem::RecordedTwice { kind, listed });
                }
                if !self.request.wants(kind) {
                    p.push(Problem::RecordedButNotRequested { kind, listed });
                }
                if present.contains(&kind) {
                    p.push(match listed {
                        "missing" => Problem::MissingButPresent(kind),
                        _ => Problem::UnsupportedButPresent(kind),
                    });
                }
            }
        }
        let present_at: HashSet<(ArtifactKind, usize)> = self
            .artifacts
            .iter()
            .filter_map(|a| Some((a.kind, a.layer?)))
            .collect();
        let has_at_layer = |kind, layer| present_at.contains(&(kind, layer));
        let requested_layers: HashSet<usize> = self.request.layers.iter().copied().collect();
        let mut seen_layers = BTreeSet::new();
        for m in &self.missing {
            if m.reason.trim().is_empty() {
                p.push(Problem::MissingWithoutReason(m.kind));
            }
            let Some(layer) = m.layer else { continue };
            let (kind, layer) = (m.kind, layer);
            if kind != ArtifactKind::Activation {
                p.push(Problem::LayerOfUnlayeredKind { kind, layer });
                continue;
            }
            if !seen_layers.insert((kind, layer)) {
                p.push(Problem::RecordedTwice {
                    kind,
                    listed: "missing at the same layer",
                });
            }
            if !self.request.wants(kind) {
                p.push(Problem::RecordedButNotRequested {
                    kind,
                    listed: "missing",
                });
            } else if !requested_layers.contains(&layer) {
                p.push(Problem::MissingLayerNotRequested { kind, layer });
            }
            if has_at_layer(kind, layer) {
                p.push(Problem::MissingLayerButPresent { kind, layer });
            }
        }
        let requested: BTreeSet<ArtifactKind> = self.request.observe.iter().copied().collect();
        for kind in requested {
            let accounted = whole_missing.contains(&kind) || self.unsupported.contains(&kind);
            if !present.contains(&kind)
                && !accounted
                && !seen_layers.iter().any(|&(k, _)| k == kind)
            {
                p.push(Problem::RequestedNotAccounted(kind));
            }
        }
        if self.request.wants(ArtifactKind::Activation)
            && !whole_missing.contains(&ArtifactKind::Activation)
            && !self.unsupported.contains(&ArtifactKind::Activation)
        {
            let kind = ArtifactKind::Activation;
            for &layer in &self.request.layers {
                if !has_at_layer(kind, layer) && !seen_layers.contains(&(kind, layer)) {
                    p.push(Problem::RequestedLayerNotAccounted { kind, layer });
                }
            }
        }
    }

    /// The trace agrees with its executor's declaration.
    fn check_capabilities(&self, p: &mut Vec<Problem>) {
        let caps = &self.capabilities;
        let unlisted = caps.unlisted_kinds();
        if !unlisted.is_empty() {
            p.push(Problem::UndeclaredCapabilities {
                executor: caps.executor.clone(),
                kinds: unlisted
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        for a in &self.artifacts {
            if caps.artifacts.get(&a.kind) == Some(&SupportLevel::Unsupported) {
                p.push(Problem::ProducedButDeclaredUnsupported {
                    artifact: a.id.clone(),
                    kind: a.kind,
                    executor: caps.executor.clone(),
                });
            }
        }
        for m in &self.missing {
            if caps.artifacts.get(&m.kind) == Some(&SupportLevel::Unsupported) {
                p.push(Problem::MissingButDeclaredUnsupported {
                    kind: m.kind,
                    executor: caps.executor.clone(),
                });
            }
        }
        for &kind in &self.unsupported {
            let level = caps.support(kind);
            if level != SupportLevel::Unsupported {
                p.push(Problem::UnsupportedButDeclared {
                    kind,
                    executor: caps.executor.clone(),
                    level,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        ArtifactData, Capabilities, DeviceKind, MissingArtifact, ModelRef, Stage, StageProfile,
        TensorData, TraceBuilder,
    };
    use super::*;

    fn caps() -> Capabilities {
        Capabilities::uniform("test", &[DeviceKind::Cpu], SupportLevel::Full)
            .with(ArtifactKind::WeightSnapshot, SupportLevel::Unsupported)
    }

    fn request(observe: &[ArtifactKind]) -> TraceRequest {
        TraceRequest {
            prompt_id: Some("p1".into()),
            category: None,
            expected_behavior: None,
            text: Some("The capital of France is".into()),
            token_ids: None,
            observe: observe.to_vec(),
            layers: vec![1],
            raw_tensors: false,
            raw_kinds: Vec::new(),
        }
    }

    /// A valid trace: tokenize → forward (logits, logprobs, one activation).
    fn valid() -> Trace {
        use ArtifactKind as K;
        let mut b = TraceBuilder::new(
            "t1",
            ModelRef {
                name: "tiny".into(),
                path: None,
                sha256: Some("ab".repeat(32)),
                tokenizer_sha256: None,
            },
            caps(),
            "cpu",
            request(&[K::Text, K::Tokens, K::Logits, K::Logprobs, K::Activation]),
        );
        let tok = b.span(Stage::Tokenize, StageProfile::default());
        let text = b.artifact(&tok, K::Text, ArtifactData::Text { text: "x".into() });
        b.input(&tok, &text);
        b.artifact(&tok, K::Tokens, ArtifactData::TokenIds { ids: vec![1, 2] });
        let fwd = b.span(Stage::Forward, StageProfile::default());
        let t = TensorData::from_f32(vec![2, 3], &[0.0; 6]).unwrap();
        for kind in [K::Logits, K::Logprobs] {
            b.artifact(&fwd, kind, ArtifactData::tensor(t.as_ref(), false));
        }
        b.artifact_with(
            &fwd,
            K::Activation,
            ArtifactData::tensor(t.as_ref(), false),
            Some(1),
            Default::default(),
        );
        b.finish().expect("the fixture is valid")
    }

    /// The messages of every problem `trace` has.
    fn problems(trace: &Trace) -> Vec<String> {
        match trace.validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.problems.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn assert_problem(trace: &Trace, needle: &str) {
        let all = problems(trace);
        assert!(
            all.iter().any(|m| m.contains(needle)),
            "expected a problem containing {needle:?}, got {all:#?}"
        );
    }

    #[test]
    fn the_fixture_is_valid() {
        assert_eq!(problems(&valid()), Vec::<String>::new());
    }

    #[test]
    fn duplicate_span_ids_are_refused() {
        let mut t = valid();
        t.spans[1].id = t.spans[0].id.clone();
        assert_problem(&t, "span id `s0-tokenize` is used by more than one span");
    }

    #[test]
    fn duplicate_artifact_ids_are_refused() {
        let mut t = valid();
        t.artifacts[1].id = t.artifacts[0].id.clone();
        assert_problem(
            &t,
            "artifact id `a0-text` is used by more than one artifact",
        );
    }

    #[test]
    fn empty_ids_are_refused() {
        let mut t = valid();
        t.spans[0].id.clear();
        assert_problem(&t, "a span has an empty id");
    }

    #[test]
    fn an_unknown_producer_span_is_refused() {
        let mut t = valid();
        t.artifacts[2].producer = "s9-decode".into();
        assert_problem(
            &t,
            "names producer span `s9-decode`, which is not in the trace",
        );
    }

    #[test]
    fn span_outputs_must_agree_with_artifact_producers() {
        // The logits artifact claims the tokenize span produced it, while
        // the forward span lists it as its own output.
        let mut t = valid();
        t.artifacts[2].producer = "s0-tokenize".into();
        assert_problem(
            &t,
            "span `s1-forward` lists `a2-logits` as an output, but artifact `a2-logits` says it was produced by span `s0-tokenize`",
        );
        assert_problem(
            &t,
            "artifact `a2-logits` names span `s0-tokenize` as its producer, but that span does not list it",
        );
    }

    #[test]
    fn span_outputs_and_inputs_must_exist() {
        let mut t = valid();
        t.spans[1].outputs.push("a99-logits".into());
        t.spans[1].inputs.push("a98-tokens".into());
        assert_problem(
            &t,
            "span `s1-forward` lists output `a99-logits`, which is not in",
        );
        assert_problem(
            &t,
            "span `s1-forward` lists input `a98-tokens`, which is not in",
        );
    }

    #[test]
    fn requested_but_missing_must_be_recorded() {
        let mut t = valid();
        t.artifacts.retain(|a| a.kind != ArtifactKind::Activation);
        t.spans[1].outputs.retain(|o| !o.ends_with("activation"));
        assert_problem(
            &t,
            "`activation` was requested but the trace neither holds it nor records it as missing",
        );
        t.missing.push(MissingArtifact {
            kind: ArtifactKind::Activation,
            layer: None,
            reason: "layer 1 hook not reached".into(),
        });
        assert_eq!(problems(&t), Vec::<String>::new());
        t.missing[0].reason = " ".into();
        assert_problem(&t, "`activation` is recorded as missing without a reason");
    }

    #[test]
    fn requested_but_unsupported_is_recorded_as_unsupported() {
        let mut req = request(&[ArtifactKind::Text, ArtifactKind::WeightSnapshot]);
        req.layers.clear();
        let mut b = TraceBuilder::new("t2", ModelRef::default_for_test(), caps(), "cpu", req);
        let s = b.span(Stage::Tokenize, StageProfile::default());
        b.artifact(
            &s,
            ArtifactKind::Text,
            ArtifactData::Text { text: "x".into() },
        );
        let t = b.finish().unwrap();
        assert_eq!(t.unsupported, vec![ArtifactKind::WeightSnapshot]);

        let mut wrong = t.clone();
        wrong.unsupported.clear();
        wrong.missing.push(MissingArtifact {
            kind: ArtifactKind::WeightSnapshot,
            layer: None,
            reason: "not collected".into(),
        });
        assert_problem(
            &wrong,
            "`weight_snapshot` is recorded as missing, but executor `test` declares it unsupported",
        );
    }

    #[test]
    fn unsupported_must_match_the_declaration() {
        let mut t = valid();
        t.unsupported.push(ArtifactKind::Logits);
        assert_problem(
            &t,
            "`logits` is recorded as unsupported, but executor `test` declares it full",
        );
        assert_problem(
            &t,
            "`logits` is recorded as unsupported, but the trace holds artifacts",
        );
    }

    #[test]
    fn recorded_but_not_requested_is_refused() {
        let mut t = valid();
        t.missing.push(MissingArtifact {
            kind: ArtifactKind::Metric,
            layer: None,
            reason: "no scorer".into(),
        });
        assert_problem(
            &t,
            "`metric` is recorded as missing, but it was never requested",
        );
    }

    #[test]
    fn an_artifact_the_executor_declares_unsupported_is_refused() {
        let mut t = valid();
        t.capabilities = t
            .capabilities
            .clone()
            .with(ArtifactKind::Activation, SupportLevel::Unsupported);
        assert_problem(
            &t,
            "artifact `a4-activation` is `activation`, which executor `test` declares unsupported",
        );
    }

    #[test]
    fn every_capability_must_be_declared() {
        let mut t = valid();
        t.capabilities.artifacts.remove(&ArtifactKind::Profile);
        assert_problem(
            &t,
            "executor `test` does not declare its support for: profile",
        );
    }

    #[test]
    fn a_request_with_neither_text_nor_token_ids_is_refused() {
        let mut t = valid();
        t.request.text = None;
        assert_problem(&t, "the request has neither text nor token ids");
        t.request.token_ids = Some(vec![]);
        assert_problem(&t, "the request has neither text nor token ids");
        t.request.token_ids = Some(vec![5]);
        assert_eq!(problems(&t), Vec::<String>::new());
    }

    #[test]
    fn duplicate_requested_kinds_are_refused() {
        let mut t = valid();
        t.request.observe.push(ArtifactKind::Logits);
        t.request.observe.push(ArtifactKind::Logits);
        let all = problems(&t);
        let dupes = all
            .iter()
            .filter(|m| m.contains("asks for `logits` more than once"));
        assert_eq!(dupes.count(), 1, "{all:#?}");
    }

    #[test]
    fn logprobs_alone_are_a_valid_request() {
        // An endpoint returns top-k log-probabilities and never logits: a
        // black box's request for logprobs alone is what it can serve.
        let req = request(&[ArtifactKind::Text, ArtifactKind::Logprobs]);
        assert_eq!(req.validate(), Ok(()));
    }

    #[test]
    fn data_must_fit_the_kind() {
        let mut t = valid();
        t.artifacts[0].data = ArtifactData::TokenIds { ids: vec![1] };
        assert_problem(
            &t,
            "artifact `a0-text` is of kind `text` but carries `token_ids` data",
        );
    }

    #[test]
    fn metrics_must_be_finite() {
        let mut t = valid();
        t.request.observe.push(ArtifactKind::Metric);
        let span = t.spans[1].id.clone();
        t.spans[1].outputs.push("m".into());
        t.artifacts.push(super::super::Artifact {
            id: "m".into(),
            kind: ArtifactKind::Metric,
            producer: span,
            layer: None,
            labels: Default::default(),
            data: ArtifactData::Scalar {
                name: "refusal_rate".into(),
                value: f64::NAN,
                unit: None,
            },
        });
        assert_problem(&t, "metric artifact `m` has a non-finite value");
    }

    #[test]
    fn a_malformed_model_hash_is_refused() {
        let mut t = valid();
        t.model.sha256 = Some("XYZ".into());
        assert_problem(
            &t,
            "model `tiny` has sha256 `XYZ`, which is not 64 lowercase hex",
        );
    }

    #[test]
    fn all_problems_are_listed_in_one_error() {
        let mut t = valid();
        t.spans[1].id = t.spans[0].id.clone();
        t.request.text = None;
        let err = t.validate().unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("trace `t1` is invalid ("), "{text}");
        assert!(text.contains("neither text nor token ids"), "{text}");
        assert!(text.contains("used by more than one span"), "{text}");
    }

    #[test]
    fn every_requested_layer_is_accounted_for() {
        let mut t = valid();
        t.request.layers = vec![1, 3];
        assert_problem(
            &t,
            "`activation` at layer 3 was requested but the trace neither holds it nor records that layer as missing",
        );
        t.missing.push(MissingArtifact {
            kind: ArtifactKind::Activation,
            layer: Some(3),
            reason: "the model has 3 layers".into(),
        });
        assert_eq!(problems(&t), Vec::<String>::new());
        t.missing[0].layer = Some(1);
        assert_problem(
            &t,
            "`activation` at layer 1 is recorded as missing, but the trace holds it",
        );
        t.missing[0].layer = Some(7);
        assert_problem(&t, "layer 7 was not requested");
    }

    #[test]
    fn only_activations_are_missing_per_layer() {
        let mut t = valid();
        t.request.observe.push(ArtifactKind::Metric);
        t.missing.push(MissingArtifact {
            kind: ArtifactKind::Metric,
            layer: Some(1),
            reason: "x".into(),
        });
        assert_problem(
            &t,
            "`metric` is recorded as missing at layer 1, but only activations",
        );
    }

    #[test]
    fn raw_tensors_need_a_request_for_them() {
        let mut t = valid();
        if let ArtifactData::Tensor { raw, .. } = &mut t.artifacts[2].data {
            *raw = true;
        }
        assert_problem(
            &t,
            "artifact `a2-logits` keeps its raw tensor, but the request did not ask",
        );
        t.request.raw_tensors = true;
        assert_eq!(problems(&t), Vec::<String>::new());
        // The KL's top-k rows are raw whatever the request says.
        t.request.raw_tensors = false;
        t.artifacts[2].kind = ArtifactKind::Logprobs;
        t.artifacts[2]
            .labels
            .insert("role".into(), "continuation".into());
        assert!(
            !problems(&t)
                .iter()
                .any(|p| p.contains("keeps its raw tensor")),
            "{:?}",
            problems(&t)
        );
    }

    #[test]
    fn a_role_vauban_reads_by_must_be_one_it_knows() {
        let mut t = valid();
        t.artifacts[2].kind = ArtifactKind::Logprobs;
        t.artifacts[2]
            .labels
            .insert("role".into(), "continuaton".into());
        assert_problem(
            &t,
            "artifact `a2-logits` (logprobs) has role `continuaton`, which vauban does not read; \
             a logprobs artifact's role is one of: prompt, rendered_prompt, completion, \
             continuation,",
        );
        let about_roles = |t: &Trace| -> Vec<String> {
            problems(t)
                .into_iter()
                .filter(|p| p.contains("role"))
                .collect()
        };
        t.artifacts[2]
            .labels
            .insert("role".into(), "continuation".into());
        assert_eq!(about_roles(&t), Vec::<String>::new());
        // Other kinds' labels stay free-form.
        t.artifacts[2].kind = ArtifactKind::Logits;
        t.artifacts[2].labels.insert("role".into(), "mine".into());
        assert_eq!(problems(&t), Vec::<String>::new());
    }

    #[test]
    fn an_activation_site_must_be_one_vauban_reads() {
        let mut t = valid();
        let a = t
            .artifacts
            .iter()
            .position(|a| a.kind == ArtifactKind::Activation)
            .unwrap();
        let id = t.artifacts[a].id.clone();
        t.artifacts[a]
            .labels
            .insert("site".into(), "residual_post".into());
        assert_problem(
            &t,
            &format!(
                "artifact `{id}` (activation) has site `residual_post`, which vauban does not \
                 read; an activation's site is one of: resid_post, attn_out, mlp_out, router"
            ),
        );
        t.artifacts[a]
            .labels
            .insert("site".into(), "resid_post".into());
        assert_eq!(problems(&t), Vec::<String>::new());
        assert_eq!(t.artifacts[a].site(), Some(Site::ResidPost));
    }

    #[test]
    fn a_summary_shape_that_overflows_is_a_problem_not_a_panic() {
        let mut t = valid();
        if let ArtifactData::Tensor { summary, .. } = &mut t.artifacts[2].data {
            summary.shape = vec![1 << 32, 1 << 32, 1 << 32];
            summary.numel = 0;
        }
        assert_problem(&t, "artifact `a2-logits`'s tensor summary says 0 elements");
    }

    #[test]
    fn the_builder_reports_spans_it_never_created() {
        let mut b = TraceBuilder::new(
            "t3",
            ModelRef::default_for_test(),
            caps(),
            "cpu",
            request(&[ArtifactKind::Text]),
        );
        let s = b.span(Stage::Tokenize, StageProfile::default());
        b.artifact(
            &s,
            ArtifactKind::Text,
            ArtifactData::Text { text: "x".into() },
        );
        b.input("s7-decode", "a0-text");
        let err = b.finish().unwrap_err().to_string();
        assert!(
            err.contains("given span `s7-decode`, which it never created"),
            "{err}"
        );
    }

    impl ModelRef {
        fn default_for_test() -> Self {
            ModelRef {
                name: "tiny".into(),
                path: None,
                sha256: None,
                tokenizer_sha256: None,
            }
        }
    }
}
