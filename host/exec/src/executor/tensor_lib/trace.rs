//! The stages of a tensor-library executor's traced run (their order is
//! the shared driver's, [`crate::executor::traced`]): tokenize, prepare,
//! prefill (with hooks), observe, lm_head, and optionally decode, forward
//! (the reference continuation) and intervene, each a span with a
//! profile, recorded through the shared [`Recorder`] as candle's are.
//! Jobs run one at a time within a stage (no batched passes).

use std::time::Instant;

use super::session::{last_logits, rewind};
use super::{LibCache, LibExecutor, LibModel, TensorOf, TensorOps};
use crate::executor::generate::{Generation, Generator};
use crate::executor::recorder::{
    Recorder, check_request, fits_context, log_softmax_data, note_generation, support_scores,
    tokenize_prompt,
};
use crate::executor::traced::{TracedStages, close, note_prefill, observed};
use crate::executor::{
    Executor, ExecutorError, InferenceSession, LocalModel, ReferenceContinuation, RunOptions,
    TraceOutput,
};
use crate::intervene::policy::StepPolicy;
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

/// A trace in progress: its run (session and recorder) and what each
/// stage hands the next.
pub(crate) struct Job<'a, M: LibModel> {
    run: Run<'a, M>,
    ids: Vec<u32>,
    context: Option<usize>,
    /// Another side's continuation to score (checked: its support rows and
    /// their width).
    reference: Option<(&'a ReferenceContinuation, usize, usize)>,
    /// Wall-clock time of the prefill pass (hook and lm_head included).
    prefill_ns: u64,
    /// The prompt's last-position logits, where generation starts.
    next: Vec<f32>,
    generation: Option<Generation>,
}

/// The tensor-library executor's stages of a traced run: one job at a
/// time within each stage (no batched passes).
impl<M: LibModel> TracedStages for LibExecutor<M> {
    type Job<'a>
        = Job<'a, M>
    where
        M: 'a;

    fn begin<'a>(
        &'a self,
        request: &'a TraceRequest,
        options: &'a RunOptions,
        policy: Option<&'a mut dyn StepPolicy>,
    ) -> Result<Job<'a, M>, ExecutorError> {
        check_request(self.dims().layers, request, &options.interventions)?;
        let mut rec = Recorder::new(
            options.trace_id.clone(),
            self.model_ref(),
            self.capabilities(),
            self.device_name(),
            request,
        );
        let ids = tokenize_prompt(&mut rec, &self.assets, request, options)?;
        let mut run = Run {
            exec: self,
            ops: M::Ops::default(),
            request,
            options,
            session: self.session(&options.interventions),
            n: ids.len(),
            on_device: self.model().on_device(),
            rec,
        };
        run.prepare_batch(policy)?;
        let context = self.assets.config.context_length;
        let reference = fits_context(request, options, run.n, (self.dims().vocab, context))?;
        Ok(Job {
            run,
            ids,
            context,
            reference,
            prefill_ns: 0,
            next: Vec::new(),
            generation: None,
        })
    }

    fn prefill(&self, jobs: &mut [Job<'_, M>]) -> Result<(), ExecutorError> {
        for job in jobs {
            let prefill = job.run.prefill(&job.ids)?;
            job.run.observe(prefill.timing)?;
            job.next = job.run.lm_head(&prefill)?;
            job.prefill_ns = prefill.ns;
        }
        Ok(())
    }

    fn decode(&self, jobs: &mut [Job<'_, M>]) -> Result<(), ExecutorError> {
        for job in jobs
            .iter_mut()
            .filter(|j| j.run.options.generate.max_tokens > 0)
        {
            let next = std::mem::take(&mut job.next);
            job.generation = Some(job.run.decode(next, job.prefill_ns, job.context)?);
        }
        Ok(())
    }

    fn forward(&self, jobs: &mut [Job<'_, M>]) -> Result<(), ExecutorError> {
        for job in jobs {
            if let Some(reference) = job.reference {
                job.run.forward(&job.ids, reference)?;
            }
        }
        Ok(())
    }

    fn finish(&self, job: Job<'_, M>) -> Result<TraceOutput, ExecutorError> {
        let Run {
            rec,
            session,
            options,
            ..
        } = job.run;
        let prefill = (job.ids.len(), job.prefill_ns);
        close(rec, options, &session.hook, prefill, job.generation)
    }
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
        let kv_bytes = self.session.cache_bytes();
        note_prefill(&mut p, model.kernel_note(), model.kv_note(), kv_bytes);
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
        // A router's probabilities say how many experts each token used.
        let used = model.config().experts.as_ref().map(|e| e.used);
        let host = |t: &TensorOf<M>| host_data(ops, t, true);
        let pending = observed(request, &kept, used, host, |layer, m| {
            let w: TensorOf<M> = model.weight(layer, m)?;
            host_data(ops, &w, false)
        })?;
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
    ) -> Result<Generation, ExecutorError> {
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
