//! Sections 5 to 9: the claims and the measurements behind them
//! (behavioural deltas, distribution shift, activations, interventions).

use std::collections::{BTreeMap, BTreeSet};

use super::{Block, Claim, Inline, PromptFilter, Table, code, codes, plain, text, text_or_none};
use crate::document::{
    ActivationFindings, Adjustment, DistributionShift, InterventionRef, KlPositions, Report,
    ReportDelta, Side,
};
use crate::render::words;
use crate::render::{deltas_by_metric, svg};

const NO_CLAIMS: &str = "No claims: no claim mapper proposed one.";
const NO_DELTAS: &str = "No behavioural deltas: no scorer produced a metric on both sides.";
const NO_DISTRIBUTION: &str = "No distribution shift: the traces hold no logprobs on both sides.";
const NO_ACTIVATIONS: &str = "No activation findings: they need raw activations recorded on \
                              both sides and a direction to project them onto.";
const NO_INTERVENTIONS: &str =
    "No intervention results: the traces record no intervention or transformation.";
/// What the access section says without a recorded intervention.
pub(super) const NO_CAUSAL: &str = "No causal statement is allowed: no intervention was recorded.";

/// Positions listed in the KL table; the full series is in report.json
/// (and in the page's plot).
const MAX_POSITIONS: usize = 32;

/// Section 5: every claim after the host's check.
pub(super) fn claims(r: &Report) -> Vec<Block> {
    if r.claims.is_empty() {
        return vec![Block::Note(NO_CLAIMS.into())];
    }
    let claims = r
        .claims
        .iter()
        .map(|c| {
            let proposed =
                || Inline::Below(vec![plain("proposed "), code(c.proposed_strength.as_str())]);
            let strength = match c.strength {
                Some(s) if s == c.proposed_strength => vec![code(s.as_str())],
                Some(s) => vec![code(s.as_str()), proposed()],
                None => vec![plain("none"), proposed()],
            };
            Claim {
                status: words::claim_status(c.status),
                tone: words::claim_status_tone(c.status),
                statement: c.statement.clone(),
                strength,
                evidence: codes(&c.evidence),
                reasons: c.reasons.clone(),
                limitations: c.limitations.clone(),
                mapper: c.mapper.clone(),
            }
        })
        .collect();
    vec![Block::Claims(claims)]
}

/// Section 6: the forest plot, how to read the tables, then one table per
/// metric.
pub(super) fn deltas(r: &Report) -> Vec<Block> {
    if r.metric_deltas.is_empty() {
        return vec![Block::Note(NO_DELTAS.into())];
    }
    let mut blocks = Vec::new();
    if let Some(svg) = svg::forest_plot(&r.metric_deltas) {
        blocks.push(Block::Plot {
            svg,
            caption: "Delta per metric and category with its 95% paired bootstrap interval; \
                      dashed line: no change; hollow marker: no interval."
                .into(),
        });
    }
    let mut legend = vec![
        plain(
            "Delta is candidate − baseline; change is the delta over |baseline| in percent; \
             95% CI is the paired bootstrap interval of the delta; the rate CIs of a 0/1 metric \
             are each side's Wilson 95% interval; p is McNemar's exact test for 0/1 \
             metrics and a sign-flip permutation test otherwise; ",
        ),
        code("*"),
    ];
    legend.extend(adjusted_rule(r));
    blocks.push(Block::Paragraph(legend));
    for (metric, rows) in deltas_by_metric(&r.metric_deltas) {
        let first = rows[0];
        blocks.push(Block::Heading(vec![
            code(metric),
            Inline::Aside(
                vec![
                    text(&first.unit),
                    plain(", "),
                    plain(words::polarity(first.polarity)),
                    plain(", scorer "),
                    code(&first.scorer),
                ]
                .into_iter()
                .chain(judged_by(first))
                .collect(),
            ),
        ]));
        let mut table = delta_table(&rows);
        for (row, d) in table.rows.iter_mut().zip(&rows) {
            // The row's index in the report: the summary's cards link here.
            let index = r
                .metric_deltas
                .iter()
                .position(|x| std::ptr::eq(x, *d))
                .expect("a delta of the report");
            row.anchor = Some(super::overview::delta_anchor(index));
            if !r.prompts.is_empty() {
                row.filter = Some(PromptFilter {
                    metric: d.metric.clone(),
                    category: d.category.clone(),
                });
            }
        }
        blocks.push(Block::Table(table));
        if let Some(p) = corrected(&rows) {
            blocks.push(p);
        }
    }
    blocks
}

/// A judged metric's rates corrected for its judge's errors, row by row,
/// or why they are not.
fn corrected(rows: &[&ReportDelta]) -> Option<Block> {
    let first = rows.iter().find_map(|d| d.corrected.as_ref());
    let why_not = rows.iter().find_map(|d| d.corrected_unavailable.as_ref());
    let Some(c) = first else {
        return why_not.map(|w| Block::Note(format!("Judge-corrected rate: {w}.")));
    };
    let mut out = vec![plain(format!(
        "Corrected for the judge's errors (Rogan–Gladen; sensitivity {}, specificity {}, {}): ",
        words::num(c.sensitivity),
        words::num(c.specificity),
        c.accuracy
    ))];
    let mut parts = Vec::new();
    for d in rows {
        let part = match (&d.corrected, &d.corrected_unavailable) {
            (Some(k), _) => format!(
                "{} {} → {}, delta {} (95% CI {}{})",
                words::category(d.category.as_deref()),
                words::num(k.baseline),
                words::num(k.candidate),
                words::signed(k.delta),
                words::interval(Some(k.ci_low), Some(k.ci_high)),
                if k.calibration_in_interval {
                    ", the calibration's uncertainty included"
                } else {
                    ""
                }
            ),
            (None, Some(w)) => format!("{} {w}", words::category(d.category.as_deref())),
            (None, None) => continue,
        };
        parts.push(part);
    }
    out.push(Inline::Highlight(parts.join("; ")));
    out.push(plain("."));
    Some(Block::Paragraph(out))
}

/// `, judged by referee` for a judged metric: its values are a model's
/// verdicts.
fn judged_by(d: &ReportDelta) -> Vec<Inline> {
    let mut out = Vec::new();
    for (i, j) in d.judged_by.iter().enumerate() {
        out.push(plain(if i == 0 { ", judged by " } else { " and " }));
        out.push(code(j));
    }
    out
}

/// What `*` means: the adjusted p-value, the method and the family.
fn adjusted_rule(r: &Report) -> Vec<Inline> {
    let m = &r.multiple_comparisons;
    match m.method {
        Adjustment::None => vec![plain(format!(
            " marks p < {} with a CI excluding 0 (p-values not adjusted for the {} tests \
             read together: the config's report.multiple_comparisons is none).",
            m.alpha, m.tests
        ))],
        method => vec![
            plain(format!(
                " marks an adjusted p < {} with a CI excluding 0. Adjusted p is p after {} \
                 adjustment (controlling the {}) over the family of ",
                m.alpha,
                method.name(),
                match method {
                    Adjustment::Holm => "family-wise error rate",
                    _ => "false discovery rate",
                },
            )),
            text(&m.family),
            plain("."),
        ],
    }
}

/// One metric's deltas, overall first.
fn delta_table(rows: &[&ReportDelta]) -> Table {
    // Wilson columns only for metrics that have rates (0/1 values).
    let rates = rows
        .iter()
        .any(|d| d.baseline_rate_ci.is_some() || d.candidate_rate_ci.is_some());
    // A row without a rate says so in its own column; under a rate on
    // the page, an absent interval is simply not shown.
    let rate = |ci: Option<[f64; 2]>| match ci {
        Some(_) => plain(words::rate_interval(ci)),
        None => Inline::Missing("n/a"),
    };
    let cells = rows
        .iter()
        .map(|d| {
            let mut row = vec![
                vec![text(words::category(d.category.as_deref()))],
                vec![plain(d.n.to_string())],
                vec![plain(words::num(d.baseline_mean))],
                vec![plain(words::num(d.candidate_mean))],
                {
                    let mut delta = vec![Inline::Highlight(words::signed(d.delta))];
                    if d.significant {
                        delta.push(plain(" *"));
                    }
                    delta
                },
                vec![plain(words::percent(d.percent_change))],
                vec![plain(words::interval(d.ci_low, d.ci_high))],
            ];
            if rates {
                row.push(vec![rate(d.baseline_rate_ci)]);
                row.push(vec![rate(d.candidate_rate_ci)]);
            }
            row.push(vec![code(d.test.as_str())]);
            row.push(vec![plain(words::p_value(d.p_value))]);
            row.push(vec![plain(words::p_value(d.p_adjusted))]);
            row.push(vec![Inline::Badge(
                words::quality_tone(d.quality),
                words::quality(d.quality).into(),
            )]);
            row
        })
        .collect();
    let mut headers = vec![
        "category",
        "n",
        "baseline",
        "candidate",
        "delta",
        "change",
        "95% CI",
    ];
    if rates {
        headers.extend(["baseline rate CI", "candidate rate CI"]);
    }
    headers.extend(["test", "p", "adjusted p", "quality"]);
    let align = if rates {
        "lrrrrrrrrlrrl"
    } else {
        "lrrrrrrlrrl"
    };
    let table = Table::new(&headers, align, cells);
    if rates {
        // Under each side's rate on the page, which keeps the table
        // narrow enough to read without scrolling.
        const WILSON: Option<&str> = Some("Wilson 95% interval");
        table.detail(7, 2, WILSON).detail(8, 3, WILSON)
    } else {
        table
    }
}

/// Why the report has no distribution shift.
fn no_distribution(r: &Report) -> String {
    match &r.distribution_unavailable {
        Some(why) => format!("No distribution shift: {why}."),
        None => NO_DISTRIBUTION.into(),
    }
}

/// The tokens the KL is over, in words.
fn kl_support(d: &DistributionShift) -> String {
    match (d.top_k, d.baseline_rest_mass) {
        (Some(k), Some(rest))
            if d.positions == KlPositions::SharedGenerated || d.support == "top_k_shared" =>
        {
            format!(
                "each side's own {k} most likely tokens at each position: the tokens both \
                 kept, one cell for those only the baseline kept (whose candidate \
                 probability is bounded by the candidate's k-th), and one for the rest \
                 ({:.2}% of the baseline's probability outside the shared tokens on average; \
                 the KL is a lower bound)",
                rest * 100.0
            )
        }
        (Some(k), Some(rest)) => format!(
            "the baseline's {k} most likely tokens at each position plus one bucket for the rest \
             ({:.2}% of the baseline's probability on average; the KL is a lower bound)",
            rest * 100.0
        ),
        _ => format!("the {} support", d.support),
    }
}

/// Section 7: the KL figures, by category, by position (plotted, and
/// tabled up to [`MAX_POSITIONS`]) and by prompt.
pub(super) fn distribution(r: &Report) -> Vec<Block> {
    let Some(d) = r.distribution.as_ref() else {
        return vec![Block::Note(no_distribution(r))];
    };
    let mut blocks = vec![
        Block::Paragraph(vec![
            plain(match d.positions {
                KlPositions::TeacherForced => {
                    "KL(baseline ‖ candidate) between next-token distributions along the \
                     baseline's continuation, each side after its own prompt, in nats, over "
                }
                KlPositions::SharedGenerated => {
                    "KL(baseline ‖ candidate) between next-token distributions at the generated \
                     positions both sides share (up to and including the first token where \
                     their completions differ; a side served by an endpoint cannot score the \
                     other's continuation, so no position after it is compared), in nats, over "
                }
            }),
            // Holds the support's name, which comes from the traces.
            text(&kl_support(d)),
            plain("."),
        ]),
        Block::Cards(vec![
            super::Card {
                value: words::num(d.first_token_kl_mean),
                label: vec![plain("first-token KL, mean over prompts")],
                detail: vec![],
                link: None,
                tone: None,
            },
            super::Card {
                value: words::num(d.mean_kl),
                label: vec![plain(match d.positions {
                    KlPositions::TeacherForced => "mean KL over the teacher-forced continuation",
                    KlPositions::SharedGenerated => "mean KL over the shared generated positions",
                })],
                detail: vec![],
                link: None,
                tone: None,
            },
        ]),
    ];
    blocks.push(if d.by_category.is_empty() {
        Block::Note("No category has a KL figure.".into())
    } else {
        let rows = d
            .by_category
            .iter()
            .map(|(c, v)| vec![vec![text(c)], vec![plain(words::num(*v))]])
            .collect();
        Block::Table(Table::new(&["category", "first-token KL"], "lr", rows))
    });
    match svg::kl_by_position_plot(&d.by_position) {
        Some(svg) => {
            blocks.push(Block::Plot {
                svg,
                caption: format!(
                    "Mean KL by generated position ({} positions).",
                    d.by_position.len()
                ),
            });
            let rows = d
                .by_position
                .iter()
                .take(MAX_POSITIONS)
                .enumerate()
                .map(|(i, v)| vec![vec![plain(i.to_string())], vec![plain(words::num(*v))]])
                .collect();
            let mut folded = vec![Block::Table(Table::new(
                &["position", "mean KL"],
                "rr",
                rows,
            ))];
            if d.by_position.len() > MAX_POSITIONS {
                folded.push(Block::Note(format!(
                    "{} more positions in report.json.",
                    d.by_position.len() - MAX_POSITIONS
                )));
            }
            blocks.push(Block::Details {
                summary: vec![plain("Mean KL by generated position (table)")],
                blocks: folded,
            });
        }
        None => blocks.push(Block::Note("No per-position KL was recorded.".into())),
    }
    blocks.push(if d.per_prompt.is_empty() {
        Block::Note("No per-prompt KL was recorded.".into())
    } else {
        let rows = d
            .per_prompt
            .iter()
            .map(|p| {
                vec![
                    vec![code(&p.prompt_id)],
                    vec![text_or_none(p.category.as_deref())],
                    vec![plain(words::num(p.first_token_kl))],
                    vec![plain(words::num(p.mean_kl))],
                    vec![plain(p.positions.to_string())],
                ]
            })
            .collect();
        Block::Details {
            summary: vec![plain(format!(
                "Per prompt ({} prompts)",
                d.per_prompt.len()
            ))],
            blocks: vec![Block::Table(Table::new(
                &[
                    "prompt",
                    "category",
                    "first-token KL",
                    "mean KL",
                    "positions",
                ],
                "llrrr",
                rows,
            ))],
        }
    });
    blocks
}

/// Section 8: the direction, the findings, and the per-layer projections
/// (plotted, and tabled); then a mixture of experts' routing, where it was
/// recorded.
pub(super) fn activations(r: &Report) -> Vec<Block> {
    let mut blocks = projections(r);
    blocks.extend(routing(r));
    blocks
}

/// How a mixture of experts' routing moved: the findings and a table per layer.
fn routing(r: &Report) -> Vec<Block> {
    let Some(g) = r.routing.as_ref() else {
        return Vec::new();
    };
    let mut blocks = vec![Block::Paragraph(vec![plain(format!(
        "Routing of the mixture of experts ({} experts per token), candidate against baseline, over {} prompt tokens of {} prompts whose tokens both sides share.",
        g.experts_per_token, g.tokens, g.prompts
    ))])];
    if !g.findings.is_empty() {
        blocks.push(Block::List(g.findings.clone()));
    }
    let headers = vec![
        vec![plain("layer")],
        vec![plain("tokens whose experts changed")],
        vec![plain("mean total variation")],
    ];
    let rows = g
        .layers
        .iter()
        .enumerate()
        .map(|(i, layer)| {
            vec![
                vec![plain(layer.to_string())],
                vec![plain(format!("{:.1}%", g.changed_choices[i] * 100.0))],
                vec![plain(format!("{:.3}", g.mean_total_variation[i]))],
            ]
        })
        .collect();
    blocks.push(Block::Table(Table::with_headers(headers, "rrr", rows)));
    blocks
}

/// The direction, the findings, and the per-layer projections.
fn projections(r: &Report) -> Vec<Block> {
    let Some(a): Option<&ActivationFindings> = r.activation_findings.as_ref() else {
        return vec![Block::Note(NO_ACTIVATIONS.into())];
    };
    let mut blocks = vec![Block::Paragraph(vec![
        plain("Mean projection of the last prompt token's residual onto the direction "),
        code(&a.direction),
        plain(" (sha256 "),
        Inline::Hash(a.direction_sha256.clone()),
        plain("), per layer, per side and category."),
    ])];
    blocks.push(if a.findings.is_empty() {
        Block::Note("No finding was derived.".into())
    } else {
        Block::List(a.findings.clone())
    });
    let Some(svg) = svg::projection_plot(a) else {
        blocks.push(Block::Note("No projection series was recorded.".into()));
        return blocks;
    };
    blocks.push(Block::Plot {
        svg,
        caption: "Solid lines: baseline; dashed: candidate; one colour per category. Series \
                  with the same value at every layer alternate their dashes and are named \
                  under the plot."
            .into(),
    });
    let headers: Vec<Vec<Inline>> = std::iter::once(vec![plain("layer")])
        .chain(a.series.iter().map(|s| {
            vec![
                plain(s.side.as_str()),
                plain(" · "),
                text(&s.category),
                plain(format!(" (n={})", s.prompts)),
            ]
        }))
        .collect();
    let rows = a
        .layers
        .iter()
        .enumerate()
        .map(|(i, layer)| {
            std::iter::once(vec![plain(layer.to_string())])
                .chain(
                    a.series
                        .iter()
                        .map(|s| vec![plain(words::num_or_na(s.mean_projection.get(i).copied()))]),
                )
                .collect()
        })
        .collect();
    let align = "r".repeat(headers.len());
    blocks.push(Block::Details {
        summary: vec![plain("Mean projection per layer (table)")],
        blocks: vec![Block::Table(Table::with_headers(headers, &align, rows))],
    });
    blocks
}

/// Section 9: the interventions and transformations, then each record a
/// causal statement may rest on.
pub(super) fn interventions(r: &Report) -> Vec<Block> {
    let mut blocks = Vec::new();
    if r.interventions.is_empty() {
        blocks.push(Block::Note(NO_INTERVENTIONS.into()));
    } else {
        let rows = r
            .interventions
            .iter()
            .map(|i| {
                let layers: Vec<Option<usize>> = i.layers.iter().copied().map(Some).collect();
                let layers = if layers.is_empty() {
                    "n/a".into()
                } else {
                    layer_ranges(&layers)
                };
                vec![
                    vec![plain(i.side.as_str())],
                    vec![text(&i.description)],
                    vec![plain(i.traces.to_string())],
                    vec![plain(layers)],
                    vec![labels(&i.labels)],
                ]
            })
            .collect();
        blocks.push(Block::Table(Table::new(
            &["side", "intervention", "traces", "layers", "labels"],
            "llrll",
            rows,
        )));
    }
    let refs = &r.access.interventions;
    if !refs.is_empty() {
        blocks.push(Block::Subheading("Intervention records"));
        blocks.push(Block::Paragraph(vec![
            Inline::Highlight(refs.len().to_string()),
            plain(
                " recorded intervention(s), the scope of any causal statement, by side, mode \
                 and layer (the labels column holds the labels every record of the row shares):",
            ),
        ]));
        blocks.push(Block::Table(Table::new(
            &["side", "mode", "layers", "records", "traces", "labels"],
            "lllrrl",
            record_groups(refs),
        )));
        if refs.len() <= MAX_RECORDS_LISTED {
            let rows = refs
                .iter()
                .map(|i| {
                    vec![
                        vec![code(i.side.as_str())],
                        vec![code(&i.trace)],
                        vec![code(&i.artifact)],
                        vec![plain(
                            i.layer.map_or_else(|| "n/a".into(), |l| l.to_string()),
                        )],
                        vec![labels(&i.labels)],
                    ]
                })
                .collect();
            blocks.push(Block::Details {
                summary: vec![plain(format!("Each record ({})", refs.len()))],
                blocks: vec![Block::Table(Table::new(
                    &["side", "trace", "artifact", "layer", "labels"],
                    "lllrl",
                    rows,
                ))],
            });
        } else {
            blocks.push(Block::Note(format!(
                "The {} individual records (side, trace, artifact, layer, labels) are in \
                 report.json, under access.interventions.",
                refs.len()
            )));
        }
    }
    blocks
}

/// Intervention records listed one by one up to this many; beyond, the
/// summary by side, mode and layer stands for them (all are in
/// report.json).
const MAX_RECORDS_LISTED: usize = 20;

/// Layers of one side and mode with the same counts: one row of the
/// records' summary.
struct Run<'a> {
    /// Records per layer, and traces per layer.
    key: (usize, usize),
    /// The layers, ascending.
    layers: Vec<Option<usize>>,
    /// The traces holding a record at any of them.
    traces: BTreeSet<&'a str>,
}

/// The intervention records summarised: one row per side and mode and
/// per set of layers with the same number of records and traces, with the
/// labels every record of the row shares.
fn record_groups(refs: &[InterventionRef]) -> Vec<Vec<Vec<Inline>>> {
    type PerLayer<'a> = BTreeMap<Option<usize>, (usize, BTreeSet<&'a str>)>;
    let mut groups: BTreeMap<(Side, String), (PerLayer<'_>, BTreeMap<String, String>)> =
        BTreeMap::new();
    for i in refs {
        let mut shared = i.labels.clone();
        shared.remove("mode");
        let (layers, common) = groups
            .entry((i.side, i.mode()))
            .or_insert_with(|| (BTreeMap::new(), shared.clone()));
        common.retain(|k, v| shared.get(k) == Some(v));
        let (records, traces) = layers.entry(i.layer).or_default();
        *records += 1;
        traces.insert(&i.trace);
    }
    let mut rows = Vec::new();
    for ((side, mode), (layers, common)) in &groups {
        // Layers with the same counts share a row, in layer order.
        let mut runs: Vec<Run<'_>> = Vec::new();
        for (layer, (records, traces)) in layers {
            let key = (*records, traces.len());
            match runs.iter_mut().find(|r| r.key == key) {
                Some(r) => {
                    r.layers.push(*layer);
                    r.traces.extend(traces.iter().copied());
                }
                None => runs.push(Run {
                    key,
                    layers: vec![*layer],
                    traces: traces.clone(),
                }),
            }
        }
        for r in runs {
            rows.push(vec![
                vec![plain(side.as_str())],
                vec![code(mode)],
                vec![plain(layer_ranges(&r.layers))],
                vec![plain((r.key.0 * r.layers.len()).to_string())],
                vec![plain(r.traces.len().to_string())],
                vec![labels(common)],
            ]);
        }
    }
    rows
}

/// Layers as ranges of consecutive numbers (`0–29`, `3, 6, 9`); `n/a` for
/// records without a layer.
pub(super) fn layer_ranges(layers: &[Option<usize>]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut known: Vec<usize> = layers.iter().flatten().copied().collect();
    known.sort_unstable();
    let mut i = 0;
    while i < known.len() {
        let mut j = i;
        while j + 1 < known.len() && known[j + 1] == known[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => known[i].to_string(),
            1 => format!("{}, {}", known[i], known[j]),
            _ => format!("{}–{}", known[i], known[j]),
        });
        i = j + 1;
    }
    if layers.iter().any(Option::is_none) {
        parts.push("n/a".into());
    }
    parts.join(", ")
}

/// An intervention's labels as `key=value` identifiers.
fn labels(labels: &BTreeMap<String, String>) -> Inline {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    codes(&pairs)
}
