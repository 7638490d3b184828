//! The forward pass, KV cache, loaders, tokenizers, interventions and
//! traces on a tiny llama built by the tests (tests/common/tiny.rs).

mod common;

use std::path::{Path, PathBuf};

use candle_core::quantized::GgmlDType;
use candle_core::{D, Device, IndexOp, Tensor};
use common::tiny;
use vauban::executor::candle::CandleExecutor;
use vauban::executor::candle::model::LoadedModel;
use vauban::executor::{
    Executor, GenerateOptions, InferenceSession, LocalModel, ModelSpec, PromptForm, RunOptions,
    generate::generate,
};
use vauban::intervene::InterventionSpec;
use vauban::model::{Matrix, WeightMode};
use vauban::trace::{ArtifactData, ArtifactKind as K, TraceRequest};

const TEXT: &str = "the cat in the hat sat on a mat, then ran in";

struct Forms {
    _dir: tempfile::TempDir,
    hf: PathBuf,
    gguf: PathBuf,
    q8: PathBuf,
}

fn forms() -> Forms {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny::write_hf(&dir.path().join("hf"), 7);
    let gguf = tiny::write_gguf(&dir.path().join("tiny-f32.gguf"), 7, GgmlDType::F32);
    let q8 = tiny::write_gguf(&dir.path().join("tiny-q8.gguf"), 7, GgmlDType::Q8_0);
    Forms {
        _dir: dir,
        hf,
        gguf,
        q8,
    }
}

fn load(path: &Path) -> LoadedModel {
    LoadedModel::load(path, WeightMode::Native, &Device::Cpu).unwrap()
}

/// The message of a load that must fail.
fn load_err(path: &Path) -> String {
    LoadedModel::load(path, WeightMode::Native, &Device::Cpu)
        .err()
        .unwrap()
        .to_string()
}

fn exec(path: &Path) -> CandleExecutor {
    CandleExecutor::load(&ModelSpec::new(path)).unwrap()
}

/// Generates after `prompt` in a fresh session; returns the generation and
/// the positions the session ends with.
fn run_generate(
    e: &CandleExecutor,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> (vauban::executor::Generation, usize) {
    let mut session = e.session(&[]);
    let g = generate(
        &mut session,
        prompt,
        None,
        opts,
        &|_| false,
        &|ids| e.detokenize(ids),
        &mut |_| {},
    )
    .unwrap();
    (g, session.position())
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    common::max_abs(&(a - b).unwrap())
}

#[test]
fn gguf_and_safetensors_forms_load_the_same_model() {
    let f = forms();
    let (hf, gguf) = (load(&f.hf), load(&f.gguf));
    assert_eq!(hf.config.layers, tiny::LAYERS);
    assert_eq!(hf.config.vocab, tiny::vocab_size());
    assert_eq!(hf.config.hidden, gguf.config.hidden);
    assert_eq!(hf.weight_files.len(), 2, "two shards");
    // Same tokens from tokenizer.json and from GGUF metadata, control tokens whole.
    let chat = "<|im_start|>user\nthe hat<|im_end|>";
    assert_eq!(hf.encode(chat).unwrap(), gguf.encode(chat).unwrap());
    assert_eq!(hf.encode(chat).unwrap()[0], 2, "<|im_start|> is one token");
    let ids = hf.encode(TEXT).unwrap();
    assert_eq!(ids, gguf.encode(TEXT).unwrap());
    assert_eq!(hf.decode(&ids).unwrap(), TEXT);

    let a = hf.model.forward(&ids, &[]).unwrap().logits;
    let b = gguf.model.forward(&ids, &[]).unwrap().logits;
    assert_eq!(a.dims(), &[ids.len(), tiny::vocab_size()]);
    assert_eq!(a.dtype(), candle_core::DType::F32);
    // HF layout with rotate_half vs llama.cpp's permuted rows with adjacent
    // pairs: the same function, up to float rounding.
    let d = max_abs_diff(&a, &b);
    assert!(d < 1e-4, "max |Δlogit| = {d}");
    // And the forward is deterministic.
    let again = hf.model.forward(&ids, &[]).unwrap().logits;
    assert_eq!(max_abs_diff(&a, &again), 0.0);
}

/// Biases on Q, K and V (Qwen2's, and some llama variants'): an HF folder
/// keeps Q and K (weights and biases) in HF's row order and runs RoPE on
/// split halves; a GGUF file has both permuted as llama.cpp's converter
/// does and runs it on adjacent pairs. The two must agree.
#[test]
fn qkv_biases_load_the_same_from_both_forms_and_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let hf = load(&tiny::write_hf_biased(&dir.path().join("hf"), 7));
    let gguf_path = dir.path().join("biased.gguf");
    let gguf = load(&tiny::write_gguf_biased(&gguf_path, 7, GgmlDType::F32));
    let plain = load(&tiny::write_gguf(
        &dir.path().join("plain.gguf"),
        7,
        GgmlDType::F32,
    ));
    assert!(hf.config.qkv_bias && gguf.config.qkv_bias && !plain.config.qkv_bias);
    let ids = gguf.encode(TEXT).unwrap();
    let logits = |m: &LoadedModel| m.model.forward(&ids, &[]).unwrap().logits;
    let d = max_abs_diff(&logits(&hf), &logits(&gguf));
    assert!(
        d < 1e-4,
        "HF and GGUF forms of one biased model: max |Δlogit| = {d}"
    );
    let effect = max_abs_diff(&logits(&gguf), &logits(&plain));
    assert!(
        effect > 1e-2,
        "the biases change the logits by only {effect}"
    );
}

#[test]
fn q8_weights_stay_quantized_and_close_to_f32() {
    let f = forms();
    let (f32m, q8) = (load(&f.gguf), load(&f.q8));
    assert!(q8.model.is_quantized() && !load(&f.hf).model.is_quantized());
    let ids = f32m.encode(TEXT).unwrap();
    let a = f32m.model.forward(&ids, &[]).unwrap().logits;
    let b = q8.model.forward(&ids, &[]).unwrap().logits;
    let scale = common::max_abs(&a);
    let d = max_abs_diff(&a, &b);
    eprintln!("Q8_0 vs f32: max |Δlogit| {d:.4} (max |logit| {scale:.2})");
    assert!(d < 0.05 * scale, "max |Δlogit| = {d}, scale {scale}");
    // Dequantizing at load gives the f32 matmul path with the Q8 values (the
    // quantized kernel also rounds activations to 8 bits, so the two differ a little).
    let deq = LoadedModel::load(&f.q8, WeightMode::F32, &Device::Cpu).unwrap();
    assert!(!deq.model.is_quantized());
    let c = deq.model.forward(&ids, &[]).unwrap().logits;
    let (dc, dq) = (max_abs_diff(&a, &c), max_abs_diff(&b, &c));
    eprintln!("dequantized Q8_0: vs f32 {dc:.4}, vs native Q8_0 {dq:.4}");
    assert!(dc < 0.05 * scale && dq < 0.05 * scale && dc > 0.0);
}

#[test]
fn kv_cache_decode_matches_the_full_forward() {
    let f = forms();
    let e = exec(&f.gguf);
    let ids = e.model.encode(TEXT).unwrap();
    let full = e.model.model.forward(&ids, &[]).unwrap().logits;
    let split = ids.len() - 4;
    let mut session = e.session(&[]);
    let first = session.prefill(&ids[..split]).unwrap().logits;
    let mut rows = vec![first];
    for &id in &ids[split..ids.len() - 1] {
        rows.push(session.decode_step(id).unwrap().logits);
    }
    assert_eq!(session.position(), ids.len() - 1);
    for (k, row) in rows.iter().enumerate() {
        let want = full.i(split - 1 + k).unwrap().to_vec1::<f32>().unwrap();
        let d = want
            .iter()
            .zip(row)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        // Tolerance: f32 rounding differs between one 13-token attention and 13 steps.
        assert!(d < 1e-4, "position {}: max |Δlogit| {d}", split - 1 + k);
    }
}

#[test]
fn greedy_generation_equals_repeated_full_forwards() {
    let f = forms();
    let e = exec(&f.hf);
    let prompt = e.model.encode("the cat").unwrap();
    let opts = GenerateOptions {
        max_tokens: 6,
        ..Default::default()
    };
    let (g, position) = run_generate(&e, &prompt, &opts);
    assert_eq!(g.ids.len(), 6);
    // The same tokens by running the whole sequence again at every step.
    let mut seq = prompt.clone();
    for _ in 0..6 {
        let logits = e.model.model.forward(&seq, &[]).unwrap().logits;
        let next = logits
            .i(seq.len() - 1)
            .unwrap()
            .argmax(D::Minus1)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap();
        seq.push(next);
    }
    assert_eq!(g.ids, seq[prompt.len()..]);
    assert_eq!(position, prompt.len() + 5, "the prompt ran once");
}

#[test]
fn seeded_sampling_is_reproducible_and_seed_dependent() {
    let f = forms();
    let e = exec(&f.gguf);
    let prompt = e.model.encode("the").unwrap();
    let run = |seed| {
        let opts = GenerateOptions {
            max_tokens: 12,
            sampling: Some(vauban::model::sample::Sampling {
                temperature: 1.5,
                top_p: 1.0,
                top_k: None,
                seed,
            }),
            stop: vec![],
            top_logprobs: 0,
        };
        run_generate(&e, &prompt, &opts).0.ids
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

fn write_direction(dir: &Path, name: &str, values: &[f32]) -> PathBuf {
    let path = dir.join(name);
    let t = Tensor::new(values, &Device::Cpu).unwrap();
    candle_core::safetensors::save(&[("direction".to_string(), t)].into_iter().collect(), &path)
        .unwrap();
    path
}

/// A direction over the tiny model's hidden width, not a unit vector.
fn test_direction() -> Vec<f32> {
    (0..tiny::HIDDEN)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 10.0)
        .collect()
}

/// Subtracting the direction in `file` after block `layer`.
fn subtraction(file: &Path, layer: usize) -> vauban::intervene::Intervention {
    let spec: InterventionSpec =
        format!("layer={layer},mode=subtract,direction={}", file.display())
            .parse()
            .unwrap();
    spec.resolve(tiny::HIDDEN, tiny::LAYERS).unwrap()
}

fn request(layers: &[usize], interventions: bool) -> TraceRequest {
    let mut observe = vec![K::Text, K::Tokens, K::Logits, K::Logprobs, K::Activation];
    if interventions {
        observe.push(K::InterventionResult);
    }
    TraceRequest {
        category: None,
        expected_behavior: None,
        prompt_id: Some("p0".into()),
        text: Some(TEXT.into()),
        token_ids: None,
        observe,
        layers: layers.to_vec(),
        raw_tensors: true,
        raw_kinds: Vec::new(),
    }
}

fn options(interventions: Vec<vauban::intervene::Intervention>) -> RunOptions {
    RunOptions {
        trace_id: "t0".into(),
        prompt: PromptForm::Raw,
        interventions,
        block_outputs: false,
        generate: GenerateOptions::default(),
        reference: None,
    }
}

/// The raw activation of a trace at `layer` (site resid_post).
fn activation(out: &vauban::executor::TraceOutput, layer: usize) -> Vec<f32> {
    let a = out
        .trace
        .artifacts_of(K::Activation)
        .find(|a| {
            a.layer == Some(layer) && a.labels.get("site").map(String::as_str) == Some("resid_post")
        })
        .unwrap();
    out.tensors[&a.id].as_ref().to_f32_vec()
}

#[test]
fn an_intervention_changes_activations_at_and_after_its_layer_only() {
    let f = forms();
    let e = exec(&f.gguf);
    let dir = tempfile::tempdir().unwrap();
    let d = test_direction();
    let file = write_direction(dir.path(), "d.safetensors", &d);
    let iv = subtraction(&file, 1);
    let plain = e
        .trace(&request(&[0, 1, 2], false), &options(vec![]), None)
        .unwrap();
    let steered = e
        .trace(&request(&[0, 1, 2], true), &options(vec![iv]), None)
        .unwrap();
    assert_eq!(
        activation(&plain, 0),
        activation(&steered, 0),
        "layer 0 runs before the intervention"
    );
    for layer in [1, 2] {
        assert_ne!(
            activation(&plain, layer),
            activation(&steered, layer),
            "layer {layer}"
        );
    }
    // Subtracting the direction leaves no component along it at layer 1 (d not unit: h − (h·d)d
    // leaves (h·d)(1 − |d|²) along d, so compare with that).
    let h1 = activation(&steered, 1);
    let h0 = activation(&plain, 1);
    let n2: f32 = d.iter().map(|x| x * x).sum();
    for (tok, (new, old)) in h1
        .chunks(tiny::HIDDEN)
        .zip(h0.chunks(tiny::HIDDEN))
        .enumerate()
    {
        let p_old: f32 = old.iter().zip(&d).map(|(a, b)| a * b).sum();
        let p_new: f32 = new.iter().zip(&d).map(|(a, b)| a * b).sum();
        assert!(
            (p_new - p_old * (1.0 - n2)).abs() < 1e-3 * (1.0 + p_old.abs()),
            "token {tok}: {p_new} vs {p_old}"
        );
    }
    // The record says what was applied.
    let rec = steered
        .trace
        .artifacts_of(K::InterventionResult)
        .next()
        .unwrap();
    assert_eq!(rec.layer, Some(1));
    let ArtifactData::Record { value } = &rec.data else {
        panic!()
    };
    let n = e.model.encode(TEXT).unwrap().len();
    assert_eq!(value["effect"]["tokens_applied"], n);
    assert_eq!(value["intervention"]["mode"], "subtract");
    assert_ne!(activation(&plain, 2), activation(&steered, 2));
}

#[test]
fn subtracting_the_zero_direction_changes_nothing() {
    let f = forms();
    let e = exec(&f.hf);
    let dir = tempfile::tempdir().unwrap();
    let file = write_direction(dir.path(), "zero.safetensors", &vec![0.0; tiny::HIDDEN]);
    let iv = subtraction(&file, 0);
    let plain = e
        .trace(&request(&[2], false), &options(vec![]), None)
        .unwrap();
    let zero = e
        .trace(&request(&[2], true), &options(vec![iv]), None)
        .unwrap();
    let logits = |o: &vauban::executor::TraceOutput| {
        let a = o.trace.artifacts_of(K::Logits).next().unwrap();
        o.tensors[&a.id].as_ref().to_f32_vec()
    };
    assert_eq!(logits(&plain), logits(&zero));
}

#[test]
fn a_trace_is_valid_and_lands_in_a_bundle() {
    let f = forms();
    let e = exec(&f.gguf);
    let mut req = request(&[0, 2], false);
    req.observe
        .extend([K::Profile, K::WeightSnapshot, K::InterventionResult]);
    let mut opts = options(vec![]);
    opts.block_outputs = true;
    opts.generate.max_tokens = 4;
    let out = e.trace(&req, &opts, None).unwrap();
    let t = &out.trace;
    let stages: Vec<String> = t.spans.iter().map(|s| s.stage.to_string()).collect();
    assert_eq!(
        stages,
        [
            "tokenize",
            "prepare_batch",
            "prefill",
            "observe",
            "lm_head",
            "decode"
        ]
    );
    assert_eq!(t.capabilities.executor, "candle");
    assert_eq!(t.model.sha256.as_deref().map(str::len), Some(64));
    // Three sites at two layers, two weight matrices at two layers.
    assert_eq!(t.artifacts_of(K::Activation).count(), 6);
    assert_eq!(t.artifacts_of(K::WeightSnapshot).count(), 4);
    assert_eq!(t.missing.len(), 1, "intervention_result: none given");
    let completion = t
        .artifacts_of(K::Text)
        .find(|a| a.labels["role"] == "completion")
        .unwrap();
    assert!(matches!(&completion.data, ArtifactData::Text { text } if !text.is_empty()));
    assert_eq!(out.generation.as_ref().unwrap().ids.len(), 4);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b");
    let mut w =
        vauban::bundle::BundleWriter::create(&path, vauban::bundle::WriteMode::CreateNew).unwrap();
    w.add_trace(t, &out.tensors).unwrap();
    w.finish().unwrap();
    let b = vauban::bundle::Bundle::open(&path).unwrap();
    b.verify_all().unwrap();
    let a = t.artifacts_of(K::Logprobs).next().unwrap();
    let lp = b.tensor("t0", &a.id).unwrap();
    assert_eq!(
        lp.shape,
        [e.model.encode(TEXT).unwrap().len(), tiny::vocab_size()]
    );
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let f = forms();
    let e = exec(&f.gguf);
    let err = e
        .trace(&request(&[3], false), &options(vec![]), None)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "layer 3 is out of range: the model has 3 layers (0 to 2)"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = write_direction(dir.path(), "wide.safetensors", &vec![1.0; tiny::HIDDEN + 1]);
    let spec: InterventionSpec = format!("layer=0,mode=subtract,direction={}", file.display())
        .parse()
        .unwrap();
    let err = spec
        .resolve(tiny::HIDDEN, tiny::LAYERS)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("65") && err.contains("64"), "{err}");
}

#[test]
fn broken_model_folders_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny::write_hf(&dir.path().join("hf"), 1);
    // A config that disagrees with the weights: the tensor and both shapes.
    let cfg = hf.join("config.json");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("\"intermediate_size\":128", "\"intermediate_size\":96");
    std::fs::write(&cfg, text).unwrap();
    let err = load_err(&hf);
    assert!(
        err.contains("model.layers.0.mlp.gate_proj.weight")
            && err.contains("[128, 64]")
            && err.contains("[96, 64]"),
        "{err}"
    );
    // An unsupported architecture.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("\"model_type\":\"llama\"", "\"model_type\":\"gpt_neox\"");
    std::fs::write(&cfg, text).unwrap();
    let err = load_err(&hf);
    assert!(err.contains("`gpt_neox` is not supported"), "{err}");
    // A missing config, and a path that is no model.
    std::fs::remove_file(&cfg).unwrap();
    let err = load_err(&hf);
    assert!(err.contains("config.json"), "{err}");
    let err = load_err(&dir.path().join("nope.gguf"));
    assert!(err.contains("nope.gguf"), "{err}");
}

#[test]
fn orthogonalized_weights_write_nothing_along_the_direction_and_export_round_trips() {
    let f = forms();
    let mut m = load(&f.gguf);
    let d: Vec<f32> = (0..tiny::HIDDEN).map(|i| (i as f32 * 0.37).sin()).collect();
    let dt = Tensor::new(d.as_slice(), &Device::Cpu).unwrap();
    let before = m.model.weight(1, Matrix::FfnDown).unwrap();
    let changes = m
        .model
        .orthogonalize(&dt, &[0, 1, 2], &[Matrix::AttnOutput, Matrix::FfnDown])
        .unwrap();
    assert_eq!(changes.len(), 6);
    for layer in 0..3 {
        for mat in [Matrix::AttnOutput, Matrix::FfnDown] {
            let w = m.model.weight(layer, mat).unwrap();
            let along = common::max_along(&dt, &w);
            assert!(along < 1e-5, "layer {layer} {mat:?}: |r̂ᵀW| = {along}");
        }
    }
    assert!(max_abs_diff(&before, &m.model.weight(1, Matrix::FfnDown).unwrap()) > 1e-3);
    // Attention Q is not a residual writer: refused.
    assert!(m.model.orthogonalize(&dt, &[0], &[Matrix::AttnQ]).is_err());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ortho");
    vauban::executor::candle::model::hf::export(
        &m.model,
        &m.tokenizer,
        m.chat_template.as_deref(),
        &m.special,
        &out,
    )
    .unwrap();
    let back = load(&out);
    let ids = m.encode(TEXT).unwrap();
    assert_eq!(back.encode(TEXT).unwrap(), ids);
    let a = m.model.forward(&ids, &[]).unwrap().logits;
    let b = back.model.forward(&ids, &[]).unwrap().logits;
    assert!(max_abs_diff(&a, &b) < 1e-4);
    assert_eq!(back.chat_template.as_deref(), Some(tiny::CHAT_TEMPLATE));
    // Export refuses to overwrite.
    assert!(
        vauban::executor::candle::model::hf::export(&m.model, &m.tokenizer, None, &m.special, &out)
            .is_err()
    );
}

/// A Phi-3 GGUF that keeps Q, K, V and gate, up apart (llama.cpp reads
/// both forms) exports in transformers' form, fused, and reloads as the
/// model it was.
#[test]
fn a_phi3_stored_unfused_exports_fused() {
    use vauban::executor::LocalBackend;
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny::write_phi3_unfused_gguf(&dir.path().join("phi3.gguf"), 7, GgmlDType::F32);
    assert!(!vauban::model::read_config(&gguf).unwrap().block.fused);
    let b = LocalBackend::load(&ModelSpec::new(gguf)).unwrap();
    let out = dir.path().join("hf");
    b.export_hf(&out).unwrap();
    let names: Vec<String> =
        candle_core::safetensors::load(out.join("model.safetensors"), &Device::Cpu)
            .unwrap()
            .into_keys()
            .collect();
    for fused in ["self_attn.qkv_proj", "mlp.gate_up_proj"] {
        assert!(
            names.iter().any(|n| n.contains(fused)),
            "{fused} not in {names:?}"
        );
    }
    assert!(
        !names
            .iter()
            .any(|n| n.contains("q_proj.") || n.contains("mlp.gate_proj."))
    );
    let back = LocalBackend::load(&ModelSpec::new(out)).unwrap();
    let ids = b.tokenize(TEXT, &PromptForm::Raw).unwrap();
    let a = b.session(&[]).prefill(&ids).unwrap().logits;
    let c = back.session(&[]).prefill(&ids).unwrap().logits;
    let worst = a
        .iter()
        .zip(&c)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "max |Δlogit| {worst}");
}

#[test]
fn the_backend_enum_dispatches_to_candle() {
    use vauban::executor::LocalBackend;
    let f = forms();
    let spec = ModelSpec::new(f.hf.clone());
    let backend = LocalBackend::load(&spec).unwrap();
    assert_eq!(backend.capabilities().executor, "candle");
    assert_eq!(backend.dims().layers, tiny::LAYERS);
    let ids = backend.tokenize("the cat", &PromptForm::Raw).unwrap();
    let chat = backend
        .tokenize("the cat", &PromptForm::Chat { system: None })
        .unwrap();
    assert_eq!(chat[0], 2, "the template opens with <|im_start|>");
    assert!(chat.len() > ids.len());
    let mut s = backend.session(&[]);
    let a = s.prefill(&ids).unwrap().logits;
    let direct = exec(&f.hf);
    let b = direct.session(&[]).prefill(&ids).unwrap().logits;
    assert_eq!(a, b);
}

#[test]
fn hf_folders_refuse_stale_or_odd_weight_files() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny::write_hf(&dir.path().join("hf"), 2);
    // A leftover file holding a tensor a shard also holds: refused, naming both.
    let stale = hf.join("model.safetensors");
    let t = Tensor::zeros(
        (tiny::vocab_size(), tiny::HIDDEN),
        candle_core::DType::F32,
        &Device::Cpu,
    )
    .unwrap();
    candle_core::safetensors::save(
        &[("lm_head.weight".to_string(), t)].into_iter().collect(),
        &stale,
    )
    .unwrap();
    let err = load_err(&hf);
    assert!(
        err.contains("lm_head.weight") && err.contains("is also in"),
        "{err}"
    );
    // An index names the shards to use; the stray file is then not read.
    let shards: Vec<String> = (1..=2)
        .map(|i| format!("model-{i:05}-of-00002.safetensors"))
        .collect();
    let mut map = serde_json::Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let st =
            unsafe { candle_core::safetensors::MmapedSafetensors::new(hf.join(shard)) }.unwrap();
        for (name, _) in st.tensors() {
            map.insert(name, shards[i].clone().into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(hf.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let m = LoadedModel::load(&hf, WeightMode::Native, &Device::Cpu).unwrap();
    assert_eq!(m.weight_files.len(), 2);
    // A listed shard that is missing is named.
    std::fs::rename(hf.join(&shards[1]), dir.path().join("away")).unwrap();
    let err = load_err(&hf);
    assert!(err.contains(&shards[1]) && err.contains("missing"), "{err}");
    // Integer weights are refused, not cast.
    std::fs::remove_file(hf.join("model.safetensors.index.json")).unwrap();
    std::fs::remove_file(&stale).unwrap();
    std::fs::rename(dir.path().join("away"), hf.join(&shards[1])).unwrap();
    let ints = Tensor::zeros(
        (tiny::vocab_size(), tiny::HIDDEN),
        candle_core::DType::U8,
        &Device::Cpu,
    )
    .unwrap();
    let path = hf.join(&shards[1]);
    let mut tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    tensors.insert("lm_head.weight".into(), ints);
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let err = load_err(&hf);
    assert!(
        err.contains("lm_head.weight") && err.contains("U8"),
        "{err}"
    );
}

#[test]
fn runs_past_the_context_length_are_refused_or_stopped() {
    let f = forms();
    let e = exec(&f.hf);
    let long = "the cat in the hat ".repeat(10);
    let mut req = request(&[], false);
    req.observe = vec![K::Text, K::Tokens];
    req.text = Some(long);
    let err = e
        .trace(&req, &options(vec![]), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("exceed the model's context length of 64"),
        "{err}"
    );
    let prompt = e.model.encode("the cat").unwrap();
    let opts = GenerateOptions {
        max_tokens: 100,
        ..Default::default()
    };
    let (g, position) = run_generate(&e, &prompt, &opts);
    assert_eq!(
        g.stop,
        vauban::executor::StopReason::ContextFull {
            limit: tiny::CONTEXT
        }
    );
    assert_eq!(position, tiny::CONTEXT);
}

#[test]
fn a_quantized_type_vauban_cannot_run_is_refused_naming_the_tensor_and_the_type() {
    let dir = tempfile::tempdir().unwrap();
    // Q8_1: a type ggml keeps for activations, which a file may still hold.
    let path = tiny::write_gguf(&dir.path().join("tiny-q8_1.gguf"), 7, GgmlDType::Q8_1);
    let e = match LoadedModel::load(&path, WeightMode::Native, &Device::Cpu) {
        Ok(_) => panic!("a Q8_1 model loaded as stored"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("tiny-q8_1.gguf"), "{e}");
    assert!(
        e.contains("tensor `token_embd.weight` is stored as Q8_1"),
        "{e}"
    );
    // The types vauban runs, every kernel format among them.
    assert!(e.contains("it runs F32, F16, BF16, Q4_0, Q4_1"), "{e}");
    for format in vauban_kernels::Format::ALL {
        assert!(e.contains(format.name()), "{format}: {e}");
    }
    // No advice that would not work: vauban cannot dequantize it either,
    // so `--weights f32` would fail the same way.
    assert!(!e.contains("--weights f32"), "{e}");
    let e = LoadedModel::load(&path, WeightMode::F32, &Device::Cpu)
        .err()
        .expect("Q8_1 dequantized")
        .to_string();
    assert!(e.contains("token_embd.weight") && e.contains("Q8_1"), "{e}");
}

/// The 5-bit types run as stored on vauban's kernels, within their
/// rounding of the same weights dequantized (llama.cpp's own files of them
/// are `families.rs`'s, against llama-server).
#[test]
fn five_bit_models_run_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    for dtype in [GgmlDType::Q5_0, GgmlDType::Q5_1] {
        let path = tiny::write_gguf(&dir.path().join(format!("{dtype:?}.gguf")), 7, dtype);
        let stored = LoadedModel::load(&path, WeightMode::Native, &Device::Cpu).unwrap();
        assert!(stored.model.is_quantized(), "{dtype:?}");
        let dense = LoadedModel::load(&path, WeightMode::F32, &Device::Cpu).unwrap();
        let ids = [1, 2, 3, 4, 5, 6];
        let a = stored.model.forward(&ids, &[]).unwrap().logits;
        let b = dense.model.forward(&ids, &[]).unwrap().logits;
        let scale = b
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let worst = max_abs_diff(&a, &b);
        // Only the activations' 8-bit rounding separates the two.
        assert!(
            worst < 0.05 * scale,
            "{dtype:?}: max |Δlogit| {worst} of {scale}"
        );
    }
}

/// What torch and MLX load a GGUF through (`HostWeights`, vauban's own
/// reader) gives every tensor as candle's reader dequantizes it, in the
/// same row-major shape, and names the stored types as ggml does.
#[test]
fn host_weights_read_every_type_as_candles_reader_does() {
    use candle_core::quantized::gguf_file::Content;
    use vauban::model::assets::ModelAssets;
    use vauban::model::host_weights::HostWeights;
    let dir = tempfile::tempdir().unwrap();
    for (dtype, name) in [
        (GgmlDType::F16, "F16"),
        (GgmlDType::BF16, "BF16"),
        (GgmlDType::Q4_0, "Q4_0"),
        (GgmlDType::Q4_1, "Q4_1"),
        (GgmlDType::Q5_0, "Q5_0"),
        (GgmlDType::Q5_1, "Q5_1"),
        (GgmlDType::Q8_0, "Q8_0"),
    ] {
        let path = tiny::write_gguf(&dir.path().join(format!("{name}.gguf")), 7, dtype);
        let assets = ModelAssets::load(&path).unwrap();
        let mut ours = HostWeights::open(&assets).unwrap();
        assert_eq!(ours.stored_types().as_deref(), Some(name));
        let mut file = std::fs::File::open(&path).unwrap();
        let candle = Content::read(&mut file).unwrap();
        assert!(candle.tensor_infos.len() > 10);
        for (tensor, info) in &candle.tensor_infos {
            let want = candle
                .tensor(&mut file, tensor, &Device::Cpu)
                .and_then(|q| q.dequantize(&Device::Cpu))
                .unwrap();
            let (shape, values) = ours.get(tensor).unwrap().unwrap();
            assert_eq!(shape, info.shape.dims(), "{name} {tensor}");
            let want = want.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(values, want, "{name} {tensor}");
        }
    }
}

/// A file may hold a tensor of a type vauban does not know (candle's
/// reader refuses the whole file for one): the model still loads and runs
/// when the tensor is never read, and reading it is refused naming it.
#[test]
fn a_tensor_of_an_unknown_type_does_not_stop_a_model_loading() {
    use candle_core::quantized::QTensor;
    use candle_core::quantized::gguf_file::{self, Content};
    let dir = tempfile::tempdir().unwrap();
    let q8 = tiny::write_gguf(&dir.path().join("tiny.gguf"), 7, GgmlDType::Q8_0);
    // The same file with one more tensor, its type id then set to 99.
    let mut file = std::fs::File::open(&q8).unwrap();
    let content = Content::read(&mut file).unwrap();
    let mut tensors: Vec<(String, QTensor)> = content
        .tensor_infos
        .keys()
        .map(|n| {
            (
                n.clone(),
                content.tensor(&mut file, n, &Device::Cpu).unwrap(),
            )
        })
        .collect();
    let extra = Tensor::zeros(8, candle_core::DType::F32, &Device::Cpu).unwrap();
    tensors.push((
        "rogue.weight".into(),
        QTensor::quantize(&extra, GgmlDType::F32).unwrap(),
    ));
    let meta: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (n.as_str(), q)).collect();
    let mut bytes = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut bytes, &meta, &refs).unwrap();
    let mut bytes = bytes.into_inner();
    // After the name: the rank (u32 1), one dimension (u64 8), the type.
    let name = b"rogue.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 4 + 8;
    assert_eq!(bytes[at..at + 4], 0u32.to_le_bytes());
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let path = dir.path().join("rogue.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let e = Content::read(&mut std::fs::File::open(&path).unwrap()).unwrap_err();
    assert!(e.to_string().contains("unknown dtype"), "{e}");

    for mode in [WeightMode::Native, WeightMode::F32] {
        let model = LoadedModel::load(&path, mode, &Device::Cpu).unwrap();
        let want = LoadedModel::load(&q8, mode, &Device::Cpu).unwrap();
        let ids = [1, 2, 3];
        let a = model.model.forward(&ids, &[]).unwrap().logits;
        let b = want.model.forward(&ids, &[]).unwrap().logits;
        assert_eq!(max_abs_diff(&a, &b), 0.0, "{mode:?}");
    }
    let mut file = vauban::gguf::GgufFile::read(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(file.tensor_shape("rogue.weight"), Some(vec![8]));
    let e = file.read_f32("rogue.weight").unwrap_err();
    assert!(e.contains("unknown type 99"), "{e}");
}

/// A prompt run as a shared prefix, then (after another prompt's rest and
/// a rewind to the prefix) its own rest, gives the logits of one pass over
/// it, with an intervention at every position, on the block kernels.
#[test]
fn a_prefix_kept_by_rewinding_gives_the_logits_of_one_pass() {
    let f = forms();
    let e = exec(&f.q8);
    let dir = tempfile::tempdir().unwrap();
    let file = write_direction(dir.path(), "d.safetensors", &test_direction());
    let ivs: Vec<_> = (0..tiny::LAYERS).map(|l| subtraction(&file, l)).collect();
    let ids = e.model.encode(TEXT).unwrap();
    let other = e
        .model
        .encode("the dog ran far away from the big red barn")
        .unwrap();
    let prefix = 3;
    let mut one = e.session(&ivs);
    let want = one.prefill(&ids).unwrap().logits;
    let mut split = e.session(&ivs);
    split.extend(&ids[..prefix]).unwrap();
    split.extend(&other[prefix..]).unwrap();
    split.rewind(prefix).unwrap();
    assert_eq!(split.position(), prefix);
    let got = split.extend(&ids[prefix..]).unwrap().logits;
    let d = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-4, "max |Δlogit| {d}");
    assert!(
        split.rewind(ids.len() + 1).is_err(),
        "rewinding forward is refused"
    );
}

/// Every artifact of `a` and `b` with the same kind, layer and labels in
/// the same order; raw tensors within `tolerance`; token ids, text and
/// scalars equal. Returns the largest tensor difference.
fn same_evidence(
    a: &vauban::executor::TraceOutput,
    b: &vauban::executor::TraceOutput,
    tolerance: f32,
) -> f32 {
    let (ta, tb) = (&a.trace, &b.trace);
    let id = &ta.id;
    let stages = |t: &vauban::trace::Trace| t.spans.iter().map(|s| s.stage).collect::<Vec<_>>();
    assert_eq!(stages(ta), stages(tb), "{id}: spans");
    assert_eq!(ta.artifacts.len(), tb.artifacts.len(), "{id}: artifacts");
    let mut worst = 0f32;
    for (x, y) in ta.artifacts.iter().zip(&tb.artifacts) {
        let what = format!("{id}: {:?} at layer {:?} {:?}", x.kind, x.layer, x.labels);
        assert_eq!(
            (x.kind, x.layer, &x.labels),
            (y.kind, y.layer, &y.labels),
            "{what}"
        );
        match (&x.data, &y.data) {
            (
                ArtifactData::Tensor {
                    summary: sx,
                    raw: rx,
                },
                ArtifactData::Tensor {
                    summary: sy,
                    raw: ry,
                },
            ) => {
                assert_eq!((&sx.shape, rx), (&sy.shape, ry), "{what}");
                if *rx {
                    let (vx, vy) = (
                        a.tensors[&x.id].as_ref().to_f32_vec(),
                        b.tensors[&y.id].as_ref().to_f32_vec(),
                    );
                    let d = vx
                        .iter()
                        .zip(&vy)
                        .map(|(p, q)| (p - q).abs())
                        .fold(0f32, f32::max);
                    assert!(d <= tolerance, "{what}: max |Δ| {d}");
                    worst = worst.max(d);
                }
            }
            // Profiles hold times; intervention records hold projections
            // (compared through the activations they produced).
            (ArtifactData::Record { .. }, ArtifactData::Record { .. })
                if matches!(x.kind, K::Profile | K::InterventionResult) => {}
            (dx, dy) => assert_eq!(
                serde_json::to_value(dx).unwrap(),
                serde_json::to_value(dy).unwrap(),
                "{what}"
            ),
        }
    }
    worst
}

#[test]
fn a_batched_trace_records_what_each_trace_records_alone() {
    let f = forms();
    let dir = tempfile::tempdir().unwrap();
    let file = write_direction(dir.path(), "d.safetensors", &test_direction());
    let iv = subtraction(&file, 1);
    let job = |id: &str, text: &str, ivs: Vec<_>, tokens: usize| {
        let mut r = request(&[0, 1, 2], !ivs.is_empty());
        r.text = Some(text.into());
        let mut o = options(ivs);
        o.trace_id = id.into();
        o.generate = GenerateOptions {
            max_tokens: tokens,
            top_logprobs: 4,
            ..Default::default()
        };
        (r, o)
    };
    // Prompts of different lengths; greedy and sampled decoding that stop
    // at different steps; an intervention on one; another side's
    // continuation scored on one; a prompt in chat form.
    let mut jobs = vec![
        job("plain", TEXT, vec![], 6),
        job("steered", "a mat", vec![iv.clone()], 9),
        job("short", "hat", vec![], 0),
        job("scored", "then ran in the", vec![iv], 3),
        job("sampled", "on a mat, the cat", vec![], 5),
    ];
    jobs[3].1.reference = Some(vauban::executor::ReferenceContinuation::new(
        "elsewhere".into(),
        vec![5, 9, 40],
        vec![vec![5, 6], vec![9, 10], vec![40, 41], vec![1, 2]],
    ));
    jobs[4].1.generate.sampling = Some(vauban::model::sample::Sampling {
        temperature: 0.9,
        top_p: 0.95,
        top_k: None,
        seed: 11,
    });
    jobs[2].1.prompt = PromptForm::Chat { system: None };
    // With the block kernels, bit for bit (every row's activations are
    // quantized on their own); with f32 weights, the matrix library's
    // summation order depends on the batch's row count.
    for (path, tolerance) in [(&f.gguf, 1e-4), (&f.q8, 0.0)] {
        let e = exec(path);
        let batched = e.trace_batch(&jobs);
        assert_eq!(batched.len(), jobs.len());
        for ((request, options), got) in jobs.iter().zip(batched) {
            let id = &options.trace_id;
            let (got, alone) = (got.unwrap(), e.trace(request, options, None).unwrap());
            let d = same_evidence(&got, &alone, tolerance);
            eprintln!("{}: {id}: max |Δ| {d:.2e}", path.display());
            assert_eq!(
                got.generation.as_ref().map(|g| &g.ids),
                alone.generation.as_ref().map(|g| &g.ids),
                "{id}: generated tokens"
            );
            let batch = |out: &vauban::executor::TraceOutput, stage| {
                let span = out.trace.spans.iter().find(|s| s.stage == stage).unwrap();
                (
                    span.profile.batch_size,
                    span.profile.notes.get("batch").cloned(),
                )
            };
            let (size, note) = batch(&got, vauban::trace::Stage::Prefill);
            assert_eq!(size, 5, "{id}");
            assert!(note.unwrap().contains("5 sequences"), "{id}");
            assert_eq!(batch(&alone, vauban::trace::Stage::Prefill), (1, None));
            if options.generate.max_tokens > 0 {
                assert_eq!(batch(&got, vauban::trace::Stage::Decode).0, 4, "{id}");
            }
        }
    }
    // A prompt outside the vocabulary fails the batched pass: the batch is
    // run again one job at a time, and that job fails alone.
    let mut bad = job("bad", TEXT, vec![], 2);
    bad.0.text = None;
    bad.0.token_ids = Some(vec![3, 100_000]);
    jobs.insert(2, bad);
    let e = exec(&f.gguf);
    for (got, (_, options)) in e.trace_batch(&jobs).into_iter().zip(&jobs) {
        match options.trace_id.as_str() {
            "bad" => {
                let err = got.err().expect("the bad job fails").to_string();
                assert!(err.contains("100000"), "{err}");
            }
            id => assert!(got.is_ok(), "{id}: {:?}", got.err()),
        }
    }
}

/// JSON values equal, numbers within `tolerance` (absolute).
fn json_close(a: &serde_json::Value, b: &serde_json::Value, tolerance: f64, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= tolerance, "{at}: {x} against {y}");
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                json_close(x, y, tolerance, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (k, x) in x {
                json_close(x, &y[k], tolerance, &format!("{at}.{k}"));
            }
        }
        (x, y) => assert_eq!(x, y, "{at}"),
    }
}

/// Prompts of a batch that open alike (a chat template with a system
/// message) run their opening once; each trace still records what it
/// would alone: every activation (block outputs included), the logits and
/// log-probabilities at every position, the intervention's record, the
/// generated tokens. An intervention on "the last token of each call" would
/// move with a split pass, so it turns the sharing off.
#[test]
fn a_shared_opening_runs_once_and_each_trace_records_what_it_would_alone() {
    let f = forms();
    let dir = tempfile::tempdir().unwrap();
    let file = write_direction(dir.path(), "d.safetensors", &test_direction());
    let system = "the cat sat on the mat and the hat sat on the cat";
    let jobs = |ivs: Vec<vauban::intervene::Intervention>| -> Vec<(TraceRequest, RunOptions)> {
        ["then ran in", "a mat", "on a mat, the cat sat"]
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let mut r = request(&[0, 1, 2], true);
                r.text = Some((*text).into());
                let mut o = options(ivs.clone());
                o.trace_id = format!("t{i}");
                o.block_outputs = true;
                o.prompt = PromptForm::Chat {
                    system: Some(system.into()),
                };
                o.generate = GenerateOptions {
                    max_tokens: 3,
                    top_logprobs: 2,
                    ..Default::default()
                };
                (r, o)
            })
            .collect()
    };
    let shared = |out: &vauban::executor::TraceOutput| -> Option<String> {
        let span = out
            .trace
            .spans
            .iter()
            .find(|s| s.stage == vauban::trace::Stage::Prefill)
            .unwrap();
        span.profile.notes.get("shared_opening").cloned()
    };
    let all_positions = subtraction(&file, 1);
    let mut last = subtraction(&file, 1);
    last.positions = vauban::intervene::Positions::Last;
    for (path, tolerance) in [(&f.gguf, 1e-4), (&f.q8, 0.0)] {
        let e = exec(path);
        for (ivs, shares) in [
            (vec![all_positions.clone()], true),
            (vec![last.clone()], false),
        ] {
            let jobs = jobs(ivs);
            for (got, (request, options)) in e.trace_batch(&jobs).into_iter().zip(&jobs) {
                let id = &options.trace_id;
                let (got, alone) = (got.unwrap(), e.trace(request, options, None).unwrap());
                let note = shared(&got);
                assert_eq!(note.is_some(), shares, "{id}: {note:?}");
                if let Some(note) = note {
                    let n: usize = note
                        .trim_start_matches("the first ")
                        .split(' ')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert!(n >= 8, "{id}: {note}");
                    assert!(note.contains("all 3 prompts"), "{note}");
                }
                assert_eq!(shared(&alone), None);
                let d = same_evidence(&got, &alone, tolerance);
                eprintln!("{}: {id} sharing {shares}: max |Δ| {d:.2e}", path.display());
                assert_eq!(
                    got.generation.as_ref().map(|g| &g.ids),
                    alone.generation.as_ref().map(|g| &g.ids),
                    "{id}: generated tokens"
                );
                // The intervention's record covers every prompt position once.
                let records = |out: &vauban::executor::TraceOutput| -> Vec<serde_json::Value> {
                    out.trace
                        .artifacts_of(K::InterventionResult)
                        .map(|a| serde_json::to_value(&a.data).unwrap())
                        .collect()
                };
                let (rg, ra) = (records(&got), records(&alone));
                assert_eq!(rg.len(), 1, "{id}");
                json_close(&rg[0], &ra[0], 1e-3, id);
            }
        }
    }
}

/// The other side's continuation, scored from the trace's own KV cache
/// (rewound to before the prompt's last token), against one plain pass over
/// the prompt and the continuation: the same log-probabilities, bit for bit
/// with the Q8_0 kernels, within f32 rounding with f32 weights; with and
/// without an intervention, alone and in a batch.
#[test]
fn a_reference_continuation_scored_from_the_cache_equals_a_full_pass() {
    use vauban::executor::candle::model::llama::LogitsAt;
    let f = forms();
    let dir = tempfile::tempdir().unwrap();
    let file = write_direction(dir.path(), "d.safetensors", &test_direction());
    let completion = vec![5u32, 9, 40, 7];
    let support = vec![
        vec![5, 6],
        vec![9, 10],
        vec![40, 41],
        vec![7, 8],
        vec![1, 2],
    ];
    let reference = vauban::executor::ReferenceContinuation::new(
        "other".into(),
        completion.clone(),
        support.clone(),
    );
    for (path, tolerance) in [(&f.gguf, 1e-5f32), (&f.q8, 0.0)] {
        let e = exec(path);
        for ivs in [vec![], vec![subtraction(&file, 1)]] {
            let mut jobs = Vec::new();
            for (i, text) in [TEXT, "a mat"].iter().enumerate() {
                let mut r = request(&[0], false);
                r.text = Some((*text).into());
                let mut o = options(ivs.clone());
                o.trace_id = format!("t{i}");
                o.generate = GenerateOptions {
                    max_tokens: 4,
                    ..Default::default()
                };
                o.reference = Some(reference.clone());
                jobs.push((r, o));
            }
            let batched = e.trace_batch(&jobs);
            for ((request, options), got) in jobs.iter().zip(batched) {
                let alone = e.trace(request, options, None).unwrap();
                let got = got.unwrap();
                // One pass over the prompt and the continuation, with the
                // same interventions.
                let prompt = e
                    .model
                    .encode_raw(request.text.as_deref().unwrap())
                    .unwrap();
                let mut ids = prompt.clone();
                ids.extend(&completion);
                let mut hook = vauban::executor::candle::RunHook::new(&options.interventions);
                let (logits, _) = e
                    .model
                    .model
                    .run(&ids, None, &mut hook, LogitsAt::From(prompt.len() - 1))
                    .unwrap();
                let lp = vauban::executor::candle::model::llama::log_softmax(&logits)
                    .unwrap()
                    .to_vec2::<f32>()
                    .unwrap();
                let want: Vec<f32> = lp
                    .iter()
                    .zip(&support)
                    .flat_map(|(row, ids)| ids.iter().map(|&i| row[i as usize]))
                    .collect();
                for out in [&got, &alone] {
                    let a = out
                        .trace
                        .artifacts_of(K::Logprobs)
                        .find(|a| {
                            a.labels.get("values").map(String::as_str) == Some("at_reference_top_k")
                        })
                        .expect("the reference's scores");
                    let have = out.tensors[&a.id].as_ref().to_f32_vec();
                    assert_eq!(have.len(), want.len());
                    let d = have
                        .iter()
                        .zip(&want)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0f32, f32::max);
                    eprintln!(
                        "{} {} interventions: max |Δ| {d:.2e}",
                        path.display(),
                        options.interventions.len()
                    );
                    // The host log-softmax against candle's: f32 rounding.
                    assert!(
                        d <= tolerance.max(2e-6),
                        "{}: max |Δ| {d}",
                        options.trace_id
                    );
                }
            }
        }
    }
}
