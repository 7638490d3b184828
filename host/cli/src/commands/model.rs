//! `vauban trace --model …`, `vauban generate` and `vauban model
//! orthogonalize`: the commands that load and run a model.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use vauban::bundle::{BundleWriter, WriteMode};
use vauban::executor::{
    DeviceSpec, Executor, GenerateOptions, InferenceSession, LocalBackend, LocalModel, ModelSpec,
    PromptForm, RunOptions, StopReason, generate::DEFAULT_MAX_TOKENS,
};
use vauban::intervene::{Direction, Intervention, InterventionSpec, load_direction};
use vauban::model::sample::Sampling;
use vauban::model::{Dtype, KvType, PrimitivePath, WeightMode};
use vauban::pipeline::progress_bar;
use vauban::plugin::policy::PolicyRun;
use vauban::plugin::{HostOptions, PluginHost, Policy, SandboxOptions};
use vauban::trace::{ArtifactKind as K, TraceRequest};

/// Which model, where, and how its weights are held.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// A .gguf file or an HF-style folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// cpu, cuda, cuda:N, metal (candle's GPUs need a build with --features
    /// cuda or metal; mlx on Apple silicon), mps (torch on Apple silicon).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// native: weights as the file stores them (quantized GGUF stays
    /// quantized); f32: dequantize at load (more memory, often faster on CPU).
    #[arg(long, default_value = "native", value_name = "native|f32")]
    pub weights: WeightMode,
    /// How the KV cache stores keys and values: f32 (as computed) or f16
    /// (half the memory, each key and value rounded to f16).
    #[arg(long, default_value = "f32", value_name = "f32|f16")]
    pub kv_cache: KvType,
    /// Who runs the model: candle (embedded, the default), torch
    /// (libtorch; a build with --features torch) or mlx (MLX; a build with
    /// --features mlx).
    #[arg(long, value_enum, default_value_t = Engine::Candle)]
    pub executor: Engine,
    /// The Torch executor's dtype for weights and activations: f32, bf16
    /// or f16 (for a GPU).
    #[arg(long, default_value = "f32", value_name = "f32|bf16|f16")]
    pub dtype: Dtype,
    /// How candle applies the activation primitive (--intervene, policies)
    /// to CPU activations: fused (vauban-kernels' one pass per token) or
    /// tensor (candle's tensor operations, the reference path).
    #[arg(long, default_value = "fused", value_name = "fused|tensor")]
    pub primitive: PrimitivePath,
    /// A LoRA adapter to apply on top of the model: a PEFT adapter folder
    /// or a llama.cpp LoRA .gguf (`vauban model lora` and `model
    /// orthogonalize --lora` write both).
    #[arg(long, value_name = "PATH")]
    pub adapter: Option<PathBuf>,
}

/// The executors that run a model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    Candle,
    Torch,
    Mlx,
}

impl ModelArgs {
    pub(super) fn load(&self) -> anyhow::Result<LocalBackend> {
        let Some(path) = &self.model else {
            bail!("--model PATH is required: a .gguf file or an HF model folder");
        };
        let spec = ModelSpec {
            path: path.clone(),
            device: self.device,
            weights: self.weights,
            kv_cache: self.kv_cache,
            dtype: self.dtype,
            primitive: self.primitive,
        };
        let start = std::time::Instant::now();
        let exec = match self.executor {
            Engine::Candle => LocalBackend::load(&spec),
            Engine::Torch => LocalBackend::torch(&spec),
            Engine::Mlx => LocalBackend::mlx(&spec),
        }
        .with_context(|| format!("cannot load the model {}", path.display()))?;
        let mut exec = exec;
        if let Some(adapter) = &self.adapter {
            let applied = exec
                .load_adapter(adapter)
                .with_context(|| format!("--adapter {}", adapter.display()))?;
            tracing::info!(
                "applied the adapter {} ({} matrices, sha256 {})",
                adapter.display(),
                applied.changes.len(),
                &applied.sha256[..12]
            );
        }
        let d = exec.dims();
        tracing::info!(
            "loaded {} in {:.2} s ({} layers, hidden {}, vocab {})",
            path.display(),
            start.elapsed().as_secs_f64(),
            d.layers,
            d.hidden,
            d.vocab
        );
        Ok(exec)
    }
}

/// The prompt, its form and what to generate.
#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The prompt text (repeat for several prompts: one trace each).
    #[arg(long, required = true)]
    pub prompt: Vec<String>,
    /// Send the prompt as plain text, without the model's chat template.
    #[arg(long)]
    pub raw: bool,
    /// A system message for the chat template.
    #[arg(long, conflicts_with = "raw")]
    pub system: Option<String>,
    /// Sampling temperature; 0 (the default) is greedy.
    // Negative numbers parse, so `-1` gets a range error rather than
    // "unexpected argument".
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = temperature)]
    pub temperature: f32,
    /// Nucleus sampling: keep the most probable tokens up to this total probability.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = probability)]
    pub top_p: f32,
    /// Keep only the k most probable tokens.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// The sampling seed (the same seed gives the same text).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when the text contains this string (repeatable); the text is cut before it.
    #[arg(long)]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub steer: SteerArgs,
}

/// Interventions and a steering policy, applied in prefill and every
/// decode step (`trace`, `generate`, `serve`).
#[derive(Debug, Args)]
pub struct SteerArgs {
    /// An activation intervention applied in prefill and every decode step
    /// (repeatable): layer=L,mode=MODE,direction=FILE[,alpha=A][,tensor=NAME]
    /// [,row=N][,value=V][,positions=all|last|N..M][,threshold=T][,when=above|below].
    /// Modes: project, subtract, add, subspace_project, subspace_remove,
    /// subspace_add, clamp, steer.
    #[arg(long, value_name = "SPEC")]
    pub intervene: Vec<InterventionSpec>,
    /// An intervention policy plugin (.wasm): after the blocks it watches,
    /// the host shows it per-token projections onto its directions and
    /// applies the ops it decides, in prefill and every decode step.
    #[arg(long, value_name = "WASM")]
    pub policy: Option<PathBuf>,
    /// The policy's config (a .toml or .json file).
    #[arg(long, value_name = "FILE", requires = "policy")]
    pub policy_config: Option<PathBuf>,
    /// Binds a direction the policy needs to a file, NAME=FILE (repeatable).
    #[arg(long, value_name = "NAME=FILE", requires = "policy")]
    pub policy_direction: Vec<String>,
}

/// A loaded policy with its directions; the host is kept for its deadline
/// thread.
pub(super) struct LoadedPolicy {
    _host: PluginHost,
    pub(super) policy: Policy,
    directions: BTreeMap<String, Direction>,
}

impl LoadedPolicy {
    /// A fresh, bound instance for one run (one job).
    pub(super) fn run(&self) -> anyhow::Result<PolicyRun<'_>> {
        Ok(self.policy.bind(&self.directions)?)
    }
}

impl PromptArgs {
    fn form(&self) -> PromptForm {
        match self.raw {
            true => PromptForm::Raw,
            false => PromptForm::Chat {
                system: self.system.clone(),
            },
        }
    }

    fn generate(&self, max_tokens: usize) -> anyhow::Result<GenerateOptions> {
        if let Some(i) = self.stop.iter().position(String::is_empty) {
            bail!(
                "--stop number {} is empty; an empty stop string would end every generation at once",
                i + 1
            );
        }
        // Checked now (also under greedy decoding, where they would be ignored)
        // so a bad flag fails before the model loads.
        let s = Sampling {
            temperature: if self.temperature == 0.0 {
                1.0
            } else {
                self.temperature
            },
            top_p: self.top_p,
            top_k: self.top_k,
            seed: self.seed,
        };
        vauban::model::sample::Sampler::new(s.clone())?;
        let sampling = match self.temperature {
            0.0 => None,
            t => Some(Sampling {
                temperature: t,
                ..s
            }),
        };
        Ok(GenerateOptions {
            max_tokens,
            sampling,
            stop: self.stop.clone(),
            top_logprobs: 0,
        })
    }
}

impl SteerArgs {
    pub(super) fn policy(&self, exec: &LocalBackend) -> anyhow::Result<Option<LoadedPolicy>> {
        let Some(path) = &self.policy else {
            return Ok(None);
        };
        let host = PluginHost::new(HostOptions {
            cache_dir: HostOptions::default_cache_dir(),
            fuel_metering: false,
        })?;
        let config = super::plugin::config_json(self.policy_config.as_deref())?;
        let policy = Policy::new(host.load(path)?, &config, SandboxOptions::default())?;
        let mut files = BTreeMap::new();
        for b in &self.policy_direction {
            let Some((name, file)) = b.split_once('=') else {
                bail!("--policy-direction {b:?}: write NAME=FILE");
            };
            if files.insert(name.to_owned(), PathBuf::from(file)).is_some() {
                bail!("--policy-direction {name} is given twice");
            }
        }
        let d = exec.dims();
        let mut directions = BTreeMap::new();
        for need in &policy.info().directions {
            let file = files.remove(&need.name).with_context(|| {
                format!(
                    "the policy needs direction `{}`; bind it with --policy-direction {}=FILE",
                    need.name, need.name
                )
            })?;
            let layer = need.layers.first().copied().unwrap_or(0);
            exec.check_layers(&need.layers).with_context(|| {
                format!(
                    "the policy watches direction `{}` at layers {:?}",
                    need.name, need.layers
                )
            })?;
            let dir = load_direction(&file, None, None, layer)
                .with_context(|| format!("--policy-direction {}={}", need.name, file.display()))?;
            let width = dir.width();
            if width != d.hidden {
                bail!(
                    "--policy-direction {}={}: {width} values, but the model's hidden size is {}",
                    need.name,
                    file.display(),
                    d.hidden
                );
            }
            directions.insert(need.name.clone(), dir);
        }
        if let Some(extra) = files.keys().next() {
            bail!("--policy-direction {extra}: the policy does not use a direction of that name");
        }
        Ok(Some(LoadedPolicy {
            _host: host,
            policy,
            directions,
        }))
    }

    pub(super) fn interventions(&self, exec: &LocalBackend) -> anyhow::Result<Vec<Intervention>> {
        let d = exec.dims();
        self.intervene
            .iter()
            .map(|spec| {
                spec.resolve(d.hidden, d.layers)
                    .with_context(|| format!("--intervene {}", spec.direction.display()))
            })
            .collect()
    }
}

/// Arguments of `vauban trace --model …`.
#[derive(Debug, Args)]
pub struct TraceRunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Blocks to observe the residual stream after (0-based), e.g. 0,5,10
    /// (with a mixture of experts, its router's probabilities there too).
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<usize>,
    /// Record logits and log-probabilities at every prompt position.
    #[arg(long)]
    pub logprobs: bool,
    /// With --logprobs: also keep the K most likely tokens, with their
    /// log-probabilities, of every distribution a new token was chosen
    /// from (the completion's `continuation_top_k`, always raw: what an
    /// OpenAI endpoint's `top_logprobs` returns). 0: the chosen tokens'
    /// log-probabilities only.
    #[arg(long, value_name = "K", default_value_t = 0, requires = "logprobs")]
    pub top_logprobs: usize,
    /// Keep raw tensors in the bundle, not only their summaries.
    #[arg(long)]
    pub raw_tensors: bool,
    /// Also record the attention and MLP outputs at the observed layers.
    #[arg(long)]
    pub block_outputs: bool,
    /// Record weight snapshots (attn_output, ffn_down) at the observed layers.
    #[arg(long)]
    pub weights_snapshot: bool,
    /// Tokens to generate after the prompt (recorded as the completion);
    /// 0 records the prompt's forward pass only.
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// The bundle folder to write.
    #[arg(long, value_name = "BUNDLE")]
    pub out: Option<PathBuf>,
    /// Replace the bundle if it exists.
    #[arg(long)]
    pub replace: bool,
    /// Prompts traced together in one batched pass (1: one at a time). A
    /// policy decides step by step for one sequence, so `--policy` traces
    /// one at a time.
    #[arg(long, default_value_t = vauban::executor::candle::DEFAULT_BATCH, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub batch: usize,
    /// Record a controlled batch-size sweep instead (`1,2,4,8`): after one
    /// warm-up pass that is not recorded, the prompts traced at each batch
    /// size in full batches of that many distinct prompts (so give at
    /// least as many prompts as the largest size), trace ids `b{N}-t{i}`.
    /// Read it with `vauban trace sweep BUNDLE --axis batch_size --fit usl`.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', conflicts_with = "batch", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub sweep_batch: Vec<usize>,
}

impl TraceRunArgs {
    fn request(&self, text: &str, index: usize) -> TraceRequest {
        let mut observe = vec![K::Text, K::Tokens, K::Profile];
        if self.logprobs {
            observe.extend([K::Logits, K::Logprobs]);
        }
        if !self.layers.is_empty() {
            observe.push(K::Activation);
        }
        if self.weights_snapshot {
            observe.push(K::WeightSnapshot);
        }
        if !self.prompt.steer.intervene.is_empty() || self.prompt.steer.policy.is_some() {
            observe.push(K::InterventionResult);
        }
        TraceRequest {
            prompt_id: Some(format!("p{index}")),
            category: None,
            expected_behavior: None,
            text: Some(text.to_owned()),
            token_ids: None,
            observe,
            layers: self.layers.clone(),
            raw_tensors: self.raw_tensors,
            raw_kinds: Vec::new(),
        }
    }
}

/// `vauban trace --model PATH --prompt … --out BUNDLE`.
pub fn trace(args: &TraceRunArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let Some(bundle_path) = &args.out else {
        bail!("--out BUNDLE is required: the folder to write the trace bundle to");
    };
    if args.weights_snapshot && args.layers.is_empty() {
        bail!("--weights-snapshot needs --layers (the blocks whose weights to record)");
    }
    if args.block_outputs && args.layers.is_empty() {
        bail!(
            "--block-outputs needs --layers (the blocks whose attention and MLP outputs to record)"
        );
    }
    no_duplicates(&args.layers)?;
    let generate = GenerateOptions {
        top_logprobs: args.top_logprobs,
        ..args.prompt.generate(args.max_tokens)?
    };
    let exec = args.model.load()?;
    exec.check_layers(&args.layers).context("--layers")?;
    let interventions = args.prompt.steer.interventions(&exec)?;
    let policy = args.prompt.steer.policy(&exec)?;
    let mode = match args.replace {
        true => WriteMode::Replace,
        false => WriteMode::CreateNew,
    };
    let mut writer = BundleWriter::create(bundle_path, mode)
        .with_context(|| format!("cannot write the bundle {}", bundle_path.display()))?;
    let jobs = |id: &dyn Fn(usize) -> String| -> Vec<(TraceRequest, RunOptions)> {
        args.prompt
            .prompt
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let options = RunOptions {
                    trace_id: id(i),
                    prompt: args.prompt.form(),
                    interventions: interventions.clone(),
                    block_outputs: args.block_outputs,
                    generate: generate.clone(),
                    reference: None,
                };
                (args.request(text, i), options)
            })
            .collect()
    };
    if !args.sweep_batch.is_empty() {
        if policy.is_some() {
            bail!("--sweep-batch times batched passes, and --policy traces one prompt at a time");
        }
        return sweep_batches(&exec, &args.sweep_batch, &jobs, writer, bundle_path, out);
    }
    let progress = progress_bar(args.prompt.prompt.len() as u64, "tracing");
    let jobs = jobs(&|i| format!("t{i}"));
    let mut write =
        |i: usize,
         result: Result<vauban::executor::TraceOutput, vauban::executor::ExecutorError>|
         -> anyhow::Result<()> {
            let output = result.with_context(|| format!("tracing prompt {i}"))?;
            writer.add_trace(&output.trace, &output.tensors)?;
            progress.inc(1);
            progress.suspend(|| -> anyhow::Result<()> {
                let t = &output.trace;
                writeln!(
                    out,
                    "t{i}: {} artifacts, {} spans, {} tokens{}",
                    t.artifacts.len(),
                    t.spans.len(),
                    t.artifacts_of(K::Tokens)
                        .find_map(|a| match &a.data {
                            vauban::trace::ArtifactData::TokenIds { ids } => Some(ids.len()),
                            _ => None,
                        })
                        .unwrap_or(0),
                    match &output.generation {
                        Some(g) =>
                            format!(", completion: {:?}", vauban::text::excerpt(&g.text, 80)),
                        None => String::new(),
                    }
                )?;
                Ok(())
            })
        };
    match &policy {
        Some(p) => {
            for (i, (request, options)) in jobs.iter().enumerate() {
                write(i, exec.trace(request, options, Some(&mut p.run()?)))?;
            }
        }
        None => {
            let mut failed = None;
            exec.trace_all(&jobs, args.batch, &mut |i, result| match write(i, result) {
                Ok(()) => std::ops::ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    std::ops::ControlFlow::Break(())
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    progress.finish_and_clear();
    writer.finish()?;
    writeln!(
        out,
        "wrote {} ({} trace{}); read it with `vauban trace inspect {}`",
        bundle_path.display(),
        args.prompt.prompt.len(),
        if args.prompt.prompt.len() == 1 {
            ""
        } else {
            "s"
        },
        bundle_path.display()
    )?;
    Ok(())
}

/// Writes a traced run into `writer` (a warm-up run has none); the first
/// failure is kept in `failed` and stops the pass.
fn keep(
    result: Result<vauban::executor::TraceOutput, vauban::executor::ExecutorError>,
    writer: Option<&mut BundleWriter>,
    failed: &mut Option<anyhow::Error>,
) -> std::ops::ControlFlow<()> {
    let step = result
        .map_err(anyhow::Error::from)
        .and_then(|o| match writer {
            Some(w) => Ok(w.add_trace(&o.trace, &o.tensors)?),
            None => Ok(()),
        });
    match step {
        Ok(()) => std::ops::ControlFlow::Continue(()),
        Err(e) => {
            *failed = Some(e);
            std::ops::ControlFlow::Break(())
        }
    }
}

/// The command's jobs, each prompt's trace id given by its index.
type JobsWithIds<'a> = dyn Fn(&dyn Fn(usize) -> String) -> Vec<(TraceRequest, RunOptions)> + 'a;

/// `vauban trace --sweep-batch`: one warm-up pass of the largest batch,
/// not recorded, then at each batch size the prompts in full batches of
/// that many, into one bundle.
fn sweep_batches(
    exec: &LocalBackend,
    sizes: &[usize],
    jobs: &JobsWithIds<'_>,
    mut writer: BundleWriter,
    bundle_path: &std::path::Path,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let largest = sizes.iter().copied().max().unwrap_or(1);
    let all = jobs(&|i| format!("warm-up-{i}"));
    if all.len() < largest {
        bail!(
            "--sweep-batch {largest} needs at least {largest} prompts (a batch of distinct prompts); {} given",
            all.len()
        );
    }
    // Warm-up: the first pass pays for page faults and thread start-up.
    let mut failed = None;
    exec.trace_all(&all[..largest], largest, &mut |_, r| {
        keep(r, None, &mut failed)
    });
    let mut traces = 0;
    for &n in sizes {
        if failed.is_some() {
            break;
        }
        let jobs = jobs(&|i| format!("b{n}-t{i}"));
        let full = jobs.len() / n * n;
        let progress = progress_bar(full as u64, &format!("batch {n}"));
        exec.trace_all(&jobs[..full], n, &mut |_, r| {
            progress.inc(1);
            keep(r, Some(&mut writer), &mut failed)
        });
        progress.finish_and_clear();
        traces += full;
    }
    if let Some(e) = failed {
        return Err(e.context("recording the sweep"));
    }
    writer.finish()?;
    writeln!(
        out,
        "wrote {} ({traces} traces at batch sizes {sizes:?}); fit it with `vauban trace sweep {} --axis batch_size --fit usl`",
        bundle_path.display(),
        bundle_path.display()
    )?;
    Ok(())
}

/// Refuses a layer listed twice (it would be recorded or changed twice).
fn no_duplicates(layers: &[usize]) -> anyhow::Result<()> {
    for (i, l) in layers.iter().enumerate() {
        if layers[..i].contains(l) {
            bail!("--layers lists layer {l} twice");
        }
    }
    Ok(())
}

/// Arguments of `vauban generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// New tokens at most.
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
}

/// `vauban generate --model PATH --prompt …`: streams the completion to
/// stdout, statistics to stderr.
pub fn generate_text(args: &GenerateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let options = args.prompt.generate(args.max_tokens)?;
    let exec = args.model.load()?;
    let interventions = args.prompt.steer.interventions(&exec)?;
    let policy = args.prompt.steer.policy(&exec)?;
    let several = args.prompt.prompt.len() > 1;
    for (i, text) in args.prompt.prompt.iter().enumerate() {
        if several {
            // Each completion under its prompt, so several read apart.
            if i > 0 {
                writeln!(out)?;
            }
            writeln!(
                out,
                "== prompt {} of {}: {}",
                i + 1,
                args.prompt.prompt.len(),
                vauban::text::excerpt(text, 80)
            )?;
        }
        let ids = exec.tokenize(text, &args.prompt.form())?;
        let mut run = policy.as_ref().map(LoadedPolicy::run).transpose()?;
        let mut session = exec.session(&interventions);
        if let Some(r) = run.as_mut() {
            session.set_policy(r);
        }
        let mut write_err = None;
        let g = exec.generate_in(&mut session, &ids, &options, &mut |t| {
            if write_err.is_none()
                && let Err(e) = out.write_all(t.as_bytes()).and_then(|_| out.flush())
            {
                write_err = Some(e);
            }
        })?;
        if let Some(e) = write_err {
            return Err(e.into());
        }
        writeln!(out)?;
        let stop = match &g.stop {
            StopReason::Eos { id } => format!("end of sequence (token {id})"),
            StopReason::StopString { stop } => format!("stop string {stop:?}"),
            StopReason::MaxTokens => "max tokens".into(),
            StopReason::ContextFull { limit } => format!("the context length ({limit} positions)"),
        };
        let decode_tps = match g.decode_ns {
            0 => String::new(),
            ns => format!(
                ", decode {:.1} tok/s",
                g.decode_steps as f64 / (ns as f64 / 1e9)
            ),
        };
        tracing::info!(
            "{} prompt tokens, {} generated; stopped on {stop}; prefill {:.1} tok/s{decode_tps}",
            ids.len(),
            g.ids.len(),
            ids.len() as f64 / (g.prefill_ns.max(1) as f64 / 1e9),
        );
        for (i, e) in session.effects().iter().enumerate() {
            tracing::info!(
                "intervention {i}: applied to {} of {} token positions",
                e.applied.iter().filter(|a| **a).count(),
                e.positions.len()
            );
        }
        let _ = session.position();
    }
    Ok(())
}

/// Arguments of `vauban model orthogonalize`.
#[derive(Debug, Args)]
pub struct OrthogonalizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The direction file (.safetensors, .npy, or a GGUF control vector).
    #[arg(long)]
    pub direction: PathBuf,
    /// The tensor to use inside the direction file.
    #[arg(long)]
    pub tensor: Option<String>,
    /// Blocks to orthogonalize (default: all).
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<usize>,
    /// The HF folder to write (must not exist).
    #[arg(long, required_unless_present = "lora", conflicts_with = "lora")]
    pub out: Option<PathBuf>,
    /// Write the edit as a rank-1 LoRA adapter into this new folder
    /// instead of a whole model: a PEFT adapter (adapter_config.json,
    /// adapter_model.safetensors) and a llama.cpp LoRA (adapter.gguf).
    #[arg(long, value_name = "DIR")]
    pub lora: Option<PathBuf>,
}

/// `vauban model orthogonalize`: removes a direction from every matrix that
/// writes into the residual stream (`W ← W − r̂(r̂ᵀW)` on attn_output and
/// ffn_down) and writes the result as an HF folder.
pub fn orthogonalize(args: &OrthogonalizeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let target = args
        .out
        .as_ref()
        .or(args.lora.as_ref())
        .expect("clap requires one");
    if target.exists() {
        bail!(
            "{} exists; choose a new folder for the {}",
            target.display(),
            if args.lora.is_some() {
                "adapter"
            } else {
                "exported model"
            }
        );
    }
    no_duplicates(&args.layers)?;
    if let Some(dir) = &args.lora {
        return super::adapter::orthogonalization_adapter(args, dir, out);
    }
    let mut exec = args.model.load()?;
    let layers = orthogonalized_layers(args, exec.dims().layers)?;
    exec.check_layers(&layers).context("--layers")?;
    // Said before anything is written: an edit this layout makes inexact.
    if let Some(why) = (args.model.model.as_deref())
        .and_then(|p| vauban::model::read_config(p).ok())
        .and_then(|c| c.weight_edit_limitation())
    {
        writeln!(out, "limitation: {why}")?;
    }
    if let Some(note) = (args.model.model.as_deref())
        .and_then(|p| vauban::model::read_config(p).ok())
        .and_then(|c| c.export_note())
    {
        writeln!(out, "note: {note}")?;
    }
    let mut changes = Vec::new();
    let directions = layer_directions(args, &layers)?;
    for (layer, direction) in &directions {
        changes.extend(exec.orthogonalize(direction, &[*layer])?);
    }
    exec.export_hf(target)
        .with_context(|| format!("cannot export to {}", target.display()))?;
    let total: f32 = changes.iter().map(|c| c.norm * c.norm).sum::<f32>().sqrt();
    writeln!(
        out,
        "orthogonalized {} matrices in {} layers along {} (total change, Frobenius: {total:.4}); wrote {}",
        changes.len(),
        layers.len(),
        tensors_used(&directions, &args.direction),
        target.display()
    )?;
    Ok(())
}

/// The layers `model orthogonalize` edits: `--layers`, or, for a control
/// vector read by layer, the layers it holds (a layer it lacks is one it
/// leaves alone), or every one of the model's `count`.
pub(super) fn orthogonalized_layers(
    args: &OrthogonalizeArgs,
    count: usize,
) -> anyhow::Result<Vec<usize>> {
    let by_layer = match args.tensor {
        None => vauban::intervene::control_vector_layers(&args.direction)
            .with_context(|| format!("--direction {}", args.direction.display()))?,
        Some(_) => None,
    };
    Ok(match (args.layers.is_empty(), by_layer) {
        (true, Some(held)) => held,
        (true, None) => (0..count).collect(),
        (false, _) => args.layers.clone(),
    })
}

/// Each layer's direction: `--tensor`, the file's one tensor,
/// `direction.L` for layer L (a control vector), or `direction` (the file
/// `vauban measure` writes).
pub(super) fn layer_directions(
    args: &OrthogonalizeArgs,
    layers: &[usize],
) -> anyhow::Result<Vec<(usize, Direction)>> {
    layers
        .iter()
        .map(|&layer| {
            let direction = load_direction(&args.direction, args.tensor.as_deref(), None, layer)
                .map_err(|e| e.picked_with("--tensor NAME"))
                .with_context(|| format!("--direction for layer {layer}"))?;
            Ok((layer, direction))
        })
        .collect()
}

/// The direction tensors used, once each, for the summary line (the
/// file, for a format whose one array has no name: `.npy`).
pub(super) fn tensors_used(directions: &[(usize, Direction)], file: &Path) -> String {
    let used: std::collections::BTreeSet<&str> = directions
        .iter()
        .map(|(_, d)| d.tensor.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    match used.is_empty() {
        true => file.display().to_string(),
        false => used.into_iter().collect::<Vec<_>>().join(", "),
    }
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The HF folder to write (must not exist).
    #[arg(long)]
    pub out: PathBuf,
}

/// `vauban model export`: the model as loaded, written as an HF folder. A
/// quantized GGUF is dequantized (the folder holds f32), so an edit made
/// from the same file (`orthogonalize`) differs from it by the edit alone.
pub fn export(args: &ExportArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.out.exists() {
        bail!(
            "{} exists; choose a new folder for the exported model",
            args.out.display()
        );
    }
    let exec = args.model.load()?;
    if let Some(note) = (args.model.model.as_deref())
        .and_then(|p| vauban::model::read_config(p).ok())
        .and_then(|c| c.export_note())
    {
        writeln!(out, "note: {note}")?;
    }
    exec.export_hf(&args.out)
        .with_context(|| format!("cannot export to {}", args.out.display()))?;
    writeln!(
        out,
        "exported the model ({} layers) to {}",
        exec.dims().layers,
        args.out.display()
    )?;
    Ok(())
}

/// A sampling temperature: a finite number ≥ 0 (0 is greedy).
fn temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Ok(_) => Err(format!(
            "`{s}` is out of range: use 0 for greedy decoding or a positive temperature such as 0.7"
        )),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

/// A probability mass in (0, 1].
fn probability(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        Ok(_) => Err(format!(
            "`{s}` is out of range: use a value in (0, 1], such as 0.9"
        )),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}
