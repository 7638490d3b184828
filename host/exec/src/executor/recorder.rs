//! The trace recorder every backend writes through.
//!
//! A backend runs its stages and computes its values; the recorder owns
//! what is the same for all of them: the spans and their profiles, the
//! standard artifacts (prompt text and tokens, the generation, the
//! next-token KL rows, the reference continuation, intervention records,
//! the run profile), the choice between raw tensors and summaries, the raw
//! tensors kept beside the trace, and the "missing" entries for what was
//! asked for and not produced. A second backend then records the same
//! artifacts with the same roles and labels, which is what the report and
//! the contract tests read.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use super::{
    Effect, ExecutorError, GenerateOptions, Generation, PromptForm, ReferenceContinuation,
    RunOptions, TraceOutput,
};
use crate::intervene::Intervention;
use crate::intervene::policy::{PolicyLog, StepPolicy};
use crate::model::ModelError;
use crate::model::assets::ModelAssets;
use crate::trace::{
    ArtifactData, ArtifactKind as K, Capabilities, ModelRef, Role, Stage, StageProfile, TensorData,
    TraceBuilder, TraceRequest,
};

/// A tensor observed during a pass, copied to the host: its kind, layer,
/// labels and data.
pub type Observed = (K, usize, BTreeMap<String, String>, TensorData);

/// Artifact labels from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Artifact labels: `role`, then the `(key, value)` pairs.
pub fn role_labels(role: Role, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut l = labels(pairs);
    l.insert(Role::KEY.to_owned(), role.as_str().to_owned());
    l
}

/// Resident memory of this process, for stage profiles (Linux; `None`
/// elsewhere).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A trace under construction, with the raw tensors it will reference.
pub struct Recorder {
    builder: TraceBuilder,
    request: TraceRequest,
    device: String,
    tensors: HashMap<String, TensorData>,
    /// The latest span, which the run's profile record hangs from.
    last_span: Option<String>,
}

impl Recorder {
    /// Starts the trace of `request` run as `trace_id`.
    pub fn new(
        trace_id: String,
        model: ModelRef,
        capabilities: Capabilities,
        device: String,
        request: &TraceRequest,
    ) -> Self {
        Recorder {
            builder: TraceBuilder::new(
                trace_id,
                model,
                capabilities,
                device.clone(),
                request.clone(),
            ),
            request: request.clone(),
            device,
            tensors: HashMap::new(),
            last_span: None,
        }
    }

    /// Whether the request asks for `kind`.
    pub fn wants(&self, kind: K) -> bool {
        self.request.wants(kind)
    }

    /// A profile of the stage that began at `start` over `tokens` tokens,
    /// on this run's device, with the process's resident memory now.
    pub fn profile(&self, start: Instant, tokens: usize) -> StageProfile {
        StageProfile {
            duration_ns: start.elapsed().as_nanos() as u64,
            device: self.device.clone(),
            batch_size: 1,
            token_count: tokens as u64,
            memory_bytes: resident_bytes(),
            ..Default::default()
        }
    }

    /// Opens a span of `stage`.
    pub fn span(&mut self, stage: Stage, profile: StageProfile) -> String {
        let span = self.builder.span(stage, profile);
        self.last_span = Some(span.clone());
        span
    }

    /// The prompt as given (`text`; or, for a token-id request, its
    /// detokenized text labelled `from = token_ids`), the prompt as the
    /// chat template rendered it, and its token ids (when the backend
    /// knows them): each as requested.
    pub fn prompt(
        &mut self,
        span: &str,
        text: Result<&str, String>,
        rendered: Option<&str>,
        ids: Option<&[u32]>,
    ) {
        if self.wants(K::Text) {
            let (text, l) = match text {
                Ok(t) => (t.to_owned(), role_labels(Role::Prompt, &[])),
                Err(detokenized) => (
                    detokenized,
                    role_labels(Role::Prompt, &[("from", "token_ids")]),
                ),
            };
            self.builder
                .artifact_with(span, K::Text, ArtifactData::Text { text }, None, l);
            if let Some(r) = rendered {
                self.text(span, Role::RenderedPrompt, r.to_owned());
            }
        }
        if let Some(ids) = ids.filter(|_| self.wants(K::Tokens)) {
            self.token_ids(span, Role::Prompt, ids.to_vec());
        }
    }

    /// A text artifact labelled with its `role`.
    fn text(&mut self, span: &str, role: Role, text: String) {
        let l = role_labels(role, &[]);
        self.builder
            .artifact_with(span, K::Text, ArtifactData::Text { text }, None, l);
    }

    /// Token ids labelled with their `role`.
    fn token_ids(&mut self, span: &str, role: Role, ids: Vec<u32>) {
        let l = role_labels(role, &[]);
        self.builder
            .artifact_with(span, K::Tokens, ArtifactData::TokenIds { ids }, None, l);
    }

    /// A tensor artifact: raw when the request asks for raw tensors (kept
    /// beside the trace), a summary otherwise.
    pub fn tensor(
        &mut self,
        span: &str,
        kind: K,
        layer: Option<usize>,
        labels: BTreeMap<String, String>,
        data: TensorData,
    ) {
        let raw = self.request.keeps_raw(kind);
        self.put(span, kind, layer, labels, data, raw);
    }

    /// The observe span: `tensors` copied to the host (activations and
    /// weight snapshots, by kind, layer and labels), each one host↔device
    /// copy where the model's memory is a device's (`on_device`).
    pub fn observe(&mut self, mut p: StageProfile, tensors: Vec<Observed>, on_device: bool) {
        p.output_bytes = tensors.iter().map(|t| t.3.bytes.len() as u64).sum();
        if on_device {
            p.host_device_copies = tensors.len() as u64;
        }
        let span = self.span(Stage::Observe, p);
        for (kind, layer, l, data) in tensors {
            self.tensor(&span, kind, Some(layer), l, data);
        }
    }

    /// The lm_head span: the prompt's logits and log-probabilities where
    /// asked (`rows`, logprobs first; recorded logits first), over every
    /// position or the last (`all_positions`). On a device it counts the
    /// last row's copy for decoding and, when rows were asked, their copy.
    pub fn lm_head(
        &mut self,
        mut p: StageProfile,
        rows: Vec<(K, TensorData)>,
        all_positions: bool,
        on_device: bool,
    ) {
        p.output_bytes = rows.iter().map(|r| r.1.bytes.len() as u64).sum();
        if on_device {
            p.host_device_copies = 1 + u64::from(!rows.is_empty());
        }
        let positions = if all_positions { "all" } else { "last" };
        p.notes.insert("positions".into(), positions.into());
        let span = self.span(Stage::LmHead, p);
        for (kind, data) in rows.into_iter().rev() {
            self.tensor(&span, kind, None, role_labels(Role::Prompt, &[]), data);
        }
    }

    /// A tensor artifact always kept raw: rows the report computes from
    /// (the next-token KL), which a summary could not replace.
    fn raw_tensor(
        &mut self,
        span: &str,
        kind: K,
        labels: BTreeMap<String, String>,
        data: TensorData,
    ) {
        self.put(span, kind, None, labels, data, true);
    }

    fn put(
        &mut self,
        span: &str,
        kind: K,
        layer: Option<usize>,
        labels: BTreeMap<String, String>,
        data: TensorData,
        raw: bool,
    ) {
        let id = self.builder.artifact_with(
            span,
            kind,
            ArtifactData::tensor(data.as_ref(), raw),
            layer,
            labels,
        );
        if raw {
            self.tensors.insert(id, data);
        }
    }

    /// Records that `kind`, asked for, was not produced, and why.
    pub fn missing(&mut self, kind: K, reason: &str) {
        self.builder.missing(kind, reason);
    }

    /// What a generation produced, as requested: the completion's text and
    /// tokens, the chosen tokens' log-probabilities, and the top-k rows of
    /// every distribution sampled from (`role = continuation`, with their
    /// ids as `continuation_top_k`; always raw).
    pub fn generation(&mut self, span: &str, g: &Generation) {
        self.completion(span, &g.text, Some(&g.ids), &g.logprobs);
        if let Some(first) = g.top.first() {
            let k = first.ids.len();
            let values: Vec<f32> = g.top.iter().flat_map(|r| r.logprobs.clone()).collect();
            let ids: Vec<u32> = g.top.iter().flat_map(|r| r.ids.clone()).collect();
            self.continuation_top_k(span, g.top.len(), k, &values, Some(&ids));
        }
    }

    /// A completion's text, its token ids when the backend knows them, and
    /// the chosen tokens' log-probabilities (when any), each as requested.
    pub fn completion(&mut self, span: &str, text: &str, ids: Option<&[u32]>, logprobs: &[f32]) {
        if self.wants(K::Text) {
            self.text(span, Role::Completion, text.to_owned());
        }
        if let Some(ids) = ids.filter(|_| self.wants(K::Tokens)) {
            self.token_ids(span, Role::Completion, ids.to_vec());
        }
        if self.wants(K::Logprobs) && !logprobs.is_empty() {
            let data = TensorData::from_f32(vec![logprobs.len()], logprobs).expect("1-D");
            self.tensor(
                span,
                K::Logprobs,
                None,
                role_labels(Role::Completion, &[("values", "chosen token")]),
                data,
            );
        }
    }

    /// The `[rows, k]` top log-probabilities of the distributions a
    /// generation sampled from (`role = continuation`), and their token ids
    /// (`continuation_top_k`) when the backend knows them; always raw, as
    /// the KL reads them. Nothing unless log-probabilities were requested.
    pub fn continuation_top_k(
        &mut self,
        span: &str,
        rows: usize,
        k: usize,
        values: &[f32],
        ids: Option<&[u32]>,
    ) {
        if !self.wants(K::Logprobs) || rows == 0 || k == 0 {
            return;
        }
        let l = role_labels(Role::Continuation, &[("values", "top_k")]);
        self.top_k_table(span, l, Role::ContinuationTopK, (rows, k), values, ids);
    }

    /// A `[rows, k]` table of top log-probabilities labelled `l` (and `k`),
    /// and their token ids under `ids_role` when given; both always raw.
    fn top_k_table(
        &mut self,
        span: &str,
        mut l: BTreeMap<String, String>,
        ids_role: Role,
        (rows, k): (usize, usize),
        values: &[f32],
        ids: Option<&[u32]>,
    ) {
        let k_label = k.to_string();
        l.insert("k".into(), k_label.clone());
        let data = TensorData::from_f32(vec![rows, k], values).expect("2-D");
        self.raw_tensor(span, K::Logprobs, l, data);
        if let Some(ids) = ids {
            let data = TensorData::from_u32(vec![rows, k], ids).expect("2-D");
            let l = role_labels(ids_role, &[("k", &k_label)]);
            self.raw_tensor(span, K::Tokens, l, data);
        }
    }

    /// A record artifact of `kind` on `span` (a backend's own profile figures).
    pub fn record(&mut self, span: &str, kind: K, value: serde_json::Value) {
        self.builder
            .artifact(span, kind, ArtifactData::Record { value });
    }

    /// Another side's continuation scored after this run's prompt: the
    /// `[positions, k]` log-probabilities (`role = reference_continuation`,
    /// labelled with the reference's trace and digest; always raw) and the
    /// continuation's tokens.
    pub fn reference(&mut self, span: &str, r: &ReferenceContinuation, scores: TensorData) {
        let k = scores.shape.get(1).copied().unwrap_or(0).to_string();
        let mut l = reference_labels(r, "at_reference_top_k");
        l.insert("k".into(), k);
        self.raw_tensor(span, K::Logprobs, l, scores);
        self.token_ids(span, Role::ReferenceContinuation, r.completion.clone());
    }

    /// Another side's continuation scored by a backend that returns its
    /// own top-k at each position instead of scores of the reference's
    /// tokens (an endpoint, through `echo`): the `[rows, k]`
    /// log-probabilities (`role = reference_continuation`, `values =
    /// own_top_k`, labelled with the reference) and their token ids
    /// (`reference_continuation_top_k`), always raw; the KL compares them
    /// with the reference's rows on the tokens both hold.
    pub fn reference_own_top_k(
        &mut self,
        span: &str,
        r: &ReferenceContinuation,
        rows: usize,
        k: usize,
        values: &[f32],
        ids: &[u32],
    ) {
        let l = reference_labels(r, "own_top_k");
        let role = Role::ReferenceContinuationTopK;
        self.top_k_table(span, l, role, (rows, k), values, Some(ids));
        self.token_ids(span, Role::ReferenceContinuation, r.completion.clone());
    }

    /// The intervene span: one record per intervention with what it did
    /// (`effects`, in the same order), and one for the policy when there is
    /// one. With neither, an intervention result asked for is recorded as
    /// missing, with the reason.
    pub fn interventions(
        &mut self,
        interventions: &[Intervention],
        effects: &[Effect],
        policy: Option<(&dyn StepPolicy, &PolicyLog)>,
        (intervene_ns, primitive): (u64, String),
    ) {
        if interventions.is_empty() && policy.is_none() {
            if self.wants(K::InterventionResult) {
                self.builder.missing(
                    K::InterventionResult,
                    "no intervention was given for this run",
                );
            }
            return;
        }
        let seen: usize = effects.iter().map(|e| e.positions.len()).sum();
        let mut p = StageProfile {
            duration_ns: intervene_ns,
            device: self.device.clone(),
            batch_size: 1,
            token_count: seen as u64,
            ..Default::default()
        };
        p.notes.insert(
            "timing".into(),
            "accumulated inside the prefill and decode passes, after each intervened block".into(),
        );
        p.notes.insert("primitive".into(), primitive);
        let span = self.builder.span(Stage::Intervene, p);
        for (iv, effect) in interventions.iter().zip(effects) {
            let value = serde_json::json!({
                "intervention": iv.record(),
                "effect": effect_record(effect),
            });
            self.builder.artifact_with(
                &span,
                K::InterventionResult,
                ArtifactData::Record { value },
                Some(iv.layer),
                labels(&[("mode", &iv.mode.to_string())]),
            );
        }
        if let Some((policy, log)) = policy {
            let who = policy.describe();
            let watches: Vec<serde_json::Value> = policy
                .watches()
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "name": w.name,
                        "layers": w.layers,
                        "direction": w.direction.source,
                        "sha256": w.direction.file_sha256,
                    })
                })
                .collect();
            let value = serde_json::json!({"policy": who, "watches": watches, "log": log});
            self.builder.artifact_with(
                &span,
                K::InterventionResult,
                ArtifactData::Record { value },
                None,
                labels(&[("policy", &who)]),
            );
        }
    }

    /// The run's throughput record (`prefill_tokens_per_s`,
    /// `decode_tokens_per_s`, resident memory), on the latest span, when
    /// the request asks for a profile.
    pub fn run_profile(&mut self, prefill_tokens: usize, prefill_ns: u64, g: Option<&Generation>) {
        let Some(span) = self.last_span.clone().filter(|_| self.wants(K::Profile)) else {
            return;
        };
        let prompt_ns = prefill_ns.max(1);
        let mut value = serde_json::json!({
            "prefill_tokens": prefill_tokens,
            "prefill_tokens_per_s": prefill_tokens as f64 / (prompt_ns as f64 / 1e9),
            "resident_bytes": resident_bytes(),
        });
        if let Some(g) = g {
            value["decode_steps"] = g.decode_steps.into();
            if g.decode_ns > 0 {
                value["decode_tokens_per_s"] =
                    (g.decode_steps as f64 / (g.decode_ns as f64 / 1e9)).into();
            }
        }
        self.builder
            .artifact(&span, K::Profile, ArtifactData::Record { value });
    }

    /// The trace, checked, with its raw tensors.
    pub fn finish(self, generation: Option<Generation>) -> Result<TraceOutput, ExecutorError> {
        Ok(TraceOutput {
            trace: self.builder.finish()?,
            tensors: self.tensors,
            generation,
        })
    }
}

/// The tokenize span: the prompt's token ids (as given, or the text as
/// `options.prompt` forms it with the model's tokenizer and chat
/// template), with the prompt artifacts. What every backend that runs a
/// model file does first, the same way, so the same file gives the same
/// ids on each. An empty prompt is refused.
pub(crate) fn tokenize_prompt(
    rec: &mut Recorder,
    assets: &ModelAssets,
    request: &TraceRequest,
    options: &RunOptions,
) -> Result<Vec<u32>, ExecutorError> {
    let start = Instant::now();
    let (ids, rendered) = match (&request.token_ids, &request.text) {
        (Some(ids), _) => (ids.clone(), None),
        (None, Some(text)) => match &options.prompt {
            PromptForm::Raw => (assets.encode_raw(text)?, None),
            PromptForm::Chat { system } => {
                let rendered = assets.render_chat(text, system.as_deref())?;
                (assets.encode(&rendered)?, Some(rendered))
            }
        },
        (None, None) => {
            return Err(ExecutorError::Request(
                "the request has neither text nor token ids".into(),
            ));
        }
    };
    if ids.is_empty() {
        return Err(ModelError::EmptyInput.into());
    }
    let mut p = rec.profile(start, ids.len());
    p.output_bytes = (ids.len() * 4) as u64;
    let span = rec.span(Stage::Tokenize, p);
    // The prompt as given, or (for token ids) detokenized, which only a
    // request for text pays for.
    let text = match &request.text {
        Some(text) => Ok(text.as_str()),
        None if rec.wants(K::Text) => Err(assets.decode(&ids)?),
        None => Err(String::new()),
    };
    rec.prompt(&span, text, rendered.as_deref(), Some(&ids));
    Ok(ids)
}

/// Checks that a prompt of `n` tokens fits the model's context, and picks
/// the other side's continuation to score when the request asks for
/// log-probabilities: checked against the vocabulary and the context, with
/// its support rows and their width. A continuation this model cannot
/// score fails its own trace here, before any pass.
pub(crate) fn fits_context<'o>(
    request: &TraceRequest,
    options: &'o RunOptions,
    n: usize,
    (vocab, context): (usize, Option<usize>),
) -> Result<Option<(&'o ReferenceContinuation, usize, usize)>, ExecutorError> {
    if let Some(limit) = context
        && n > limit
    {
        return Err(ModelError::ContextExceeded { needed: n, limit }.into());
    }
    let Some(r) = options
        .reference
        .as_ref()
        .filter(|_| request.wants(K::Logprobs))
    else {
        return Ok(None);
    };
    let (rows, k) = r.check(vocab)?;
    let needed = n + rows - 1;
    if let Some(limit) = context
        && needed > limit
    {
        return Err(ExecutorError::Request(format!(
            "reference continuation of `{}`: the prompt and continuation are {needed} tokens, over the model's context of {limit}",
            r.trace_id
        )));
    }
    Ok(Some((r, rows, k)))
}

/// The decode span's notes of a generation: why it stopped and how it
/// sampled.
pub(crate) fn note_generation(p: &mut StageProfile, g: &Generation, options: &GenerateOptions) {
    p.notes.insert(
        "stop".into(),
        serde_json::to_string(&g.stop).expect("serializes"),
    );
    p.notes.insert(
        "sampling".into(),
        match &options.sampling {
            Some(s) => format!(
                "temperature {} top_p {} top_k {:?} seed {}",
                s.temperature, s.top_p, s.top_k, s.seed
            ),
            None => "greedy".into(),
        },
    );
}

/// Row-wise log-probabilities of f32 logits (over the last dimension),
/// computed on the host across the kernel threads.
pub(crate) fn log_softmax_data(logits: &TensorData) -> TensorData {
    let width = *logits
        .shape
        .last()
        .expect("logits have a vocabulary dimension");
    let x = f32_values(logits);
    TensorData::f32_filled(logits.shape.clone(), |out| {
        vauban_kernels::softmax::log_softmax_rows(&x, width, out)
    })
}

/// The values of f32 trace data: borrowed where the bytes are aligned (a
/// large allocation always is), else copied.
pub(crate) fn f32_values(data: &TensorData) -> std::borrow::Cow<'_, [f32]> {
    debug_assert_eq!(data.dtype, crate::trace::DType::F32);
    match bytemuck::try_cast_slice::<u8, f32>(&data.bytes) {
        Ok(v) if cfg!(target_endian = "little") => std::borrow::Cow::Borrowed(v),
        _ => std::borrow::Cow::Owned(data.as_ref().to_f32_vec()),
    }
}

/// The log-probabilities `[rows, k]` of each row's `support` ids, from
/// logits `[rows, vocab]` (a reference continuation's scores).
pub(crate) fn support_scores(logits: &TensorData, support: &[Vec<u32>]) -> TensorData {
    let lp = log_softmax_data(logits);
    let width = *lp.shape.last().expect("logits have a vocabulary dimension");
    let values = f32_values(&lp);
    let k = support.first().map_or(0, Vec::len);
    let scores: Vec<f32> = values
        .chunks_exact(width)
        .zip(support)
        .flat_map(|(row, ids)| ids.iter().map(|&i| row[i as usize]))
        .collect();
    TensorData::from_f32(vec![support.len(), k], &scores).expect("rows × k")
}

/// The labels of another side's continuation scored here: its role, what
/// the values are, and the reference's trace and digest.
fn reference_labels(r: &ReferenceContinuation, values: &str) -> BTreeMap<String, String> {
    role_labels(
        Role::ReferenceContinuation,
        &[
            ("values", values),
            ("reference_trace", &r.trace_id),
            ("reference_sha256", &r.sha256),
        ],
    )
}

/// Checks a request against the model before any work: layers in range,
/// activations and weight snapshots with layers to take them at, and
/// something to run.
pub fn check_request(
    layers: usize,
    request: &TraceRequest,
    interventions: &[Intervention],
) -> Result<(), ExecutorError> {
    let in_range = |l: &[usize]| match l.iter().find(|&&x| x >= layers) {
        Some(&layer) => Err(crate::model::ModelError::LayerOutOfRange {
            layer,
            count: layers,
        }),
        None => Ok(()),
    };
    in_range(&request.layers)?;
    if request.wants(K::Activation) && request.layers.is_empty() {
        return Err(ExecutorError::Request(
            "activations were requested with no layers; pass --layers".into(),
        ));
    }
    if request.wants(K::WeightSnapshot) && request.layers.is_empty() {
        return Err(ExecutorError::Request(
            "weight snapshots were requested with no layers; pass --layers".into(),
        ));
    }
    for iv in interventions {
        in_range(&[iv.layer])?;
    }
    if request.text.is_none() && request.token_ids.is_none() {
        return Err(ExecutorError::Request(
            "the request has neither text nor token ids".into(),
        ));
    }
    Ok(())
}

/// The effect part of an intervention record.
fn effect_record(e: &Effect) -> serde_json::Value {
    let applied = e.applied.iter().filter(|a| **a).count();
    let first: Vec<f32> = e
        .projections
        .iter()
        .map(|p| p.first().copied().unwrap_or(f32::NAN))
        .collect();
    let finite: Vec<f32> = first.iter().copied().filter(|v| v.is_finite()).collect();
    let mean = match finite.len() {
        0 => None,
        n => Some(finite.iter().map(|&v| v as f64).sum::<f64>() / n as f64),
    };
    serde_json::json!({
        "tokens_seen": e.positions.len(),
        "tokens_applied": applied,
        "prefill_tokens": e.prefill_tokens,
        "decode_tokens": e.positions.len() - e.prefill_tokens,
        "delta_norm": e.delta_sq.sqrt(),
        "projection_before": {
            "mean": mean,
            "min": finite.iter().copied().reduce(f32::min),
            "max": finite.iter().copied().reduce(f32::max),
        },
        "positions": e.positions,
        "projections_before": e.projections,
        "applied": e.applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{StopReason, TopLogprobs};
    use crate::trace::{DeviceKind, SupportLevel};

    fn request(observe: &[K], raw: bool) -> TraceRequest {
        TraceRequest {
            prompt_id: Some("q1".into()),
            category: None,
            expected_behavior: None,
            text: Some("hi".into()),
            token_ids: None,
            observe: observe.to_vec(),
            layers: vec![],
            raw_tensors: raw,
            raw_kinds: Vec::new(),
        }
    }

    fn recorder(req: &TraceRequest) -> Recorder {
        let caps = Capabilities::uniform("test", &[DeviceKind::Cpu], SupportLevel::Full);
        Recorder::new(
            "t1".into(),
            ModelRef {
                name: "m".into(),
                ..Default::default()
            },
            caps,
            "cpu".into(),
            req,
        )
    }

    fn generation() -> Generation {
        Generation {
            ids: vec![5, 6],
            text: "ab".into(),
            stop: StopReason::Eos { id: 2 },
            logprobs: vec![-0.1, -0.2],
            top: (0..3)
                .map(|i| TopLogprobs {
                    ids: vec![i, i + 1],
                    logprobs: vec![-0.1, -2.5],
                })
                .collect(),
            prefill_ns: 1,
            decode_ns: 2,
            decode_steps: 1,
        }
    }

    #[test]
    fn a_generation_keeps_its_kl_rows_raw_whatever_the_request_says() {
        let req = request(
            &[K::Text, K::Tokens, K::Logits, K::Logprobs, K::Profile],
            false,
        );
        let mut rec = recorder(&req);
        let span = rec.span(Stage::Tokenize, rec.profile(Instant::now(), 1));
        rec.prompt(&span, Ok("hi"), Some("<user>hi"), Some(&[1, 2]));
        let span = rec.span(Stage::Decode, rec.profile(Instant::now(), 1));
        let g = generation();
        rec.generation(&span, &g);
        rec.missing(K::Logits, "this test records no logits");
        rec.run_profile(2, 10, Some(&g));
        let out = rec.finish(Some(g)).unwrap();
        let roles: Vec<(K, Option<&str>)> = out
            .trace
            .artifacts
            .iter()
            .map(|a| (a.kind, a.role_label()))
            .collect();
        // (The labels as the trace stores them.)
        for want in [
            (K::Text, Some("prompt")),
            (K::Text, Some("rendered_prompt")),
            (K::Tokens, Some("prompt")),
            (K::Text, Some("completion")),
            (K::Tokens, Some("completion")),
            (K::Logprobs, Some("completion")),
            (K::Logprobs, Some("continuation")),
            (K::Tokens, Some("continuation_top_k")),
        ] {
            assert!(roles.contains(&want), "{want:?} missing from {roles:?}");
        }
        // Only the KL rows are kept raw in a summary-only request, as [3, 2].
        assert_eq!(out.tensors.len(), 2, "{:?}", out.tensors.keys());
        for t in out.tensors.values() {
            assert_eq!(t.shape, vec![3, 2]);
        }
        let profile = out.trace.artifacts_of(K::Profile).next().unwrap();
        assert_eq!(
            profile.producer, span,
            "the profile hangs from the last span"
        );
    }

    #[test]
    fn an_intervention_result_asked_for_and_not_made_is_missing_with_a_reason() {
        let req = request(&[K::Text, K::InterventionResult], true);
        let mut rec = recorder(&req);
        let span = rec.span(Stage::Tokenize, rec.profile(Instant::now(), 1));
        rec.prompt(&span, Err("detokenized".into()), None, Some(&[1]));
        rec.interventions(&[], &[], None, (0, String::new()));
        let out = rec.finish(None).unwrap();
        let missing = &out.trace.missing;
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].kind, K::InterventionResult);
        assert!(missing[0].reason.contains("no intervention"), "{missing:?}");
        let prompt = out.trace.artifacts_of(K::Text).next().unwrap();
        assert_eq!(
            prompt.labels.get("from").map(String::as_str),
            Some("token_ids")
        );
    }

    #[test]
    fn requests_the_model_cannot_serve_are_refused_before_any_work() {
        let mut req = request(&[K::Activation], false);
        let e = check_request(4, &req, &[]).unwrap_err().to_string();
        assert!(e.contains("pass --layers"), "{e}");
        req.layers = vec![4];
        let e = check_request(4, &req, &[]).unwrap_err().to_string();
        assert!(e.contains("layer 4 is out of range"), "{e}");
        req.layers = vec![3];
        req.text = None;
        let e = check_request(4, &req, &[]).unwrap_err().to_string();
        assert!(e.contains("neither text nor token ids"), "{e}");
    }
}
