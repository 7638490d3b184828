//! One traced run on candle: tokenize, prepare, prefill (with hooks),
//! observe, lm_head, and optionally decode, forward (the reference
//! continuation) and intervene, each a span with a profile. What is
//! recorded, and how, is the shared [`Recorder`]'s; this file holds what
//! is candle's: the session, the hooks, and tensors copied to the host.

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::{DType, Tensor};

use super::CandleExecutor;
use super::model::llama::{LogitsAt, log_softmax};
use super::session::CandleSession;
use crate::executor::generate::generate;
use crate::executor::recorder::{Recorder, check_request, labels, resident_bytes};
use crate::executor::{
    Executor, ExecutorError, InferenceSession, PromptForm, ReferenceContinuation, RunOptions,
    TraceOutput,
};
use crate::intervene::policy::StepPolicy;
use crate::model::{Matrix, ModelError};
use crate::trace::{ArtifactKind as K, Stage, TensorData, TraceRequest};

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

pub(super) fn run(
    exec: &CandleExecutor,
    request: &TraceRequest,
    options: &RunOptions,
    policy: Option<&mut dyn StepPolicy>,
) -> Result<TraceOutput, ExecutorError> {
    check_request(exec.dims().layers, request, &options.interventions)?;
    let mut rec = Recorder::new(
        options.trace_id.clone(),
        exec.model_ref(),
        exec.capabilities(),
        exec.device_name.clone(),
        request,
    );

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
        (None, None) => unreachable!("check_request refuses it"),
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
        None if rec.wants(K::Text) => Err(exec.detokenize(&ids)?),
        None => Err(String::new()),
    };
    let rendered = rendered
        .as_deref()
        .filter(|_| matches!(options.prompt, PromptForm::Chat { .. }));
    rec.prompt(&span, text, rendered, Some(&ids));

    // prepare_batch: the session, its cache and hook.
    let start = Instant::now();
    let mut session: CandleSession<'_> = exec.session(&options.interventions);
    if let Some(p) = policy {
        for w in p.watches() {
            exec.check_layers(&w.layers)?;
        }
        session.set_policy(p);
    }
    let observe = request.wants(K::Activation);
    if observe {
        session.hook.observe = request.layers.clone();
        session.hook.block_outputs = options.block_outputs;
    }
    let mut p = rec.profile(start, ids.len());
    p.input_bytes = (ids.len() * 4) as u64;
    p.notes.insert(
        "kv_cache".into(),
        "per-layer key/value buffers written in place, capacity doubled when full".into(),
    );
    rec.span(Stage::PrepareBatch, p);

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
    let mut p = rec.profile(start, ids.len());
    p.duration_ns = total_ns.saturating_sub(timing.hook_ns + timing.lm_head_ns);
    p.memory_bytes = resident_bytes();
    p.notes.insert("kernel".into(), exec.model.model.kernel());
    p.notes.insert(
        "excludes".into(),
        "hook (intervene, observe) and lm_head time, recorded in their own spans".into(),
    );
    p.notes
        .insert("kv_cache_bytes".into(), session.cache_bytes().to_string());
    rec.span(Stage::Prefill, p);

    // observe: activations (and weight snapshots) copied to the host.
    let kept = std::mem::take(&mut session.hook.kept);
    let observed_ns = session
        .timing
        .hook_ns
        .saturating_sub(session.hook.intervene_ns);
    if observe || request.wants(K::WeightSnapshot) {
        let start = Instant::now();
        let mut pending: Vec<(K, usize, BTreeMap<String, String>, TensorData)> = Vec::new();
        for k in &kept {
            let l = labels(&[("site", k.site.as_str())]);
            pending.push((K::Activation, k.layer, l, to_data(&k.tensor)?));
        }
        if request.wants(K::WeightSnapshot) {
            for &layer in &request.layers {
                for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                    let w = exec.model.model.weight(layer, m)?;
                    let l = labels(&[("matrix", m.gguf_stem()), ("dequantized", "true")]);
                    pending.push((K::WeightSnapshot, layer, l, to_data(&w)?));
                }
            }
        }
        let mut p = rec.profile(start, ids.len());
        p.duration_ns += observed_ns;
        p.output_bytes = pending.iter().map(|x| x.3.bytes.len() as u64).sum();
        p.host_device_copies = pending.len() as u64;
        let span = rec.span(Stage::Observe, p);
        for (kind, layer, l, data) in pending {
            rec.tensor(&span, kind, Some(layer), l, data);
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
    let mut p = rec.profile(start, ids.len());
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
    let span = rec.span(Stage::LmHead, p);
    for (kind, data) in lm {
        rec.tensor(&span, kind, None, labels(&[("role", "prompt")]), data);
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
        let mut p = rec.profile(start, g.decode_steps);
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
        let span = rec.span(Stage::Decode, p);
        rec.generation(&span, &g);
        generation = Some(g);
    }

    // forward: another side's continuation scored after this run's own prompt.
    if let Some(r) = options
        .reference
        .as_ref()
        .filter(|_| request.wants(K::Logprobs))
    {
        let start = Instant::now();
        let scores = score_reference(exec, &ids, options, r)?;
        let mut p = rec.profile(start, ids.len() + r.completion.len());
        p.output_bytes = scores.bytes.len() as u64;
        p.notes.insert(
            "teacher_forced".into(),
            format!(
                "the continuation of trace `{}` after this run's prompt; log-probabilities of its top tokens",
                r.trace_id
            ),
        );
        let span = rec.span(Stage::Forward, p);
        rec.reference(&span, r, scores);
    }

    // intervene: what each intervention (and the policy) did over prefill and decode.
    let policy = session
        .hook
        .policy
        .as_deref()
        .map(|p| (p as &dyn StepPolicy, &session.hook.policy_log));
    rec.interventions(
        &options.interventions,
        session.effects(),
        policy,
        session.hook.intervene_ns,
    );
    rec.run_profile(ids.len(), total_ns, generation.as_ref());
    rec.finish(generation)
}

/// Log-probabilities `[positions, k]` of `r.support` at each position of
/// `r.completion` teacher-forced after `prompt`, from one forward pass of a
/// fresh session with this run's interventions (a policy, which decides
/// step by step, does not take part).
fn score_reference(
    exec: &CandleExecutor,
    prompt: &[u32],
    options: &RunOptions,
    r: &ReferenceContinuation,
) -> Result<TensorData, ExecutorError> {
    let (rows, k) = r.check(exec.dims().vocab)?;
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
