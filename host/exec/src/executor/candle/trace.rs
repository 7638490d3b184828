//! One traced run on candle: tokenize, prepare, prefill (with hooks),
//! observe, lm_head, and optionally decode, forward (the reference
//! continuation) and intervene, each a span with a profile. What is
//! recorded, and how, is the shared [`Recorder`]'s; this file holds what
//! is candle's: the session, the hooks, and tensors copied to the host.

use std::time::Instant;

use candle_core::{DType, Tensor};

use super::CandleExecutor;
use super::model::llama::LogitsAt;
use super::session::{CandleSession, Pass, last_row, prefill_batch, run_sessions};
use crate::executor::generate::{Generation, Generator};
use crate::executor::recorder::{
    Recorder, check_request, fits_context, log_softmax_data, support_scores, tokenize_prompt,
};
use crate::executor::traced::{
    DecodeBatch, TracedStages, close, decode_profile, forward_profile, note_prefill, observed,
};
use crate::executor::{
    Executor, ExecutorError, InferenceSession, LocalModel, ReferenceContinuation, RunOptions,
    TraceOutput,
};
use crate::intervene::policy::StepPolicy;
use crate::model::ModelError;
use crate::trace::{ArtifactKind as K, Stage, StageProfile, TensorData, TraceRequest};

/// A tensor copied to the host as f32 trace data: one copy, straight from
/// a CPU tensor's storage into the bytes a trace keeps (or drops after
/// summarising), never through an intermediate vector.
fn host_data(t: &Tensor) -> Result<TensorData, ExecutorError> {
    let shape = t.dims().to_vec();
    let t = t.to_dtype(DType::F32).map_err(ModelError::from)?;
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(cpu), Some((from, to))) =
            (&*storage, layout.contiguous_offsets())
        {
            let values = &cpu.as_slice::<f32>().map_err(ModelError::from)?[from..to];
            let pool = vauban_kernels::pool::Pool::global();
            return Ok(TensorData::f32_filled(shape, |out| pool.copy(values, out)));
        }
    }
    // A GPU tensor, or a strided view: candle copies it out.
    let values = t
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(ModelError::from)?;
    Ok(TensorData::from_f32(shape, &values).expect("the tensor's shape"))
}

/// candle's stages of a traced run: each one batched pass over every job
/// (or one pass per decode step over the sequences still generating).
impl TracedStages for CandleExecutor {
    type Job<'a> = Job<'a>;

    fn begin<'a>(
        &'a self,
        request: &'a TraceRequest,
        options: &'a RunOptions,
        policy: Option<&'a mut dyn StepPolicy>,
    ) -> Result<Job<'a>, ExecutorError> {
        begin(self, request, options, policy)
    }
    fn prefill(&self, jobs: &mut [Job<'_>]) -> Result<(), ExecutorError> {
        prefill(jobs)
    }
    fn decode(&self, jobs: &mut [Job<'_>]) -> Result<(), ExecutorError> {
        decode(self, jobs)
    }
    fn forward(&self, jobs: &mut [Job<'_>]) -> Result<(), ExecutorError> {
        score_references(self, jobs)
    }
    fn finish(&self, job: Job<'_>) -> Result<TraceOutput, ExecutorError> {
        finish(job)
    }
}

/// A trace in progress.
pub(crate) struct Job<'a> {
    exec: &'a CandleExecutor,
    request: &'a TraceRequest,
    options: &'a RunOptions,
    rec: Recorder,
    ids: Vec<u32>,
    session: CandleSession<'a>,
    observe: bool,
    at: LogitsAt,
    /// Another side's continuation to score (checked: its support rows and
    /// their width).
    reference: Option<(&'a ReferenceContinuation, usize, usize)>,
    /// Wall-clock time of the prefill pass (shared by the batch; hook and
    /// lm_head included).
    prefill_ns: u64,
    /// The prompt's last-position logits, where generation starts.
    prefill_last: Vec<f32>,
    generation: Option<Generation>,
}

/// Spans of a batched pass say so (a batch of one says nothing). As the
/// profile's contract has it, a span's duration is the stage's wall-clock
/// time: for a batched pass, the whole pass, which `batch_size` sequences
/// shared.
fn note_batch(p: &mut StageProfile, sequences: usize, tokens: usize) {
    p.batch_size = sequences.max(1) as u32;
    if sequences > 1 {
        p.notes.insert(
            "batch".into(),
            format!(
                "one pass over {sequences} sequences ({tokens} tokens); its time is the pass's, shared by them"
            ),
        );
    }
}

/// Tokenizes the prompt and prepares the session: the tokenize and
/// prepare_batch spans.
fn begin<'a>(
    exec: &'a CandleExecutor,
    request: &'a TraceRequest,
    options: &'a RunOptions,
    policy: Option<&'a mut dyn StepPolicy>,
) -> Result<Job<'a>, ExecutorError> {
    check_request(exec.dims().layers, request, &options.interventions)?;
    let mut rec = Recorder::new(
        options.trace_id.clone(),
        exec.model_ref(),
        exec.capabilities(),
        exec.device_name.clone(),
        request,
    );

    let ids = tokenize_prompt(&mut rec, &exec.model.assets, request, options)?;

    // prepare_batch: the session, its cache and hook.
    let start = Instant::now();
    let mut session: CandleSession<'a> = exec.session(&options.interventions);
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
    let at = if request.wants(K::Logits) || request.wants(K::Logprobs) {
        LogitsAt::All
    } else {
        LogitsAt::Last
    };
    let context = exec.model.model.config().context_length;
    let reference = fits_context(request, options, ids.len(), (exec.dims().vocab, context))?;
    Ok(Job {
        exec,
        request,
        options,
        rec,
        ids,
        session,
        observe,
        at,
        reference,
        prefill_ns: 0,
        prefill_last: Vec::new(),
        generation: None,
    })
}

/// The prompts' forward pass with hooks (prefill), the activations copied
/// to the host (observe) and the logits (lm_head). An opening every prompt
/// shares runs once ([`prefill_batch`]).
fn prefill(jobs: &mut [Job<'_>]) -> Result<(), ExecutorError> {
    let start = Instant::now();
    let done = {
        let mut sessions = Vec::with_capacity(jobs.len());
        let mut ids = Vec::with_capacity(jobs.len());
        let mut at = Vec::with_capacity(jobs.len());
        for j in jobs.iter_mut() {
            sessions.push(&mut j.session);
            ids.push(j.ids.as_slice());
            at.push(j.at);
        }
        prefill_batch(&mut sessions, &ids, &at)?
    };
    let total_ns = start.elapsed().as_nanos() as u64;
    let opening = done.opening;
    let tokens: usize = opening + jobs.iter().map(|j| j.ids.len() - opening).sum::<usize>();
    let sequences = jobs.len();
    // The forward passes without any hook or the lm_head, which have their
    // own spans (each job's own hook; the passes' lm_head).
    let hooks: u64 =
        done.opening_timing.hook_ns + jobs.iter().map(|j| j.session.timing.hook_ns).sum::<u64>();
    let lm_head =
        done.opening_timing.lm_head_ns + jobs.first().map_or(0, |j| j.session.timing.lm_head_ns);
    let forward_ns = total_ns.saturating_sub(hooks + lm_head);
    for (job, logits) in jobs.iter_mut().zip(done.logits) {
        // Every job's observation and interventions include the opening's.
        job.session.timing.hook_ns += done.opening_timing.hook_ns;
        job.prefill_ns = total_ns;
        job.after_prefill(&logits, forward_ns, (sequences, tokens), opening)?;
    }
    Ok(())
}

impl Job<'_> {
    /// Records the prefill, observe and lm_head spans of this trace.
    fn after_prefill(
        &mut self,
        logits: &Tensor,
        forward_ns: u64,
        (sequences, batch_tokens): (usize, usize),
        opening: usize,
    ) -> Result<(), ExecutorError> {
        let (exec, request, rec) = (self.exec, self.request, &mut self.rec);
        let n = self.ids.len();
        let timing = self.session.timing;
        let start = Instant::now();
        let on_device = exec.on_device();
        let mut p = rec.profile(start, n);
        p.duration_ns = forward_ns;
        // The prompt's ids, uploaded.
        p.host_device_copies = u64::from(on_device);
        let (m, kv_bytes) = (&exec.model.model, self.session.cache_bytes());
        note_prefill(&mut p, m.kernel(), m.kv_type().name().into(), kv_bytes);
        note_batch(&mut p, sequences, batch_tokens);
        if opening > 0 {
            p.notes.insert(
                "shared_opening".into(),
                format!(
                    "the first {opening} tokens, which all {sequences} prompts of the batch open with, ran once; this trace continued from a copy of their KV cache"
                ),
            );
        }
        rec.span(Stage::Prefill, p);

        // observe: activations (and weight snapshots) copied to the host.
        let kept = std::mem::take(&mut self.session.hook.kept);
        let observed_ns = timing
            .hook_ns
            .saturating_sub(self.session.hook.intervene_ns);
        if self.observe || request.wants(K::WeightSnapshot) {
            let start = Instant::now();
            // A router's probabilities say how many experts each token used.
            let used = exec.model.model.config().experts.as_ref().map(|e| e.used);
            let pending = observed(request, &kept, used, host_data, |layer, m| {
                host_data(&exec.model.model.weight(layer, m)?)
            })?;
            let mut p = rec.profile(start, n);
            p.duration_ns += observed_ns;
            rec.observe(p, pending, on_device);
        }

        // lm_head: logits and log-probabilities at every prompt position.
        let start = Instant::now();
        let mut lm: Vec<(K, TensorData)> = Vec::new();
        if request.wants(K::Logits) || request.wants(K::Logprobs) {
            let host = host_data(logits)?;
            if request.wants(K::Logprobs) {
                lm.push((K::Logprobs, log_softmax_data(&host)));
            }
            if request.wants(K::Logits) {
                lm.push((K::Logits, host));
            }
        }
        self.prefill_last = last_row(logits)?;
        let mut p = rec.profile(start, n);
        p.duration_ns += timing.lm_head_ns;
        note_batch(&mut p, sequences, batch_tokens);
        rec.lm_head(p, lm, self.at == LogitsAt::All, on_device);
        Ok(())
    }
}

/// Generates for every job that asks, one pass per step over all the
/// sequences still generating.
fn decode(exec: &CandleExecutor, jobs: &mut [Job<'_>]) -> Result<(), ExecutorError> {
    let is_eos = |id| exec.is_eos(id);
    let detokenize = |ids: &[u32]| exec.detokenize(ids);
    let capacity = exec.model.model.config().context_length;
    let start = Instant::now();
    // (job, its generator, its next-token logits)
    let mut running = Vec::new();
    for (i, job) in jobs.iter_mut().enumerate() {
        if job.options.generate.max_tokens > 0 {
            let mut g = Generator::new(&job.options.generate, &is_eos, &detokenize)?;
            g.prefill_ns = job.prefill_ns;
            running.push((i, g, std::mem::take(&mut job.prefill_last)));
        }
    }
    let generating = running.len();
    let mut feeding = vec![None; jobs.len()];
    let mut widest = 1;
    loop {
        let mut feed = 0;
        for (i, g, logits) in running.iter_mut() {
            let position = jobs[*i].session.position();
            feeding[*i] = g.next(logits, position, capacity, &mut |_| {})?;
            feed += usize::from(feeding[*i].is_some());
        }
        if feed == 0 {
            break;
        }
        widest = widest.max(feed);
        let step = Instant::now();
        let fed: Vec<[u32; 1]> = feeding.iter().flatten().map(|&id| [id]).collect();
        let logits = {
            let mut sessions = Vec::with_capacity(feed);
            for (job, _) in jobs.iter_mut().zip(&feeding).filter(|(_, f)| f.is_some()) {
                sessions.push(&mut job.session);
            }
            let ids: Vec<&[u32]> = fed.iter().map(|id| id.as_slice()).collect();
            run_sessions(
                &mut sessions,
                &ids,
                &vec![LogitsAt::Last; feed],
                Pass::Decode,
            )?
        };
        let step_ns = step.elapsed().as_nanos() as u64;
        let mut logits = logits.into_iter();
        for (i, g, next) in running.iter_mut() {
            if feeding[*i].is_some() {
                let row = logits.next().expect("one row per sequence fed");
                *next = last_row(&row)?;
                g.decode_ns += step_ns;
                g.decode_steps += 1;
            }
        }
    }
    let batch = DecodeBatch {
        start,
        on_device: exec.on_device(),
        widest,
        generating,
        cache: "",
        compactions: 0,
    };
    for (i, g, _) in running {
        let job = &mut jobs[i];
        let g = g.finish(&mut |_| {});
        let kv_bytes = job.session.cache_bytes();
        let p = decode_profile(&job.rec, &g, job.options, kv_bytes, &batch);
        let span = job.rec.span(Stage::Decode, p);
        job.rec.generation(&span, &g);
        job.generation = Some(g);
    }
    Ok(())
}

/// The forward stage: for every job with another side's continuation,
/// the log-probabilities `[positions, k]` of `r.support` at each position
/// of `r.completion` teacher-forced after this trace's prompt, in one pass
/// over fresh sessions with this run's interventions (a policy, which
/// decides step by step, does not take part).
fn score_references(exec: &CandleExecutor, jobs: &mut [Job<'_>]) -> Result<(), ExecutorError> {
    // (job, the reference, rows, k, the tokens the pass runs). The prompt
    // is in the job's KV cache already: a fork of it, rewound to before
    // the prompt's last token, runs that token and the continuation. A job
    // with a policy runs its prompt again in a session without the policy
    // (the continuation is scored under the model and its interventions).
    let mut scoring = Vec::new();
    let mut sessions: Vec<CandleSession<'_>> = Vec::new();
    let mut at = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let Some((r, rows, k)) = job.reference else {
            continue;
        };
        let n = job.ids.len();
        let mut session = exec.session(&job.options.interventions);
        let ids = match job.session.hook.policy.is_none() {
            true => {
                session.cache = job.session.cache.fork()?;
                session
                    .cache
                    .truncate(n - 1)
                    .map_err(ExecutorError::Request)?;
                at.push(LogitsAt::All);
                job.ids[n - 1..].to_vec()
            }
            false => {
                at.push(LogitsAt::From(n - 1));
                job.ids.clone()
            }
        };
        let mut ids = ids;
        ids.extend(&r.completion[..rows - 1]);
        scoring.push((i, r, rows, k, ids));
        sessions.push(session);
    }
    if scoring.is_empty() {
        return Ok(());
    }
    let start = Instant::now();
    let logits = {
        let mut refs: Vec<&mut CandleSession<'_>> = sessions.iter_mut().collect();
        let ids: Vec<&[u32]> = scoring.iter().map(|s| s.4.as_slice()).collect();
        run_sessions(&mut refs, &ids, &at, Pass::Prompt)?
    };
    let total_ns = start.elapsed().as_nanos() as u64;
    let tokens: usize = scoring.iter().map(|s| s.4.len()).sum();
    for ((i, r, rows, k, ids), logits) in scoring.into_iter().zip(logits) {
        let scores = support_scores(&host_data(&logits)?, &r.support);
        debug_assert_eq!(scores.shape, [rows, k]);
        let job = &mut jobs[i];
        let pass = (ids.len(), total_ns, scores.bytes.len());
        let mut p = forward_profile(&job.rec, start, pass, exec.on_device(), &r.trace_id);
        note_batch(&mut p, sessions.len(), tokens);
        let span = job.rec.span(Stage::Forward, p);
        job.rec.reference(&span, r, scores);
    }
    Ok(())
}

/// The intervene span, the run's profile, and the finished trace.
fn finish(job: Job<'_>) -> Result<TraceOutput, ExecutorError> {
    let prefill = (job.ids.len(), job.prefill_ns);
    close(
        job.rec,
        job.options,
        &job.session.hook,
        prefill,
        job.generation,
    )
}
