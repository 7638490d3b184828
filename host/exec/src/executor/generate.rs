//! The decode loop, backend-neutral: prefill once, then one `decode_step`
//! per new token; greedy or seeded sampling; stop on EOS, a stop string or
//! the token budget.

use std::time::Instant;

use serde::Serialize;

use super::{ExecutorError, InferenceSession};
use crate::model::sample::{Sampler, Sampling};

/// New tokens per prompt when the user does not say: `vauban trace`,
/// `vauban generate` and a config's `observe.max_tokens` all default to it,
/// enough for a refusal's first sentence or the start of an answer.
pub const DEFAULT_MAX_TOKENS: usize = 48;

/// What to generate.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GenerateOptions {
    /// New tokens at most (0: no generation).
    pub max_tokens: usize,
    /// `None`: greedy.
    pub sampling: Option<Sampling>,
    /// Generation stops when the text contains one; the text is cut before it.
    pub stop: Vec<String>,
    /// Keep the `k` most likely tokens of every distribution sampled from
    /// (0: none): the baseline's side of the next-token KL.
    pub top_logprobs: usize,
}

/// The `k` most likely tokens of one next-token distribution, most likely
/// first, with their log-probabilities under the untempered distribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprobs {
    pub ids: Vec<u32>,
    pub logprobs: Vec<f32>,
}

impl TopLogprobs {
    /// The `k` most likely entries of `logits` (ties broken by the lower id).
    pub fn of(logits: &[f32], k: usize) -> TopLogprobs {
        let lse = log_sum_exp(logits);
        let k = k.min(logits.len());
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        if k < order.len() && k > 0 {
            order.select_nth_unstable_by(k - 1, by_logit);
        }
        order.truncate(k);
        order.sort_unstable_by(by_logit);
        let logprobs = order
            .iter()
            .map(|&i| (logits[i as usize] as f64 - lse) as f32)
            .collect();
        TopLogprobs {
            ids: order,
            logprobs,
        }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum StopReason {
    /// The model produced an end-of-sequence token (not included in the text).
    Eos {
        id: u32,
    },
    /// The text reached a stop string (cut before it).
    StopString {
        stop: String,
    },
    MaxTokens,
    /// The next token would not fit in the model's context length.
    ContextFull {
        limit: usize,
    },
}

/// A finished generation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generation {
    /// The generated token ids (without the EOS token).
    pub ids: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    /// Log-probability of each generated token under the model's own
    /// (untempered) next-token distribution.
    pub logprobs: Vec<f32>,
    /// With `top_logprobs`: one row per distribution sampled from, the one
    /// that produced the end-of-sequence token included.
    pub top: Vec<TopLogprobs>,
    pub prefill_ns: u64,
    /// Time of all decode steps.
    pub decode_ns: u64,
    /// Decode steps run (one per token after the first).
    pub decode_steps: usize,
}

/// Generates after `prompt` (already prefilled when `prefilled` holds the
/// prompt's last-position logits). `on_text` receives text as it becomes
/// final (held back while it could still be the start of a stop string).
pub fn generate(
    session: &mut dyn InferenceSession,
    prompt: &[u32],
    prefilled: Option<Vec<f32>>,
    options: &GenerateOptions,
    is_eos: &dyn Fn(u32) -> bool,
    detokenize: &dyn Fn(&[u32]) -> Result<String, ExecutorError>,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation, ExecutorError> {
    let mut sampler = match &options.sampling {
        Some(s) if s.temperature > 0.0 => Sampler::new(s.clone())?,
        _ => Sampler::greedy(),
    };
    let start = Instant::now();
    let mut logits = match prefilled {
        Some(l) => l,
        None => session.prefill(prompt)?.logits,
    };
    let prefill_ns = start.elapsed().as_nanos() as u64;
    let holdback = options.stop.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut ids = Vec::new();
    let mut logprobs = Vec::new();
    let mut emitted = 0usize;
    let mut text = String::new();
    let mut stop = StopReason::MaxTokens;
    let mut decode_ns = 0u64;
    let mut decode_steps = 0usize;
    let mut top = Vec::new();
    while ids.len() < options.max_tokens {
        if options.top_logprobs > 0 {
            top.push(TopLogprobs::of(&logits, options.top_logprobs));
        }
        let id = sampler.sample(&logits)?;
        if is_eos(id) {
            stop = StopReason::Eos { id };
            break;
        }
        logprobs.push(log_prob(&logits, id));
        ids.push(id);
        text = detokenize(&ids)?;
        if let Some((at, s)) = options
            .stop
            .iter()
            .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
        {
            text.truncate(at);
            stop = StopReason::StopString { stop: s.clone() };
            break;
        }
        // Text is final up to the first byte sequence the tokenizer could
        // not decode yet (U+FFFD), less `holdback` bytes that could still
        // start a stop string.
        if text.is_char_boundary(emitted) {
            let decodable = text[emitted..]
                .find('\u{FFFD}')
                .map_or(text.len(), |at| emitted + at);
            let mut ready = decodable.saturating_sub(holdback);
            while !text.is_char_boundary(ready) {
                ready -= 1;
            }
            if ready > emitted {
                on_text(&text[emitted..ready]);
                emitted = ready;
            }
        }
        if ids.len() == options.max_tokens {
            break;
        }
        if let Some(limit) = session.capacity()
            && session.position() + 1 > limit
        {
            stop = StopReason::ContextFull { limit };
            break;
        }
        continue_decode(
            &mut *session,
            id,
            &mut logits,
            &mut decode_ns,
            &mut decode_steps,
        )?;
    }
    // A generation cut by its budget can end inside a character: the
    // tokenizer shows those bytes as U+FFFD. The text ends at the last
    // whole character; the ids keep every token generated.
    if matches!(stop, StopReason::MaxTokens | StopReason::ContextFull { .. }) {
        let whole = text.trim_end_matches('\u{FFFD}').len();
        text.truncate(whole);
    }
    if text.len() > emitted && text.is_char_boundary(emitted) {
        on_text(&text[emitted..]);
    }
    Ok(Generation {
        ids,
        text,
        stop,
        logprobs,
        top,
        prefill_ns,
        decode_ns,
        decode_steps,
    })
}

/// Runs one decode step for `id`, timing it.
fn continue_decode(
    session: &mut dyn InferenceSession,
    id: u32,
    logits: &mut Vec<f32>,
    decode_ns: &mut u64,
    decode_steps: &mut usize,
) -> Result<(), ExecutorError> {
    let t = Instant::now();
    *logits = session.decode_step(id)?.logits;
    *decode_ns += t.elapsed().as_nanos() as u64;
    *decode_steps += 1;
    Ok(())
}

/// `log softmax(logits)[id]`, in f64 for a stable sum.
pub fn log_prob(logits: &[f32], id: u32) -> f32 {
    (logits[id as usize] as f64 - log_sum_exp(logits)) as f32
}

/// `log Σ exp(logits)`, in f64.
fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    logits
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::StepOutput;

    /// A session whose next token is always `(last + 1) % 5`, so the tests
    /// know the sequence without a model.
    struct Counting {
        pos: usize,
        prefills: usize,
    }

    fn peak(id: u32) -> Vec<f32> {
        let mut l = vec![0.0; 5];
        l[((id + 1) % 5) as usize] = 10.0;
        l
    }

    impl InferenceSession for Counting {
        fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
            self.prefills += 1;
            self.pos += ids.len();
            Ok(StepOutput {
                logits: peak(*ids.last().unwrap()),
            })
        }
        fn decode_step(&mut self, id: u32) -> Result<StepOutput, ExecutorError> {
            self.pos += 1;
            Ok(StepOutput { logits: peak(id) })
        }
        fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
            self.pos += ids.len();
            Ok(StepOutput {
                logits: peak(*ids.last().unwrap()),
            })
        }
        fn rewind(&mut self, to: usize) -> Result<(), ExecutorError> {
            self.pos = to;
            Ok(())
        }
        fn position(&self) -> usize {
            self.pos
        }
        fn capacity(&self) -> Option<usize> {
            Some(6)
        }
    }

    fn letters(ids: &[u32]) -> Result<String, ExecutorError> {
        Ok(ids.iter().map(|&i| (b'a' + i as u8) as char).collect())
    }

    fn run(opts: GenerateOptions, eos: u32) -> (Generation, String, Counting) {
        let mut s = Counting {
            pos: 0,
            prefills: 0,
        };
        let mut streamed = String::new();
        let g = generate(
            &mut s,
            &[0],
            None,
            &opts,
            &|id| id == eos,
            &letters,
            &mut |t| streamed.push_str(t),
        )
        .unwrap();
        (g, streamed, s)
    }

    #[test]
    fn greedy_runs_prefill_once_and_one_step_per_token() {
        let opts = GenerateOptions {
            max_tokens: 3,
            ..Default::default()
        };
        let (g, streamed, s) = run(opts, 99);
        assert_eq!(g.ids, [1, 2, 3]);
        assert_eq!((g.text.as_str(), streamed.as_str()), ("bcd", "bcd"));
        assert_eq!(g.stop, StopReason::MaxTokens);
        assert_eq!(s.prefills, 1);
        // Prompt (1) + two decode steps: the last token is not run.
        assert_eq!((s.pos, g.decode_steps), (3, 2));
        assert!(g.logprobs.iter().all(|&lp| lp > -0.01 && lp <= 0.0));
    }

    #[test]
    fn top_rows_follow_every_sampled_distribution_the_eos_one_included() {
        let opts = GenerateOptions {
            max_tokens: 10,
            top_logprobs: 2,
            ..Default::default()
        };
        // Tokens 1, 2 then EOS (3): three distributions were sampled from.
        let (g, _, _) = run(opts, 3);
        assert_eq!(g.ids, [1, 2]);
        assert_eq!(g.top.len(), 3);
        for (row, want) in g.top.iter().zip([1, 2, 3]) {
            assert_eq!(row.ids[0], want, "{row:?}");
            assert_eq!(row.ids.len(), 2);
            // Most likely first; the chosen token's logprob matches.
            assert!(row.logprobs[0] >= row.logprobs[1]);
        }
        assert_eq!(g.top[0].logprobs[0], g.logprobs[0]);
    }

    #[test]
    fn top_logprobs_are_the_k_largest_in_order_with_ties_by_id() {
        let logits = [0.0, 3.0, 1.0, 3.0, -2.0];
        let t = TopLogprobs::of(&logits, 3);
        assert_eq!(t.ids, [1, 3, 2]);
        let lse = logits
            .iter()
            .map(|&l: &f32| (l as f64).exp())
            .sum::<f64>()
            .ln();
        assert!((t.logprobs[2] as f64 - (1.0 - lse)).abs() < 1e-6);
        // k over the vocabulary: every token, still ordered.
        assert_eq!(TopLogprobs::of(&logits, 9).ids, [1, 3, 2, 0, 4]);
    }

    #[test]
    fn eos_ends_without_entering_the_text() {
        let opts = GenerateOptions {
            max_tokens: 10,
            ..Default::default()
        };
        let (g, _, _) = run(opts, 3);
        assert_eq!(g.ids, [1, 2]);
        assert_eq!(g.stop, StopReason::Eos { id: 3 });
    }

    #[test]
    fn a_stop_string_cuts_the_text_and_is_never_streamed() {
        let opts = GenerateOptions {
            max_tokens: 10,
            stop: vec!["de".into()],
            ..Default::default()
        };
        let (g, streamed, _) = run(opts, 99);
        assert_eq!(g.text, "bc");
        assert_eq!(streamed, "bc");
        assert_eq!(g.stop, StopReason::StopString { stop: "de".into() });
    }

    /// A session that emits the bytes of "abcé!" one per token (token id = byte).
    struct Bytes {
        pos: usize,
    }

    const BYTES: &[u8] = "abcé!".as_bytes();

    fn peak_at(i: usize) -> Vec<f32> {
        let mut l = vec![0.0; 256];
        l[BYTES[i.min(BYTES.len() - 1)] as usize] = 10.0;
        l
    }

    impl InferenceSession for Bytes {
        fn prefill(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
            self.pos = ids.len();
            Ok(StepOutput { logits: peak_at(0) })
        }
        fn decode_step(&mut self, _: u32) -> Result<StepOutput, ExecutorError> {
            self.pos += 1;
            Ok(StepOutput {
                logits: peak_at(self.pos - 1),
            })
        }
        fn extend(&mut self, ids: &[u32]) -> Result<StepOutput, ExecutorError> {
            self.pos += ids.len();
            Ok(StepOutput {
                logits: peak_at(self.pos - 1),
            })
        }
        fn rewind(&mut self, to: usize) -> Result<(), ExecutorError> {
            self.pos = to;
            Ok(())
        }
        fn position(&self) -> usize {
            self.pos
        }
        fn capacity(&self) -> Option<usize> {
            None
        }
    }

    fn lossy(ids: &[u32]) -> Result<String, ExecutorError> {
        let bytes: Vec<u8> = ids.iter().map(|&i| i as u8).collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    #[test]
    fn a_budget_that_ends_inside_a_character_ends_the_text_before_it() {
        let opts = GenerateOptions {
            max_tokens: 4,
            ..Default::default()
        };
        let mut streamed = String::new();
        let g = generate(
            &mut Bytes { pos: 0 },
            &[1],
            None,
            &opts,
            &|_| false,
            &lossy,
            &mut |t| streamed.push_str(t),
        )
        .unwrap();
        // a b c and the first byte of é: the text stops after `c`.
        assert_eq!(g.ids.len(), 4);
        assert_eq!(g.text, "abc");
        assert_eq!(streamed, "abc");
        assert_eq!(g.stop, StopReason::MaxTokens);
    }

    #[test]
    fn a_stop_string_split_across_a_multibyte_character_is_never_streamed() {
        let opts = GenerateOptions {
            max_tokens: 10,
            stop: vec!["cé".into()],
            ..Default::default()
        };
        let mut s = Bytes { pos: 0 };
        let mut streamed = String::new();
        let g = generate(&mut s, &[0], None, &opts, &|_| false, &lossy, &mut |t| {
            streamed.push_str(t)
        })
        .unwrap();
        assert_eq!(g.text, "ab");
        assert_eq!(streamed, "ab");
    }

    #[test]
    fn generation_stops_at_the_context_length() {
        let opts = GenerateOptions {
            max_tokens: 100,
            ..Default::default()
        };
        // Capacity 6: the prompt (1) and five decode steps.
        let (g, _, s) = run(opts, 99);
        assert_eq!(g.stop, StopReason::ContextFull { limit: 6 });
        assert_eq!(s.pos, 6);
        assert_eq!(g.ids.len(), 6);
    }

    #[test]
    fn log_prob_matches_a_hand_computed_softmax() {
        let lp = log_prob(&[0.0, (3.0f32).ln()], 1);
        assert!((lp - (0.75f32).ln()).abs() < 1e-6, "{lp}");
    }
}
