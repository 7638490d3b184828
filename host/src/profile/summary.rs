//! One trace's span profiles folded into one summary.

use serde::{Deserialize, Serialize};

use crate::trace::{Stage, Trace};

/// A trace's cost, summed or maximised over its spans.
///
/// Spans are sequential stages of one run, so durations, bytes, copies and
/// syncs add up; sizes that describe the run's shape (batch size, queue
/// depth, memory) are maxima, since adding them would count the same batch,
/// queue or allocation once per stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceProfileSummary {
    /// The trace's id.
    pub trace: String,
    /// How many spans the trace has.
    pub spans: usize,
    /// Sum of the spans' durations: the spans are sequential stages, so this
    /// is the run's wall-clock time as far as the spans account for it.
    pub total_duration_ns: u64,
    /// Tokens pushed through the model: the sum of `token_count` over spans
    /// whose stage runs the model (prefill, forward, decode; see
    /// [`Stage::runs_model`]). Tokenize or observe spans handle the same
    /// tokens again, and counting them would double the total.
    pub token_count: u64,
    /// The largest batch size any span ran with.
    pub batch_size: u32,
    /// `token_count × batch_size` per second of `total_duration_ns`
    /// (`token_count` is per sequence, so the batch multiplies it). `None`
    /// when the duration is zero, no token went through the model, or no
    /// span recorded a batch size: a rate from those would be undefined or a
    /// false zero.
    pub tokens_per_s: Option<f64>,
    /// The largest `memory_bytes` any span recorded; `None` when no span
    /// measured memory. Spans record memory at their end (or their own peak
    /// where the backend can), so this is a lower bound on the run's peak.
    pub peak_memory_bytes: Option<u64>,
    /// Sum of the spans' input bytes.
    pub input_bytes: u64,
    /// Sum of the spans' output bytes.
    pub output_bytes: u64,
    /// Sum of the spans' host↔device copies.
    pub host_device_copies: u64,
    /// Sum of the spans' points where the host waited for the device.
    pub sync_points: u64,
    /// The deepest queue any span saw (requests waiting behind this one).
    pub max_queue_depth: u32,
    /// Totals per stage, in the order each stage first appears in the trace.
    pub per_stage: Vec<StageTotal>,
}

/// The spans of one stage in a trace, totalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageTotal {
    /// The stage.
    pub stage: Stage,
    /// How many spans of this stage the trace has (decode usually has one per step).
    pub spans: usize,
    /// Sum of those spans' durations.
    pub duration_ns: u64,
    /// Sum of those spans' token counts, whatever the stage (unlike
    /// [`TraceProfileSummary::token_count`], which counts model stages only).
    pub token_count: u64,
}

/// Folds a trace's span profiles into one summary (see
/// [`TraceProfileSummary`] for each field's definition). Sums saturate
/// rather than overflow.
pub fn summarize_trace(trace: &Trace) -> TraceProfileSummary {
    let mut s = TraceProfileSummary {
        trace: trace.id.clone(),
        spans: trace.spans.len(),
        total_duration_ns: 0,
        token_count: 0,
        batch_size: 0,
        tokens_per_s: None,
        peak_memory_bytes: None,
        input_bytes: 0,
        output_bytes: 0,
        host_device_copies: 0,
        sync_points: 0,
        max_queue_depth: 0,
        per_stage: Vec::new(),
    };
    for span in &trace.spans {
        let p = &span.profile;
        s.total_duration_ns = s.total_duration_ns.saturating_add(p.duration_ns);
        if span.stage.runs_model() {
            s.token_count = s.token_count.saturating_add(p.token_count);
        }
        s.batch_size = s.batch_size.max(p.batch_size);
        s.peak_memory_bytes = s.peak_memory_bytes.max(p.memory_bytes);
        s.input_bytes = s.input_bytes.saturating_add(p.input_bytes);
        s.output_bytes = s.output_bytes.saturating_add(p.output_bytes);
        s.host_device_copies = s.host_device_copies.saturating_add(p.host_device_copies);
        s.sync_points = s.sync_points.saturating_add(p.sync_points);
        s.max_queue_depth = s.max_queue_depth.max(p.queue_depth);

        let total = match s.per_stage.iter_mut().find(|t| t.stage == span.stage) {
            Some(t) => t,
            None => {
                s.per_stage.push(StageTotal {
                    stage: span.stage,
                    spans: 0,
                    duration_ns: 0,
                    token_count: 0,
                });
                s.per_stage.last_mut().expect("just pushed")
            }
        };
        total.spans += 1;
        total.duration_ns = total.duration_ns.saturating_add(p.duration_ns);
        total.token_count = total.token_count.saturating_add(p.token_count);
    }
    if s.total_duration_ns > 0 && s.token_count > 0 && s.batch_size > 0 {
        let seconds = s.total_duration_ns as f64 / 1e9;
        s.tokens_per_s = Some(s.token_count as f64 * f64::from(s.batch_size) / seconds);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Step, assert_close, trace};
    use super::*;
    use crate::trace::{ArtifactKind, StageProfile};

    const MS: u64 = 1_000_000;

    /// tokenize (5 tokens, 1 ms), prefill (5 tokens, 10 ms, memory 1000,
    /// 2 copies, 1 sync), decode ×3 (1 token, 2 ms, memory 1500 / 1200 /
    /// 1300, queue depth 0 / 2 / 1), all at batch 1.
    fn five_span_trace() -> Trace {
        let p = |tokens: u64, ms: u64| StageProfile {
            duration_ns: ms * MS,
            device: "cpu".into(),
            batch_size: 1,
            token_count: tokens,
            input_bytes: tokens * 4,
            output_bytes: tokens * 100,
            ..Default::default()
        };
        let decode = |memory: u64, queue: u32| StageProfile {
            memory_bytes: Some(memory),
            queue_depth: queue,
            ..p(1, 2)
        };
        trace(
            "t1",
            &[ArtifactKind::Text, ArtifactKind::Tokens],
            vec![
                Step(Stage::Tokenize, p(5, 1)),
                Step(
                    Stage::Prefill,
                    StageProfile {
                        memory_bytes: Some(1000),
                        host_device_copies: 2,
                        sync_points: 1,
                        ..p(5, 10)
                    },
                ),
                Step(Stage::Decode, decode(1500, 0)),
                Step(Stage::Decode, decode(1200, 2)),
                Step(Stage::Decode, decode(1300, 1)),
            ],
        )
    }

    #[test]
    fn a_trace_summary_sums_sequential_spans_and_counts_model_tokens_once() {
        let s = summarize_trace(&five_span_trace());
        assert_eq!(s.trace, "t1");
        assert_eq!(s.spans, 5);
        // 1 + 10 + 2 + 2 + 2 = 17 ms
        assert_eq!(s.total_duration_ns, 17_000_000);
        // prefill 5 + decode 1 + 1 + 1 = 8; tokenize's 5 are the same tokens
        assert_eq!(s.token_count, 8);
        assert_eq!(s.batch_size, 1);
        // 8 tokens × batch 1 / 0.017 s = 470.588235294... tok/s
        assert_close(s.tokens_per_s.unwrap(), 470.5882352941176);
        // max(1000, 1500, 1200, 1300); tokenize measured nothing
        assert_eq!(s.peak_memory_bytes, Some(1500));
        // input: 4 bytes per token over every span: (5 + 5 + 1 + 1 + 1) × 4 = 52
        assert_eq!(s.input_bytes, 52);
        // output: (5 + 5 + 1 + 1 + 1) × 100 = 1300
        assert_eq!(s.output_bytes, 1300);
        assert_eq!(s.host_device_copies, 2);
        assert_eq!(s.sync_points, 1);
        // max(0, 0, 0, 2, 1)
        assert_eq!(s.max_queue_depth, 2);
        assert_eq!(
            s.per_stage,
            vec![
                StageTotal {
                    stage: Stage::Tokenize,
                    spans: 1,
                    duration_ns: 1_000_000,
                    token_count: 5,
                },
                StageTotal {
                    stage: Stage::Prefill,
                    spans: 1,
                    duration_ns: 10_000_000,
                    token_count: 5,
                },
                // 3 × 2 ms, 3 × 1 token
                StageTotal {
                    stage: Stage::Decode,
                    spans: 3,
                    duration_ns: 6_000_000,
                    token_count: 3,
                },
            ]
        );
    }

    #[test]
    fn per_stage_totals_keep_first_appearance_order() {
        let p = |ms: u64| StageProfile {
            duration_ns: ms * MS,
            ..Default::default()
        };
        // decode, prefill, decode: decode first, its two spans merged
        let t = trace(
            "t1",
            &[ArtifactKind::Text],
            vec![
                Step(Stage::Decode, p(1)),
                Step(Stage::Prefill, p(2)),
                Step(Stage::Decode, p(4)),
            ],
        );
        let stages: Vec<(Stage, usize, u64)> = summarize_trace(&t)
            .per_stage
            .iter()
            .map(|t| (t.stage, t.spans, t.duration_ns))
            .collect();
        // decode: 1 + 4 = 5 ms over 2 spans
        assert_eq!(
            stages,
            vec![(Stage::Decode, 2, 5 * MS), (Stage::Prefill, 1, 2 * MS)]
        );
    }

    #[test]
    fn a_trace_without_memory_measurements_has_no_peak() {
        let p = StageProfile {
            duration_ns: 3 * MS,
            batch_size: 1,
            token_count: 4,
            ..Default::default()
        };
        let t = trace(
            "t1",
            &[ArtifactKind::Text],
            vec![Step(Stage::Forward, p.clone()), Step(Stage::Decode, p)],
        );
        let s = summarize_trace(&t);
        assert_eq!(s.peak_memory_bytes, None);
        // 4 + 4 tokens over 6 ms: 8 / 0.006 = 1333.33... tok/s
        assert_close(s.tokens_per_s.unwrap(), 1333.3333333333333);
    }

    #[test]
    fn throughput_multiplies_tokens_by_the_largest_batch() {
        let p = |batch: u32, tokens: u64| StageProfile {
            duration_ns: 5 * MS,
            batch_size: batch,
            token_count: tokens,
            ..Default::default()
        };
        let t = trace(
            "t1",
            &[ArtifactKind::Text],
            vec![
                Step(Stage::PrepareBatch, p(4, 0)),
                Step(Stage::Prefill, p(4, 6)),
                Step(Stage::Decode, p(4, 4)),
            ],
        );
        let s = summarize_trace(&t);
        assert_eq!(s.batch_size, 4);
        // (6 + 4) tokens × batch 4 / 0.015 s = 40 / 0.015 = 2666.66... tok/s
        assert_close(s.tokens_per_s.unwrap(), 2666.666666666667);
    }

    #[test]
    fn throughput_is_none_without_time_tokens_or_batch() {
        let p = |ms: u64, batch: u32, tokens: u64| StageProfile {
            duration_ns: ms * MS,
            batch_size: batch,
            token_count: tokens,
            ..Default::default()
        };
        let rate = |stage: Stage, profile: StageProfile| {
            summarize_trace(&trace(
                "t1",
                &[ArtifactKind::Text],
                vec![Step(stage, profile)],
            ))
            .tokens_per_s
        };
        assert_eq!(rate(Stage::Forward, p(0, 1, 8)), None, "zero duration");
        assert_eq!(rate(Stage::Forward, p(5, 1, 0)), None, "no tokens");
        assert_eq!(rate(Stage::Tokenize, p(5, 1, 8)), None, "no model stage");
        assert_eq!(rate(Stage::Forward, p(5, 0, 8)), None, "no batch size");
        assert!(rate(Stage::Forward, p(5, 1, 8)).is_some());
    }

    #[test]
    fn sums_saturate_instead_of_overflowing() {
        let p = StageProfile {
            duration_ns: u64::MAX - 1,
            batch_size: 1,
            token_count: u64::MAX,
            input_bytes: u64::MAX,
            ..Default::default()
        };
        let t = trace(
            "t1",
            &[ArtifactKind::Text],
            vec![Step(Stage::Forward, p.clone()), Step(Stage::Decode, p)],
        );
        let s = summarize_trace(&t);
        assert_eq!(s.total_duration_ns, u64::MAX);
        assert_eq!(s.token_count, u64::MAX);
        assert_eq!(s.input_bytes, u64::MAX);
        assert_eq!(s.per_stage[0].token_count, u64::MAX);
    }

    #[test]
    fn a_summary_round_trips_through_json() {
        let s = summarize_trace(&five_span_trace());
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"stage\":\"prefill\""), "{json}");
        assert_eq!(
            serde_json::from_str::<TraceProfileSummary>(&json).unwrap(),
            s
        );
    }
}
