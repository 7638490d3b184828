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
    let mut g = Generator::new(options, is_eos, detokenize)?;
    let start = Instant::now();
    let mut logits = match prefilled {
        Some(l) => l,
        None => session.prefill(prompt)?.logits,
    };
    g.prefill_ns = start.elapsed().as_nanos() as u64;
    while let Some(id) = g.next(&logits, session.position(), session.capacity(), on_text)? {
        let t = Instant::now();
        logits = session.decode_step(id)?.logits;
        g.decode_ns += t.elapsed().as_nanos() as u64;
        g.decode_steps += 1;
    }
    Ok(g.finish(on_text))
}

/// One generation as a state machine: it takes each next-token
/// distribution and says which token to feed next, or that it is done.
/// [`generate`] drives one through a session; a batched decode drives
/// several, one pass feeding all of them.
pub struct Generator<'o> {
    options: &'o GenerateOptions,
    is_eos: &'o dyn Fn(u32) -> bool,
    detokenize: &'o dyn Fn(&[u32]) -> Result<String, ExecutorError>,
    sampler: Sampler,
    /// Bytes of text that could still start a stop string.
    holdback: usize,
    ids: Vec<u32>,
    logprobs: Vec<f32>,
    top: Vec<TopLogprobs>,
    text: String,
    /// Bytes of `text` handed to `on_text` so far.
    emitted: usize,
    /// Why it ended, once it has.
    stop: Option<StopReason>,
    /// Time of the prompt's pass, decode steps run and their time: the
    /// driver's to fill in (a batched pass divides its time).
    pub prefill_ns: u64,
    pub decode_ns: u64,
    pub decode_steps: usize,
}

impl<'o> Generator<'o> {
    pub fn new(
        options: &'o GenerateOptions,
        is_eos: &'o dyn Fn(u32) -> bool,
        detokenize: &'o dyn Fn(&[u32]) -> Result<String, ExecutorError>,
    ) -> Result<Self, ExecutorError> {
        let sampler = match &options.sampling {
            Some(s) if s.temperature > 0.0 => Sampler::new(s.clone())?,
            _ => Sampler::greedy(),
        };
        Ok(Generator {
            options,
            is_eos,
            detokenize,
            sampler,
            holdback: options.stop.iter().map(|s| s.len()).max().unwrap_or(0),
            ids: Vec::new(),
            logprobs: Vec::new(),
            top: Vec::new(),
            text: String::new(),
            emitted: 0,
            stop: None,
            prefill_ns: 0,
            decode_ns: 0,
            decode_steps: 0,
        })
    }

    /// Tokens it may still generate (0 once it has ended).
    pub fn remaining(&self) -> usize {
        match self.stop {
            Some(_) => 0,
            None => self.options.max_tokens.saturating_sub(self.ids.len()),
        }
    }

    /// Takes the next-token `logits` of a sequence `position` tokens long
    /// (`capacity`: the model's context) and returns the token to run
    /// next, or `None` when the generation has ended (on EOS, a stop
    /// string, the token budget or a full context).
    pub fn next(
        &mut self,
        logits: &[f32],
        position: usize,
        capacity: Option<usize>,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Option<u32>, ExecutorError> {
        let options = self.options;
        if self.stop.is_some() {
            return Ok(None);
        }
        if self.ids.len() >= options.max_tokens {
            self.stop = Some(StopReason::MaxTokens);
            return Ok(None);
        }
        if options.top_logprobs > 0 {
            self.top.push(TopLogprobs::of(logits, options.top_logprobs));
        }
        let id = self.sampler.sample(logits)?;
        if (self.is_eos)(id) {
            self.stop = Some(StopReason::Eos { id });
            return Ok(None);
        }
        self.logprobs.push(log_prob(logits, id));
        self.ids.push(id);
        self.text = (self.detokenize)(&self.ids)?;
        if let Some((at, s)) = options
            .stop
            .iter()
            .filter_map(|s| self.text.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
        {
            self.text.truncate(at);
            self.stop = Some(StopReason::StopString { stop: s.clone() });
            return Ok(None);
        }
        // Text is final up to the first byte sequence the tokenizer could
        // not decode yet (U+FFFD), less `holdback` bytes that could still
        // start a stop string.
        let (text, emitted) = (&self.text, self.emitted);
        if text.is_char_boundary(emitted) {
            let decodable = text[emitted..]
                .find('\u{FFFD}')
                .map_or(text.len(), |at| emitted + at);
            let mut ready = decodable.saturating_sub(self.holdback);
            while !text.is_char_boundary(ready) {
                ready -= 1;
            }
            if ready > emitted {
                on_text(&text[emitted..ready]);
                self.emitted = ready;
            }
        }
        if self.ids.len() == options.max_tokens {
            self.stop = Some(StopReason::MaxTokens);
            return Ok(None);
        }
        if let Some(limit) = capacity
            && position + 1 > limit
        {
            self.stop = Some(StopReason::ContextFull { limit });
            return Ok(None);
        }
        Ok(Some(id))
    }

    /// The finished generation (the rest of its text to `on_text`).
    pub fn finish(mut self, on_text: &mut dyn FnMut(&str)) -> Generation {
        let stop = self.stop.take().unwrap_or(StopReason::MaxTokens);
        let mut text = std::mem::take(&mut self.text);
        // A generation cut by its budget can end inside a character: the
        // tokenizer shows those bytes as U+FFFD. The text ends at the last
        // whole character; the ids keep every token generated.
        if matches!(stop, StopReason::MaxTokens | StopReason::ContextFull { .. }) {
            let whole = text.trim_end_matches('\u{FFFD}').len();
            text.truncate(whole);
        }
        if text.len() > self.emitted && text.is_char_boundary(self.emitted) {
            on_text(&text[self.emitted..]);
        }
        Generation {
            ids: self.ids,
            text,
            stop,
            logprobs: self.logprobs,
            top: self.top,
            prefill_ns: self.prefill_ns,
            decode_ns: self.decode_ns,
            decode_steps: self.decode_steps,
        }
    }
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
