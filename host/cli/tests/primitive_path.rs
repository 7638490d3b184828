//! The fused primitive kernel's verification gate, end to end (seed 003):
//! a traced run with interventions at every block records the same
//! evidence on both paths (`--primitive fused`, the default, and
//! `--primitive tensor`, candle's tensor operations), and a behaviour
//! suite gives the same report. The unit half of the gate (every mode,
//! positions rule and condition) is `vauban-exec`'s
//! `the_fused_kernel_gives_the_tensor_paths_outcome`; the speed half,
//! `scripts/bench-primitive.sh` and `cargo bench -p vauban-exec --bench
//! primitive`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::quantized::GgmlDType;
use common::{arg as s, output_text as said, plugins, tiny};
use serde_json::Value;

fn vauban(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vauban"))
        .args(args)
        .env(
            "VAUBAN_PLUGIN_DIR",
            plugins::wasm("vauban-plugin-refusal").parent().unwrap(),
        )
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("vauban-primitive-path-cache"),
        )
        .output()
        .expect("the vauban binary runs")
}

/// A unit direction of the tiny model's width.
fn direction(dir: &Path) -> PathBuf {
    let path = dir.join("d.safetensors");
    let v: Vec<f32> = (0..tiny::HIDDEN)
        .map(|i| (i * 5 % 11) as f32 - 5.0)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let v: Vec<f32> = v.iter().map(|x| x / n).collect();
    let t = candle_core::Tensor::new(v.as_slice(), &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(&[("direction".to_string(), t)].into_iter().collect(), &path)
        .unwrap();
    path
}

/// Every number in a JSON value, in order (an artifact's or a record's
/// values, compared within a tolerance).
fn numbers(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.push(n.as_f64().unwrap()),
        Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
        Value::Object(o) => o.values().for_each(|x| numbers(x, out)),
        _ => {}
    }
}

/// A trace with every kind of change at every block (subtract, clamp at
/// the last position, steer under a condition) records the same evidence
/// on both paths: the same artifacts and spans, the same tokens, logits
/// and activations within f32 summation order, the same intervention
/// records; its intervene span says which path ran.
#[test]
fn a_traced_run_records_the_same_evidence_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 4, GgmlDType::F32);
    let d = direction(dir.path());
    let d = s(&d);
    let specs = [
        format!("layer=0,mode=subtract,direction={d}"),
        format!("layer=1,mode=clamp,value=0.5,positions=last,direction={d}"),
        format!("layer=2,mode=steer,alpha=2.0,when=above,threshold=0.0,direction={d}"),
    ];
    let run = |path: &str| {
        let out = dir.path().join(path);
        let mut args = vec![
            "trace",
            "--model",
            s(&model),
            "--prompt",
            "the cat sat in the hat",
            "--prompt",
            "then a mat",
            "--raw",
            "--logprobs",
            "--raw-tensors",
            "--layers",
            "0,1,2",
            "--max-tokens",
            "6",
            "--primitive",
            path,
            "--out",
            s(&out),
        ];
        for spec in &specs {
            args.extend(["--intervene", spec.as_str()]);
        }
        let o = vauban(&args);
        assert!(o.status.success(), "{}", said(&o));
        vauban::bundle::Bundle::open(&out).unwrap()
    };
    let (fused, tensor) = (run("fused"), run("tensor"));
    assert_eq!(fused.traces().len(), 2);
    for (f, t) in fused.traces().iter().zip(tensor.traces()) {
        let stages = |x: &vauban::trace::Trace| -> Vec<String> {
            x.spans.iter().map(|s| format!("{:?}", s.stage)).collect()
        };
        assert_eq!(stages(f), stages(t), "the same spans");
        let ids = |x: &vauban::trace::Trace| -> Vec<String> {
            x.artifacts.iter().map(|a| a.id.clone()).collect()
        };
        assert_eq!(ids(f), ids(t), "the same artifacts");
        let (fr, tr) = (
            fused.raw_tensors(f).unwrap(),
            tensor.raw_tensors(t).unwrap(),
        );
        for (a, b) in f.artifacts.iter().zip(&t.artifacts) {
            use vauban::trace::ArtifactData::TokenIds;
            if let (TokenIds { ids: x }, TokenIds { ids: y }) = (&a.data, &b.data) {
                assert_eq!(x, y, "{}: the same tokens", a.id)
            }
            if let (Some(x), Some(y)) = (fr.get(&a.id), tr.get(&b.id)) {
                assert_eq!(x.shape, y.shape, "{}", a.id);
                if x.dtype == vauban::trace::DType::F32 {
                    let (x, y) = (x.as_ref().to_f32_vec(), y.as_ref().to_f32_vec());
                    let worst = x
                        .iter()
                        .zip(&y)
                        .map(|(p, q)| (p - q).abs())
                        .fold(0f32, f32::max);
                    assert!(worst < 1e-4, "{}: {worst}", a.id);
                } else {
                    assert_eq!(x.bytes, y.bytes, "{}", a.id);
                }
            }
        }
        let span = |x: &vauban::trace::Trace| {
            x.spans
                .iter()
                .find(|s| s.stage == vauban::trace::Stage::Intervene)
                .unwrap()
                .clone()
        };
        let (fs, ts) = (span(f), span(t));
        assert!(
            fs.profile.notes["primitive"].starts_with("fused: "),
            "{:?}",
            fs.profile.notes
        );
        assert!(
            ts.profile.notes["primitive"].starts_with("tensor: "),
            "{:?}",
            ts.profile.notes
        );
        assert_eq!(fs.profile.token_count, ts.profile.token_count);
        // The intervention records: what each did, by the numbers.
        let records = |x: &vauban::trace::Trace| -> Vec<f64> {
            let mut v = Vec::new();
            for a in x
                .artifacts
                .iter()
                .filter(|a| a.kind.as_str() == "intervention_result")
            {
                numbers(&serde_json::to_value(&a.data).unwrap(), &mut v);
            }
            v
        };
        let (rf, rt) = (records(f), records(t));
        assert_eq!(rf.len(), rt.len());
        assert!(!rf.is_empty(), "the interventions are recorded");
        for (p, q) in rf.iter().zip(&rt) {
            assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "{p} vs {q}");
        }
    }
}

/// A behaviour suite with the candidate ablating a direction after every
/// block: the same report on both paths (deltas, claims, the next-token
/// KL), `primitive = "tensor"` set in the config.
#[test]
fn a_behaviour_suite_reports_the_same_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny::write_gguf(&dir.path().join("tiny.gguf"), 6, GgmlDType::F32);
    direction(dir.path());
    let config = |name: &str, primitive: &str| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                r#"output = "{name}"
seed = 1
[suite]
prompts = [
  {{ id = "a", text = "the cat" }},
  {{ id = "b", text = "a hat" }},
  {{ id = "c", text = "then in" }},
  {{ id = "d", text = "the mat" }},
]
[observe]
max_tokens = 6
prompt_form = "raw"
logprobs = true
[baseline]
model = "{model}"
[candidate]
model = "{model}"
{primitive}
[candidate.transform]
kind = "ablate"
direction = "d.safetensors"
[[scorers]]
plugin = "refusal"
[[scorers]]
plugin = "behavior"
[[claim_mappers]]
plugin = "claims-default"
"#,
                model = model.display(),
            ),
        )
        .unwrap();
        let o = vauban(&["run", s(&path)]);
        assert!(matches!(o.status.code(), Some(0 | 3)), "{}", said(&o));
        let text = std::fs::read_to_string(dir.path().join(name).join("report.json")).unwrap();
        serde_json::from_str::<Value>(&text).unwrap()
    };
    let fused = config("fused", "");
    let tensor = config("tensor", "primitive = \"tensor\"");
    for key in ["metric_deltas", "claims", "access", "gates"] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        numbers(&fused[key], &mut a);
        numbers(&tensor[key], &mut b);
        assert_eq!(a.len(), b.len(), "{key}");
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{key}: {p} vs {q}");
        }
    }
    let texts = |r: &Value| -> Vec<String> {
        r["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{} {}", c["status"], c["strength"]))
            .collect()
    };
    assert_eq!(texts(&fused), texts(&tensor));
    let kl = |r: &Value| r["distribution"]["mean_kl"].as_f64().unwrap();
    assert!(
        (kl(&fused) - kl(&tensor)).abs() < 1e-5,
        "{} vs {}",
        kl(&fused),
        kl(&tensor)
    );
    // The same examples shown, word for word.
    assert_eq!(fused["examples"], tensor["examples"]);
    // A setting of candle's, refused on another executor by name.
    std::fs::write(
        dir.path().join("replay.toml"),
        std::fs::read_to_string(dir.path().join("tensor.toml"))
            .unwrap()
            .replace(
                "primitive = \"tensor\"",
                "executor = \"replay\"\nprimitive = \"tensor\"",
            ),
    )
    .unwrap();
    let o = vauban(&["validate", s(&dir.path().join("replay.toml"))]);
    assert_eq!(o.status.code(), Some(1), "{}", said(&o));
    assert!(
        said(&o).contains("candidate.primitive: `primitive` is a setting of executor = \"candle\", and this side's executor is `replay`"),
        "{}",
        said(&o)
    );
}
