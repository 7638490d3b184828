//! One traced run on candle: tokenize, prepare, prefill (with hooks),
//! intervene, observe, lm_head, and optionally decode, each a span with a
//! profile, each requested artifact present or accounted for.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use candle_core::{DType, Tensor};

use super::session::CandleSession;
use super::{CandleExecutor, resident_bytes};
use crate::executor::Effect;
use crate::executor::generate::generate;
use crate::executor::{ExecutorError, InferenceSession, PromptForm, RunOptions, TraceOutput};
use crate::intervene::policy::StepPolicy;
use crate::model::ModelError;
use crate::model::llama::{LogitsAt, Matrix, log_softmax};
use crate::trace::{
    ArtifactData, ArtifactKind as K, Stage, StageProfile, TensorData, TraceBuilder, TraceRequest,
};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A tensor copied to the host as f32 trace data.
fn to_data(t: &Tensor) -> Result<TensorData, ExecutorError> {
    let shape = t.dims().to_vec();
    let values = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(ModelError::from)?;
    Ok(TensorData::from_f32(shape, &values).expect("the shape is the tensor's own"))
}

/// Checks the request against the model before any work.
fn check(
    exec: &CandleExecutor,
    request: &TraceRequest,
    options: &RunOptions,
) -> Result<(), ExecutorError> {
    exec.model.model.check_layers(&request.layers)?;
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
    for iv in &options.interventions {
        exec.model.model.check_layers(&[iv.layer])?;
    }
    if request.text.is_none() && request.token_ids.is_none() {
        return Err(ExecutorError::Request(
            "the request has neither text nor token ids".into(),
        ));
    }
    Ok(())
}

pub(super) fn run(
    exec: &CandleExecutor,
    request: &TraceRequest,
    options: &RunOptions,
    policy: Option<&mut dyn StepPolicy>,
) -> Result<TraceOutput, ExecutorError> {
    check(exec, request, options)?;
    let device = exec.device_name.clone();
    let profile = |start: Instant, tokens: usize| StageProfile {
        duration_ns: start.elapsed().as_nanos() as u64,
        device: device.clone(),
        batch_size: 1,
        token_count: tokens as u64,
        memory_bytes: resident_bytes(),
        ..Default::default()
    };
    let mut b = TraceBuilder::new(
        options.trace_id.clone(),
        exec.model_ref(),
        exec.capabilities(),
        device.clone(),
        request.clone(),
    );
    let mut tensors: HashMap<String, TensorData> = HashMap::new();
    let raw = request.raw_tensors;

    // tokenize
    let start = Instant::now();
    let (ids, rendered) = match (&request.token_ids, &request.text) {
        (Some(ids), _) => (ids.clone(), None),
        (None, Some(text)) => {
            let rendered = exec.render(text, &options.prompt)?;
            let ids = match options.prompt {
                PromptForm::Raw => exec.model.encode_raw(text)?,
                PromptForm::Chat { .. } => exec.model.encode(&rendered)?,
            };
            (ids, Some(rendered))
        }
        (None, None) => unreachable!("checked above"),
    };
    if ids.is_empty() {
        return Err(ModelError::EmptyInput.into());
    }
    let mut p = profile(start, ids.len());
    p.output_bytes = (ids.len() * 4) as u64;
    let span = b.span(Stage::Tokenize, p);
    if request.wants(K::Text) {
        match &request.text {
            Some(text) => {
                b.artifact_with(
                    &span,
                    K::Text,
                    ArtifactData::Text { text: text.clone() },
                    None,
                    labels(&[("role", "prompt")]),
                );
            }
            None => {
                let text = exec.detokenize(&ids)?;
                b.artifact_with(
                    &span,
                    K::Text,
                    ArtifactData::Text { text },
                    None,
                    labels(&[("role", "prompt"), ("from", "token_ids")]),
                );
            }
        }
        if let (Some(r), PromptForm::Chat { .. }) = (&rendered, &options.prompt) {
            b.artifact_with(
                &span,
                K::Text,
                ArtifactData::Text { text: r.clone() },
                None,
                labels(&[("role", "rendered_prompt")]),
            );
        }
    }
    if request.wants(K::Tokens) {
        b.artifact_with(
            &span,
            K::Tokens,
            ArtifactData::TokenIds { ids: ids.clone() },
            None,
            labels(&[("role", "prompt")]),
        );
    }

    // prepare_batch: the session, its cache and hook.
    let start = Instant::now();
    let mut session: CandleSession<'_> = exec.session(&options.interventions);
    if let Some(p) = policy {
        for w in p.watches() {
            exec.model.model.check_layers(&w.layers)?;
        }
        session.set_policy(p);
    }
    let observe = request.wants(K::Activation);
    if observe {
        session.hook.observe = request.layers.clone();
        session.hook.block_outputs = options.block_outputs;
    }
    let mut p = profile(start, ids.len());
    p.input_bytes = (ids.len() * 4) as u64;
    p.notes.insert(
        "kv_cache".into(),
        "per-layer key/value tensors, grown by concatenation".into(),
    );
    b.span(Stage::PrepareBatch, p);

    // prefill (the forward pass over the prompt, hooks included)
    let want_all = request.wants(K::Logits) || request.wants(K::Logprobs);
    let at = if want_all {
        LogitsAt::All
    } else {
        LogitsAt::Last
    };
    let start = Instant::now();
    let logits = session.prefill_tensor(&ids, at)?;
    let total_ns = start.elapsed().as_nanos() as u64;
    let timing = session.timing;
    let mut p = profile(start, ids.len());
    p.duration_ns = total_ns.saturating_sub(timing.hook_ns + timing.lm_head_ns);
    p.memory_bytes = resident_bytes();
    p.notes.insert(
        "kernel".into(),
        match exec.model.model.is_quantized() {
            true => "candle quantized matmul (weights as stored)".into(),
            false => "candle f32 matmul".into(),
        },
    );
    p.notes.insert(
        "excludes".into(),
        "hook (intervene, observe) and lm_head time, recorded in their own spans".into(),
    );
    p.notes
        .insert("kv_cache_bytes".into(), session.cache_bytes().to_string());
    b.span(Stage::Prefill, p);

    // observe: activations copied to the host and summarised.
    let kept = std::mem::take(&mut session.hook.kept);
    let observed_ns = session
        .timing
        .hook_ns
        .saturating_sub(session.hook.intervene_ns);
    if observe || request.wants(K::WeightSnapshot) {
        let start = Instant::now();
        let mut pending: Vec<(K, usize, BTreeMap<String, String>, TensorData)> = Vec::new();
        for k in &kept {
            let data = to_data(&k.tensor)?;
            pending.push((
                K::Activation,
                k.layer,
                labels(&[("site", k.site.as_str())]),
                data,
            ));
        }
        if request.wants(K::WeightSnapshot) {
            for &layer in &request.layers {
                for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                    let w = exec.model.model.weight(layer, m)?;
                    pending.push((
                        K::WeightSnapshot,
                        layer,
                        labels(&[("matrix", m.gguf_stem()), ("dequantized", "true")]),
                        to_data(&w)?,
                    ));
                }
            }
        }
        let bytes: usize = pending.iter().map(|x| x.3.bytes.len()).sum();
        let mut p = profile(start, ids.len());
        p.duration_ns += observed_ns;
        p.output_bytes = bytes as u64;
        p.host_device_copies = pending.len() as u64;
        let span = b.span(Stage::Observe, p);
        for (kind, layer, l, data) in pending {
            let id = b.artifact_with(
                &span,
                kind,
                ArtifactData::tensor(data.as_ref(), raw),
                Some(layer),
                l,
            );
            if raw {
                tensors.insert(id, data);
            }
        }
    }

    // lm_head: logits and log-probabilities at every prompt position.
    let start = Instant::now();
    let mut lm: Vec<(K, TensorData)> = Vec::new();
    if request.wants(K::Logits) {
        lm.push((K::Logits, to_data(&logits)?));
    }
    if request.wants(K::Logprobs) {
        lm.push((K::Logprobs, to_data(&log_softmax(&logits)?)?));
    }
    let prefill_last: Vec<f32> = {
        let n = logits.dim(0).map_err(ModelError::from)?;
        logits
            .get(n - 1)
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(ModelError::from)?
    };
    let mut p = profile(start, ids.len());
    p.duration_ns += timing.lm_head_ns;
    p.output_bytes = lm.iter().map(|x| x.1.bytes.len() as u64).sum();
    p.host_device_copies = 1 + lm.len() as u64;
    p.notes.insert(
        "positions".into(),
        match at {
            LogitsAt::All => "all",
            LogitsAt::Last => "last",
        }
        .into(),
    );
    let span = b.span(Stage::LmHead, p);
    let mut last_span = span.clone();
    for (kind, data) in lm {
        let id = b.artifact_with(
            &span,
            kind,
            ArtifactData::tensor(data.as_ref(), raw),
            None,
            labels(&[("role", "prompt")]),
        );
        if raw {
            tensors.insert(id, data);
        }
    }

    // decode
    let mut generation = None;
    if options.generate.max_tokens > 0 {
        let start = Instant::now();
        let g = generate(
            &mut session,
            &ids,
            Some(prefill_last),
            &options.generate,
            &|id| exec.is_eos(id),
            &|ids| exec.detokenize(ids),
            &mut |_| {},
        )?;
        let mut p = profile(start, g.decode_steps);
        p.duration_ns = g.decode_ns;
        p.notes.insert(
            "stop".into(),
            serde_json::to_string(&g.stop).expect("serializes"),
        );
        p.notes.insert(
            "sampling".into(),
            match &options.generate.sampling {
                Some(s) => format!(
                    "temperature {} top_p {} top_k {:?} seed {}",
                    s.temperature, s.top_p, s.top_k, s.seed
                ),
                None => "greedy".into(),
            },
        );
        p.notes
            .insert("kv_cache_bytes".into(), session.cache_bytes().to_string());
        let span = b.span(Stage::Decode, p);
        last_span = span.clone();
        if request.wants(K::Text) {
            b.artifact_with(
                &span,
                K::Text,
                ArtifactData::Text {
                    text: g.text.clone(),
                },
                None,
                labels(&[("role", "completion")]),
            );
        }
        if request.wants(K::Tokens) {
            b.artifact_with(
                &span,
                K::Tokens,
                ArtifactData::TokenIds { ids: g.ids.clone() },
                None,
                labels(&[("role", "completion")]),
            );
        }
        if request.wants(K::Logprobs) && !g.logprobs.is_empty() {
            let data = TensorData::from_f32(vec![g.logprobs.len()], &g.logprobs).expect("1-D");
            let id = b.artifact_with(
                &span,
                K::Logprobs,
                ArtifactData::tensor(data.as_ref(), raw),
                None,
                labels(&[("role", "completion"), ("values", "chosen token")]),
            );
            if raw {
                tensors.insert(id, data);
            }
        }
        if request.wants(K::Logprobs) && !g.top.is_empty() {
            // Always raw: the next-token KL is computed from these rows.
            let k = g.top[0].ids.len();
            let values: Vec<f32> = g.top.iter().flat_map(|r| r.logprobs.clone()).collect();
            let data = TensorData::from_f32(vec![g.top.len(), k], &values).expect("2-D");
            let id = b.artifact_with(
                &span,
                K::Logprobs,
                ArtifactData::tensor(data.as_ref(), true),
                None,
                labels(&[
                    ("role", "continuation"),
                    ("values", "top_k"),
                    ("k", &k.to_string()),
                ]),
            );
            tensors.insert(id, data);
            let ids: Vec<u32> = g.top.iter().flat_map(|r| r.ids.clone()).collect();
            let data = TensorData::from_u32(vec![g.top.len(), k], &ids).expect("2-D");
            let id = b.artifact_with(
                &span,
                K::Tokens,
                ArtifactData::tensor(data.as_ref(), true),
                None,
                labels(&[("role", "continuation_top_k"), ("k", &k.to_string())]),
            );
            tensors.insert(id, data);
        }
        generation = Some(g);
    }

    // forward: another side's continuation scored after this run's own prompt.
    if let Some(r) = options
        .reference
        .as_ref()
        .filter(|_| request.wants(K::Logprobs))
    {
        let start = Instant::now();
        let data = score_reference(exec, &ids, options, r)?;
        let mut p = profile(start, ids.len() + r.completion.len());
        p.output_bytes = data.bytes.len() as u64;
        p.notes.insert(
            "teacher_forced".into(),
            format!(
                "the continuation of trace `{}` after this run's prompt; log-probabilities of its top tokens",
                r.trace_id
            ),
        );
        let span = b.span(Stage::Forward, p);
        last_span = span.clone();
        let k = data.shape[1].to_string();
        let id = b.artifact_with(
            &span,
            K::Logprobs,
            ArtifactData::tensor(data.as_ref(), true),
            None,
            labels(&[
                ("role", "reference_continuation"),
                ("values", "at_reference_top_k"),
                ("k", &k),
                ("reference_trace", &r.trace_id),
                ("reference_sha256", &r.sha256),
            ]),
        );
        tensors.insert(id, data);
        b.artifact_with(
            &span,
            K::Tokens,
            ArtifactData::TokenIds {
                ids: r.completion.clone(),
            },
            None,
            labels(&[("role", "reference_continuation")]),
        );
    }

    // intervene: what each intervention (and the policy) did over prefill and decode.
    let policy_record = session.policy_log().cloned().map(|log| {
        let who = session.hook.policy.as_ref().map(|p| p.describe()).unwrap_or_default();
        let watches: Vec<serde_json::Value> = session
            .hook
            .policy
            .as_ref()
            .map(|p| {
                p.watches()
                    .iter()
                    .map(|w| serde_json::json!({"name": w.name, "layers": w.layers, "direction": w.direction.source, "sha256": w.direction.file_sha256}))
                    .collect()
            })
            .unwrap_or_default();
        (who, serde_json::json!({"policy": session.hook.policy.as_ref().map(|p| p.describe()), "watches": watches, "log": log}))
    });
    if !options.interventions.is_empty() || policy_record.is_some() {
        let seen: usize = session.effects().iter().map(|e| e.positions.len()).sum();
        let mut p = StageProfile {
            duration_ns: session.hook.intervene_ns,
            device: device.clone(),
            batch_size: 1,
            token_count: seen as u64,
            ..Default::default()
        };
        p.notes.insert(
            "timing".into(),
            "accumulated inside the prefill and decode passes, after each intervened block".into(),
        );
        let span = b.span(Stage::Intervene, p);
        for (iv, effect) in options.interventions.iter().zip(session.effects()) {
            let value = serde_json::json!({
                "intervention": iv.record(),
                "effect": effect_record(effect),
            });
            b.artifact_with(
                &span,
                K::InterventionResult,
                ArtifactData::Record { value },
                Some(iv.layer),
                labels(&[("mode", &iv.mode.to_string())]),
            );
        }
        if let Some((who, value)) = policy_record {
            b.artifact_with(
                &span,
                K::InterventionResult,
                ArtifactData::Record { value },
                None,
                labels(&[("policy", &who)]),
            );
        }
    } else if request.wants(K::InterventionResult) {
        b.missing(
            K::InterventionResult,
            "no intervention was given for this run",
        );
    }

    if request.wants(K::Profile) {
        let prompt_ns: u64 = total_ns.max(1);
        let mut value = serde_json::json!({
            "prefill_tokens": ids.len(),
            "prefill_tokens_per_s": ids.len() as f64 / (prompt_ns as f64 / 1e9),
            "resident_bytes": resident_bytes(),
        });
        if let Some(g) = &generation {
            value["decode_steps"] = g.decode_steps.into();
            if g.decode_ns > 0 {
                value["decode_tokens_per_s"] =
                    (g.decode_steps as f64 / (g.decode_ns as f64 / 1e9)).into();
            }
        }
        b.artifact(&last_span, K::Profile, ArtifactData::Record { value });
    }
    let trace = b.finish()?;
    Ok(TraceOutput {
        trace,
        tensors,
        generation,
    })
}

/// Log-probabilities `[positions, k]` of `r.support` at each position of
/// `r.completion` teacher-forced after `prompt`, from one forward pass of a
/// fresh session with this run's interventions (a policy, which decides
/// step by step, does not take part).
fn score_reference(
    exec: &CandleExecutor,
    prompt: &[u32],
    options: &RunOptions,
    r: &crate::executor::ReferenceContinuation,
) -> Result<TensorData, ExecutorError> {
    let rows = r.support.len();
    let k = r.support.first().map_or(0, Vec::len);
    if rows == 0 || rows > r.completion.len() + 1 || r.support.iter().any(|s| s.len() != k) {
        return Err(ExecutorError::Request(format!(
            "reference continuation of `{}`: {rows} support rows for {} tokens (want 1 to {}, each of the same width)",
            r.trace_id,
            r.completion.len(),
            r.completion.len() + 1
        )));
    }
    let vocab = exec.dims().vocab;
    if let Some(bad) = r.support.iter().flatten().find(|&&id| id as usize >= vocab) {
        return Err(ExecutorError::Request(format!(
            "reference continuation of `{}`: token id {bad} is outside this model's vocabulary of {vocab}",
            r.trace_id
        )));
    }
    let mut ids = prompt.to_vec();
    ids.extend(&r.completion[..rows - 1]);
    let mut session = exec.session(&options.interventions);
    if let Some(limit) = session.capacity()
        && ids.len() > limit
    {
        return Err(ExecutorError::Request(format!(
            "reference continuation of `{}`: the prompt and continuation are {} tokens, over the model's context of {limit}",
            r.trace_id,
            ids.len()
        )));
    }
    let logits = session.prefill_tensor(&ids, LogitsAt::All)?;
    let rows_lp: Vec<Vec<f32>> = log_softmax(&logits)?
        .narrow(0, prompt.len() - 1, rows)
        .and_then(|t| t.to_vec2::<f32>())
        .map_err(ModelError::from)?;
    let values: Vec<f32> = rows_lp
        .iter()
        .zip(&r.support)
        .flat_map(|(row, ids)| ids.iter().map(|&i| row[i as usize]))
        .collect();
    Ok(TensorData::from_f32(vec![rows, k], &values).expect("rows × k"))
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
