//! `vauban measure`, the refusal direction: the mechanics on the tiny test
//! model (tests/common/tiny.rs), and the method on SmolLM2-135M-Instruct
//! with the shipped example prompt sets (skipped with a message when the
//! model file is absent).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use candle_core::quantized::GgmlDType;
use common::tiny;
use vauban::config::{Prompt, Redaction, Suite};
use vauban::executor::{
    Executor, GenerateOptions, LocalBackend, LocalModel, ModelSpec, PromptForm, RunOptions,
};
use vauban::intervene::{InterventionSpec, load_direction};
use vauban::measure::{
    self, MeasureError, MeasureOptions, Measurement, Provenance, Selection, holdout_split,
    read_metadata,
};
use vauban::model::WeightMode;
use vauban::trace::{ArtifactKind as K, TraceRequest};

const HARMFUL: [&str; 5] = [
    "the cat sat",
    "then ran in",
    "a hat on a mat",
    "in the hat",
    "sat on the cat",
];
const HARMLESS: [&str; 6] = [
    "a mat",
    "the hat then",
    "ran on",
    "in a cat",
    "the mat sat",
    "hat hat",
];

fn suite(prefix: &str, texts: &[&str]) -> Suite {
    let prompts = texts
        .iter()
        .enumerate()
        .map(|(i, t)| Prompt {
            id: format!("{prefix}-{i}"),
            text: (*t).to_owned(),
            category: Some(prefix.to_owned()),
            expected_behavior: None,
            redaction: Redaction::Safe,
            tags: vec![],
        })
        .collect();
    Suite::new(prompts, prefix).unwrap()
}

/// Writes a suite as a `.jsonl` file.
fn write_suite(path: &Path, s: &Suite) -> PathBuf {
    let text: String = s
        .prompts
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// The tiny model as an f32 GGUF (no declared context length, so the chat
/// template's extra tokens always fit), loaded once per test binary.
fn tiny_exec() -> &'static (tempfile::TempDir, PathBuf, LocalBackend) {
    static EXEC: OnceLock<(tempfile::TempDir, PathBuf, LocalBackend)> = OnceLock::new();
    EXEC.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = tiny::write_gguf(&dir.path().join("tiny.gguf"), 11, GgmlDType::F32);
        let exec = load(&path, WeightMode::Native);
        (dir, path, exec)
    })
}

fn load(path: &Path, weights: WeightMode) -> LocalBackend {
    LocalBackend::load(&ModelSpec {
        weights,
        ..ModelSpec::new(path)
    })
    .unwrap()
}

/// Options that always choose (the tiny model's random weights give any KL).
fn lenient() -> MeasureOptions {
    MeasureOptions {
        max_kl: 1e9,
        ..MeasureOptions::default()
    }
}

fn run(exec: &LocalBackend, options: &MeasureOptions) -> Result<Measurement, MeasureError> {
    measure::measure(
        exec,
        &suite("harm", &HARMFUL),
        &suite("safe", &HARMLESS),
        options,
        &|_| {},
    )
}

/// The residual stream after every block at the last prompt token, read
/// from a trace's raw activations: `[layers][hidden]`.
fn traced_last_token(exec: &LocalBackend, text: &str) -> Vec<Vec<f32>> {
    let layers: Vec<usize> = (0..tiny::LAYERS).collect();
    let request = TraceRequest {
        prompt_id: Some("p".into()),
        category: None,
        expected_behavior: None,
        text: Some(text.into()),
        token_ids: None,
        observe: vec![K::Text, K::Tokens, K::Activation],
        layers: layers.clone(),
        raw_tensors: true,
        raw_kinds: Vec::new(),
    };
    let options = RunOptions {
        trace_id: "t".into(),
        prompt: PromptForm::Chat { system: None },
        interventions: vec![],
        block_outputs: false,
        generate: GenerateOptions::default(),
        reference: None,
    };
    let out = exec.trace(&request, &options, None).unwrap();
    layers
        .iter()
        .map(|&l| {
            let a = out
                .trace
                .artifacts_of(K::Activation)
                .find(|a| {
                    a.layer == Some(l)
                        && a.labels.get("site").map(String::as_str) == Some("resid_post")
                })
                .unwrap();
            // [1, tokens, hidden]: the last `hidden` values are the last token.
            let values = out.tensors[&a.id].as_ref().to_f32_vec();
            values[values.len() - tiny::HIDDEN..].to_vec()
        })
        .collect()
}

fn mean(rows: &[Vec<Vec<f32>>], layer: usize) -> Vec<f64> {
    let mut acc = vec![0.0f64; tiny::HIDDEN];
    for r in rows {
        for (a, &x) in acc.iter_mut().zip(&r[layer]) {
            *a += f64::from(x);
        }
    }
    acc.iter().map(|a| a / rows.len() as f64).collect()
}

#[test]
fn each_layer_direction_is_the_unit_difference_of_means_of_traced_activations() {
    let (_, _, exec) = tiny_exec();
    let m = run(exec, &lenient()).unwrap();
    let s = &m.scores;
    assert_eq!((s.n_layers, s.d_model), (tiny::LAYERS, tiny::HIDDEN));
    assert_eq!(m.per_layer.len(), tiny::LAYERS);
    // 5 prompts at 0.25: round(1.25) = 1 held out; 6: round(1.5) = 2.
    assert_eq!(s.split.harmful_holdout, ["harm-2"]);
    assert_eq!(s.split.harmless_holdout, ["safe-1", "safe-4"]);
    assert_eq!(
        (s.counts.harmful_train, s.counts.harmless_train),
        (4, 4),
        "{:?}",
        s.counts
    );

    // Independently: traces of the train prompts, their last-token
    // residuals, the difference of the means, normalised.
    let texts = |set: &[&str], prefix: &str, ids: &[String]| -> Vec<Vec<Vec<f32>>> {
        set.iter()
            .enumerate()
            .filter(|(i, _)| ids.contains(&format!("{prefix}-{i}")))
            .map(|(_, t)| traced_last_token(exec, t))
            .collect()
    };
    let harmful = texts(&HARMFUL, "harm", &s.split.harmful_train);
    let harmless = texts(&HARMLESS, "safe", &s.split.harmless_train);
    assert_eq!((harmful.len(), harmless.len()), (4, 4));
    for layer in 0..tiny::LAYERS {
        let (h, b) = (mean(&harmful, layer), mean(&harmless, layer));
        let diff: Vec<f64> = h.iter().zip(&b).map(|(x, y)| x - y).collect();
        let norm = diff.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!(
            (norm - s.norms[layer]).abs() < 1e-4 * norm.max(1.0),
            "layer {layer}: norm {norm} vs {}",
            s.norms[layer]
        );
        let got = &m.per_layer[layer];
        let unit: f64 = got
            .iter()
            .map(|&x| f64::from(x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((unit - 1.0).abs() < 1e-5, "layer {layer}: norm {unit}");
        for (i, (&g, d)) in got.iter().zip(&diff).enumerate() {
            assert!(
                (f64::from(g) - d / norm).abs() < 1e-5,
                "layer {layer}, index {i}: {g} vs {}",
                d / norm
            );
        }
    }

    // The default candidates on 3 layers are 1 and 2; the scores are
    // finite, KL is non-negative, the chosen layer is the lowest refusal.
    let layers: Vec<usize> = s.candidates.iter().map(|c| c.layer).collect();
    assert_eq!(layers, [1, 2]);
    assert!(s.baseline_refusal_score.is_finite());
    for c in &s.candidates {
        assert!(c.refusal_score.is_finite() && c.kl >= -1e-9, "{c:?}");
    }
    let lowest = s
        .candidates
        .iter()
        .min_by(|a, b| a.refusal_score.total_cmp(&b.refusal_score))
        .unwrap();
    assert_eq!(m.chosen_layer(), lowest.layer);
    assert_eq!(s.selection, Selection::LowestRefusalWithinKl);
    assert_eq!(m.direction(), m.per_layer[m.chosen_layer()].as_slice());
    assert!(!s.refusal_tokens.is_empty());
}

/// The prompt sets written to files in a fresh folder, and the provenance
/// of a measurement of `exec` made from them.
fn measured_from_files(exec: &LocalBackend) -> (tempfile::TempDir, PathBuf, PathBuf, Provenance) {
    let dir = tempfile::tempdir().unwrap();
    let harmful = write_suite(&dir.path().join("harmful.jsonl"), &suite("harm", &HARMFUL));
    let harmless = write_suite(
        &dir.path().join("harmless.jsonl"),
        &suite("safe", &HARMLESS),
    );
    let provenance = Provenance::of_files(exec, &harmful, &harmless).unwrap();
    (dir, harmful, harmless, provenance)
}

#[test]
fn the_saved_file_loads_as_a_direction_with_its_provenance() {
    let (_, model, exec) = tiny_exec();
    let m = run(exec, &lenient()).unwrap();
    let (dir, harmful, harmless, provenance) = measured_from_files(exec);
    let out = dir.path().join("sub/refusal.safetensors");
    m.save(&out, &provenance).unwrap();
    // The same measurement gives the same bytes: the file's sha256 keys the
    // candidate's trace cache and provenance (its metadata is a map).
    for again in ["again-1.safetensors", "again-2.safetensors"] {
        let other = dir.path().join(again);
        m.save(&other, &provenance).unwrap();
        assert_eq!(
            std::fs::read(&other).unwrap(),
            std::fs::read(&out).unwrap(),
            "two saves of one measurement differ"
        );
    }

    // What `--intervene …,direction=FILE,tensor=direction` reads.
    let layer = m.chosen_layer();
    let d = load_direction(&out, Some("direction"), None, layer).unwrap();
    assert_eq!(d.rows(), 1);
    assert_eq!(d.basis, m.direction());
    assert!((d.norms[0] - 1.0).abs() < 1e-5);
    for l in 0..tiny::LAYERS {
        let row = load_direction(&out, Some("per_layer"), Some(l), l).unwrap();
        assert_eq!(row.basis, m.per_layer[l]);
    }
    let spec: InterventionSpec = format!(
        "layer={layer},mode=subtract,direction={},tensor=direction",
        out.display()
    )
    .parse()
    .unwrap();
    spec.resolve(tiny::HIDDEN, tiny::LAYERS).unwrap();
    // …and as-is, naming no tensor: `direction` is the default.
    let spec: InterventionSpec = format!("layer={layer},mode=subtract,direction={}", out.display())
        .parse()
        .unwrap();
    let iv = spec.resolve(tiny::HIDDEN, tiny::LAYERS).unwrap();
    assert_eq!(iv.direction.basis, m.direction());

    let meta = read_metadata(&out).unwrap();
    let get = |k: &str| meta.get(k).map(String::as_str);
    assert_eq!(get("vauban.kind"), Some("refusal_direction"));
    assert_eq!(get("vauban.layer"), Some(layer.to_string().as_str()));
    assert_eq!(get("vauban.method"), Some(measure::METHOD));
    assert_eq!(get("vauban.tool_version"), Some(env!("CARGO_PKG_VERSION")));
    let model_sha = vauban::hash::sha256_file(model).unwrap().0;
    assert_eq!(get("vauban.model_sha256"), Some(model_sha.as_str()));
    let file_sha = |p: &Path| vauban::hash::sha256_file(p).unwrap().0;
    assert_eq!(
        get("vauban.harmful_sha256"),
        Some(file_sha(&harmful).as_str())
    );
    assert_eq!(
        get("vauban.harmless_sha256"),
        Some(file_sha(&harmless).as_str())
    );
    let scores: measure::Scores = serde_json::from_str(get("vauban.scores").unwrap()).unwrap();
    assert_eq!(scores, m.scores);

    // Reuse: the same model and files match; another prompt file does not.
    assert!(provenance.matches(&meta));
    let other = Provenance {
        harmful_sha256: "0".repeat(64),
        ..provenance.clone()
    };
    assert!(!other.matches(&meta));
    let unknown_model = Provenance {
        model_sha256: None,
        ..provenance
    };
    assert!(!unknown_model.matches(&meta));

    let bad = m.save(&dir.path().join("refusal.npy"), &other).unwrap_err();
    assert!(
        bad.to_string().contains(".safetensors") && bad.to_string().contains(".gguf"),
        "{bad}"
    );
}

/// llama.cpp's control-vector loader (`llama_control_vector_load_one`)
/// reads `direction.N` for N ≥ 1 as f32 of width n_embd and applies it to
/// the output of block N; `general.architecture` says what the file is.
#[test]
fn a_measurement_saved_as_gguf_is_a_llama_cpp_control_vector() {
    let (_, _, exec) = tiny_exec();
    let m = run(exec, &lenient()).unwrap();
    let (dir, _, _, provenance) = measured_from_files(exec);
    let out = dir.path().join("refusal.gguf");
    m.save(&out, &provenance).unwrap();

    let mut file = vauban::gguf::GgufFile::read(std::fs::File::open(&out).unwrap()).unwrap();
    let meta = |k: &str| file.meta(k).unwrap_or_else(|| panic!("no {k}"));
    assert_eq!(
        meta("general.architecture").to_str().unwrap(),
        "controlvector"
    );
    assert_eq!(meta("controlvector.model_hint").to_str().unwrap(), "llama");
    let count = tiny::LAYERS - 1;
    assert_eq!(
        meta("controlvector.layer_count").to_u32().unwrap(),
        count as u32
    );
    // Every layer but 0, which llama.cpp refuses.
    let mut want: Vec<String> = (1..tiny::LAYERS)
        .map(|l| format!("direction.{l}"))
        .collect();
    want.sort();
    assert_eq!(file.tensor_names(), want);
    for l in 1..tiny::LAYERS {
        let name = format!("direction.{l}");
        assert_eq!(file.tensor_shape(&name), Some(vec![tiny::HIDDEN]));
        assert_eq!(file.read_f32(&name).unwrap(), m.per_layer[l], "{name}");
    }

    // Read back as a direction, naming no tensor: each layer its own.
    let layer = tiny::LAYERS - 1;
    let d = load_direction(&out, None, None, layer).unwrap();
    assert_eq!(d.tensor, format!("direction.{layer}"));
    assert_eq!(d.basis, m.per_layer[layer]);
    let spec: InterventionSpec = format!("layer=1,mode=subtract,direction={}", out.display())
        .parse()
        .unwrap();
    let iv = spec.resolve(tiny::HIDDEN, tiny::LAYERS).unwrap();
    assert_eq!(iv.direction.basis, m.per_layer[1]);

    // vauban's provenance rides along in string metadata, so a run can
    // tell a control vector it measured from one it did not.
    let read = read_metadata(&out).unwrap();
    assert_eq!(read["vauban.layer"], m.chosen_layer().to_string());
    assert_eq!(read["general.architecture"], "controlvector");
    assert!(provenance.matches(&read));
}

#[test]
fn the_holdout_split_is_deterministic() {
    for n in 2..40 {
        for f in [0.1, 0.25, 0.5, 0.9] {
            let a = holdout_split("harmful", n, f).unwrap();
            assert_eq!(a, holdout_split("harmful", n, f).unwrap());
            assert!(!a.is_empty() && a.len() < n, "n {n}, f {f}: {a:?}");
            assert!(a.windows(2).all(|w| w[0] < w[1]) && a[a.len() - 1] < n);
        }
    }
    // Every fourth prompt, from the third.
    assert_eq!(
        holdout_split("harmful", 24, 0.25).unwrap(),
        [2, 6, 10, 14, 18, 22]
    );
    // And a whole measurement repeats exactly.
    let (_, _, exec) = tiny_exec();
    let options = MeasureOptions {
        layer: Some(1),
        ..lenient()
    };
    let (a, b) = (run(exec, &options).unwrap(), run(exec, &options).unwrap());
    assert_eq!(a, b);
}

#[test]
fn a_set_of_one_prompt_is_refused_naming_the_set() {
    let (_, model, exec) = tiny_exec();
    let e = measure::measure(
        exec,
        &suite("harm", &HARMFUL[..1]),
        &suite("safe", &HARMLESS),
        &lenient(),
        &|_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("harmful prompt set has 1 prompt") && e.contains("at least 2"),
        "{e}"
    );

    // The command names the file too, before loading the model.
    let dir = tempfile::tempdir().unwrap();
    let one = write_suite(
        &dir.path().join("one.jsonl"),
        &suite("safe", &HARMLESS[..1]),
    );
    let harmful = write_suite(&dir.path().join("h.jsonl"), &suite("harm", &HARMFUL));
    let o = vauban(&[
        "measure",
        "--model",
        s(model),
        "--harmful",
        s(&harmful),
        "--harmless",
        s(&one),
        "--out",
        s(&dir.path().join("d.safetensors")),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("one.jsonl") && err.contains("harmless prompt set has 1 prompt"),
        "{err}"
    );
}

#[test]
fn a_layer_out_of_range_names_the_range() {
    let (_, model, exec) = tiny_exec();
    for options in [
        MeasureOptions {
            layer: Some(3),
            ..lenient()
        },
        MeasureOptions {
            candidates: vec![1, 7],
            ..lenient()
        },
    ] {
        let e = run(exec, &options).unwrap_err().to_string();
        assert!(
            e.contains("out of range") && e.contains("3 layers (0 to 2)"),
            "{e}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let harmful = write_suite(&dir.path().join("h.jsonl"), &suite("harm", &HARMFUL));
    let harmless = write_suite(&dir.path().join("s.jsonl"), &suite("safe", &HARMLESS));
    let o = vauban(&[
        "measure",
        "--model",
        s(model),
        "--harmful",
        s(&harmful),
        "--harmless",
        s(&harmless),
        "--out",
        s(&dir.path().join("d.safetensors")),
        "--layer",
        "5",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--layer: layer 5 is out of range") && err.contains("(0 to 2)"),
        "{err}"
    );
}

#[test]
fn no_layer_within_the_kl_bound_names_the_smallest_and_the_fixes() {
    let (_, _, exec) = tiny_exec();
    let options = MeasureOptions {
        max_kl: 0.0,
        ..MeasureOptions::default()
    };
    let e = run(exec, &options).unwrap_err();
    let MeasureError::NoLayerWithinKl {
        smallest,
        candidates,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!(candidates.len(), 2);
    let least = candidates
        .iter()
        .map(|c| c.kl)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(*smallest, least);
    let text = e.to_string();
    assert!(
        text.contains("--max-kl") && text.contains("--layer") && text.contains("smallest"),
        "{text}"
    );
    // --layer skips the choice but still reports the layer's scores.
    let fixed = run(
        exec,
        &MeasureOptions {
            layer: Some(2),
            ..options
        },
    )
    .unwrap();
    assert_eq!(fixed.chosen_layer(), 2);
    assert_eq!(fixed.scores.selection, Selection::Fixed);
    assert_eq!(fixed.scores.candidates.len(), 1);
    assert!(fixed.scores.chosen().kl > 0.0);
}

fn vauban(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .output()
        .expect("the vauban binary runs")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_command_writes_the_file_and_prints_json_or_a_table() {
    let (_, model, _) = tiny_exec();
    let dir = tempfile::tempdir().unwrap();
    let harmful = write_suite(&dir.path().join("h.jsonl"), &suite("harm", &HARMFUL));
    let harmless = write_suite(&dir.path().join("s.jsonl"), &suite("safe", &HARMLESS));
    let out = dir.path().join("d.safetensors");
    let base = [
        "measure",
        "--model",
        s(model),
        "--harmful",
        s(&harmful),
        "--harmless",
        s(&harmless),
        "--out",
        s(&out),
        "--max-kl",
        "1000",
    ];
    let o = vauban(&[&base[..], &["--json", "--refusal-token", "hat"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let layer = doc["scores"]["chosen_layer"].as_u64().unwrap();
    assert_eq!(doc["scores"]["refusal_tokens"][0]["text"], "hat");
    assert_eq!(doc["scores"]["refusal_tokens"].as_array().unwrap().len(), 1);
    let meta = read_metadata(&out).unwrap();
    assert_eq!(meta["vauban.layer"], layer.to_string());

    let o = vauban(&[&base[..], &["--layers", "0..=2"]].concat());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("<- chosen") && text.contains("baseline refusal score"));
    assert_eq!(text.lines().filter(|l| l.starts_with("    ")).count(), 3);

    let o = vauban(&[&base[..], &["--layers", "2..2"]].concat());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("selects no layer"));

    // --out FILE.gguf writes a control vector; another extension is a
    // usage mistake named before the model loads.
    let cv = dir.path().join("d.gguf");
    let mut args = base.to_vec();
    args[8] = s(&cv);
    let o = vauban(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The advice uses llama.cpp's syntax, FILE:SCALE in one argument
    // (llama-server --help: `--control-vector-scaled FNAME:SCALE,...`).
    let advice = String::from_utf8_lossy(&o.stdout);
    assert!(
        advice.contains(&format!("--control-vector-scaled {}:SCALE", s(&cv))),
        "{advice}"
    );
    let file = vauban::gguf::GgufFile::read(std::fs::File::open(&cv).unwrap()).unwrap();
    assert_eq!(
        file.meta("general.architecture").unwrap().to_str().unwrap(),
        "controlvector"
    );
    args[8] = "d.npy";
    let o = vauban(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--out d.npy") && err.contains(".gguf"),
        "{err}"
    );
}

/// SmolLM2-135M-Instruct, loaded with f32 weights (ten times faster than
/// its Q4_1 on the CPU).
fn smollm2() -> Option<LocalBackend> {
    Some(load(&common::smollm2_path()?, WeightMode::F32))
}

#[test]
fn smollm2_ablating_the_chosen_direction_lowers_refusal_within_the_kl_bound() {
    let Some(exec) = smollm2() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/prompts");
    let harmful = Suite::load(&root.join("harmful.jsonl")).unwrap();
    let harmless = Suite::load(&root.join("harmless.jsonl")).unwrap();
    // The top of the default range (6 to 24) keeps the debug-build runtime
    // down. SmolLM2-135M hardly refuses, so the effect is small: of the
    // whole range only layers 9 and 23 stay within the KL bound, and 23
    // lowers the score (docs/measure.md has the whole table).
    let options = MeasureOptions {
        candidates: (20..=24).collect(),
        ..MeasureOptions::default()
    };
    let start = std::time::Instant::now();
    let m = measure::measure(&exec, &harmful, &harmless, &options, &|_| {}).unwrap();
    let s = &m.scores;
    eprintln!(
        "measured in {:.1} s; baseline {:.3}; {:?}",
        start.elapsed().as_secs_f64(),
        s.baseline_refusal_score,
        s.candidates
    );
    let c = s.chosen();
    assert!(
        c.refusal_score < s.baseline_refusal_score,
        "layer {}: {} is not below the baseline {}",
        c.layer,
        c.refusal_score,
        s.baseline_refusal_score
    );
    assert!(c.kl <= measure::DEFAULT_MAX_KL, "{c:?}");
    assert_eq!(
        (s.counts.harmful_holdout, s.counts.harmless_holdout),
        (6, 6)
    );
    // The first answer tokens of "I'm sorry", "Sorry", "As an AI", with
    // and without a leading space.
    let tokens: Vec<&str> = s.refusal_tokens.iter().map(|t| t.token.as_str()).collect();
    assert_eq!(tokens, ["I", "ĠI", "Sorry", "ĠSor", "As", "ĠAs"]);
}
