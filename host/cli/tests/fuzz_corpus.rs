//! The fuzz targets (`vauban::fuzz_targets`) on their corpora
//! (`fuzz/corpus/TARGET/`) and on a fixed set of mutations of each input,
//! so a regression a fuzzer once found (or would find near a seed) fails
//! `cargo test` without a fuzzer installed. Deterministic: the mutations
//! come from a seeded generator, and their number is fixed, not timed.
//! Long fuzzing runs are `scripts/fuzz.sh TARGET SECONDS`.

use std::path::PathBuf;

use vauban::fuzz_targets::TARGETS;

/// Mutations per corpus input.
const MUTATIONS: usize = 150;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// xorshift64*: a small, seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes a parser treats specially: structure, quotes, escapes, numbers at
/// their limits, control characters.
const INTERESTING: [&[u8]; 14] = [
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\n",
    b"\0",
    b"\x1b[2J",
    b"-1",
    b"1e309",
    b"nan",
    b"18446744073709551616",
    b"\xff\xfe",
];

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(v.len())..end);
            }
            2 => {
                let s = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, s.iter().copied());
            }
            3 if !v.is_empty() => {
                // Repeat a slice (deep nesting, long lists).
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(32)).min(v.len());
                let piece = v[start..end].repeat(1 + rng.below(8));
                v.splice(at..at, piece);
            }
            4 if !other.is_empty() => {
                // Splice in part of another input.
                let start = rng.below(other.len());
                let end = (start + 1 + rng.below(64)).min(other.len());
                v.splice(at..at, other[start..end].iter().copied());
            }
            _ => v.truncate(at),
        }
    }
    v
}

#[test]
fn every_fuzz_target_survives_its_corpus_and_mutations_of_it() {
    for (name, target) in TARGETS {
        let inputs = corpus(name);
        assert!(!inputs.is_empty(), "fuzz/corpus/{name} is empty");
        let mut rng = Rng(0x5eed ^ name.len() as u64);
        for (i, (file, bytes)) in inputs.iter().enumerate() {
            target(bytes);
            let other = &inputs[(i + 1) % inputs.len()].1;
            for m in 0..MUTATIONS {
                let input = mutate(&mut rng, bytes, other);
                // A panic names the target, the seed file and the mutation,
                // and the input is kept to reproduce it.
                let r = std::panic::catch_unwind(|| target(&input));
                if r.is_err() {
                    let keep = std::env::temp_dir().join(format!("vauban-fuzz-{name}-{file}-{m}"));
                    std::fs::write(&keep, &input).unwrap();
                    panic!(
                        "fuzz target {name} panicked on mutation {m} of {file}; input kept at {}",
                        keep.display()
                    );
                }
            }
        }
    }
}
