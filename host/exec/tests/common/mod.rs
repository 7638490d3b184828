//! What the backends' forward tests share: the SmolLM2 file, and one
//! comparison of logits rows.

use std::path::PathBuf;

/// SmolLM2-135M-Instruct Q4_1, where `scripts/fetch-model.sh` put it; `None`
/// (with a message) when it is absent.
pub fn smollm2() -> Option<PathBuf> {
    let dir = std::env::var_os("VAUBAN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vauban/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    match path.is_file() {
        true => Some(path),
        false => {
            eprintln!(
                "skipping: {} is absent; run `bash scripts/fetch-model.sh`",
                path.display()
            );
            None
        }
    }
}

/// Checks `got` against `want` row by row (positions × vocabulary): the
/// same shape and the same top token at every position. Returns the
/// largest |Δlogit|.
pub fn compare_rows(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: positions");
    let mut worst = 0f32;
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "{what}: vocabulary");
        for (a, b) in g.iter().zip(w) {
            worst = worst.max((a - b).abs());
        }
        let top = |x: &[f32]| (0..x.len()).max_by(|&i, &j| x[i].total_cmp(&x[j])).unwrap();
        assert_eq!(top(g), top(w), "{what}: top token");
    }
    worst
}
