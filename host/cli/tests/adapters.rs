//! LoRA adapters through the binary: `model orthogonalize --lora`, `model
//! lora`, `--adapter` and `adapter =`.
//!
//! - On the tiny test model (no Python): the rank-1 adapter of an
//!   orthogonalization, applied by vauban (`--adapter`, in either format,
//!   on an f32 and a quantized base), gives the logits of the model
//!   orthogonalized whole; every bad input is refused naming what is wrong.
//! - Against the tools no one here wrote (`scripts/reference/check_lora.py`
//!   in the reference environment, with llama.cpp's build): PEFT and
//!   `llama-server --lora` load what vauban writes and agree with the edit
//!   made in torch; `model lora` recovers a synthetic low-rank fine-tune
//!   and reports for a full-rank one the share numpy's SVD says it can
//!   keep; on SmolLM2's Q4_1 file, vauban and llama-server apply the same
//!   adapter to the quantized base alike.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};
use common::{arg as s, output_text as said, run_vauban as vauban, tiny};

/// A direction file of width `width` (no component zero).
fn direction(dir: &Path, width: usize) -> PathBuf {
    let path = dir.join("direction.safetensors");
    let v: Vec<f32> = (0..width).map(|i| ((i % 7) as f32 - 2.5) / 3.0).collect();
    let t = Tensor::new(v.as_slice(), &Device::Cpu).unwrap();
    candle_core::safetensors::save(&[("direction".to_string(), t)].into_iter().collect(), &path)
        .unwrap();
    path
}

/// The prompt's last-position logits of `vauban trace` on `model` with
/// `extra` arguments.
fn logits(dir: &Path, name: &str, model: &Path, extra: &[&str]) -> Vec<f32> {
    let bundle = dir.join(name);
    let mut args = vec![
        "trace",
        "--model",
        s(model),
        "--prompt",
        "the cat sat in the hat",
        "--raw",
        "--logprobs",
        "--raw-tensors",
        "--max-tokens",
        "1",
        "--out",
        s(&bundle),
    ];
    args.extend_from_slice(extra);
    let o = vauban(&args);
    assert!(o.status.success(), "{}", said(&o));
    let b = vauban::bundle::Bundle::open(&bundle).unwrap();
    let t = b.trace("t0").unwrap();
    let raw = b.raw_tensors(t).unwrap();
    let a = t
        .artifacts
        .iter()
        .find(|a| a.kind.as_str() == "logits")
        .expect("a logits artifact");
    let all = raw[&a.id].as_ref().to_f32_vec();
    let vocab = *raw[&a.id].shape.last().unwrap();
    all[all.len() - vocab..].to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The tiny model as an f32 or Q8_0 GGUF, its orthogonalization along a
/// direction written whole (`edited`) and as an adapter (`lora`).
struct Edit {
    dir: tempfile::TempDir,
    model: PathBuf,
    edited: PathBuf,
    lora: PathBuf,
}

fn edit(dtype: GgmlDType) -> Edit {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 5, dtype);
    let d = direction(dir.path(), tiny::HIDDEN);
    let (edited, lora) = (dir.path().join("edited"), dir.path().join("lora"));
    for (flag, out) in [("--out", &edited), ("--lora", &lora)] {
        let o = vauban(&[
            "model",
            "orthogonalize",
            "--model",
            s(&model),
            "--direction",
            s(&d),
            flag,
            s(out),
        ]);
        assert!(o.status.success(), "{}", said(&o));
    }
    Edit {
        dir,
        model,
        edited,
        lora,
    }
}

/// The adapter vauban applies (either format) gives the orthogonalized
/// model's logits, on an f32 base and on a quantized one (whose changed
/// matrices are kept dense); the adapter changes them.
#[test]
fn an_orthogonalization_adapter_gives_the_orthogonalized_models_logits() {
    for dtype in [GgmlDType::F32, GgmlDType::Q8_0] {
        let e = edit(dtype);
        let dir = e.dir.path();
        for f in [
            "adapter_config.json",
            "adapter_model.safetensors",
            "adapter.gguf",
        ] {
            assert!(e.lora.join(f).is_file(), "{f} written");
        }
        let whole = logits(dir, "whole", &e.edited, &[]);
        let base = logits(dir, "base", &e.model, &[]);
        let gguf = e.lora.join("adapter.gguf");
        for (name, adapter) in [("peft", e.lora.as_path()), ("gguf", gguf.as_path())] {
            // The folder holds f32 weights dequantized from the file: the
            // adapted base dequantized at load holds the same.
            let f32_name = format!("{name}-f32");
            let adapted = logits(
                dir,
                &f32_name,
                &e.model,
                &["--adapter", s(adapter), "--weights", "f32"],
            );
            let d = max_diff(&adapted, &whole);
            assert!(d < 1e-4, "{dtype:?} {name}: {d}");
            assert!(
                max_diff(&adapted, &base) > 1e-2,
                "the adapter changes the logits"
            );
            // As stored: the changed matrices dense, the others Q8_0 (whose
            // kernels round the activations to 8 bits too).
            let native = logits(dir, name, &e.model, &["--adapter", s(adapter)]);
            let tol = if dtype == GgmlDType::F32 { 1e-4 } else { 5e-2 };
            let d = max_diff(&native, &whole);
            assert!(d < tol, "{dtype:?} {name} native: {d}");
            // The adapted model is nearer the orthogonalized one than the
            // base is: the adapter's change, not the paths' rounding.
            let apart = max_diff(&base, &whole);
            assert!(
                apart > 2.0 * d,
                "{dtype:?} {name}: base {apart} from the edited model, adapted {d}"
            );
        }
    }
}

/// The adapted model's traces name the adapter and claim no file hash.
#[test]
fn an_adapted_models_traces_name_the_adapter() {
    let e = edit(GgmlDType::F32);
    let bundle = e.dir.path().join("b");
    let o = vauban(&[
        "trace",
        "--model",
        s(&e.model),
        "--adapter",
        s(&e.lora),
        "--prompt",
        "hi",
        "--raw",
        "--max-tokens",
        "1",
        "--out",
        s(&bundle),
    ]);
    assert!(o.status.success(), "{}", said(&o));
    let b = vauban::bundle::Bundle::open(&bundle).unwrap();
    let m = &b.trace("t0").unwrap().model;
    assert!(m.name.starts_with("tiny.gguf (LoRA "), "{}", m.name);
    assert!(m.name.ends_with("lora, rank 1)"), "{}", m.name);
    assert_eq!(
        m.sha256, None,
        "the file's hash no longer describes the weights"
    );
}

/// Rewrites the PEFT adapter's tensors with `change` applied.
fn rewrite_peft(lora: &Path, change: impl Fn(&mut Vec<(String, Tensor)>)) {
    let file = lora.join("adapter_model.safetensors");
    let mut tensors: Vec<(String, Tensor)> = candle_core::safetensors::load(&file, &Device::Cpu)
        .unwrap()
        .into_iter()
        .collect();
    change(&mut tensors);
    candle_core::safetensors::save(&tensors.into_iter().collect(), &file).unwrap();
}

/// An adapter that does not fit is refused naming the first mismatch; a
/// model file is not an adapter; a folder holding neither format says so.
#[test]
fn an_adapter_that_does_not_fit_is_refused_naming_the_mismatch() {
    let e = edit(GgmlDType::F32);
    let refused = |adapter: &Path| {
        let o = vauban(&[
            "trace",
            "--model",
            s(&e.model),
            "--adapter",
            s(adapter),
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
            "--out",
            s(&e.dir.path().join("never")),
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", said(&o));
        said(&o)
    };
    // A factor of the wrong width.
    let wide = e.dir.path().join("wide");
    copy_dir(&e.lora, &wide);
    rewrite_peft(&wide, |t| {
        let (_, a) = t
            .iter_mut()
            .find(|(n, _)| n == "base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight")
            .unwrap();
        *a = Tensor::zeros((1, 65), candle_core::DType::F32, &Device::Cpu).unwrap();
    });
    let err = refused(&wide);
    assert!(
        err.contains("does not fit the model")
            && err.contains("`model.layers.1.self_attn.o_proj`: lora_A is [1, 65]")
            && err.contains("lora_A must be [r, 64]"),
        "{err}"
    );
    // A layer the model does not have.
    let deep = e.dir.path().join("deep");
    copy_dir(&e.lora, &deep);
    rewrite_peft(&deep, |t| {
        for (n, _) in t.iter_mut() {
            *n = n.replace("layers.2.", "layers.7.");
        }
    });
    let err = refused(&deep);
    assert!(
        err.contains("it targets `model.layers.7.") && err.contains("(3 layers"),
        "{err}"
    );
    // A GGUF adapter made for another family.
    let qwen = e.dir.path().join("qwen.gguf");
    let a = vec![0f32; 64];
    vauban::model::gguf::write_f32(
        &mut std::fs::File::create(&qwen).unwrap(),
        &[
            (
                "general.architecture",
                vauban::model::gguf::MetaValue::Str("qwen3".into()),
            ),
            (
                "general.type",
                vauban::model::gguf::MetaValue::Str("adapter".into()),
            ),
            (
                "adapter.type",
                vauban::model::gguf::MetaValue::Str("lora".into()),
            ),
        ],
        &[
            ("blk.0.attn_output.weight.lora_a", &[1, 64], &a),
            ("blk.0.attn_output.weight.lora_b", &[64, 1], &a),
        ],
    )
    .unwrap();
    let err = refused(&qwen);
    assert!(
        err.contains("it was made for a `qwen3` model, and the model is `llama`"),
        "{err}"
    );
    // A model file given as the adapter.
    let err = refused(&e.model);
    assert!(err.contains("is not a LoRA adapter"), "{err}");
    // A folder with neither format.
    let err = refused(e.dir.path());
    assert!(
        err.contains("holds neither adapter_config.json (a PEFT adapter) nor adapter.gguf"),
        "{err}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// `model lora`'s bad input: a rank of 0, two models of different shapes,
/// two identical models, a matrix name it does not know, a folder that
/// exists; `orthogonalize` with both `--out` and `--lora`.
#[test]
fn model_lora_refuses_what_it_cannot_extract() {
    let dir = tempfile::tempdir().unwrap();
    let a = tiny::write_gguf(&dir.path().join("a.gguf"), 1, GgmlDType::F32);
    let b = tiny::write_gguf(&dir.path().join("b.gguf"), 2, GgmlDType::F32);
    let other = tiny::write_family_gguf(&dir.path().join("qwen3.gguf"), "qwen3", 1, GgmlDType::F32);
    let out = dir.path().join("out");
    let lora = |base: &Path, tuned: &Path, rank: &str, extra: &[&str]| {
        let mut args = vec![
            "model",
            "lora",
            "--base",
            s(base),
            "--tuned",
            s(tuned),
            "--rank",
            rank,
            "--out",
            s(&out),
        ];
        args.extend_from_slice(extra);
        vauban(&args)
    };
    let o = lora(&a, &b, "0", &[]);
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", said(&o));
    assert!(said(&o).contains("--rank"), "{}", said(&o));
    let o = lora(&a, &other, "1", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        said(&o).contains("the two models differ in shape: the base is a `llama` model and the tuned one a `qwen3` model"),
        "{}",
        said(&o)
    );
    let o = lora(&a, &a, "1", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        said(&o).contains("every one of the 21 matrices is the same in both models"),
        "{}",
        said(&o)
    );
    let o = lora(&a, &b, "1", &["--matrices", "attn_o"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        said(&o).contains("`attn_o` is not a block matrix; use one of attn_q"),
        "{}",
        said(&o)
    );
    // Two different random models: every matrix differs, at full rank.
    let o = lora(&a, &b, "4", &[]);
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        said(&o).contains("rank-4 LoRA adapter of 21 matrices"),
        "{}",
        said(&o)
    );
    assert!(
        said(&o).contains("token_embd.weight: ‖Δ‖ ="),
        "the embeddings differ and are not carried: {}",
        said(&o)
    );
    let o = lora(&a, &b, "4", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        said(&o).contains("exists; choose a new folder"),
        "{}",
        said(&o)
    );
    let d = direction(dir.path(), tiny::HIDDEN);
    let o = vauban(&[
        "model",
        "orthogonalize",
        "--model",
        s(&a),
        "--direction",
        s(&d),
        "--out",
        s(&dir.path().join("x")),
        "--lora",
        s(&dir.path().join("y")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", said(&o));
}

/// `adapter =` in a config: checked against the model when the config is
/// validated (a mismatch named at the key), refused on an endpoint.
#[test]
fn a_configs_adapter_is_checked_when_the_config_is() {
    let e = edit(GgmlDType::F32);
    let dir = e.dir.path();
    let deep = dir.join("deep");
    copy_dir(&e.lora, &deep);
    rewrite_peft(&deep, |t| {
        for (n, _) in t.iter_mut() {
            *n = n.replace("layers.2.", "layers.9.");
        }
    });
    let suite = dir.join("suite.jsonl");
    std::fs::write(&suite, "{\"id\": \"a\", \"text\": \"hi\"}\n").unwrap();
    let config = |candidate: &str| {
        let path = dir.join("c.toml");
        std::fs::write(
            &path,
            format!(
                "output = \"out\"\n[suite]\nfile = \"suite.jsonl\"\n[[scorers]]\nplugin = \"refusal\"\n[baseline]\nmodel = \"tiny.gguf\"\n[candidate]\n{candidate}\n"
            ),
        )
        .unwrap();
        let plugins = common::plugins::wasm("vauban-plugin-refusal");
        let o = Command::new(env!("CARGO_BIN_EXE_vauban"))
            .args(["validate", s(&path)])
            .env("VAUBAN_PLUGIN_DIR", plugins.parent().unwrap())
            .output()
            .unwrap();
        (o.status.code(), said(&o))
    };
    let (code, text) = config("model = \"tiny.gguf\"\nadapter = \"lora\"");
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = config("model = \"tiny.gguf\"\nadapter = \"deep\"");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("candidate.adapter: adapter") && text.contains("`model.layers.9."),
        "{text}"
    );
    let (code, text) = config(
        "model = \"served\"\nexecutor = \"http\"\nurl = \"http://127.0.0.1:9/v1\"\nadapter = \"lora\"",
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("candidate.adapter: an adapter is applied to a model vauban holds"),
        "{text}"
    );
}

/// PEFT and llama.cpp load vauban's adapters and agree with the edit made
/// in torch; `model lora` recovers and measures fine-tunes as numpy's SVD
/// says; vauban and llama-server apply one adapter to SmolLM2's Q4_1 file
/// alike (`scripts/reference/check_lora.py`; it skips without the
/// reference environment or llama.cpp's build, unless CI requires them).
#[test]
fn peft_and_llama_cpp_load_vaubans_adapters() {
    let Some(server) = common::llama_server::binary() else {
        return;
    };
    let Some(python) = common::reference::python() else {
        return;
    };
    let llama = server.parent().and_then(Path::parent).unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(python);
    cmd.arg(common::reference::root().join("scripts/reference/check_lora.py"))
        .arg(env!("CARGO_BIN_EXE_vauban"))
        .arg(llama)
        .arg(out.path());
    if let Some(smollm2) = common::smollm2_path() {
        cmd.arg("--real").arg(smollm2);
    }
    let done = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    println!("{stdout}");
    assert!(
        done.status.success(),
        "check_lora.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let json = std::fs::read_to_string(out.path().join("check_lora.json")).unwrap();
    let checks: serde_json::Value = serde_json::from_str(&json).unwrap();
    let checks = &checks["checks"];
    for family in ["llama", "qwen3", "gemma2"] {
        let c = &checks[format!("orthogonalize_{family}")];
        assert_eq!(c["ok"], true, "{family}: {c}");
        assert!(c["peft_vs_edited"].as_f64().unwrap() < 2e-4, "{c}");
        assert!(
            c["vauban_adapter_vs_edited"].as_f64().unwrap() < 2e-4,
            "{c}"
        );
        assert_eq!(c["rank"], 1);
    }
    let llama = &checks["orthogonalize_llama"];
    assert_eq!(llama["llama_server_same_greedy"], true, "{llama}");
    assert!(llama["llama_server_lora_vs_edited"].as_f64().unwrap() < 1e-3);
    assert!(
        llama["vauban_gguf_adapter_vs_llama_server"]
            .as_f64()
            .unwrap()
            < 1e-3
    );
    for case in ["extract_rank2", "extract_sparse", "extract_full_rank"] {
        assert_eq!(checks[case]["ok"], true, "{case}: {}", checks[case]);
    }
    let full = &checks["extract_full_rank"];
    assert!(
        full["worst_share_vs_best"].as_f64().unwrap() > 0.999,
        "{full}"
    );
    assert_eq!(full["above_best"], false);
    if common::smollm2_path().is_some() {
        let real = &checks["real_smollm2"];
        assert_eq!(real["ok"], true, "{real}");
        assert!(real["kl_vauban_vs_llama_server"].as_f64().unwrap() < 0.05);
    }
}

/// The tensor-library executors apply an adapter as candle does: the same
/// logits, from the PEFT folder and from the GGUF, on an f32 base and on a
/// quantized one dequantized at load.
#[cfg(any(feature = "torch", feature = "mlx"))]
#[test]
fn the_adapter_applies_alike_on_every_executor() {
    let executors = [
        #[cfg(feature = "torch")]
        "torch",
        #[cfg(feature = "mlx")]
        "mlx",
    ];
    for dtype in [GgmlDType::F32, GgmlDType::Q8_0] {
        let e = edit(dtype);
        let dir = e.dir.path();
        let gguf = e.lora.join("adapter.gguf");
        let f32 = ["--weights", "f32"];
        let candle = logits(
            dir,
            "candle",
            &e.model,
            &["--adapter", s(&e.lora), f32[0], f32[1]],
        );
        let base = logits(dir, "base", &e.model, &f32);
        for executor in executors {
            for (name, adapter) in [("peft", e.lora.as_path()), ("gguf", gguf.as_path())] {
                let other = logits(
                    dir,
                    &format!("{executor}-{name}"),
                    &e.model,
                    &[
                        "--adapter",
                        s(adapter),
                        "--executor",
                        executor,
                        f32[0],
                        f32[1],
                    ],
                );
                let d = max_diff(&other, &candle);
                assert!(d < 1e-4, "{executor} {dtype:?} {name}: {d}");
                assert!(
                    max_diff(&other, &base) > 1e-2,
                    "{executor}: the adapter applied"
                );
            }
        }
    }
}
