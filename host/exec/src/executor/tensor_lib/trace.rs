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
    Executor, ExecutorError, InferenceSession, LocalModel, ReferenceContinuation, RunOptions,
    TraceOutput,
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

/// One traced run, span by span in the order every executor records them:
/// prepare_batch, prefill, observe, lm_head, decode, forward, intervene.
pub(super) fn run<M: LibModel>(
    exec: &LibExecutor<M>,
    request: &TraceRequest,
    options: &RunOptions,
    policy: Option<&mut dyn StepPolicy>,
) -> Result<TraceOutput, ExecutorError> {
    check_request(exec.dims().layers, request, &options.interventions)?;
    let mut rec = Recorder::new(
        options.trace_id.clone(),
        exec.model_ref(),
        exec.capabilities(),
        exec.device_name(),
        request,
    );
    let ids = tokenize_prompt(&mut rec, &exec.assets, request, options)?;
    let mut run = Run {
        exec,
        ops: M::Ops::default(),
        request,
        options,
        session: exec.session(&options.interventions),
        n: ids.len(),
        on_device: exec.model().on_device(),
        rec,
    };
    // (Re-wrapped so the policy's trait object takes the run's lifetime.)
    run.prepare_batch(match policy {
        Some(p) => Some(p),
        None => None,
    })?;
    let context = exec.assets.config.context_length;
    let reference = fits_context(request, options, run.n, (exec.dims().vocab, context))?;
    let prefill = run.prefill(&ids)?;
    run.observe(prefill.timing)?;
    let next = run.lm_head(&prefill)?;
    let generation = match options.generate.max_tokens > 0 {
        true => Some(run.decode(next, prefill.ns, context)?),
        false => None,
    };
    if let Some(reference) = reference {
        run.forward(&ids, reference)?;
    }
    let Run {
        mut rec, session, ..
    } = run;
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
    rec.run_profile(ids.len(), prefill.ns, generation.as_ref());
    rec.finish(generation)
}

/// A traced run in progress: its session and its recorder.
struct Run<'a, M: LibModel> {
    exec: &'a LibExecutor<M>,
    ops: M::Ops,
    request: &'a TraceRequest,
    options: &'a RunOptions,
    session: super::LibSession<'a, M>,
    rec: Recorder,
    /// The prompt's tokens.
    n: usize,
    /// Whether tensors live in another memory than the host's.
    on_device: bool,
}

/// What the prefill pass gave.
struct Prefilled<T> {
    /// Logits from the first position kept (every prompt position when
    /// logits or log-probabilities are asked for, else the last).
    logits: T,
    /// The pass's wall time, hook and lm_head included.
    ns: u64,
    timing: super::PassTiming,
}

impl<'a, M: LibModel> Run<'a, M> {
    fn all_logits(&self) -> bool {
        self.request.wants(K::Logits) || self.request.wants(K::Logprobs)
    }

    /// prepare_batch: the session, its cache and hook.
    fn prepare_batch(
        &mut self,
        policy: Option<&'a mut dyn StepPolicy>,
    ) -> Result<(), ExecutorError> {
        let start = Instant::now();
        if let Some(p) = policy {
            for w in p.watches() {
                self.exec.check_layers(&w.layers)?;
            }
            self.session.set_policy(p);
        }
        if self.request.wants(K::Activation) {
            self.session.hook.observe = self.request.layers.clone();
            self.session.hook.block_outputs = self.options.block_outputs;
        }
        let mut p = self.rec.profile(start, self.n);
        p.input_bytes = (self.n * 4) as u64;
        p.notes.insert(
            "kv_cache".into(),
            "per-layer key/value tensors, grown by concatenation".into(),
        );
        self.rec.span(Stage::PrepareBatch, p);
        Ok(())
    }

    /// prefill: the forward pass with hooks.
    fn prefill(&mut self, ids: &[u32]) -> Result<Prefilled<TensorOf<M>>, ExecutorError> {
        let model = self.exec.model();
        let start = Instant::now();
        let from = if self.all_logits() { 0 } else { self.n - 1 };
        let logits = self.session.pass(ids, true, from)?;
        let settled = model.settle();
        let ns = start.elapsed().as_nanos() as u64;
        let timing = self.session.timing;
        let mut p = self.rec.profile(start, self.n);
        settled.note(&mut p);
        // The prompt's ids, uploaded.
        p.host_device_copies = u64::from(self.on_device);
        if let Some(name) = model.device_label() {
            p.notes.insert("device_name".into(), name);
        }
        p.duration_ns = ns.saturating_sub(timing.hook_ns + timing.lm_head_ns);
        p.memory_bytes = resident_bytes();
        p.notes.insert("kernel".into(), model.kernel_note());
        p.notes.insert(
            "excludes".into(),
            "hook (intervene, observe) and lm_head time, recorded in their own spans".into(),
        );
        p.notes.insert(
            "kv_cache_bytes".into(),
            self.session.cache_bytes().to_string(),
        );
        p.notes.insert("kv_cache".into(), model.kv_note());
        self.rec.span(Stage::Prefill, p);
        Ok(Prefilled { logits, ns, timing })
    }

    /// observe: activations (and weight snapshots) copied to the host.
    fn observe(&mut self, timing: super::PassTiming) -> Result<(), ExecutorError> {
        let (model, request, ops) = (self.exec.model(), self.request, &self.ops);
        let kept = std::mem::take(&mut self.session.hook.kept);
        if !(request.wants(K::Activation) || request.wants(K::WeightSnapshot)) {
            return Ok(());
        }
        let start = Instant::now();
        let mut pending = Vec::new();
        // A router's probabilities say how many experts each token used.
        let used = model.config().experts.as_ref().map(|e| e.used.to_string());
        for k in &kept {
            let mut l = labels(&[(Site::KEY, k.site.as_str())]);
            if let (Site::Router, Some(u)) = (k.site, &used) {
                l.insert("experts_used".into(), u.clone());
            }
            pending.push((K::Activation, k.layer, l, host_data(ops, &k.tensor, true)?));
        }
        if request.wants(K::WeightSnapshot) {
            for &layer in &request.layers {
                for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                    let w: TensorOf<M> = model.weight(layer, m)?;
                    let l = labels(&[("matrix", m.gguf_stem()), ("dequantized", "true")]);
                    pending.push((K::WeightSnapshot, layer, l, host_data(ops, &w, false)?));
                }
            }
        }
        let settled = model.settle();
        let mut p = self.rec.profile(start, self.n);
        settled.note(&mut p);
        p.duration_ns += timing
            .hook_ns
            .saturating_sub(self.session.hook.intervene_ns);
        self.rec.observe(p, pending, self.on_device);
        Ok(())
    }

    /// lm_head: logits and log-probabilities at every prompt position;
    /// the next-token logits after the prompt.
    fn lm_head(&mut self, prefill: &Prefilled<TensorOf<M>>) -> Result<Vec<f32>, ExecutorError> {
        let start = Instant::now();
        let all_logits = self.all_logits();
        let mut lm: Vec<(K, TensorData)> = Vec::new();
        if all_logits {
            let host = host_data(&self.ops, &prefill.logits, false)?;
            if self.request.wants(K::Logprobs) {
                lm.push((K::Logprobs, log_softmax_data(&host)));
            }
            if self.request.wants(K::Logits) {
                lm.push((K::Logits, host));
            }
        }
        let next = last_logits(&self.ops, &prefill.logits)?;
        let settled = self.exec.model().settle();
        let mut p = self.rec.profile(start, self.n);
        settled.note(&mut p);
        p.duration_ns += prefill.timing.lm_head_ns;
        self.rec.lm_head(p, lm, all_logits, self.on_device);
        Ok(next)
    }

    /// decode: one pass per generated token.
    fn decode(
        &mut self,
        mut next: Vec<f32>,
        prefill_ns: u64,
        context: Option<usize>,
    ) -> Result<crate::executor::Generation, ExecutorError> {
        let exec = self.exec;
        let is_eos = |id| exec.is_eos(id);
        let detokenize = |ids: &[u32]| exec.detokenize(ids);
        let start = Instant::now();
        let mut g = Generator::new(&self.options.generate, &is_eos, &detokenize)?;
        g.prefill_ns = prefill_ns;
        while let Some(id) = g.next(&next, self.session.position(), context, &mut |_| {})? {
            let step = Instant::now();
            next = self.session.decode_step(id)?.logits;
            g.decode_ns += step.elapsed().as_nanos() as u64;
            g.decode_steps += 1;
        }
        let g = g.finish(&mut |_| {});
        let settled = exec.model().settle();
        let mut p = self.rec.profile(start, g.decode_steps);
        settled.note(&mut p);
        p.duration_ns = g.decode_ns;
        // Each step uploads its token and copies its logits back, which
        // waits for the step: one synchronisation per step.
        if self.on_device {
            p.host_device_copies = 2 * g.decode_steps as u64;
            p.sync_points += g.decode_steps as u64;
        }
        note_generation(&mut p, &g, &self.options.generate);
        p.notes.insert(
            "kv_cache_bytes".into(),
            self.session.cache_bytes().to_string(),
        );
        let span = self.rec.span(Stage::Decode, p);
        self.rec.generation(&span, &g);
        Ok(g)
    }

    /// forward: another side's continuation, teacher-forced after this
    /// prompt, from a fork of the prompt's cache rewound to before its last
    /// token (a run with a policy runs its prompt again without it: the
    /// continuation is scored under the model and its interventions).
    fn forward(
        &mut self,
        ids: &[u32],
        (r, rows, k): (&ReferenceContinuation, usize, usize),
    ) -> Result<(), ExecutorError> {
        let n = self.n;
        let start = Instant::now();
        let mut scoring = self.exec.session(&self.options.interventions);
        let mut fed = match self.session.hook.policy.is_none() {
            true => {
                scoring.cache = self.session.cache.fork();
                rewind(&mut scoring.cache, n - 1)?;
                ids[n - 1..].to_vec()
            }
            false => ids.to_vec(),
        };
        let skip = fed.len() - 1;
        fed.extend(&r.completion[..rows - 1]);
        // Logits at the scored rows only: from the prompt's last token on.
        let logits = scoring.pass(&fed, true, skip)?;
        let scores = support_scores(&host_data(&self.ops, &logits, false)?, &r.support);
        debug_assert_eq!(scores.shape, [rows, k]);
        let settled = self.exec.model().settle();
        let mut p = self.rec.profile(start, fed.len());
        settled.note(&mut p);
        p.output_bytes = scores.bytes.len() as u64;
        // The tokens up, the scored rows' logits back.
        if self.on_device {
            p.host_device_copies = 2;
        }
        p.notes.insert(
            "teacher_forced".into(),
            format!(
                "the continuation of trace `{}` after this run's prompt; log-probabilities of its top tokens",
                r.trace_id
            ),
        );
        let span = self.rec.span(Stage::Forward, p);
        self.rec.reference(&span, r, scores);
        Ok(())
    }
}
