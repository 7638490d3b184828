//! The order of a traced run's stages, written once for every local
//! backend: tokenize and prepare_batch (`begin`), then prefill, observe and
//! lm_head, then decode, then forward (a reference continuation scored),
//! then intervene and the run's profile (`finish`). A backend supplies
//! each stage's body over a slice of jobs, so one that batches (candle)
//! runs a stage as one pass over all of them and one that does not runs
//! them one after another; the order, the batch's error handling and the
//! fallback to one job at a time are the driver's.

use crate::executor::generate::Generation;
use crate::executor::hook::{Kept, RunHook, TensorOps};
use crate::executor::recorder::{Observed, Recorder, labels, resident_bytes};
use crate::executor::{ExecutorError, RunOptions, TraceOutput};
use crate::intervene::policy::StepPolicy;
use crate::model::Matrix;
use crate::trace::{ArtifactKind as K, Site, StageProfile, TensorData, TraceRequest};

/// A local backend's stages of a traced run.
pub(crate) trait TracedStages {
    /// A trace in progress: its recorder, session and what the stages
    /// before handed on.
    type Job<'a>
    where
        Self: 'a;

    /// tokenize and prepare_batch: the prompt's tokens, the session, its
    /// cache and hook (with `policy` deciding ops after its blocks).
    fn begin<'a>(
        &'a self,
        request: &'a TraceRequest,
        options: &'a RunOptions,
        policy: Option<&'a mut dyn StepPolicy>,
    ) -> Result<Self::Job<'a>, ExecutorError>;
    /// prefill, observe and lm_head of every job.
    fn prefill(&self, jobs: &mut [Self::Job<'_>]) -> Result<(), ExecutorError>;
    /// decode: the generation of every job that asks for one.
    fn decode(&self, jobs: &mut [Self::Job<'_>]) -> Result<(), ExecutorError>;
    /// forward: every job's reference continuation, scored.
    fn forward(&self, jobs: &mut [Self::Job<'_>]) -> Result<(), ExecutorError>;
    /// intervene (what each intervention and the policy did), the run's
    /// profile, and the finished trace.
    fn finish(&self, job: Self::Job<'_>) -> Result<TraceOutput, ExecutorError>;
}

/// One traced run: a batch of one.
pub(crate) fn trace_one<S: TracedStages>(
    backend: &S,
    request: &TraceRequest,
    options: &RunOptions,
    policy: Option<&mut dyn StepPolicy>,
) -> Result<TraceOutput, ExecutorError> {
    // The policy's trait object is reborrowed for the job's lifetime.
    let policy = policy.map(|p| p as &mut dyn StepPolicy);
    let mut jobs = vec![backend.begin(request, options, policy)?];
    run_stages(backend, &mut jobs)?;
    backend.finish(jobs.pop().expect("one job"))
}

/// Traces `jobs` as one batch, each stage over all of them. Each trace
/// records what it would alone. A job that cannot start fails alone; a
/// batch whose stages fail is run again one job at a time, so a bad job
/// cannot fail the others. One result per job, in order.
pub(crate) fn trace_batch<S: TracedStages>(
    backend: &S,
    jobs: &[(TraceRequest, RunOptions)],
) -> Vec<Result<TraceOutput, ExecutorError>> {
    let mut out: Vec<Option<Result<TraceOutput, ExecutorError>>> =
        jobs.iter().map(|_| None).collect();
    let mut started = Vec::new();
    let mut index = Vec::new();
    for (i, (request, options)) in jobs.iter().enumerate() {
        match backend.begin(request, options, None) {
            Ok(job) => {
                started.push(job);
                index.push(i);
            }
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    match run_stages(backend, &mut started) {
        Ok(()) => {
            for (i, job) in index.into_iter().zip(started) {
                out[i] = Some(backend.finish(job));
            }
        }
        Err(e) if started.len() == 1 => out[index[0]] = Some(Err(e)),
        Err(e) => {
            tracing::warn!(
                "a batched pass over {} traces failed ({e}); running them one at a time",
                started.len()
            );
            drop(started);
            for i in index {
                let (request, options) = &jobs[i];
                out[i] = Some(trace_one(backend, request, options, None));
            }
        }
    }
    out.into_iter()
        .map(|r| r.expect("every job is answered"))
        .collect()
}

/// `batch` jobs at a time in one batched run ([`trace_batch`]), results
/// handed back in order: an executor's `trace_all`. A batch's results are
/// all computed by the time the first is handed over, so all of them are
/// (what was computed is kept); `Break` stops before the next batch.
pub(crate) fn trace_in_batches<S: TracedStages>(
    backend: &S,
    jobs: &[(TraceRequest, RunOptions)],
    batch: usize,
    on_done: &mut dyn FnMut(usize, Result<TraceOutput, ExecutorError>) -> std::ops::ControlFlow<()>,
) {
    let batch = batch.max(1);
    for (b, chunk) in jobs.chunks(batch).enumerate() {
        let mut stop = false;
        for (i, result) in trace_batch(backend, chunk).into_iter().enumerate() {
            stop |= on_done(b * batch + i, result).is_break();
        }
        if stop {
            return;
        }
    }
}

/// The stages between `begin` and `finish`, in their order.
fn run_stages<S: TracedStages>(backend: &S, jobs: &mut [S::Job<'_>]) -> Result<(), ExecutorError> {
    backend.prefill(jobs)?;
    backend.decode(jobs)?;
    backend.forward(jobs)
}

/// The last stage of every backend's trace: the intervene span (what each
/// intervention and the policy did over prefill and decode, from the
/// run's hook), the run's profile, and the finished trace.
pub(crate) fn close<O: TensorOps>(
    mut rec: Recorder,
    options: &RunOptions,
    hook: &RunHook<'_, O>,
    (prompt_tokens, prefill_ns): (usize, u64),
    generation: Option<Generation>,
) -> Result<TraceOutput, ExecutorError> {
    let policy = hook
        .policy
        .as_deref()
        .map(|p| (p as &dyn StepPolicy, &hook.policy_log));
    rec.interventions(
        &options.interventions,
        &hook.effects,
        policy,
        (hook.intervene_ns, hook.primitive_note()),
    );
    rec.run_profile(prompt_tokens, prefill_ns, generation.as_ref());
    rec.finish(generation)
}

/// What the observe span records of a run: each kept activation (labelled
/// with its site, a router's with how many experts each token used), then
/// the weight snapshots the request asks for (the two matrices of each
/// observed block that write into the residual stream). `host` copies an
/// activation to the host, `weight` a block's matrix.
pub(crate) fn observed<T>(
    request: &TraceRequest,
    kept: &[Kept<T>],
    experts_used: Option<usize>,
    host: impl Fn(&T) -> Result<TensorData, ExecutorError>,
    mut weight: impl FnMut(usize, Matrix) -> Result<TensorData, ExecutorError>,
) -> Result<Vec<Observed>, ExecutorError> {
    let used = experts_used.map(|u| u.to_string());
    let mut out: Vec<Observed> = Vec::new();
    for k in kept {
        let mut l = labels(&[(Site::KEY, k.site.as_str())]);
        if let (Site::Router, Some(u)) = (k.site, &used) {
            l.insert("experts_used".into(), u.clone());
        }
        out.push((K::Activation, k.layer, l, host(&k.tensor)?));
    }
    if request.wants(K::WeightSnapshot) {
        for &layer in &request.layers {
            for m in [Matrix::AttnOutput, Matrix::FfnDown] {
                let l = labels(&[("matrix", m.gguf_stem()), ("dequantized", "true")]);
                out.push((K::WeightSnapshot, layer, l, weight(layer, m)?));
            }
        }
    }
    Ok(out)
}

/// What every backend's prefill span says beyond its times: the process's
/// resident memory, the kernel that ran, that the hook's and the lm_head's
/// time are in their own spans, and the KV cache (its layout and bytes).
/// How a batch's decode ran, for each trace's decode span.
pub(crate) struct DecodeBatch {
    pub start: std::time::Instant,
    /// Whether tensors live in another memory than the host's.
    pub on_device: bool,
    /// The most sequences one step ran.
    pub widest: usize,
    /// Sequences of the batch that generated.
    pub generating: usize,
    /// How the steps kept keys and values, for the batch note (empty, or
    /// " over one preallocated cache").
    pub cache: &'static str,
    /// Times the batch's cache was rebuilt with the sequences still
    /// generating alone.
    pub compactions: usize,
}

/// The decode span's profile of a finished generation `g`, which kept
/// `kv_cache_bytes` of keys and values.
pub(crate) fn decode_profile(
    rec: &Recorder,
    g: &Generation,
    options: &RunOptions,
    kv_cache_bytes: u64,
    d: &DecodeBatch,
) -> StageProfile {
    let mut p = rec.profile(d.start, g.decode_steps);
    p.duration_ns = g.decode_ns;
    // Each step uploads its token and copies its logits back, which
    // waits for the step: one synchronisation per step. A batched
    // step's sequences share one upload, which each trace counts as its
    // own (as each counts the step's whole time).
    if d.on_device {
        p.host_device_copies = 2 * g.decode_steps as u64;
        p.sync_points += g.decode_steps as u64;
    }
    crate::executor::recorder::note_generation(&mut p, g, &options.generate);
    p.notes
        .insert("kv_cache_bytes".into(), kv_cache_bytes.to_string());
    p.batch_size = d.widest as u32;
    if d.generating > 1 {
        p.notes.insert(
            "batch".into(),
            format!(
                "decoded with up to {} sequences per step{}; its time is the steps' it took part in",
                d.widest, d.cache
            ),
        );
    }
    if d.compactions > 0 {
        p.notes.insert(
            "compacted".into(),
            format!(
                "the batch's cache was rebuilt {} time(s) with the sequences still generating alone, once half or more had finished",
                d.compactions
            ),
        );
    }
    p
}

/// The forward span's profile of a scored continuation of trace
/// `trace_id` (`tokens` run, `output_bytes` of scores kept), in a pass
/// that took `ns`.
pub(crate) fn forward_profile(
    rec: &Recorder,
    start: std::time::Instant,
    (tokens, ns, output_bytes): (usize, u64, usize),
    on_device: bool,
    trace_id: &str,
) -> StageProfile {
    let mut p = rec.profile(start, tokens);
    p.duration_ns = ns;
    p.output_bytes = output_bytes as u64;
    // The tokens up, the scored rows' logits back.
    if on_device {
        p.host_device_copies = 2;
    }
    p.notes.insert(
        "teacher_forced".into(),
        format!(
            "the continuation of trace `{trace_id}` after this run's prompt; log-probabilities of its top tokens"
        ),
    );
    p
}

pub(crate) fn note_prefill(p: &mut StageProfile, kernel: String, kv_cache: String, kv_bytes: u64) {
    p.memory_bytes = resident_bytes();
    p.notes.insert("kernel".into(), kernel);
    p.notes.insert(
        "excludes".into(),
        "hook (intervene, observe) and lm_head time, recorded in their own spans".into(),
    );
    p.notes
        .insert("kv_cache_bytes".into(), kv_bytes.to_string());
    p.notes.insert("kv_cache".into(), kv_cache);
}
