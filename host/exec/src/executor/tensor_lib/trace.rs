//! One traced run of a tensor-library executor: tokenize, prepare,
//! prefill (with hooks), observe, lm_head, and optionally decode, forward
//! (the reference continuation) and intervene, each a span with a
//! profile, recorded through the shared [`Recorder`] as candle's are.
//! Jobs run one at a time (no batched passes).

use std::time::Instant;

use super::session::{last_logits, rewind};
use super::{LibCache, LibExecutor, LibModel, TensorOf, TensorOps};
use crate::executor::generate::Generator;
use crate::executor::recorder::{
    Recorder, check_request, fits_context, labels, log_softmax_data, note_generation,
    resident_bytes, support_scores, tokenize_prompt,
};
use crate::executor::{
    Executor, ExecutorError, InferenceSession, LocalModel, RunOptions, TraceOutput,
};
use crate::intervene::policy::StepPolicy;
use crate::model::Matrix;
use crate::trace::Site;
use crate::trace::{ArtifactKind as K, Stage, TensorData, TraceRequest};

/// A tensor copied to the host as f32 trace data, with its shape; with
/// `batched`, under a leading batch axis of 1 (activations `[tokens,
/// hidden]` are recorded `[1, tokens, hidden]`, as candle records them).
fn host_data<O: TensorOps>(
    ops: &O,
    t: &O::Tensor,
    batched: bool,
) -> Result<TensorData, ExecutorError> {
    let (mut shape, values) = ops.host(t)?;
    if batched {
        shape.insert(0, 1);
    }
    Ok(TensorData::from_f32(shape, &values).expect("the tensor's shape"))
}

pub(super) fn run<M: LibModel>(
    exec: &LibExecutor<M>,
    request: &TraceRequest,
    options: &RunOptions,
    policy: Option<&mut dyn StepPolicy>,
) -> Result<TraceOutput, ExecutorError> {
    check_request(exec.dims().layers, request, &options.interventions)?;
    let ops = M::Ops::default();
    let model = exec.model();
    let mut rec = Recorder::new(
        options.trace_id.clone(),
        exec.model_ref(),
        exec.capabilities(),
        exec.device_name(),
        request,
    );
    let ids = tokenize_prompt(&mut rec, &exec.assets, request, options)?;
    let n = ids.len();
    let on_device = model.on_device();

    // prepare_batch: the session, its cache and hook.
    let start = Instant::now();
    let mut session = exec.session(&options.interventions);
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
    let mut p = rec.profile(start, n);
    p.input_bytes = (n * 4) as u64;
    p.notes.insert(
        "kv_cache".into(),
        "per-layer key/value tensors, grown by concatenation".into(),
    );
    rec.span(Stage::PrepareBatch, p);
    let all_logits = request.wants(K::Logits) || request.wants(K::Logprobs);
    let context = exec.assets.config.context_length;
    let reference = fits_context(request, options, n, (exec.dims().vocab, context))?;

    // prefill: the forward pass with hooks.
    let start = Instant::now();
    let from = if all_logits { 0 } else { n - 1 };
    let logits = session.pass(&ids, true, from)?;
    let settled = model.settle();
    let prefill_ns = start.elapsed().as_nanos() as u64;
    let timing = session.timing;
    let mut p = rec.profile(start, n);
    settled.note(&mut p);
    // The prompt's ids, uploaded.
    p.host_device_copies = u64::from(on_device);
    if let Some(name) = model.device_label() {
        p.notes.insert("device_name".into(), name);
    }
    p.duration_ns = prefill_ns.saturating_sub(timing.hook_ns + timing.lm_head_ns);
    p.memory_bytes = resident_bytes();
    p.notes.insert("kernel".into(), model.kernel_note());
    p.notes.insert(
        "excludes".into(),
        "hook (intervene, observe) and lm_head time, recorded in their own spans".into(),
    );
    p.notes
        .insert("kv_cache_bytes".into(), session.cache_bytes().to_string());
    p.notes.insert("kv_cache".into(), model.kv_note());
    rec.span(Stage::Prefill, p);

    // observe: activations (and weight snapshots) copied to the host.
    let kept = std::mem::take(&mut session.hook.kept);
    if observe || request.wants(K::WeightSnapshot) {
        let start = Instant::now();
        let mut pending = Vec::new();
        // A router's probabilities say how many experts each token used.
        let used = model.config().experts.as_ref().map(|e| e.used.to_string());
        for k in &kept {
            let mut l = labels(&[(Site::KEY, k.site.as_str())]);
            if let (Site::Router, Some(u)) = (k.site, &used) {
                l.insert("experts_used".into(), u.clone());
            }
            pending.push((K::Activation, k.layer, l, host_data(&ops, &k.tensor, true)?));
        }
        if request.wants(K::WeightSnapshot) {
            for &layer in &request.layers {
                for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                    let w: TensorOf<M> = model.weight(layer, m)?;
                    let l = labels(&[("matrix", m.gguf_stem()), ("dequantized", "true")]);
                    pending.push((K::WeightSnapshot, layer, l, host_data(&ops, &w, false)?));
                }
            }
        }
        let settled = model.settle();
        let mut p = rec.profile(start, n);
        settled.note(&mut p);
        p.duration_ns += timing.hook_ns.saturating_sub(session.hook.intervene_ns);
        rec.observe(p, pending, on_device);
    }

    // lm_head: logits and log-probabilities at every prompt position.
    let start = Instant::now();
    let mut lm: Vec<(K, TensorData)> = Vec::new();
    if all_logits {
        let host = host_data(&ops, &logits, false)?;
        if request.wants(K::Logprobs) {
            lm.push((K::Logprobs, log_softmax_data(&host)));
        }
        if request.wants(K::Logits) {
            lm.push((K::Logits, host));
        }
    }
    let mut next = last_logits(&ops, &logits)?;
    let settled = model.settle();
    let mut p = rec.profile(start, n);
    settled.note(&mut p);
    p.duration_ns += timing.lm_head_ns;
    rec.lm_head(p, lm, all_logits, on_device);

    // decode: one pass per generated token.
    let mut generation = None;
    if options.generate.max_tokens > 0 {
        let is_eos = |id| exec.is_eos(id);
        let detokenize = |ids: &[u32]| exec.detokenize(ids);
        let start = Instant::now();
        let mut g = Generator::new(&options.generate, &is_eos, &detokenize)?;
        g.prefill_ns = prefill_ns;
        while let Some(id) = g.next(&next, session.position(), context, &mut |_| {})? {
            let step = Instant::now();
            next = session.decode_step(id)?.logits;
            g.decode_ns += step.elapsed().as_nanos() as u64;
            g.decode_steps += 1;
        }
        let g = g.finish(&mut |_| {});
        let settled = model.settle();
        let mut p = rec.profile(start, g.decode_steps);
        settled.note(&mut p);
        p.duration_ns = g.decode_ns;
        // Each step uploads its token and copies its logits back, which
        // waits for the step: one synchronisation per step.
        if on_device {
            p.host_device_copies = 2 * g.decode_steps as u64;
            p.sync_points += g.decode_steps as u64;
        }
        note_generation(&mut p, &g, &options.generate);
        p.notes
            .insert("kv_cache_bytes".into(), session.cache_bytes().to_string());
        let span = rec.span(Stage::Decode, p);
        rec.generation(&span, &g);
        generation = Some(g);
    }

    // forward: another side's continuation, teacher-forced after this
    // prompt, from a fork of the prompt's cache rewound to before its last
    // token (a run with a policy runs its prompt again without it: the
    // continuation is scored under the model and its interventions).
    if let Some((r, rows, k)) = reference {
        let start = Instant::now();
        let mut scoring = exec.session(&options.interventions);
        let mut fed = match session.hook.policy.is_none() {
            true => {
                scoring.cache = session.cache.fork();
                rewind(&mut scoring.cache, n - 1)?;
                ids[n - 1..].to_vec()
            }
            false => ids.clone(),
        };
        let skip = fed.len() - 1;
        fed.extend(&r.completion[..rows - 1]);
        // Logits at the scored rows only: from the prompt's last token on.
        let logits = scoring.pass(&fed, true, skip)?;
        let scores = support_scores(&host_data(&ops, &logits, false)?, &r.support);
        debug_assert_eq!(scores.shape, [rows, k]);
        let settled = model.settle();
        let mut p = rec.profile(start, fed.len());
        settled.note(&mut p);
        p.output_bytes = scores.bytes.len() as u64;
        // The tokens up, the scored rows' logits back.
        if on_device {
            p.host_device_copies = 2;
        }
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

    // intervene: what each intervention and the policy did.
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
    rec.run_profile(n, prefill_ns, generation.as_ref());
    rec.finish(generation)
}
