//! The stages of a tensor-library executor's traced run (their order is
//! the shared driver's, [`crate::executor::traced`]): tokenize, prepare,
//! prefill (with hooks), observe, lm_head, and optionally decode, forward
//! (the reference continuation) and intervene, each a span with a
//! profile, recorded through the shared [`Recorder`] as candle's are.
//! Each stage runs its jobs as one ragged batch ([`LibModel::run_batch`]):
//! the prompts in one pass (an opening they all share run once), every
//! generating sequence in each decode step over one preallocated cache,
//! the reference continuations in one pass.

use std::time::Instant;

use super::session::{
    Pass, last_logits, prefill_batch, rewind, run_rows, stack_caches, unstack_caches,
};
use super::{LibCache, LibExecutor, LibModel, TensorOf, TensorOps};
use crate::executor::generate::{Generation, Generator};
use crate::executor::recorder::{
    Recorder, check_request, fits_context, log_softmax_data, support_scores, tokenize_prompt,
};
use crate::executor::traced::{
    DecodeBatch, TracedStages, close, decode_profile, forward_profile, note_prefill, observed,
};
use crate::executor::{
    Executor, ExecutorError, LocalModel, ReferenceContinuation, RunOptions, TraceOutput,
};
use crate::intervene::policy::StepPolicy;
use crate::trace::{ArtifactKind as K, Stage, StageProfile, TensorData, TraceRequest};

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

/// The tensor-library executor's stages of a traced run, each one batched
/// pass over every job (a stage over one job is a batch of one).
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

    /// The prompts' forward pass with hooks (prefill), the activations
    /// copied to the host (observe) and the logits (lm_head).
    fn prefill(&self, jobs: &mut [Job<'_, M>]) -> Result<(), ExecutorError> {
        if jobs.is_empty() {
            // Every job of the batch failed to start.
            return Ok(());
        }
        let model = self.model();
        let start = Instant::now();
        let done = {
            let mut sessions = Vec::with_capacity(jobs.len());
            let mut ids = Vec::with_capacity(jobs.len());
            let mut all = Vec::with_capacity(jobs.len());
            for j in jobs.iter_mut() {
                all.push(j.run.all_logits());
                sessions.push(&mut j.run.session);
                ids.push(j.ids.as_slice());
            }
            prefill_batch(model, &mut sessions, &ids, &all)?
        };
        let settled = model.settle();
        let total_ns = start.elapsed().as_nanos() as u64;
        let opening = done.opening;
        let tokens = opening + jobs.iter().map(|j| j.ids.len() - opening).sum::<usize>();
        let batch = Batch {
            sequences: jobs.len(),
            tokens,
            opening,
        };
        // The pass without any hook or the lm_head, which have their own
        // spans (each job's own hook; the pass's lm_head).
        let hooks: u64 = done.opening_timing.hook_ns
            + jobs
                .iter()
                .map(|j| j.run.session.timing.hook_ns)
                .sum::<u64>();
        let lm_head = done.opening_timing.lm_head_ns
            + jobs.first().map_or(0, |j| j.run.session.timing.lm_head_ns);
        let forward_ns = total_ns.saturating_sub(hooks + lm_head);
        let mut settled = Some(settled);
        for (job, logits) in jobs.iter_mut().zip(done.logits) {
            // Every job's observation and interventions include the opening's.
            job.run.session.timing.hook_ns += done.opening_timing.hook_ns;
            job.run.session.timing.lm_head_ns = lm_head;
            job.prefill_ns = total_ns;
            let timing = job.run.session.timing;
            job.run
                .prefill(forward_ns, settled.take().unwrap_or_default(), &batch)?;
            job.run.observe(timing)?;
            job.next = job.run.lm_head(&logits, timing, &batch)?;
        }
        Ok(())
    }

    fn decode(&self, jobs: &mut [Job<'_, M>]) -> Result<(), ExecutorError> {
        decode(self, jobs)
    }

    fn forward(&self, jobs: &mut [Job<'_, M>]) -> Result<(), ExecutorError> {
        score_references(self, jobs)
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

/// How a batched pass was shared, for its spans.
struct Batch {
    sequences: usize,
    /// Tokens the pass ran (the opening once).
    tokens: usize,
    /// Tokens of the opening every prompt shares, run once (0: none).
    opening: usize,
}

impl Batch {
    /// Spans of a batched pass say so (a batch of one says nothing). As
    /// candle's: a span's time is the whole pass's, which `sequences`
    /// sequences shared.
    fn note(&self, p: &mut StageProfile) {
        p.batch_size = self.sequences.max(1) as u32;
        if self.sequences > 1 {
            p.notes.insert(
                "batch".into(),
                format!(
                    "one ragged pass over {} sequences ({} tokens); its time is the whole pass's",
                    self.sequences, self.tokens
                ),
            );
        }
    }
}

/// Generates for every job that asks, one pass per step over all the
/// sequences still generating, on one cache preallocated for the longest
/// generation.
fn decode<M: LibModel>(
    exec: &LibExecutor<M>,
    jobs: &mut [Job<'_, M>],
) -> Result<(), ExecutorError> {
    let is_eos = |id| exec.is_eos(id);
    let detokenize = |ids: &[u32]| exec.detokenize(ids);
    let model = exec.model();
    let ops = M::Ops::default();
    let start = Instant::now();
    let generating: Vec<&mut Job<'_, M>> = jobs
        .iter_mut()
        .filter(|j| j.run.options.generate.max_tokens > 0)
        .collect();
    if generating.is_empty() {
        return Ok(());
    }
    let mut gens = Vec::with_capacity(generating.len());
    let mut nexts = Vec::with_capacity(generating.len());
    let mut jobs = generating;
    let mut longest = 0;
    for job in jobs.iter_mut() {
        let mut g = Generator::new(&job.run.options.generate, &is_eos, &detokenize)?;
        g.prefill_ns = job.prefill_ns;
        longest = longest.max(job.run.options.generate.max_tokens);
        gens.push(g);
        nexts.push(std::mem::take(&mut job.next));
    }
    let context = jobs[0].context;
    let mut sessions: Vec<&mut super::LibSession<'_, M>> =
        jobs.iter_mut().map(|j| &mut j.run.session).collect();
    let mut rows = RowsOfBatch::stack(&mut sessions, longest)?;
    let mut widest = 1;
    let steps = loop {
        // The token each sequence runs next (none: it has finished).
        let mut feeding: Vec<Option<[u32; 1]>> = vec![None; gens.len()];
        for (k, &j) in rows.jobs.iter().enumerate() {
            let position = rows.cache.layout().rows[k].len();
            feeding[j] = gens[j]
                .next(&nexts[j], position, context, &mut |_| {})?
                .map(|id| [id]);
        }
        let live: Vec<usize> = (0..gens.len()).filter(|&j| feeding[j].is_some()).collect();
        if live.is_empty() {
            break Ok(());
        }
        widest = widest.max(live.len());
        let step = Instant::now();
        if 2 * live.len() <= rows.jobs.len() {
            let left = gens.iter().map(|g| g.remaining()).max().unwrap_or(0);
            if let Err(e) = rows.compact(&mut sessions, &live, left) {
                break Err(e);
            }
        }
        let ids: Vec<&[u32]> = rows
            .jobs
            .iter()
            .map(|&j| feeding[j].as_ref().map_or(&[][..], |id| id.as_slice()))
            .collect();
        let from = vec![0; ids.len()];
        let ran = {
            let mut running = rows.sessions(&mut sessions);
            run_rows(
                model,
                &mut rows.cache,
                &mut running,
                &ids,
                &from,
                Pass::Decode,
            )
        };
        let ran = match ran {
            Ok(ran) => ran,
            Err(e) => break Err(e),
        };
        let step_ns = step.elapsed().as_nanos() as u64;
        for (&j, logits) in rows.jobs.iter().zip(ran) {
            if let Some(logits) = logits {
                nexts[j] = last_logits(&ops, &logits)?;
                gens[j].decode_ns += step_ns;
                gens[j].decode_steps += 1;
            }
        }
    };
    let compactions = rows.compactions;
    rows.unstack(&mut sessions)?;
    steps?;
    let settled = model.settle();
    let mut settled = Some(settled);
    let batch = DecodeBatch {
        start,
        on_device: model.on_device(),
        widest,
        generating: gens.len(),
        cache: " over one preallocated cache",
        compactions,
    };
    for (job, g) in jobs.iter_mut().zip(gens) {
        let run = &mut job.run;
        let g = g.finish(&mut |_| {});
        let kv_bytes = run.session.cache_bytes();
        let mut p = decode_profile(&run.rec, &g, run.options, kv_bytes, &batch);
        settled.take().unwrap_or_default().note(&mut p);
        let span = run.rec.span(Stage::Decode, p);
        run.rec.generation(&span, &g);
        job.generation = Some(g);
    }
    Ok(())
}

/// The sequences a decode stage runs in one batch cache: which job each
/// of its rows is. Once half of them or more have finished, the cache is
/// rebuilt with the running ones alone ([`RowsOfBatch::compact`]): a
/// finished sequence's row would otherwise still be computed in every
/// step (as a hole), and its padding still attended over.
struct RowsOfBatch<C> {
    cache: C,
    /// The job of each row of `cache`.
    jobs: Vec<usize>,
    /// Times the rows were rebuilt.
    compactions: usize,
}

impl<C: LibCache> RowsOfBatch<C> {
    /// Every session's cache as one, with room for `extra` more columns.
    fn stack<M: LibModel<Cache = C>>(
        sessions: &mut [&mut super::LibSession<'_, M>],
        extra: usize,
    ) -> Result<Self, ExecutorError> {
        Ok(RowsOfBatch {
            cache: stack_caches(sessions, extra)?,
            jobs: (0..sessions.len()).collect(),
            compactions: 0,
        })
    }

    /// The sessions of the rows, in row order.
    fn sessions<'s, 'a, M: LibModel<Cache = C>>(
        &self,
        all: &'s mut [&mut super::LibSession<'a, M>],
    ) -> Vec<&'s mut super::LibSession<'a, M>> {
        let mut picked: Vec<Option<&mut super::LibSession<'a, M>>> =
            all.iter_mut().map(|s| Some(&mut **s)).collect();
        self.jobs
            .iter()
            .map(|&j| picked[j].take().expect("a job in one row"))
            .collect()
    }

    /// Gives every row's cache back to its session, then stacks those of
    /// `live` alone (holes gathered away), with room for `extra` columns.
    fn compact<M: LibModel<Cache = C>>(
        &mut self,
        all: &mut [&mut super::LibSession<'_, M>],
        live: &[usize],
        extra: usize,
    ) -> Result<(), ExecutorError> {
        let empty = all[0].model.new_cache();
        let cache = std::mem::replace(&mut self.cache, empty);
        unstack_caches(&mut self.sessions(all), cache)?;
        self.jobs = live.to_vec();
        self.cache = stack_caches(&mut self.sessions(all), extra)?;
        self.compactions += 1;
        Ok(())
    }

    /// Every row's cache back to its session.
    fn unstack<M: LibModel<Cache = C>>(
        self,
        all: &mut [&mut super::LibSession<'_, M>],
    ) -> Result<(), ExecutorError> {
        unstack_caches(&mut self.sessions(all), self.cache)
    }
}

/// The forward stage: for every job with another side's continuation,
/// the log-probabilities `[positions, k]` of `r.support` at each position
/// of `r.completion` teacher-forced after this trace's prompt, in one
/// pass over fresh sessions with this run's interventions. The prompt is
/// in the job's KV cache already: a fork of it, rewound to before the
/// prompt's last token, runs that token and the continuation. A run with
/// a policy runs its prompt again without it (the continuation is scored
/// under the model and its interventions).
fn score_references<M: LibModel>(
    exec: &LibExecutor<M>,
    jobs: &mut [Job<'_, M>],
) -> Result<(), ExecutorError> {
    let mut scoring = Vec::new();
    let mut sessions = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let Some((r, rows, k)) = job.reference else {
            continue;
        };
        let n = job.run.n;
        let mut session = exec.session(&job.run.options.interventions);
        let (mut fed, skip) = match job.run.session.hook.policy.is_none() {
            true => {
                session.cache = job.run.session.cache.fork()?;
                rewind(&mut session.cache, n - 1)?;
                (job.ids[n - 1..].to_vec(), 0)
            }
            false => (job.ids.clone(), n - 1),
        };
        fed.extend(&r.completion[..rows - 1]);
        scoring.push((i, r, rows, k, fed, skip));
        sessions.push(session);
    }
    if scoring.is_empty() {
        return Ok(());
    }
    let model = exec.model();
    let start = Instant::now();
    let logits = {
        let mut refs: Vec<&mut super::LibSession<'_, M>> = sessions.iter_mut().collect();
        let ids: Vec<&[u32]> = scoring.iter().map(|s| s.4.as_slice()).collect();
        let from: Vec<usize> = scoring.iter().map(|s| s.5).collect();
        let mut batch = stack_caches(&mut refs, 0)?;
        run_rows(model, &mut batch, &mut refs, &ids, &from, Pass::Prompt)?
    };
    let settled = model.settle();
    let total_ns = start.elapsed().as_nanos() as u64;
    let batch = Batch {
        sequences: sessions.len(),
        tokens: scoring.iter().map(|s| s.4.len()).sum(),
        opening: 0,
    };
    let mut settled = Some(settled);
    for ((i, r, rows, k, fed, _), logits) in scoring.into_iter().zip(logits) {
        let logits = logits.expect("every continuation has tokens");
        let run = &mut jobs[i].run;
        let scores = support_scores(&host_data(&run.ops, &logits, false)?, &r.support);
        debug_assert_eq!(scores.shape, [rows, k]);
        let pass = (fed.len(), total_ns, scores.bytes.len());
        let mut p = forward_profile(&run.rec, start, pass, run.on_device, &r.trace_id);
        settled.take().unwrap_or_default().note(&mut p);
        batch.note(&mut p);
        let span = run.rec.span(Stage::Forward, p);
        run.rec.reference(&span, r, scores);
    }
    Ok(())
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
            "per-layer key/value tensors [rows, kv_heads, capacity, head_dim], preallocated (decode reserves its longest generation; grown by doubling) and written in place".into(),
        );
        self.rec.span(Stage::PrepareBatch, p);
        Ok(())
    }

    /// prefill: the batched pass's span, for this trace (the pass ran in
    /// [`prefill_batch`]; `forward_ns` is its time outside every hook and
    /// the lm_head).
    fn prefill(
        &mut self,
        forward_ns: u64,
        settled: super::Settled,
        batch: &Batch,
    ) -> Result<(), ExecutorError> {
        let model = self.exec.model();
        let mut p = self.rec.profile(Instant::now(), self.n);
        settled.note(&mut p);
        // The prompt's ids, uploaded.
        p.host_device_copies = u64::from(self.on_device);
        if let Some(name) = model.device_label() {
            p.notes.insert("device_name".into(), name);
        }
        p.duration_ns = forward_ns;
        let kv_bytes = self.session.cache_bytes();
        note_prefill(&mut p, model.kernel_note(), model.kv_note(), kv_bytes);
        batch.note(&mut p);
        if batch.opening > 0 {
            p.notes.insert(
                "shared_opening".into(),
                format!(
                    "the first {} tokens, which all {} prompts of the batch open with, ran once; this trace continued from a copy of their KV cache",
                    batch.opening, batch.sequences
                ),
            );
        }
        self.rec.span(Stage::Prefill, p);
        Ok(())
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
    fn lm_head(
        &mut self,
        logits: &TensorOf<M>,
        timing: super::PassTiming,
        batch: &Batch,
    ) -> Result<Vec<f32>, ExecutorError> {
        let start = Instant::now();
        let all_logits = self.all_logits();
        let mut lm: Vec<(K, TensorData)> = Vec::new();
        if all_logits {
            let host = host_data(&self.ops, logits, false)?;
            if self.request.wants(K::Logprobs) {
                lm.push((K::Logprobs, log_softmax_data(&host)));
            }
            if self.request.wants(K::Logits) {
                lm.push((K::Logits, host));
            }
        }
        let next = last_logits(&self.ops, logits)?;
        let mut p = self.rec.profile(start, self.n);
        p.duration_ns += timing.lm_head_ns;
        batch.note(&mut p);
        self.rec.lm_head(p, lm, all_logits, self.on_device);
        Ok(next)
    }
}
