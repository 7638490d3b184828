//! `vauban trace --model`, `vauban generate` and `vauban model
//! orthogonalize`, run as a user runs them, on the tiny test model (and on
//! SmolLM2 where the file is present).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::quantized::GgmlDType;
use common::tiny;

fn vauban(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .output()
        .expect("the vauban binary runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn direction(dir: &Path, width: usize) -> PathBuf {
    let path = dir.join(format!("d{width}.safetensors"));
    let v: Vec<f32> = (0..width).map(|i| ((i % 5) as f32 - 2.0) / 4.0).collect();
    let t = candle_core::Tensor::new(v.as_slice(), &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(&[("direction".to_string(), t)].into_iter().collect(), &path)
        .unwrap();
    path
}

/// `--top-logprobs K` keeps the K most likely tokens of every distribution
/// a new token was chosen from: under greedy decoding, each row's first id
/// is the token chosen, and the first row is the top K of the prompt's
/// last-position log-probabilities, which the prefill records in full.
#[test]
fn trace_keeps_the_top_logprobs_of_every_new_token() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let bundle = dir.path().join("b");
    let args = |top: &'static str| {
        vec![
            "trace",
            "--model",
            s(&model),
            "--prompt",
            "the cat",
            "--raw",
            "--logprobs",
            "--raw-tensors",
            "--max-tokens",
            "3",
            "--top-logprobs",
            top,
            "--out",
            s(&bundle),
        ]
    };
    let o = vauban(&args("4"));
    assert!(o.status.success(), "{:?}", text(&o));
    let b = vauban::bundle::Bundle::open(&bundle).unwrap();
    let t = b.trace("t0").unwrap();
    let raw = b.raw_tensors(t).unwrap();
    let find = |kind: &str, role: &str| {
        let a = t
            .artifacts
            .iter()
            .find(|a| {
                a.kind.as_str() == kind && a.labels.get("role").map(String::as_str) == Some(role)
            })
            .unwrap_or_else(|| panic!("a {kind} artifact of role {role}"));
        &raw[&a.id]
    };
    let top = find("logprobs", "continuation");
    let top_ids = find("tokens", "continuation_top_k");
    assert_eq!(
        (top.shape.clone(), top_ids.shape.clone()),
        (vec![3, 4], vec![3, 4])
    );
    let top = top.as_ref().to_f32_vec();
    let top_ids: Vec<u32> = top_ids
        .bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let chosen = find("logprobs", "completion").as_ref().to_f32_vec();
    let completion = t
        .artifacts
        .iter()
        .find_map(|a| match &a.data {
            vauban::trace::ArtifactData::TokenIds { ids } if a.labels["role"] == "completion" => {
                Some(ids.clone())
            }
            _ => None,
        })
        .unwrap();
    for i in 0..3 {
        let row = &top[i * 4..][..4];
        assert!(
            row.windows(2).all(|w| w[0] >= w[1]),
            "row {i} in order: {row:?}"
        );
        assert_eq!(
            top_ids[i * 4],
            completion[i],
            "row {i} starts with the greedy token"
        );
        assert!(
            (row[0] - chosen[i]).abs() < 1e-6,
            "{} against {}",
            row[0],
            chosen[i]
        );
    }
    // The prompt's last row, in full, ranked here.
    let prompt = find("logprobs", "prompt");
    let vocab = prompt.shape[1];
    let all = prompt.as_ref().to_f32_vec();
    let last = &all[all.len() - vocab..];
    let mut ranked: Vec<u32> = (0..vocab as u32).collect();
    ranked.sort_by(|a, b| {
        last[*b as usize]
            .total_cmp(&last[*a as usize])
            .then(a.cmp(b))
    });
    assert_eq!(&top_ids[..4], &ranked[..4]);
    for (j, &id) in ranked[..4].iter().enumerate() {
        assert!(
            (top[j] - last[id as usize]).abs() < 1e-5,
            "{} against {}",
            top[j],
            last[id as usize]
        );
    }
    // It needs --logprobs, which records log-probabilities at all.
    let mut no_logprobs = args("4");
    no_logprobs.retain(|a| *a != "--logprobs");
    let o = vauban(&no_logprobs);
    let (_, err) = text(&o);
    assert!(!o.status.success() && err.contains("--logprobs"), "{err}");
}

#[test]
fn trace_writes_a_bundle_that_inspects_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let d = direction(dir.path(), tiny::HIDDEN);
    let bundle = dir.path().join("b");
    let spec = format!("layer=1,mode=subtract,direction={},alpha=0.5", d.display());
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "the cat",
        "--prompt",
        "in the hat",
        "--raw",
        "--layers",
        "0,2",
        "--logprobs",
        "--raw-tensors",
        "--max-tokens",
        "3",
        "--intervene",
        &spec,
        "--out",
        s(&bundle),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("wrote") && out.contains("2 traces"), "{out}");
    let o = vauban(&["trace", "validate", s(&bundle)]);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = vauban(&["trace", "inspect", s(&bundle), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["traces"].as_array().unwrap().len(), 2);
    assert_eq!(json["traces"][0]["artifacts"]["activation"], 2);
    // The trace itself, as the library reads it.
    let b = vauban::bundle::Bundle::open(&bundle).unwrap();
    let t = b.trace("t0").unwrap();
    for k in [
        "text",
        "tokens",
        "logits",
        "logprobs",
        "activation",
        "intervention_result",
        "profile",
    ] {
        assert!(t.artifacts.iter().any(|a| a.kind.as_str() == k), "{k}");
    }
    let rec = t
        .artifacts
        .iter()
        .find(|a| a.kind.as_str() == "intervention_result")
        .unwrap();
    assert_eq!(rec.layer, Some(1));
    let vauban::trace::ArtifactData::Record { value } = &rec.data else {
        panic!("a record")
    };
    assert_eq!(value["intervention"]["alpha"], 0.5);
    // Every prompt token in prefill, then one decode step per new token
    // but the last (3 new tokens: the model emits no EOS on this prompt).
    let ids = |role: &str| {
        t.artifacts
            .iter()
            .find_map(|a| match &a.data {
                vauban::trace::ArtifactData::TokenIds { ids } if a.labels["role"] == role => {
                    Some(ids.len())
                }
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(value["effect"]["prefill_tokens"], ids("prompt"));
    assert_eq!(ids("completion"), 3);
    assert_eq!(value["effect"]["decode_tokens"], 2);
    // Writing over it needs --replace.
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "x",
        "--raw",
        "--out",
        s(&bundle),
    ]);
    assert!(!o.status.success());
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "x",
        "--raw",
        "--out",
        s(&bundle),
        "--replace",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
}

#[test]
fn bad_input_is_refused_with_a_clear_error_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let out = dir.path().join("b");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--layers".into(), "0,3".into()],
            "layer 3 is out of range: the model has 3 layers (0 to 2)",
        ),
        (
            vec![
                "--intervene".into(),
                format!(
                    "layer=0,mode=subtract,direction={}",
                    direction(dir.path(), 65).display()
                ),
            ],
            "width 65 but the model's hidden size (d_model) is 64",
        ),
        (
            vec![
                "--intervene".into(),
                "layer=0,mode=sideways,direction=x.npy".into(),
            ],
            "mode=`sideways` is unknown; valid modes: project, subtract",
        ),
        (vec!["--temperature=-1".into()], "temperature"),
        // Separated from its flag, a negative value is still a value.
        (
            vec!["--temperature".into(), "-1".into()],
            "`-1` is out of range: use 0 for greedy decoding",
        ),
        (
            vec!["--layers".into(), "1,1".into()],
            "--layers lists layer 1 twice",
        ),
        (
            vec!["--block-outputs".into()],
            "--block-outputs needs --layers",
        ),
        (vec!["--stop".into(), "".into()], "--stop number 1 is empty"),
        (vec!["--top-p".into(), "0".into()], "--top-p"),
    ];
    for (extra, expected) in cases {
        let mut args = vec![
            "trace",
            "--model",
            s(&model),
            "--prompt",
            "the",
            "--raw",
            "--out",
            s(&out),
        ];
        args.extend(extra.iter().map(String::as_str));
        let o = vauban(&args);
        let (stdout, stderr) = text(&o);
        assert!(!o.status.success(), "{args:?} succeeded: {stdout}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!out.exists(), "no bundle on failure");
    }
    let o = vauban(&[
        "generate",
        "--model",
        "/nonexistent/model.gguf",
        "--prompt",
        "hi",
    ]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("/nonexistent/model.gguf"), "{stderr}");
    let o = vauban(&["trace", "--prompt", "hi", "--out", s(&out)]);
    assert!(
        text(&o).1.contains("--model PATH is required"),
        "{:?}",
        text(&o)
    );
}

/// `vauban generate` on `model` with the prompt "the cat" and `extra`
/// arguments; what it printed.
fn generated(model: &Path, extra: &[&str]) -> String {
    let mut args = vec!["generate", "--model", s(model), "--prompt", "the cat"];
    args.extend(extra);
    let o = vauban(&args);
    assert!(o.status.success(), "{:?}", text(&o));
    text(&o).0
}

#[test]
fn generate_uses_the_chat_template_unless_raw_and_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_hf(&dir.path().join("hf"), 5);
    let run = |extra: &[&str]| generated(&model, &[&["--max-tokens", "8"], extra].concat());
    let greedy = run(&[]);
    assert_eq!(greedy, run(&[]), "greedy is deterministic");
    assert_ne!(run(&["--raw"]), greedy, "the template changes the prompt");
    let a = run(&["--temperature", "1.5", "--seed", "1"]);
    assert_eq!(a, run(&["--temperature", "1.5", "--seed", "1"]));
}

#[test]
fn orthogonalize_writes_a_model_that_loads() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let d = direction(dir.path(), tiny::HIDDEN);
    let out = dir.path().join("ortho");
    let o = vauban(&[
        "model",
        "orthogonalize",
        "--model",
        s(&model),
        "--direction",
        s(&d),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(
        text(&o).0.contains("orthogonalized 6 matrices in 3 layers"),
        "{:?}",
        text(&o)
    );
    let o = vauban(&[
        "generate",
        "--model",
        s(&out),
        "--prompt",
        "the",
        "--raw",
        "--max-tokens",
        "2",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
}

#[test]
fn export_writes_the_model_unchanged_as_an_hf_folder() {
    // A Q8_0 GGUF is dequantized to f32 on export: the folder must decode
    // as the file does with its weights dequantized at load.
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::Q8_0);
    let out = dir.path().join("base");
    let o = vauban(&["model", "export", "--model", s(&model), "--out", s(&out)]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(
        text(&o).0.contains("exported the model (3 layers)"),
        "{:?}",
        text(&o)
    );
    assert!(out.join("config.json").is_file() && out.join("tokenizer.json").is_file());
    let raw = ["--raw", "--max-tokens", "12"];
    let from_gguf = generated(&model, &[&raw[..], &["--weights", "f32"]].concat());
    assert!(!from_gguf.is_empty());
    assert_eq!(generated(&out, &raw), from_gguf);
    // An existing folder is never overwritten.
    let o = vauban(&["model", "export", "--model", s(&model), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(
        text(&o).1.contains("exists; choose a new folder"),
        "{:?}",
        text(&o)
    );
}

fn smollm2() -> Option<PathBuf> {
    let dir = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipping: {} is absent; run `bash scripts/fetch-model.sh`",
            path.display()
        );
        None
    }
}

#[test]
fn smollm2_generate_raw_continues_with_paris() {
    let Some(model) = smollm2() else { return };
    let o = vauban(&[
        "generate",
        "--model",
        s(&model),
        "--prompt",
        "The capital of France is",
        "--raw",
        "--max-tokens",
        "3",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with(" Paris"), "{out:?}");
}

#[test]
fn orthogonalize_uses_each_layers_own_control_vector() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let cv = dir.path().join("cv.safetensors");
    let d = |k: usize| {
        let v: Vec<f32> = (0..tiny::HIDDEN)
            .map(|i| ((i * k) % 7) as f32 - 3.0)
            .collect();
        candle_core::Tensor::new(v.as_slice(), &candle_core::Device::Cpu).unwrap()
    };
    let tensors = [
        ("direction.1".to_string(), d(2)),
        ("direction.2".to_string(), d(3)),
    ];
    candle_core::safetensors::save(&tensors.iter().cloned().collect(), &cv).unwrap();
    let out = dir.path().join("o");
    let o = vauban(&[
        "model",
        "orthogonalize",
        "--model",
        s(&model),
        "--direction",
        s(&cv),
        "--layers",
        "1,2",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(
        text(&o).0.contains("along direction.1, direction.2"),
        "{:?}",
        text(&o)
    );
    let m = vauban::executor::candle::model::LoadedModel::load(
        &out,
        vauban::model::WeightMode::Native,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    for (layer, k) in [(1, 2), (2, 3)] {
        let w = m
            .model
            .weight(layer, vauban::model::Matrix::FfnDown)
            .unwrap();
        let along = common::max_along(&d(k), &w);
        assert!(along < 1e-4, "layer {layer}: {along}");
    }
    // No --layers: the layers the control vector holds (as llama.cpp reads
    // it, a layer it lacks is left alone); a layer named and missing is an
    // error naming what the file holds.
    let orthogonalize = |extra: &[&str]| {
        let mut args = vec![
            "model",
            "orthogonalize",
            "--model",
            s(&model),
            "--direction",
            s(&cv),
        ];
        args.extend(extra);
        vauban(&args)
    };
    let o = orthogonalize(&["--out", s(&dir.path().join("all"))]);
    let (said, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        said.contains("in 2 layers along direction.1, direction.2"),
        "{said}"
    );
    let zero = dir.path().join("zero");
    let o = orthogonalize(&["--layers", "0,1", "--out", s(&zero)]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("layer 0") && err.contains("direction.1, direction.2"),
        "{err}"
    );
    // An existing --out is refused before any work.
    let o = orthogonalize(&["--out", s(&out)]);
    assert!(
        text(&o).1.contains("exists; choose a new folder"),
        "{:?}",
        text(&o)
    );
}

/// The file `vauban measure` writes (`direction` beside `per_layer`) works
/// as-is in `model orthogonalize`; a file with several tensors and no
/// default gets the fix in this command's syntax (`--tensor NAME`).
#[test]
fn orthogonalize_reads_the_measure_layout_as_is_and_names_its_own_flag() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let t = |rows: usize| {
        let v: Vec<f32> = (0..rows * tiny::HIDDEN)
            .map(|i| ((i % 5) as f32 - 2.0) / 4.0)
            .collect();
        let t = candle_core::Tensor::new(v.as_slice(), &candle_core::Device::Cpu).unwrap();
        match rows {
            1 => t,
            _ => t.reshape((rows, tiny::HIDDEN)).unwrap(),
        }
    };
    let measured = dir.path().join("refusal.safetensors");
    candle_core::safetensors::save(
        &[
            ("direction".to_string(), t(1)),
            ("per_layer".to_string(), t(tiny::LAYERS)),
        ]
        .into_iter()
        .collect(),
        &measured,
    )
    .unwrap();
    let run = |file: &Path, out: &str| {
        vauban(&[
            "model",
            "orthogonalize",
            "--model",
            s(&model),
            "--direction",
            s(file),
            "--out",
            s(&dir.path().join(out)),
        ])
    };
    let o = run(&measured, "ortho");
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(text(&o).0.contains("along direction ("), "{:?}", text(&o));

    let other = dir.path().join("two.safetensors");
    candle_core::safetensors::save(
        &[("a".to_string(), t(1)), ("b".to_string(), t(1))]
            .into_iter()
            .collect(),
        &other,
    )
    .unwrap();
    let o = run(&other, "ortho2");
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("a, b") && stderr.contains("pick one with --tensor NAME"),
        "{stderr}"
    );
    assert!(!stderr.contains("tensor=NAME"), "{stderr}");
}

/// One completion length by default everywhere (`DEFAULT_MAX_TOKENS`):
/// `vauban trace` records a completion, and `trace inspect` shows it;
/// several prompts to `generate` each get their own heading.
#[test]
fn trace_and_generate_share_the_default_length_and_show_the_completion() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::F32);
    let bundle = dir.path().join("b");
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "the cat",
        "--raw",
        "--out",
        s(&bundle),
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = vauban(&["trace", "inspect", s(&bundle), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let completion = json["traces"][0]["completion"].as_str().unwrap().to_owned();
    assert!(!completion.is_empty(), "{json:#}");
    let o = vauban(&["trace", "inspect", s(&bundle)]);
    let shown = text(&o).0;
    let first: String = completion.chars().take(10).collect();
    let line = shown
        .lines()
        .find(|l| l.trim_start().starts_with("completion "))
        .unwrap_or_else(|| panic!("{shown}"));
    // Shown quoted and escaped (the tiny model's text is not all printable).
    let quoted = format!("{first:?}");
    assert!(
        line.contains(quoted.trim_end_matches('"')),
        "{line} / {quoted}"
    );

    // generate: the same default, so the same greedy text as the trace's.
    let o = vauban(&[
        "generate",
        "--model",
        s(&model),
        "--prompt",
        "the cat",
        "--raw",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    // (stdout shows control characters escaped, as every command does)
    assert_eq!(
        text(&o).0.trim_end_matches('\n'),
        vauban::text::printable(&completion)
    );
    let o = vauban(&[
        "generate",
        "--model",
        s(&model),
        "--raw",
        "--max-tokens",
        "4",
        "--prompt",
        "the cat",
        "--prompt",
        "a hat",
    ]);
    let out = text(&o).0;
    assert!(o.status.success(), "{out}");
    let one = out
        .find("== prompt 1 of 2: \"the cat\"\n")
        .unwrap_or_else(|| panic!("{out}"));
    let two = out
        .find("\n\n== prompt 2 of 2: \"a hat\"\n")
        .unwrap_or_else(|| panic!("{out}"));
    assert!(one < two);
}

#[test]
fn trace_batches_prompts_and_says_so_in_each_span() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::Q8_0);
    let batch_sizes = |bundle: &Path| -> Vec<u32> {
        let b = vauban::bundle::Bundle::open(bundle).unwrap();
        b.traces()
            .iter()
            .map(|t| {
                t.spans
                    .iter()
                    .find(|s| s.stage == vauban::trace::Stage::Prefill)
                    .unwrap()
                    .profile
                    .batch_size
            })
            .collect()
    };
    let run = |batch: &str, bundle: &Path| {
        let o = vauban(&[
            "trace",
            "--model",
            s(&model),
            "--raw",
            "--prompt",
            "the cat",
            "--prompt",
            "in the hat sat",
            "--prompt",
            "a mat",
            "--max-tokens",
            "4",
            "--batch",
            batch,
            "--out",
            s(bundle),
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        out
    };
    let (two, one) = (dir.path().join("two"), dir.path().join("one"));
    let batched = run("2", &two);
    assert_eq!(batch_sizes(&two), [2, 2, 1]);
    let alone = run("1", &one);
    assert_eq!(batch_sizes(&one), [1, 1, 1]);
    // The same completions either way (the lines name each trace's).
    let lines = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with('t'))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(lines(&batched), lines(&alone));
    assert_eq!(lines(&batched).len(), 3, "{batched}");
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "x",
        "--batch",
        "0",
        "--out",
        s(&dir.path().join("z")),
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--batch"), "{err}");
}

/// `--kv-cache f16` stores keys and values in half the bytes, and each
/// trace says which cache it ran with.
#[test]
fn trace_records_the_kv_cache_type_and_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::Q8_0);
    let prefill_notes = |kind: &str| -> (String, u64) {
        let bundle = dir.path().join(kind);
        let o = vauban(&[
            "trace",
            "--model",
            s(&model),
            "--raw",
            "--prompt",
            "the cat sat",
            "--max-tokens",
            "2",
            "--kv-cache",
            kind,
            "--out",
            s(&bundle),
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        let b = vauban::bundle::Bundle::open(&bundle).unwrap();
        let t = &b.traces()[0];
        let p = &t
            .spans
            .iter()
            .find(|s| s.stage == vauban::trace::Stage::Prefill)
            .unwrap()
            .profile;
        (
            p.notes["kv_cache"].clone(),
            p.notes["kv_cache_bytes"].parse().unwrap(),
        )
    };
    let (f32_kind, f32_bytes) = prefill_notes("f32");
    let (f16_kind, f16_bytes) = prefill_notes("f16");
    assert_eq!((f32_kind.as_str(), f16_kind.as_str()), ("f32", "f16"));
    assert!(f16_bytes > 0);
    assert_eq!(f16_bytes * 2, f32_bytes);
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "x",
        "--kv-cache",
        "q8",
        "--out",
        s(&dir.path().join("z")),
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--kv-cache") && err.contains("f32 or f16"),
        "{err}"
    );
}

/// `--executor torch` and `--executor mlx`: in a build with the feature, the trace is that backend's
/// and says the GGUF was dequantized; without it, the error names the
/// build to make. `--dtype` is the Torch and MLX executors' and candle refuses it.
#[test]
fn trace_runs_on_the_executor_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 3, GgmlDType::Q8_0);
    for (executor, built) in [
        ("torch", cfg!(feature = "torch")),
        ("mlx", cfg!(feature = "mlx")),
    ] {
        let bundle = dir.path().join(executor);
        let o = vauban(&[
            "trace",
            "--executor",
            executor,
            "--model",
            s(&model),
            "--raw",
            "--prompt",
            "the cat sat",
            "--max-tokens",
            "2",
            "--out",
            s(&bundle),
        ]);
        let (out, err) = text(&o);
        if built {
            assert!(o.status.success(), "{out}\n{err}");
            let b = vauban::bundle::Bundle::open(&bundle).unwrap();
            let t = &b.traces()[0];
            assert_eq!(t.capabilities.executor, executor);
            let prefill = t
                .spans
                .iter()
                .find(|s| s.stage == vauban::trace::Stage::Prefill)
                .unwrap();
            let kernel = &prefill.profile.notes["kernel"];
            assert!(
                kernel.contains("Q8_0") && kernel.contains("dequantized"),
                "{kernel}"
            );
        } else {
            assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
            assert!(
                err.contains("built without it") && err.contains(&format!("--features {executor}")),
                "{err}"
            );
        }
    }
    let o = vauban(&[
        "trace",
        "--model",
        s(&model),
        "--prompt",
        "x",
        "--dtype",
        "bf16",
        "--out",
        s(&dir.path().join("bf16")),
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("dtype = \"bf16\"") && err.contains("Torch and MLX executors"),
        "{err}"
    );
}
