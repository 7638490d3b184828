//! The trace stage: load a side's model, apply its transformation, and
//! record one trace per prompt, reusing traces already recorded for the
//! same model, transformation, prompt and settings (found by content hash),
//! so an interrupted run resumes where it stopped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::json;

use crate::bundle::{Bundle, BundleWriter, WriteMode};
use crate::config::Prompt;
use crate::config::file::{PromptFormName, TransformKind};
use crate::executor::{
    Backend, Executor, ExecutorError, GenerateOptions, LocalBackend, LocalModel, ModelDims,
    ModelSpec, PromptForm, ReferenceContinuation, RunOptions, TraceOutput,
};
use crate::intervene::{Intervention, Mode, Positions, load_direction};
use crate::model::sample::Sampling;
use crate::model::{KvType, PrimitivePath};
use crate::trace::{ArtifactData, ArtifactKind as K, DeviceKind, TensorData, Trace, TraceRequest};

use super::plan::{DirectionRef, PICK_IN_CONFIG, Plan, SidePlan, TransformPlan};
use crate::config::file::ExecutorKind;

/// A loaded model with its transformation applied.
pub struct LoadedSide {
    pub exec: Backend,
    /// Applied in prefill and every decode step.
    pub interventions: Vec<Intervention>,
    /// What identifies this side's runs in the trace cache.
    pub fingerprint: serde_json::Value,
    /// The transformation, in words (none: the model as loaded).
    pub describe: Option<String>,
    /// sha256 of the weights file(s) as loaded, before any transformation.
    pub model_sha256: Option<String>,
    /// Prompts the embedded model traces in one batched pass.
    pub batch: usize,
}

/// Loads `side`'s model and applies its transformation; `measured` is the
/// `[measure]` stage's direction file, when the config has one.
pub fn load_side(
    side: &SidePlan,
    measured: Option<&Path>,
    output: &Path,
) -> anyhow::Result<LoadedSide> {
    let mut exec = open_executor(side, output).with_context(|| {
        format!(
            "{}: cannot load {}",
            side.name.as_str(),
            side.model.display()
        )
    })?;
    let Some(local) = exec.local_mut() else {
        return Ok(served_as_is(side, exec));
    };
    let model_sha256 = local.weights_sha256();
    // The adapter first: a transformation applies to the adapted model.
    let adapter = match &side.adapter {
        Some(path) => {
            let applied = local
                .load_adapter(path)
                .with_context(|| format!("{}: adapter {}", side.name.as_str(), path.display()))?;
            tracing::info!(
                "{}: applied the adapter {} ({} matrices)",
                side.name.as_str(),
                path.display(),
                applied.changes.len()
            );
            let describe = format!(
                "LoRA adapter {} (sha256 {}, {} matrices)",
                path.display(),
                applied.sha256,
                applied.changes.len()
            );
            let print = json!({ "path": path.display().to_string(), "sha256": applied.sha256 });
            Some((print, describe))
        }
        None => None,
    };
    let applied = match &side.transform {
        Some(t) => apply_transform(side, t, local, measured)?,
        None => Applied::default(),
    };
    let mut fingerprint = json!({
        "model_sha256": model_sha256,
        "model": side.model.display().to_string(),
        "weights": format!("{:?}", side.weights),
        "device": local.device_name(),
        "transform": applied.fingerprint,
        "system": side.system,
    });
    // Named only when there is one, so traces recorded before the setting
    // existed keep their fingerprint and are reused.
    // Named only when it is not the default, as `kv_cache`.
    if side.primitive != PrimitivePath::default() {
        fingerprint["primitive"] = json!(side.primitive.name());
    }
    let describe = match (adapter, applied.describe) {
        (Some((print, adapter)), transform) => {
            fingerprint["adapter"] = print;
            Some(match transform {
                Some(t) => format!("{adapter}, then {t}"),
                None => adapter,
            })
        }
        (None, transform) => transform,
    };
    // Named only when it is not the default, so traces recorded before the
    // setting existed (all f32) keep their fingerprint and are reused.
    if side.kv_cache != KvType::F32 {
        fingerprint["kv_cache"] = json!(side.kv_cache.name());
    }
    // Likewise the executor: candle's traces keep their fingerprint.
    match side.backend {
        ExecutorKind::Torch => {
            fingerprint["executor"] = json!("torch");
            fingerprint["dtype"] = json!(side.dtype.name());
        }
        ExecutorKind::Mlx => fingerprint["executor"] = json!("mlx"),
        _ => {}
    }
    Ok(LoadedSide {
        exec,
        interventions: applied.interventions,
        fingerprint,
        describe,
        model_sha256,
        batch: side.batch,
    })
}

/// The executor `side` names, opened on its model.
fn open_executor(side: &SidePlan, output: &Path) -> Result<Backend, ExecutorError> {
    let spec = ModelSpec {
        path: side.model.clone(),
        device: side.device,
        weights: side.weights,
        kv_cache: side.kv_cache,
        dtype: side.dtype,
        primitive: side.primitive,
    };
    Ok(match side.backend {
        ExecutorKind::Candle => LocalBackend::load(&spec)?.into(),
        ExecutorKind::Torch => LocalBackend::torch(&spec)?.into(),
        ExecutorKind::Mlx => LocalBackend::mlx(&spec)?.into(),
        ExecutorKind::Replay => Backend::replay(&side.model)?,
        ExecutorKind::Http => {
            let mut http = side
                .http
                .clone()
                .expect("the plan sets an http side's endpoint");
            // Every answer is kept, so a rerun asks only for what is missing.
            http.cache = Some(output.join("traces").join("http").join(side.name.as_str()));
            Backend::http(&http)?
        }
    })
}

/// A side whose model vauban does not hold (an endpoint, a recording): it
/// serves its model as it is, with no transformation to apply.
fn served_as_is(side: &SidePlan, exec: Backend) -> LoadedSide {
    let (fingerprint, model_sha256) = match exec.served_identity() {
        // What identifies an endpoint's model is what the server reported
        // when probed.
        Some(identity) => (json!({ "http": identity, "system": side.system }), None),
        // The recording already holds whatever transformation was applied.
        None => (
            json!({ "replay": side.model.display().to_string() }),
            exec.model_ref().sha256,
        ),
    };
    // A recording says what its run did to the model.
    let describe = exec.recorded_transformation();
    LoadedSide {
        exec,
        interventions: Vec::new(),
        fingerprint,
        describe,
        model_sha256,
        batch: side.batch,
    }
}

/// What a side's transformation did to its model: the interventions its
/// runs apply, the transformation in words, and what identifies it in the
/// trace cache.
#[derive(Default)]
struct Applied {
    interventions: Vec<Intervention>,
    describe: Option<String>,
    fingerprint: serde_json::Value,
}

/// Applies `t` to `side`'s model: loads its direction (or resolves its
/// interventions) at every layer it names, and changes the weights where
/// it orthogonalizes.
fn apply_transform(
    side: &SidePlan,
    t: &TransformPlan,
    local: &mut LocalBackend,
    measured: Option<&Path>,
) -> anyhow::Result<Applied> {
    let dims = local.dims();
    let layers: Vec<usize> = match t.layers.is_empty() {
        true => (0..dims.layers).collect(),
        false => t.layers.clone(),
    };
    local
        .check_layers(&layers)
        .with_context(|| format!("{}.transform.layers", side.name.as_str()))?;
    match t.kind {
        TransformKind::Intervene => intervene(side, t, dims),
        TransformKind::Ablate | TransformKind::Orthogonalize | TransformKind::Steer => {
            along_direction(side, t, local, &layers, measured)
        }
    }
}

/// Subtracts, adds or orthogonalizes against the transformation's
/// direction at each of `layers` (read from its file, or the measured one).
fn along_direction(
    side: &SidePlan,
    t: &TransformPlan,
    local: &mut LocalBackend,
    layers: &[usize],
    measured: Option<&Path>,
) -> anyhow::Result<Applied> {
    let dims = local.dims();
    let mut interventions = Vec::new();
    let (path, tensor) = direction_file(t.direction.as_ref(), t.tensor.as_deref(), measured)?;
    let mut sha = String::new();
    let mut norm = 0.0;
    for &layer in layers {
        let d = load_direction(&path, tensor.as_deref(), None, layer)
            .map_err(|e| e.picked_with(PICK_IN_CONFIG))
            .with_context(|| format!("{}.transform.direction", side.name.as_str()))?;
        if d.width() != dims.hidden {
            bail!(
                "{}.transform.direction: {} has width {} but the model's hidden size is {}",
                side.name.as_str(),
                path.display(),
                d.width(),
                dims.hidden
            );
        }
        norm = d.norms[0];
        sha = d.file_sha256.clone();
        match t.kind {
            TransformKind::Ablate => interventions.push(Intervention {
                layer,
                mode: Mode::Subtract,
                direction: d.unit()?,
                alpha: t.alpha,
                value: None,
                positions: Positions::All,
                condition: None,
            }),
            // Activation addition takes the direction as the
            // file holds it (a difference of means carries its
            // own scale), times `alpha`.
            TransformKind::Steer => {
                let steer = Intervention {
                    layer,
                    mode: Mode::Steer,
                    direction: d,
                    alpha: t.alpha,
                    value: None,
                    positions: Positions::All,
                    condition: None,
                };
                steer
                    .check()
                    .with_context(|| format!("{}.transform.direction", side.name.as_str()))?;
                interventions.push(steer);
            }
            _ => {
                local.orthogonalize(&d.unit()?, &[layer])?;
            }
        }
    }
    let what = match t.kind {
        TransformKind::Ablate => format!(
            "directional ablation (subtract, alpha {}) of {} (tensor {}, norm {norm:.4}) after {} blocks",
            t.alpha,
            path.display(),
            tensor.as_deref().unwrap_or("(the only one)"),
            layers.len()
        ),
        TransformKind::Steer => format!(
            "activation addition (steer, alpha {}) of {} (tensor {}, norm {norm:.4}) after {} block(s) {:?}",
            t.alpha,
            path.display(),
            tensor.as_deref().unwrap_or("(the only one)"),
            layers.len(),
            layers
        ),
        _ => format!(
            "weights orthogonalized against {} (tensor {}) in {} blocks (attn_output, ffn_down)",
            path.display(),
            tensor.as_deref().unwrap_or("(the only one)"),
            layers.len()
        ),
    };
    let transform_fp = json!({
        "kind": t.kind.as_str(), "direction_sha256": sha, "tensor": tensor,
        "layers": layers, "alpha": t.alpha,
    });
    Ok(Applied {
        interventions,
        describe: Some(what),
        fingerprint: transform_fp,
    })
}

/// The transformation's own interventions, resolved against the model.
fn intervene(side: &SidePlan, t: &TransformPlan, dims: ModelDims) -> anyhow::Result<Applied> {
    let mut interventions = Vec::new();
    for spec in &t.interventions {
        interventions.push(
            spec.resolve(dims.hidden, dims.layers)
                .with_context(|| format!("{}.transform.interventions", side.name.as_str()))?,
        );
    }
    let transform_fp = json!({
        "kind": "intervene",
        "interventions": interventions.iter().map(Intervention::record).collect::<Vec<_>>(),
    });
    let describe = format!(
        "{} activation intervention(s): {}",
        interventions.len(),
        interventions
            .iter()
            .map(|i| format!(
                "{} at layer {} (alpha {})",
                i.mode.as_str(),
                i.layer,
                i.alpha
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(Applied {
        interventions,
        describe: Some(describe),
        fingerprint: transform_fp,
    })
}

/// The direction file and tensor a transformation names.
fn direction_file(
    d: Option<&DirectionRef>,
    tensor: Option<&str>,
    measured: Option<&Path>,
) -> anyhow::Result<(PathBuf, Option<String>)> {
    match d {
        Some(DirectionRef::File(p)) => Ok((p.clone(), tensor.map(str::to_owned))),
        Some(DirectionRef::Measured) => match measured {
            Some(p) => Ok((
                p.to_path_buf(),
                Some(tensor.unwrap_or("direction").to_owned()),
            )),
            None => bail!("`measured` direction, but no `[measure]` stage ran"),
        },
        None => bail!("the transformation has no direction"),
    }
}

/// What both sides run each prompt with.
pub struct RunSettings {
    pub form: PromptFormName,
    /// The first sample's generation; sample k seeds with `seed + k`.
    pub generate: GenerateOptions,
    /// Generations per prompt (1 when greedy).
    pub samples: usize,
    pub observe: Vec<K>,
    pub layers: Vec<usize>,
    pub raw_activations: bool,
}

impl RunSettings {
    pub fn from_plan(
        plan: &Plan,
        side: &LoadedSide,
        generation: &super::plan::GenerationSettings,
    ) -> anyhow::Result<RunSettings> {
        let o = &plan.config.observe;
        let g = generation;
        let mut observe = vec![K::Text, K::Tokens, K::Profile];
        if o.logprobs {
            observe.extend([K::Logits, K::Logprobs]);
        }
        if !o.layers.is_empty() {
            side.exec
                .check_layers(&o.layers)
                .context("observe.layers")?;
            observe.push(K::Activation);
        }
        if o.weights {
            if o.layers.is_empty() {
                bail!("observe.weights needs observe.layers (the blocks whose weights to record)");
            }
            observe.push(K::WeightSnapshot);
        }
        if !side.interventions.is_empty() {
            observe.push(K::InterventionResult);
        }
        let sampling = match g.temperature {
            0.0 => None,
            t => Some(Sampling {
                temperature: t,
                top_p: g.top_p,
                top_k: g.top_k,
                seed: g.seed,
            }),
        };
        if let Some(s) = &sampling {
            crate::model::sample::Sampler::new(s.clone()).context("sampling")?;
        }
        Ok(RunSettings {
            form: o.prompt_form,
            samples: g.samples,
            generate: GenerateOptions {
                max_tokens: g.max_tokens,
                sampling,
                stop: g.stop.clone(),
                top_logprobs: match o.logprobs {
                    true => o.top_logprobs,
                    false => 0,
                },
            },
            observe,
            layers: o.layers.clone(),
            raw_activations: o.raw_tensors,
        })
    }

    fn request(&self, p: &Prompt) -> TraceRequest {
        TraceRequest {
            prompt_id: Some(p.id.clone()),
            category: p.category.clone(),
            expected_behavior: p.expected_behavior.clone(),
            text: Some(p.text.clone()),
            token_ids: None,
            observe: self.observe.clone(),
            layers: self.layers.clone(),
            raw_tensors: self.raw_activations,
            // Logits, log-probabilities and weight snapshots are vocabulary- or
            // matrix-sized and the pipeline keeps their summaries only.
            raw_kinds: vec![K::Activation],
        }
    }

    fn form(&self, system: Option<&str>) -> PromptForm {
        match self.form {
            PromptFormName::Raw => PromptForm::Raw,
            PromptFormName::Chat => PromptForm::Chat {
                system: system.map(str::to_owned),
            },
        }
    }
}

/// What the trace stage did for one side.
pub struct Recorded {
    pub bundle: Bundle,
    pub reused: usize,
}

/// Records (or reuses) one trace per prompt and writes the side's bundle
/// at `bundle_path`; per-trace results are kept under `cache` as they are
/// made, so an interrupted run loses at most the prompt in flight.
/// `references` (by prompt id) are the other side's continuations to score
/// after each prompt (the candidate's side of the KL).
#[allow(clippy::too_many_arguments)]
pub fn record_side(
    name: &str,
    side: &LoadedSide,
    system: Option<&str>,
    settings: &RunSettings,
    prompts: &[Prompt],
    references: &HashMap<String, ReferenceContinuation>,
    cache: &Path,
    bundle_path: &Path,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<Recorded> {
    // A replay serves recorded traces: nothing to resume, nothing to keep.
    let cached = !side.exec.is_replay();
    if cached {
        std::fs::create_dir_all(cache)
            .with_context(|| format!("cannot create {}", cache.display()))?;
    }
    let runs = plan_runs(side, system, settings, prompts, references, cache);
    let total = runs.len();
    let recorded_before = runs.iter().filter(|r| cached && r.dir.exists()).count();
    if recorded_before > 0 {
        tracing::info!(
            target: super::NOTICE,
            "reusing {recorded_before} of {total} recorded {name} traces"
        );
    }
    // Recorded traces first; the rest go to the executor in one batch,
    // which an endpoint answers several at a time and a local model in
    // order. Each trace is kept in the cache the moment it arrives.
    let mut parts: Vec<Option<Part>> = vec![None; total];
    let mut pending = Vec::new();
    for (i, run) in runs.into_iter().enumerate() {
        match cached.then(|| reuse(&run)).flatten() {
            Some(part) => {
                parts[i] = Some(part);
                progress.inc(1);
            }
            None => pending.push((i, run)),
        }
    }
    let reused = total - pending.len();
    let tracing = Tracing {
        name,
        side,
        cached,
        cache,
        total,
        progress,
    };
    if let Some(e) = tracing.trace_pending(&pending, &mut parts) {
        let kept = parts.iter().filter(|p| p.is_some()).count();
        return Err(match e.downcast::<crate::interrupt::Interrupted>() {
            Ok(mut stop) => {
                stop.kept[0].kept = kept;
                anyhow::Error::new(stop)
            }
            Err(e) if cached && kept > 0 => e.context(format!(
                "{kept} of {total} {name} traces are kept in {}; run the same command to resume",
                cache.display()
            )),
            Err(e) => e,
        });
    }
    let mut w = BundleWriter::create(bundle_path, WriteMode::Replace)
        .with_context(|| format!("cannot write {}", bundle_path.display()))?;
    if let Some(d) = &side.describe {
        w.transformation(d.clone());
    }
    for (t, tensors) in parts.iter().flatten() {
        w.add_trace(t, tensors)?;
    }
    w.finish()?;
    let bundle = Bundle::open(bundle_path)?;
    Ok(Recorded { bundle, reused })
}

/// A trace and its raw tensors.
type Part = (Trace, HashMap<String, TensorData>);

/// One trace to record or reuse: a prompt's sample, its request and
/// options, and where the cache keeps it.
struct Run<'p> {
    prompt: &'p Prompt,
    request: TraceRequest,
    options: RunOptions,
    dir: PathBuf,
}

/// Every trace of the side, in order: each prompt's samples in a row, the
/// first (seed `seed`, id the prompt's) first: it is the one examples
/// show and the KL pairs.
fn plan_runs<'p>(
    side: &LoadedSide,
    system: Option<&str>,
    settings: &RunSettings,
    prompts: &'p [Prompt],
    references: &HashMap<String, ReferenceContinuation>,
    cache: &Path,
) -> Vec<Run<'p>> {
    prompts
        .iter()
        .flat_map(|p| (0..settings.samples).map(move |k| (p, k)))
        .map(|(p, k)| {
            let request = settings.request(p);
            let mut generate = settings.generate.clone();
            if let Some(s) = generate.sampling.as_mut() {
                s.seed = s.seed.wrapping_add(k as u64);
            }
            let options = RunOptions {
                trace_id: sample_id(&p.id, k),
                prompt: settings.form(system),
                interventions: side.interventions.clone(),
                block_outputs: false,
                generate,
                reference: (k == 0).then(|| references.get(&p.id).cloned()).flatten(),
            };
            let dir = cache.join(cache_key(&side.fingerprint, &request, &options));
            Run {
                prompt: p,
                request,
                options,
                dir,
            }
        })
        .collect()
}

/// The cached trace of `run`, when one was recorded and reads back; one
/// that does not is recorded again, with a warning.
fn reuse(run: &Run<'_>) -> Option<Part> {
    if !run.dir.exists() {
        return None;
    }
    match read_cached(&run.dir) {
        Ok(part) => {
            tracing::debug!("reusing {} for prompt {}", run.dir.display(), run.prompt.id);
            Some(part)
        }
        Err(e) => {
            tracing::warn!(
                "re-recording prompt {}: cached trace unusable ({e:#})",
                run.prompt.id
            );
            None
        }
    }
}

/// What tracing the pending runs of one side needs.
struct Tracing<'a> {
    name: &'a str,
    side: &'a LoadedSide,
    cached: bool,
    cache: &'a Path,
    total: usize,
    progress: &'a indicatif::ProgressBar,
}

impl Tracing<'_> {
    /// Traces the pending runs into `parts`, keeping each in the cache as
    /// it arrives; the first failure, or the user's stop, when the side
    /// could not be finished.
    fn trace_pending(
        &self,
        pending: &[(usize, Run<'_>)],
        parts: &mut [Option<Part>],
    ) -> Option<anyhow::Error> {
        if pending.is_empty() {
            return None;
        }
        if self.cached && crate::interrupt::requested() {
            return Some(self.interrupted());
        }
        let jobs: Vec<(TraceRequest, RunOptions)> = pending
            .iter()
            .map(|(_, r)| (r.request.clone(), r.options.clone()))
            .collect();
        let mut failure: Option<anyhow::Error> = None;
        let started = std::time::Instant::now();
        let (mut answered, mut tokens) = (0usize, 0u64);
        self.side
            .exec
            .trace_all(&jobs, self.side.batch, &mut |j, result| {
                let (i, run) = &pending[j];
                let step = result
                    .with_context(|| format!("tracing prompt `{}`", run.prompt.id))
                    .and_then(|out| self.keep(run, out));
                match step {
                    Ok(out) => {
                        answered += 1;
                        tokens += out
                            .0
                            .spans
                            .iter()
                            .filter(|s| s.stage.runs_model())
                            .map(|s| s.profile.token_count)
                            .sum::<u64>();
                        parts[*i] = Some(out);
                        self.progress.inc(1);
                        if self.side.exec.device_kind() == DeviceKind::Remote {
                            let secs = started.elapsed().as_secs_f64().max(1e-9);
                            self.progress.set_message(format!(
                                "{} {:.1} req/s {:.0} tok/s",
                                self.name,
                                answered as f64 / secs,
                                tokens as f64 / secs
                            ));
                        }
                    }
                    Err(e) => {
                        // The first failure is the one reported; a batch's
                        // later results still arrive, and are kept.
                        failure.get_or_insert(e);
                        return std::ops::ControlFlow::Break(());
                    }
                }
                // Stop before the next prompt; what arrived is kept.
                match self.cached && answered < jobs.len() && crate::interrupt::requested() {
                    true => {
                        failure.get_or_insert_with(|| self.interrupted());
                        std::ops::ControlFlow::Break(())
                    }
                    false => std::ops::ControlFlow::Continue(()),
                }
            });
        failure
    }

    /// A traced run, its unrequested activations dropped, kept in the
    /// cache (where the side is cached).
    fn keep(&self, run: &Run<'_>, mut out: TraceOutput) -> anyhow::Result<Part> {
        keep_raw_activations_only(&mut out.trace, &mut out.tensors);
        if self.cached {
            let mut w = BundleWriter::create(&run.dir, WriteMode::Replace)?;
            w.add_trace(&out.trace, &out.tensors)?;
            w.finish()?;
        }
        Ok((out.trace, out.tensors))
    }

    /// The user's stop while tracing this side.
    fn interrupted(&self) -> anyhow::Error {
        anyhow::Error::new(crate::interrupt::Interrupted {
            at: "while tracing".into(),
            kept: vec![crate::interrupt::Kept {
                side: self.name.to_owned(),
                kept: 0,
                of: self.total,
            }],
            cache: self.cache.to_path_buf(),
        })
    }
}

/// A trace's id: the prompt's for its first sample, `ID#K` for sample K.
pub fn sample_id(prompt: &str, k: usize) -> String {
    match k {
        0 => prompt.to_owned(),
        k => format!("{prompt}#{k}"),
    }
}

/// The version of [`cache_key`]'s layout: bumped when what the key holds
/// changes on purpose, so that no old entry is read under a new meaning.
const CACHE_KEY_LAYOUT: u32 = 2;

/// The trace cache's key of one run: everything that decides its trace,
/// serialized by serde (never by `Debug`, whose text is not a contract),
/// as one JSON object whose keys are sorted at every level, hashed with
/// sha256. `cache_key_is_stable` pins its value for fixed inputs: a
/// change there (a field renamed, a serde setting, JSON's key order) would
/// otherwise re-record every cached trace, or read stale ones.
fn cache_key(side: &serde_json::Value, request: &TraceRequest, options: &RunOptions) -> String {
    crate::hash::sha256_hex(cache_key_text(side, request, options).as_bytes())
}

/// The text [`cache_key`] hashes.
fn cache_key_text(
    side: &serde_json::Value,
    request: &TraceRequest,
    options: &RunOptions,
) -> String {
    let key = json!({
        "layout": CACHE_KEY_LAYOUT,
        "tool": env!("CARGO_PKG_VERSION"),
        "side": side,
        "request": request,
        "prompt": options.prompt,
        "generate": {
            "max_tokens": options.generate.max_tokens,
            "sampling": options.generate.sampling,
            "stop": options.generate.stop,
            "top_logprobs": options.generate.top_logprobs,
        },
        "reference": options.reference.as_ref().map(|r| &r.sha256),
    });
    sorted(key).to_string()
}

/// `value` with every object's keys in sorted order, whatever order
/// serde_json's map keeps (insertion order when a dependency turns on its
/// `preserve_order` feature).
fn sorted(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// A cached single-trace bundle, verified, with its raw tensors.
fn read_cached(dir: &Path) -> anyhow::Result<(Trace, HashMap<String, TensorData>)> {
    let b = Bundle::open(dir)?;
    b.verify_all()?;
    let [t] = b.traces() else {
        bail!(
            "{} holds {} traces, not one",
            dir.display(),
            b.traces().len()
        );
    };
    let tensors = b.raw_tensors(t)?;
    Ok((t.clone(), tensors))
}

/// Raw tensors are kept for activations and the KL's top-k rows only:
/// full logits, logprobs and weight snapshots are vocabulary- or
/// matrix-sized, and their summaries stay.
fn keep_raw_activations_only(trace: &mut Trace, tensors: &mut HashMap<String, TensorData>) {
    for a in &mut trace.artifacts {
        if a.kind != K::Activation
            && !a.is_kl_rows()
            && let ArtifactData::Tensor { raw, .. } = &mut a.data
            && *raw
        {
            *raw = false;
            tensors.remove(&a.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache key's text for fixed inputs, written out: a change to
    /// it (a renamed field, a serde attribute, the JSON's key order) must
    /// be deliberate, with [`CACHE_KEY_LAYOUT`] bumped, since it re-records
    /// every cached trace or reads stale ones.
    #[test]
    fn cache_key_is_stable() {
        let request = TraceRequest {
            prompt_id: Some("p1".into()),
            text: Some("Hi".into()),
            observe: vec![K::Text, K::Logprobs],
            layers: vec![3],
            ..TraceRequest::default()
        };
        let options = RunOptions {
            trace_id: "p1".into(),
            prompt: PromptForm::Chat {
                system: Some("Be brief.".into()),
            },
            interventions: Vec::new(),
            block_outputs: false,
            generate: GenerateOptions {
                max_tokens: 8,
                sampling: Some(Sampling {
                    temperature: 0.7,
                    top_p: 0.9,
                    top_k: Some(40),
                    seed: 7,
                }),
                stop: vec!["\n".into()],
                top_logprobs: 20,
            },
            reference: None,
        };
        let side = json!({"model_sha256": "ab", "weights": "native"});
        let want = format!(
            concat!(
                r#"{{"generate":{{"max_tokens":8,"sampling":{{"seed":7,"temperature":0.699999988079071,"#,
                r#""top_k":40,"top_p":0.8999999761581421}},"stop":["\n"],"top_logprobs":20}},"#,
                r#""layout":2,"prompt":{{"form":"chat","system":"Be brief."}},"reference":null,"#,
                r#""request":{{"layers":[3],"observe":["text","logprobs"],"prompt_id":"p1","#,
                r#""raw_tensors":false,"text":"Hi"}},"side":{{"model_sha256":"ab","weights":"native"}},"#,
                r#""tool":"{}"}}"#
            ),
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(cache_key_text(&side, &request, &options), want);
        assert_eq!(
            cache_key(&side, &request, &options),
            crate::hash::sha256_hex(want.as_bytes())
        );
    }
}
