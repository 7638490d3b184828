//! Traces grouped by one controlled axis into comparable points, and, on a
//! concurrency axis, the Universal Scalability Law fitted to them
//! ([`fit_usl`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{TraceProfileSummary, summarize_trace};
use crate::trace::{ArtifactKind, Trace};

/// The quantity a sweep varies; each trace's value is read from its
/// [`TraceProfileSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepAxis {
    /// Tokens pushed through the model ([`TraceProfileSummary::token_count`]).
    TokenCount,
    /// The largest batch size ([`TraceProfileSummary::batch_size`]).
    BatchSize,
    /// The deepest queue seen ([`TraceProfileSummary::max_queue_depth`]).
    QueueDepth,
}

impl SweepAxis {
    /// Every axis, in the order error messages list them.
    pub const ALL: [SweepAxis; 3] = [
        SweepAxis::TokenCount,
        SweepAxis::BatchSize,
        SweepAxis::QueueDepth,
    ];

    /// The name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SweepAxis::TokenCount => "token_count",
            SweepAxis::BatchSize => "batch_size",
            SweepAxis::QueueDepth => "queue_depth",
        }
    }

    /// This axis's value for a trace with summary `summary`.
    pub fn value_of(self, summary: &TraceProfileSummary) -> u64 {
        match self {
            SweepAxis::TokenCount => summary.token_count,
            SweepAxis::BatchSize => u64::from(summary.batch_size),
            SweepAxis::QueueDepth => u64::from(summary.max_queue_depth),
        }
    }
}

impl fmt::Display for SweepAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sweep axis name that is not one of [`SweepAxis::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sweep axis `{given}`; expected one of: {}", valid_axes())]
pub struct UnknownSweepAxis {
    /// The name given.
    pub given: String,
}

fn valid_axes() -> String {
    SweepAxis::ALL.map(SweepAxis::as_str).join(", ")
}

impl FromStr for SweepAxis {
    type Err = UnknownSweepAxis;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SweepAxis::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownSweepAxis {
                given: s.to_owned(),
            })
    }
}

/// How strict [`summarize_sweep`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepOptions {
    /// Accept traces whose artifact coverage differs (the points then mix
    /// different work); the sweep's coverage becomes the intersection.
    pub allow_unstable_coverage: bool,
}

/// The traces that share one axis value, and their duration statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepPoint {
    /// The axis value every trace of the point has.
    pub axis_value: u64,
    /// The traces' ids, in input order.
    pub traces: Vec<String>,
    /// How many traces the point has.
    pub samples: usize,
    /// Mean of the traces' total durations.
    pub mean_duration_ns: f64,
    /// Shortest total duration.
    pub min_duration_ns: u64,
    /// Longest total duration.
    pub max_duration_ns: u64,
    /// Population standard deviation of the total durations (the traces are
    /// the whole point, not a sample of it); 0 for one trace.
    pub std_duration_ns: f64,
    /// Mean of `tokens_per_s` over the traces that have one; `None` if none does.
    pub mean_tokens_per_s: Option<f64>,
}

/// Traces grouped by one axis into points, ascending by axis value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The axis the points vary.
    pub axis: SweepAxis,
    /// One point per distinct axis value, ascending.
    pub points: Vec<SweepPoint>,
    /// The artifact kinds every trace holds, in report order: the first
    /// trace's kinds when coverage is stable, the intersection otherwise.
    pub coverage: Vec<ArtifactKind>,
    /// Whether every trace holds exactly the same artifact kinds.
    pub coverage_stable: bool,
    /// Set when the sweep cannot show what it is for (one axis value only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The USL fitted to the points' throughput, when asked for
    /// (`vauban trace sweep --fit usl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usl: Option<crate::report::usl::UslFit>,
}

/// Why a sweep cannot be fitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// The axis is not a concurrency.
    #[error(
        "a USL fit models throughput against concurrency: sweep `--axis batch_size` (or `queue_depth`), not `{0}`"
    )]
    NotConcurrency(SweepAxis),
    /// The points mix different work.
    #[error(
        "the sweep's artifact coverage is unstable, so its points measure different work; a fit of them would mean nothing: record the same artifacts in every trace"
    )]
    UnstableCoverage,
    /// A point has no throughput.
    #[error(
        "no trace at {axis} = {value} recorded a throughput (tokens through the model over a non-zero time)"
    )]
    NoThroughput { axis: SweepAxis, value: u64 },
    #[error(transparent)]
    Fit(#[from] crate::report::usl::UslError),
}

/// Fits the Universal Scalability Law to `sweep`'s throughput against its
/// concurrency (batch size or queue depth), each point's mean tokens per
/// second (which counts a batch's every sequence); the intervals come
/// from a residual bootstrap seeded with `seed`. Refused, saying why, on
/// another axis, with unstable coverage, or with points the fit cannot use
/// (fewer than four, a zero throughput).
pub fn fit_usl(sweep: &Sweep, seed: u64) -> Result<crate::report::usl::UslFit, FitError> {
    if !matches!(sweep.axis, SweepAxis::BatchSize | SweepAxis::QueueDepth) {
        return Err(FitError::NotConcurrency(sweep.axis));
    }
    if !sweep.coverage_stable {
        return Err(FitError::UnstableCoverage);
    }
    let points = sweep
        .points
        .iter()
        .map(|p| match p.mean_tokens_per_s {
            Some(x) => Ok((p.axis_value as f64, x)),
            None => Err(FitError::NoThroughput {
                axis: sweep.axis,
                value: p.axis_value,
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(crate::report::usl::fit(&points, seed)?)
}

/// Why traces cannot form a sweep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    /// No traces were given.
    #[error("a sweep needs at least one trace")]
    Empty,
    /// Two traces hold different artifact kinds, so they did different work.
    #[error(
        "trace `{other}` does not hold the same artifact kinds as trace `{first}` \
         (only in `{first}`: {}; only in `{other}`: {}), so their timings measure different work; \
         record the same artifacts for every trace in the sweep, or pass \
         `--allow-unstable-coverage` (`SweepOptions::allow_unstable_coverage`) \
         knowing the points then mix different work",
        crate::text::list(.only_in_first),
        crate::text::list(.only_in_other)
    )]
    UnstableCoverage {
        /// The first trace's id (the reference coverage).
        first: String,
        /// The id of the first trace whose coverage differs.
        other: String,
        /// Kinds the first trace holds and the other does not.
        only_in_first: Vec<ArtifactKind>,
        /// Kinds the other trace holds and the first does not.
        only_in_other: Vec<ArtifactKind>,
    },
    /// Two traces observed the same kinds at different layers, so they did different work.
    #[error(
        "trace `{other}` observed layers {other_layers:?} but trace `{first}` observed layers \
         {first_layers:?}, so their timings measure different work; observe the same layers in \
         every trace of the sweep, or pass `--allow-unstable-coverage` knowing the points then \
         mix different work"
    )]
    UnstableLayers {
        /// The first trace's id (the reference).
        first: String,
        /// The id of the first trace whose layers differ.
        other: String,
        /// `(kind, layer)` pairs the first trace holds, as `kind@layer`.
        first_layers: Vec<String>,
        /// `(kind, layer)` pairs the other trace holds, as `kind@layer`.
        other_layers: Vec<String>,
    },
}

/// The per-layer artifacts a trace holds, as `kind@layer`, sorted.
fn observed_layers(trace: &Trace) -> Vec<String> {
    let pairs: BTreeSet<(ArtifactKind, usize)> = trace
        .artifacts
        .iter()
        .filter_map(|a| a.layer.map(|l| (a.kind, l)))
        .collect();
    pairs.into_iter().map(|(k, l)| format!("{k}@{l}")).collect()
}

/// Groups `traces` by their value on `axis` into points, ascending.
///
/// Every trace must hold the same artifact kinds as the first
/// ([`Trace::coverage`]): a trace that also recorded activations did more
/// work, and averaging it with one that did not would blur the axis's
/// effect; likewise a trace that observed other layers
/// ([`SweepError::UnstableLayers`]). A difference is refused with [`SweepError::UnstableCoverage`]
/// unless `options.allow_unstable_coverage`. A single axis value is accepted
/// but sets [`Sweep::warning`].
pub fn summarize_sweep(
    traces: &[Trace],
    axis: SweepAxis,
    options: SweepOptions,
) -> Result<Sweep, SweepError> {
    let first = traces.first().ok_or(SweepError::Empty)?;
    let reference = first.coverage();
    let mut common = reference.clone();
    let mut stable = true;
    let reference_layers = observed_layers(first);
    for t in &traces[1..] {
        let coverage = t.coverage();
        if coverage == reference {
            let layers = observed_layers(t);
            if layers != reference_layers {
                if !options.allow_unstable_coverage {
                    return Err(SweepError::UnstableLayers {
                        first: first.id.clone(),
                        other: t.id.clone(),
                        first_layers: reference_layers,
                        other_layers: layers,
                    });
                }
                stable = false;
            }
            continue;
        }
        if !options.allow_unstable_coverage {
            return Err(SweepError::UnstableCoverage {
                first: first.id.clone(),
                other: t.id.clone(),
                only_in_first: reference.difference(&coverage).copied().collect(),
                only_in_other: coverage.difference(&reference).copied().collect(),
            });
        }
        stable = false;
        common = common
            .intersection(&coverage)
            .copied()
            .collect::<BTreeSet<_>>();
    }

    let mut groups: BTreeMap<u64, Vec<TraceProfileSummary>> = BTreeMap::new();
    for t in traces {
        let s = summarize_trace(t);
        groups.entry(axis.value_of(&s)).or_default().push(s);
    }
    let points: Vec<SweepPoint> = groups
        .into_iter()
        .map(|(value, summaries)| point(value, &summaries))
        .collect();
    let warning = match points.as_slice() {
        [only] => Some(format!(
            "every trace has {axis} {}: one axis value cannot show how cost scales; \
             record traces at two or more {axis} values",
            only.axis_value
        )),
        _ => None,
    };
    Ok(Sweep {
        axis,
        points,
        coverage: common.into_iter().collect(),
        coverage_stable: stable,
        warning,
        usl: None,
    })
}

/// One point's statistics; `summaries` is not empty.
fn point(axis_value: u64, summaries: &[TraceProfileSummary]) -> SweepPoint {
    let n = summaries.len();
    let durations: Vec<u64> = summaries.iter().map(|s| s.total_duration_ns).collect();
    let mean = durations.iter().map(|&d| d as f64).sum::<f64>() / n as f64;
    let variance = durations
        .iter()
        .map(|&d| (d as f64 - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    let rates: Vec<f64> = summaries.iter().filter_map(|s| s.tokens_per_s).collect();
    SweepPoint {
        axis_value,
        traces: summaries.iter().map(|s| s.trace.clone()).collect(),
        samples: n,
        mean_duration_ns: mean,
        min_duration_ns: durations.iter().copied().min().unwrap_or(0),
        max_duration_ns: durations.iter().copied().max().unwrap_or(0),
        std_duration_ns: if n > 1 { variance.sqrt() } else { 0.0 },
        mean_tokens_per_s: (!rates.is_empty())
            .then(|| rates.iter().sum::<f64>() / rates.len() as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Step, assert_close, trace};
    use super::*;
    use crate::trace::{Stage, StageProfile};

    use ArtifactKind as K;

    const MS: u64 = 1_000_000;

    /// tokenize (`tokens`, 1 ms) then prefill (`tokens`, `prefill_ms`) at
    /// batch 1: `tokens` through the model in `1 + prefill_ms` ms.
    fn run(id: &str, tokens: u64, prefill_ms: u64, observe: &[ArtifactKind]) -> Trace {
        let p = |tokens: u64, ms: u64| StageProfile {
            duration_ns: ms * MS,
            batch_size: 1,
            token_count: tokens,
            ..Default::default()
        };
        trace(
            id,
            observe,
            vec![
                Step(Stage::Tokenize, p(tokens, 1)),
                Step(Stage::Prefill, p(tokens, prefill_ms)),
            ],
        )
    }

    const TEXT_TOKENS: &[ArtifactKind] = &[K::Text, K::Tokens];

    #[test]
    fn a_token_count_sweep_groups_traces_into_ascending_points() {
        // b: 8 tokens in 1 + 20 = 21 ms; c: 16 tokens in 1 + 29 = 30 ms;
        // a: 8 tokens in 1 + 16 = 17 ms.
        let traces = [
            run("b", 8, 20, TEXT_TOKENS),
            run("c", 16, 29, TEXT_TOKENS),
            run("a", 8, 16, TEXT_TOKENS),
        ];
        let sweep =
            summarize_sweep(&traces, SweepAxis::TokenCount, SweepOptions::default()).unwrap();
        assert_eq!(sweep.axis, SweepAxis::TokenCount);
        assert!(sweep.coverage_stable);
        assert_eq!(sweep.coverage, vec![K::Text, K::Tokens]);
        assert_eq!(sweep.warning, None);
        assert_eq!(sweep.points.len(), 2);

        let p8 = &sweep.points[0];
        assert_eq!(p8.axis_value, 8);
        assert_eq!(p8.traces, vec!["b", "a"]);
        assert_eq!(p8.samples, 2);
        // (21 + 17) / 2 = 19 ms
        assert_eq!(p8.mean_duration_ns, 19_000_000.0);
        assert_eq!(p8.min_duration_ns, 17_000_000);
        assert_eq!(p8.max_duration_ns, 21_000_000);
        // deviations ±2 ms: sqrt((2² + 2²) / 2) = 2 ms
        assert_eq!(p8.std_duration_ns, 2_000_000.0);
        // (8 / 0.021 + 8 / 0.017) / 2 = (380.952... + 470.588...) / 2 = 425.770...
        assert_close(p8.mean_tokens_per_s.unwrap(), 425.77030812324927);

        let p16 = &sweep.points[1];
        assert_eq!(p16.axis_value, 16);
        assert_eq!(p16.traces, vec!["c"]);
        assert_eq!(p16.samples, 1);
        assert_eq!(p16.mean_duration_ns, 30_000_000.0);
        assert_eq!(p16.min_duration_ns, 30_000_000);
        assert_eq!(p16.max_duration_ns, 30_000_000);
        assert_eq!(p16.std_duration_ns, 0.0);
        // 16 / 0.030 = 533.33... tok/s
        assert_close(p16.mean_tokens_per_s.unwrap(), 533.3333333333334);
    }

    #[test]
    fn the_duration_std_is_the_population_std() {
        // 10, 20, 30 ms (prefill 9, 19, 29 + 1 ms tokenize): mean 20 ms,
        // sqrt((10² + 0² + 10²) / 3) = sqrt(66.66...) = 8.16496580927726 ms
        // (the sample std would be 10 ms).
        let traces = [
            run("a", 4, 9, TEXT_TOKENS),
            run("b", 4, 19, TEXT_TOKENS),
            run("c", 4, 29, TEXT_TOKENS),
        ];
        let sweep =
            summarize_sweep(&traces, SweepAxis::TokenCount, SweepOptions::default()).unwrap();
        assert_eq!(sweep.points[0].mean_duration_ns, 20_000_000.0);
        assert_close(sweep.points[0].std_duration_ns, 8_164_965.80927726);
    }

    #[test]
    fn batch_size_and_queue_depth_axes_read_the_summary() {
        let with = |id: &str, batch: u32, queue: [u32; 2]| {
            let p = |queue: u32| StageProfile {
                duration_ns: MS,
                batch_size: batch,
                token_count: 2,
                queue_depth: queue,
                ..Default::default()
            };
            trace(
                id,
                TEXT_TOKENS,
                vec![
                    Step(Stage::Prefill, p(queue[0])),
                    Step(Stage::Decode, p(queue[1])),
                ],
            )
        };
        // batch 4, queues 3 then 1: max queue depth 3; batch 2, queues 0 then 5: 5
        let traces = [with("a", 4, [3, 1]), with("b", 2, [0, 5])];
        let values = |axis| {
            summarize_sweep(&traces, axis, SweepOptions::default())
                .unwrap()
                .points
                .iter()
                .map(|p| (p.axis_value, p.traces.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            values(SweepAxis::BatchSize),
            vec![(2, vec!["b".to_owned()]), (4, vec!["a".to_owned()])]
        );
        assert_eq!(
            values(SweepAxis::QueueDepth),
            vec![(3, vec!["a".to_owned()]), (5, vec!["b".to_owned()])]
        );
    }

    #[test]
    fn a_sweep_with_unstable_coverage_is_refused_by_default() {
        let traces = [
            run("with-act", 8, 16, &[K::Text, K::Tokens, K::Activation]),
            run("plain", 16, 29, TEXT_TOKENS),
        ];
        let err =
            summarize_sweep(&traces, SweepAxis::TokenCount, SweepOptions::default()).unwrap_err();
        assert_eq!(
            err,
            SweepError::UnstableCoverage {
                first: "with-act".into(),
                other: "plain".into(),
                only_in_first: vec![K::Activation],
                only_in_other: vec![],
            }
        );
        let text = err.to_string();
        for needle in [
            "`with-act`",
            "`plain`",
            "only in `with-act`: activation",
            "only in `plain`: none",
            "record the same artifacts for every trace",
            "--allow-unstable-coverage",
            "mix different work",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
    }

    #[test]
    fn unstable_coverage_is_accepted_when_allowed_and_reduced_to_the_intersection() {
        let traces = [
            run("with-act", 8, 16, &[K::Text, K::Tokens, K::Activation]),
            run("plain", 16, 29, TEXT_TOKENS),
            run("text-only", 16, 29, &[K::Text]),
        ];
        let options = SweepOptions {
            allow_unstable_coverage: true,
        };
        let sweep = summarize_sweep(&traces, SweepAxis::TokenCount, options).unwrap();
        assert!(!sweep.coverage_stable);
        // {text, tokens, activation} ∩ {text, tokens} ∩ {text}
        assert_eq!(sweep.coverage, vec![K::Text]);
        assert_eq!(sweep.points.len(), 2);
        assert_eq!(sweep.points[1].traces, vec!["plain", "text-only"]);
    }

    #[test]
    fn traces_observing_different_layers_are_refused_unless_allowed() {
        let at_layer = |id: &str, layer: usize| {
            let mut t = run(id, 8, 10, &[K::Text, K::Activation]);
            t.request.layers = vec![layer];
            for a in &mut t.artifacts {
                if a.kind == K::Activation {
                    a.layer = Some(layer);
                }
            }
            t.validate().expect("still a valid trace");
            t
        };
        let traces = [at_layer("l0", 0), at_layer("l5", 5)];
        let err = summarize_sweep(&traces, SweepAxis::TokenCount, SweepOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("trace `l5` observed layers [\"activation@5\"]"),
            "{err}"
        );
        assert!(
            err.contains("trace `l0` observed layers [\"activation@0\"]"),
            "{err}"
        );
        let allowed = SweepOptions {
            allow_unstable_coverage: true,
        };
        let sweep = summarize_sweep(&traces, SweepAxis::TokenCount, allowed).unwrap();
        assert!(!sweep.coverage_stable);
    }

    #[test]
    fn an_empty_sweep_is_refused() {
        let err = summarize_sweep(&[], SweepAxis::BatchSize, SweepOptions::default()).unwrap_err();
        assert_eq!(err, SweepError::Empty);
        assert_eq!(err.to_string(), "a sweep needs at least one trace");
    }

    #[test]
    fn a_single_axis_value_is_accepted_with_a_warning() {
        let traces = [run("a", 8, 16, TEXT_TOKENS), run("b", 8, 20, TEXT_TOKENS)];
        let sweep =
            summarize_sweep(&traces, SweepAxis::TokenCount, SweepOptions::default()).unwrap();
        assert_eq!(sweep.points.len(), 1);
        let warning = sweep.warning.expect("a single point warns");
        assert!(warning.contains("token_count 8"), "{warning}");
        assert!(warning.contains("cannot show how cost scales"), "{warning}");
    }

    #[test]
    fn axis_names_round_trip_and_an_unknown_name_lists_the_valid_ones() {
        for axis in SweepAxis::ALL {
            assert_eq!(axis.to_string().parse::<SweepAxis>().unwrap(), axis);
            let json = serde_json::to_string(&axis).unwrap();
            assert_eq!(json, format!("\"{axis}\""));
            assert_eq!(serde_json::from_str::<SweepAxis>(&json).unwrap(), axis);
        }
        let err = "tokens".parse::<SweepAxis>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown sweep axis `tokens`; expected one of: token_count, batch_size, queue_depth"
        );
    }

    #[test]
    fn a_sweep_round_trips_through_json() {
        let traces = [run("a", 8, 16, TEXT_TOKENS), run("b", 16, 20, TEXT_TOKENS)];
        let sweep =
            summarize_sweep(&traces, SweepAxis::TokenCount, SweepOptions::default()).unwrap();
        let json = serde_json::to_string(&sweep).unwrap();
        assert!(json.contains("\"axis\":\"token_count\""), "{json}");
        assert!(!json.contains("warning"), "{json}");
        assert_eq!(serde_json::from_str::<Sweep>(&json).unwrap(), sweep);
    }
}
