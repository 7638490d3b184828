//! Every model family vauban runs, against Hugging Face transformers (a
//! reference no one here wrote): `scripts/reference/compare_transformers.py`
//! builds a tiny random model of each family with transformers (real
//! layouts: Q/K norms, post-norms, GeGLU, soft-caps, sliding windows, two
//! RoPE bases), runs the same prompt through transformers and through this
//! build's `vauban trace`, and compares the logits, the residual stream
//! after every block and eight greedy tokens.
//!
//! GGUF files of the same families come from llama.cpp's own converter and
//! `llama-quantize`, and are checked against llama.cpp's `llama-server`
//! (`scripts/reference/compare_llama_cpp.py`): the prompt's token ids
//! from the GGUF's tokenizer metadata, greedy tokens and their
//! log-probabilities.
//!
//! The reference's Python environment is `scripts/setup-reference.sh`'s
//! (setup.sh installs it); without it the tests skip, unless
//! `VAUBAN_REQUIRE_REFERENCE=1` (CI), under which they fail.

mod common;

use std::path::Path;
use std::process::Command;

use common::reference::{python as reference_python, root};

/// Runs `scripts/reference/<script>.py VAUBAN [args] OUT [more]` in the
/// reference environment; the `models` of the JSON it writes to OUT.
fn run_reference(
    python: &Path,
    script: &str,
    args: &[&std::ffi::OsStr],
    more: &[&std::ffi::OsStr],
) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let done = Command::new(python)
        .arg(root().join(format!("scripts/reference/{script}.py")))
        .arg(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .arg(out.path())
        .args(more)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    // The per-model lines, for the test's log.
    println!("{stdout}");
    assert!(
        done.status.success(),
        "{script}.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let json = std::fs::read_to_string(out.path().join(format!("{script}.json"))).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&json).unwrap();
    meta["models"].clone()
}

/// Runs the comparison with transformers on `executor` for the cases in
/// `only` (every case when empty) but those in `skip`, keeping the tiny
/// models in `keep`; the per-model results.
fn compare(executor: &str, only: &str, skip: &str, keep: &Path) -> Option<serde_json::Value> {
    let python = reference_python()?;
    let more = [
        "--executor".as_ref(),
        executor.as_ref(),
        "--only".as_ref(),
        only.as_ref(),
        "--skip".as_ref(),
        skip.as_ref(),
        "--keep".as_ref(),
        keep.as_os_str(),
    ];
    Some(run_reference(&python, "compare_transformers", &[], &more))
}

/// `vauban model orthogonalize` of the tiny model `name` in `models`
/// along a direction of ones, into `{name}.edited`; its output.
fn orthogonalize(models: &Path, name: &str) -> String {
    orthogonalize_on(models, name, "candle")
}

/// [`orthogonalize`] on `executor`, into `{name}.edited` (candle) or
/// `{name}.edited-{executor}`.
fn orthogonalize_on(models: &Path, name: &str, executor: &str) -> String {
    let direction = models.join(format!("{name}.direction.safetensors"));
    let ones =
        candle_core::Tensor::ones(64, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(
        &std::collections::HashMap::from([("direction".to_owned(), ones)]),
        &direction,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(["model", "orthogonalize", "--model"])
        .arg(models.join(name))
        .arg("--direction")
        .arg(&direction)
        .arg("--out")
        .arg(models.join(match executor {
            "candle" => format!("{name}.edited"),
            _ => format!("{name}.edited-{executor}"),
        }))
        .args(["--executor", executor])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Every family on a tensor-library executor against transformers: the
/// same cases, the same tolerances (the mixture's router included), its
/// forward instead of candle's.
#[cfg(any(feature = "torch", feature = "mlx"))]
fn every_family_on(executor: &str) {
    let keep = tempfile::tempdir().unwrap();
    let Some(models) = compare(executor, "", "", keep.path()) else {
        return;
    };
    assert!(models.as_object().unwrap().len() >= 15, "{models}");
    for (name, m) in models.as_object().unwrap() {
        assert_eq!(m["ok"], true, "{executor} {name}: {m}");
        assert_eq!(m["vauban_greedy"], m["transformers_greedy"], "{name}");
    }
    for moe in ["qwen3_moe", "qwen3_moe_norm"] {
        assert!(
            models[moe]["router_max_abs_diff"].as_f64().unwrap() < 1e-4,
            "{moe}: {}",
            models[moe]
        );
    }
    // A mixture's weight edit on this executor: every expert's down
    // matrix no longer writes along the direction (ones), in the folder
    // it exports.
    orthogonalize_on(keep.path(), "qwen3_moe", executor);
    let edited = keep.path().join(format!("qwen3_moe.edited-{executor}"));
    let worst = experts_write_along_ones(&edited);
    assert!(
        worst < 1e-4,
        "{executor}: an edited expert still writes {worst} along r"
    );
    assert!(experts_write_along_ones(&keep.path().join("qwen3_moe")) > 1e-2);
}

/// The largest |rᵀ W| over every expert's down matrix of the HF folder
/// `dir` (`[experts, hidden, ffn]` stacks, transformers 5's
/// `mlp.experts.down_proj`, or the Hub's `mlp.experts.{e}.down_proj.weight`,
/// `[hidden, ffn]`), for the unit direction r along ones.
#[cfg(any(feature = "torch", feature = "mlx"))]
fn experts_write_along_ones(dir: &Path) -> f32 {
    let (mut worst, mut seen) = (0f32, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "safetensors") {
            continue;
        }
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
        for (name, t) in tensors {
            if !(name.contains("mlp.experts.") && name.contains("down_proj")) {
                continue;
            }
            seen += 1;
            let axis = t.rank() - 2;
            let hidden = t.dims()[axis];
            // rᵀW for r = ones / √hidden: the column sums, scaled.
            let along = (t.sum(axis).unwrap() / (hidden as f64).sqrt()).unwrap();
            let along = along.abs().unwrap().flatten_all().unwrap();
            worst = worst.max(along.max(0).unwrap().to_scalar::<f32>().unwrap());
        }
    }
    assert!(seen > 0, "no expert's down matrix in {}", dir.display());
    worst
}

#[cfg(feature = "torch")]
#[test]
fn every_family_matches_transformers_at_every_block_on_torch() {
    every_family_on("torch");
}

#[cfg(feature = "mlx")]
#[test]
fn every_family_matches_transformers_at_every_block_on_mlx() {
    every_family_on("mlx");
}

/// The largest |Δ| between candle's fused CPU attention and its tensor
/// attention (a GPU's path: masks for the windows, soft-caps as tensor
/// operations) on the HF folder `dir`: a 30-token prompt (longer than the
/// tiny models' window of 5), then three decode steps through the cache.
fn fused_against_tensor_attention(dir: &Path) -> f32 {
    use vauban::executor::candle::model::LoadedModel;
    use vauban::executor::candle::model::llama::{LogitsAt, NoHook};
    use vauban::model::WeightMode;
    let device = candle_core::Device::Cpu;
    let fused = LoadedModel::load(dir, WeightMode::F32, &device).unwrap();
    let mut tensor = LoadedModel::load(dir, WeightMode::F32, &device).unwrap();
    tensor.model.use_tensor_attention();
    let prompt: Vec<u32> = (5..35).collect();
    let mut logits: Vec<Vec<f32>> = Vec::new();
    for m in [&fused, &tensor] {
        let mut cache = m.model.new_cache();
        let mut all = Vec::new();
        for (step, ids) in [&prompt[..], &[40], &[41], &[42]].into_iter().enumerate() {
            let at = if step == 0 {
                LogitsAt::All
            } else {
                LogitsAt::Last
            };
            let (l, _) = m.model.run(ids, Some(&mut cache), &mut NoHook, at).unwrap();
            all.extend(l.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        }
        logits.push(all);
    }
    logits[0]
        .iter()
        .zip(&logits[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

#[test]
fn every_family_matches_transformers_at_every_block_on_candle() {
    let keep = tempfile::tempdir().unwrap();
    let Some(models) = compare("candle", "", "", keep.path()) else {
        return;
    };
    let names: Vec<&str> = models
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for family in [
        "llama",
        "qwen2_bias",
        "mistral_window",
        "qwen3",
        "gemma2",
        "gemma3",
        "olmo2",
        "phi3",
        "phi3_partial",
        "phi3_longrope",
        "phi3_longrope_switch",
        "qwen3_moe",
        "qwen3_moe_norm",
    ] {
        assert!(
            names.contains(&family),
            "{family} was not compared: {names:?}"
        );
    }
    for (name, m) in models.as_object().unwrap() {
        // The script's own verdict, and the figures it rests on.
        assert_eq!(m["ok"], true, "{name}: {m}");
        assert!(
            m["max_abs_logit_diff"].as_f64().unwrap() < 2e-4,
            "{name}: {m}"
        );
        assert!(!m["layers"].as_array().unwrap().is_empty(), "{name}: {m}");
        assert_eq!(m["vauban_greedy"], m["transformers_greedy"], "{name}");
        // vauban's export, read back by transformers.
        assert!(
            m["export_max_abs_logit_diff"].as_f64().unwrap() < 2e-4,
            "{name}: {m}"
        );
        // The family's chat template: transformers' ids, with and without
        // a system message.
        assert_eq!(m["chat_same"], true, "{name}: {}", m["chat"]);
    }
    for family in ["qwen3", "gemma2", "gemma3", "olmo2", "phi3"] {
        assert!(
            models[family]["chat"]["user"]["vauban"].is_array(),
            "{family}"
        );
    }
    // Gemma 2's template has no system role: both refuse the conversation.
    let refused = &models["gemma2"]["chat"]["system"];
    assert!(
        refused["vauban"].is_null() && refused["transformers"].is_null(),
        "{refused}"
    );
    // The GPU's attention path agrees with the CPU's fused one, windows,
    // soft-caps and the local RoPE base included, in prefill and decode.
    for family in [
        "mistral_window",
        "qwen3",
        "gemma2",
        "gemma3",
        "olmo2",
        "phi3_partial",
        "qwen3_moe",
    ] {
        let worst = fused_against_tensor_attention(&keep.path().join(family));
        println!("{family}: fused against tensor attention, max |Δlogit| {worst:.2e}");
        assert!(worst < 1e-4, "{family}: max |Δlogit| {worst}");
    }
    routing_recipe_says_where_an_edit_moved_the_experts(keep.path());
    // `vauban measure` on a Gemma (its chat template) and on the mixture
    // (raw prompts: its files ship no template; a random model needs a
    // loose KL bound).
    for (family, extra) in [
        ("gemma2", &[][..]),
        ("qwen3_moe", &["--raw", "--max-kl", "5"][..]),
    ] {
        let out = keep.path().join(format!("{family}.refusal.safetensors"));
        let done = Command::new(env!("CARGO_BIN_EXE_vauban"))
            .arg("measure")
            .arg("--model")
            .arg(keep.path().join(family))
            .arg("--harmful")
            .arg(root().join("examples/prompts/harmful.jsonl"))
            .arg("--harmless")
            .arg(root().join("examples/prompts/harmless.jsonl"))
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            done.status.success() && out.is_file(),
            "{family}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    // A weight edit is exact on a pre-norm model; on a post-norm one
    // (Gemma, OLMo 2) the command says it is not, before it writes.
    let llama = orthogonalize(keep.path(), "llama");
    assert!(!llama.contains("limitation"), "{llama}");
    for post_norm in ["gemma2", "olmo2"] {
        let text = orthogonalize(keep.path(), post_norm);
        let (first, rest) = text.split_once('\n').unwrap();
        assert!(
            first.starts_with("limitation: a ") && first.contains("not exactly"),
            "{text}"
        );
        assert!(rest.contains("orthogonalized"), "{text}");
    }
}

/// llama.cpp's reading of its own converter's GGUF files (f32, Q8_0, and
/// Q5_0 and Q5_1 on the dense families) against vauban's, for every family:
/// token ids, greedy tokens, their log-probabilities; and a llama model
/// whose every matrix row is a multiple of 256 values wide in each
/// llama-quantize preset, so that each file holds the types its preset
/// names (read back from the file) and every tensor type vauban runs as
/// stored is compared.
#[test]
fn every_family_converted_by_llama_cpp_matches_llama_cpp() {
    let Some(server) = common::llama_server::binary() else {
        return;
    };
    let Some(python) = reference_python() else {
        return;
    };
    // scripts/build-llama-server.sh's folder: bin/ and convert/.
    let llama = server.parent().and_then(Path::parent).unwrap();
    let models = run_reference(&python, "compare_llama_cpp", &[llama.as_os_str()], &[]);
    let models = models.as_object().unwrap();
    for family in [
        "llama",
        "qwen3",
        "gemma2",
        "gemma3",
        "olmo2",
        "phi3",
        "phi3_longrope",
        "qwen3moe",
    ] {
        // The 5-bit types on the dense families the script quantizes to
        // them (their kernels do not depend on the family).
        let five_bit = ["llama", "qwen3", "gemma2", "gemma3", "olmo2"].contains(&family);
        let dtypes: &[&str] = match five_bit {
            true => &["F32", "Q8_0", "Q5_0", "Q5_1"],
            false => &["F32", "Q8_0"],
        };
        for dtype in dtypes {
            let m = same_as_llama_cpp(models, family, dtype);
            assert!(
                m["tensor_types"][dtype].as_u64().is_some_and(|n| n > 0),
                "{family} {dtype}: {}",
                m["tensor_types"]
            );
        }
    }
    // The wide case, in each preset: the types each file holds, as
    // llama.cpp's `gguf` package reads them; the types its preset names
    // must be among them (llama-quantize did not fall back from them).
    let mut held = std::collections::BTreeSet::new();
    for preset in [
        "F32", "Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M",
        "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16",
    ] {
        let m = same_as_llama_cpp(models, "llama256", preset);
        let types = m["tensor_types"].as_object().unwrap();
        for t in m["expected_types"].as_array().unwrap() {
            let t = t.as_str().unwrap();
            assert!(
                types.contains_key(t),
                "llama256 {preset}: no {t} in {types:?}"
            );
        }
        held.extend(types.keys().cloned());
    }
    // Together, every type vauban's kernels run as stored.
    for t in [
        "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "IQ4_NL", "IQ4_XS",
    ] {
        assert!(
            held.contains(t),
            "no file of the wide case held {t}: {held:?}"
        );
    }
}

/// A trained model of a realistic width, SmolLM2-135M-Instruct (the file
/// the tests fetch, dequantized to F32 by `llama-quantize` and quantized
/// from that into each of its presets), against llama.cpp: each file's
/// next-token distributions over its whole vocabulary of 49,152 at the
/// issue's tolerances, its greedy tokens and the prompts' ids; the F32
/// file within 1e-3 of llama.cpp and of transformers (built from the F32
/// file) on every greedy token's log-probability.
#[test]
fn a_trained_model_in_every_preset_matches_llama_cpp() {
    let Some(server) = common::llama_server::binary() else {
        return;
    };
    let Some(python) = reference_python() else {
        return;
    };
    let Some(smollm2) = common::smollm2_path() else {
        return;
    };
    let llama = server.parent().and_then(Path::parent).unwrap();
    let models = run_reference(
        &python,
        "compare_llama_cpp",
        &[llama.as_os_str()],
        &["--real".as_ref(), smollm2.as_os_str()],
    );
    let models = models.as_object().unwrap();
    for preset in [
        "F32", "Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M",
        "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16",
    ] {
        same_as_llama_cpp(models, "smollm2", preset);
    }
    let f32 = &models["smollm2/F32"];
    for key in [
        "max_abs_diff_vauban_llama_cpp",
        "max_abs_diff_vauban_transformers",
    ] {
        assert!(f32[key].as_f64().is_some_and(|d| d < 1e-3), "{key}: {f32}");
    }
}

/// The comparison of `family`'s `dtype` file: the script's verdict, the
/// next-token distributions within KL 0.05 and 0.5 nats on llama.cpp's
/// top 20 (or, for a quantized file the two round apart, within twice
/// llama.cpp's distance of the f32 model), the prompt's ids and the greedy tokens the same as llama.cpp's
/// (up to the step where they parted at a near tie, for a quantized file
/// where the script found one).
fn same_as_llama_cpp<'a>(
    models: &'a serde_json::Map<String, serde_json::Value>,
    family: &str,
    dtype: &str,
) -> &'a serde_json::Value {
    let m = &models[&format!("{family}/{dtype}")];
    assert_eq!(m["ok"], true, "{family} {dtype}: {m}");
    // The issue's tolerances on the next-token distributions, each in
    // full, at every step both decoded from the same tokens.
    let figure = |key: &str| m[key].as_f64().unwrap_or(f64::INFINITY);
    assert!(
        m["distribution_steps"].as_u64().is_some_and(|n| n > 0),
        "{family} {dtype}: no distribution compared"
    );
    assert!(
        figure("max_kl_llama_cpp_vauban") <= 0.05,
        "{family} {dtype}: KL {}",
        m["max_kl_llama_cpp_vauban"]
    );
    // 0.5 nats on llama.cpp's top 20; where a quantized file's two readers
    // round the activations further apart than that (each its own way),
    // vauban's top 20 within twice llama.cpp's distance of the f32 model.
    let (top, llama_f32, vauban_f32) = (
        figure("max_abs_diff_top20_logprobs"),
        figure("max_abs_diff_top20_llama_cpp_transformers"),
        figure("max_abs_diff_top20_vauban_transformers"),
    );
    assert!(
        top <= 0.5 || (dtype != "F32" && vauban_f32 <= 2.0 * llama_f32 + 5e-3),
        "{family} {dtype}: top-20 |Δlogprob| {top} against llama.cpp, {vauban_f32} against \
         the f32 model (llama.cpp: {llama_f32})"
    );
    assert_eq!(
        m["prompt_ids_vauban"], m["prompt_ids_llama_cpp"],
        "{family} {dtype}"
    );
    let tokens = |key: &str| m[key].as_array().cloned().unwrap_or_default();
    let (ours, theirs) = (tokens("greedy_vauban"), tokens("greedy_llama_cpp"));
    let shared = match m["near_tie_at"].as_u64() {
        Some(step) => {
            assert_ne!(
                dtype, "F32",
                "{family}: an f32 file must agree at every step"
            );
            step as usize
        }
        None => ours.len().max(theirs.len()),
    };
    assert!(shared > 0, "{family} {dtype}: no greedy token compared");
    assert_eq!(
        ours.get(..shared.min(ours.len())),
        theirs.get(..shared.min(theirs.len())),
        "{family} {dtype}"
    );
    m
}

/// The cookbook's `examples/moe-routing.toml` on the tiny Qwen3-MoE: against
/// itself orthogonalized along a direction of ones the report says tokens
/// were rerouted; against itself, that routing did not move at any layer.
fn routing_recipe_says_where_an_edit_moved_the_experts(models: &Path) {
    let dir = models.join("cookbook");
    std::fs::create_dir_all(dir.join("examples/prompts")).unwrap();
    for file in ["moe-routing.toml", "prompts/everyday.jsonl"] {
        std::fs::copy(
            root().join("examples").join(file),
            dir.join("examples").join(file),
        )
        .unwrap();
    }
    orthogonalize(models, "qwen3_moe");
    let plugin_dir = common::plugins::wasm("vauban-plugin-behavior")
        .parent()
        .unwrap()
        .to_path_buf();
    let run = |changed: &str| -> (serde_json::Value, String) {
        let out_dir = dir.join("out/moe-routing");
        let _ = std::fs::remove_dir_all(&out_dir);
        let out = Command::new(env!("CARGO_BIN_EXE_vauban"))
            .args(["run", "examples/moe-routing.toml"])
            .current_dir(&dir)
            .env("VAUBAN_PLUGIN_DIR", &plugin_dir)
            .env("VAUBAN_MOE_BASE", models.join("qwen3_moe"))
            .env("VAUBAN_MOE_CHANGED", models.join(changed))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
                .unwrap();
        let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
        println!("routing against {changed}: {}", report["routing"]);
        (report["routing"].clone(), md)
    };
    let changed = |r: &serde_json::Value| -> Vec<f64> {
        r["changed_choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (r, md) = run("qwen3_moe.edited");
    assert_eq!(r["layers"], serde_json::json!([0, 1, 2]), "{r}");
    assert_eq!(
        (&r["experts_per_token"], &r["prompts"]),
        (&2.into(), &24.into()),
        "{r}"
    );
    assert!(changed(&r).iter().any(|&c| c > 0.0), "{r}");
    assert!(changed(&r).iter().all(|&c| c <= 1.0), "{r}");
    assert!(md.contains("Routing moved most at layer"), "{md}");
    // The control: the model against itself routes every token alike.
    let (same, md) = run("qwen3_moe");
    assert_eq!(changed(&same), [0.0, 0.0, 0.0], "{same}");
    assert!(md.contains("Routing did not move"), "{md}");
}
