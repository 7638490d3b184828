//! Sections 1 to 4: what the report found at a glance, what was compared,
//! what the evidence allows it to claim, and what the evidence is.

use super::{Block, Card, Inline, Table, code, codes, plain, text, text_or_none};
use crate::document::{PluginRecord, Report, ReportDelta};
use crate::render::words::{self, Tone};

/// The most changes the summary shows as cards; the rest are in the
/// deltas' tables.
const MAX_CHANGE_CARDS: usize = 6;

/// A count and its word, as a badge of `tone` when it is not zero (it
/// calls for attention then), as plain words otherwise.
fn tally(n: usize, word: &str, tone: Option<Tone>) -> Inline {
    match tone {
        Some(tone) if n > 0 => Inline::Badge(tone, format!("{n} {word}")),
        _ => plain(format!("{n} {word}")),
    }
}

/// How large a change is, comparable across metrics of any unit: the
/// delta over the larger of the two means (0 to 2; 0 when both are 0).
fn relative_size(d: &ReportDelta) -> f64 {
    let scale = d.baseline_mean.abs().max(d.candidate_mean.abs());
    if scale > 0.0 && d.delta.is_finite() {
        d.delta.abs() / scale
    } else {
        0.0
    }
}

/// The significant deltas, largest relative change first (then the
/// smaller adjusted p), each with its index in `metric_deltas` (the
/// anchor of its row in the deltas' tables).
pub(super) fn largest_changes(r: &Report) -> Vec<(usize, &ReportDelta)> {
    let mut changes: Vec<(usize, &ReportDelta)> = r
        .metric_deltas
        .iter()
        .enumerate()
        .filter(|(_, d)| d.significant)
        .collect();
    changes.sort_by(|(_, a), (_, b)| {
        relative_size(b).total_cmp(&relative_size(a)).then(
            a.p_adjusted
                .unwrap_or(1.0)
                .total_cmp(&b.p_adjusted.unwrap_or(1.0)),
        )
    });
    changes
}

/// The anchor of a delta's row (its index in `metric_deltas`).
pub(super) fn delta_anchor(index: usize) -> String {
    format!("delta-{index}")
}

/// Section 1: the headline, its lines, the largest significant changes
/// (as cards), then the counts a reader checks (claims, gates, plugins).
pub(super) fn summary(r: &Report) -> Vec<Block> {
    let s = &r.summary;
    let mut blocks = vec![Block::Lead(s.headline.clone())];
    if !s.lines.is_empty() {
        blocks.push(Block::List(s.lines.clone()));
    }
    blocks.push(Block::Subheading("Largest significant changes"));
    let changes = largest_changes(r);
    if changes.is_empty() {
        blocks.push(Block::Note(if r.metric_deltas.is_empty() {
            "No significant change: no metric was compared on both sides.".into()
        } else {
            format!(
                "No significant change: none of the {} deltas has an adjusted p below {} with \
                 a 95% interval excluding 0 (every delta is in Behavioural deltas).",
                r.metric_deltas.len(),
                r.multiple_comparisons.alpha
            )
        }));
    } else {
        let cards = changes
            .iter()
            .take(MAX_CHANGE_CARDS)
            .map(|&(i, d)| Card {
                value: words::signed(d.delta),
                label: vec![
                    code(&d.metric),
                    plain(" · "),
                    text(words::category(d.category.as_deref())),
                ],
                detail: vec![
                    plain(format!(
                        "{} → {} · adjusted p {} · ",
                        words::num(d.baseline_mean),
                        words::num(d.candidate_mean),
                        words::p_value(d.p_adjusted)
                    )),
                    Inline::Badge(
                        words::quality_tone(d.quality),
                        words::quality(d.quality).into(),
                    ),
                ],
                link: Some(delta_anchor(i)),
                tone: Some(words::quality_tone(d.quality)),
            })
            .collect();
        blocks.push(Block::Cards(cards));
        if changes.len() > MAX_CHANGE_CARDS {
            blocks.push(Block::Note(format!(
                "{} more significant change(s) in Behavioural deltas.",
                changes.len() - MAX_CHANGE_CARDS
            )));
        }
    }
    blocks.push(Block::Subheading("At a glance"));
    blocks.push(Block::Fields(vec![
        (
            "prompts",
            vec![Inline::Highlight(s.prompts.to_string()), plain(" paired")],
        ),
        (
            "evidence",
            vec![
                plain("access level "),
                code(r.access.level.as_str()),
                plain(", claims up to "),
                code(r.access.claim_strength.as_str()),
            ],
        ),
        (
            "claims",
            vec![
                tally(s.claims_accepted, "accepted", None),
                plain(" · "),
                tally(s.claims_downgraded, "downgraded", Some(Tone::Warn)),
                plain(" · "),
                tally(s.claims_rejected, "rejected", Some(Tone::Bad)),
            ],
        ),
        (
            "gates",
            vec![
                tally(s.gates_failed, "failed", Some(Tone::Bad)),
                plain(" · "),
                tally(s.gates_warned, "warned", Some(Tone::Warn)),
            ],
        ),
        (
            "plugins",
            vec![tally(s.plugin_failures, "failed", Some(Tone::Warn))],
        ),
    ]));
    blocks
}

/// Section 2: the change in words, then the two models side by side.
pub(super) fn target_change(r: &Report) -> Vec<Block> {
    let t = &r.target_change;
    let fields = Block::Fields(vec![
        ("change", vec![text_or_none(t.description.as_deref())]),
        (
            "transformation kind",
            vec![
                t.transformation_kind
                    .as_deref()
                    .map_or(Inline::Missing("none"), code),
            ],
        ),
        (
            "transformation",
            vec![text_or_none(t.transformation_summary.as_deref())],
        ),
    ]);
    let rows = [&t.baseline, &t.candidate]
        .iter()
        .map(|m| {
            vec![
                vec![text(&m.label)],
                vec![text(&m.model_name)],
                vec![
                    m.model_sha256
                        .as_ref()
                        .map_or(Inline::Missing("unknown"), |h| Inline::Hash(h.clone())),
                ],
                vec![code(&m.executor)],
                vec![code(&m.device)],
                vec![text_or_none(m.transformation.as_deref())],
            ]
        })
        .collect();
    let table = Table::new(
        &[
            "side",
            "model",
            "sha256",
            "executor",
            "device",
            "host-applied transformation",
        ],
        "llllll",
        rows,
    );
    vec![fields, Block::Table(table)]
}

/// Section 3: the access level, what it allows and what it does not, and
/// the scope of any causal statement.
pub(super) fn access(r: &Report) -> Vec<Block> {
    let a = &r.access;
    let mut blocks = vec![Block::Paragraph(vec![
        plain("Access level "),
        Inline::Strong(vec![code(a.level.as_str())]),
        plain("; the strongest claim it allows is "),
        Inline::Strong(vec![code(a.claim_strength.as_str())]),
        plain(
            ". The level comes from what the traces hold, not from what was \
             requested.",
        ),
    ])];
    blocks.push(Block::Subheading("This report can claim"));
    if a.can_claim.is_empty() {
        blocks.push(Block::Note(
            "No claim strength is supported by the evidence.".into(),
        ));
    } else {
        let rows = a
            .can_claim
            .iter()
            .map(|s| {
                vec![
                    vec![Inline::Badge(Tone::Ok, "✔ can claim".into())],
                    vec![code(s.as_str())],
                    vec![text(s.needs())],
                ]
            })
            .collect();
        let table = Table::new(&["", "strength", "backed by"], "lll", rows)
            .toned(a.can_claim.iter().map(|_| Tone::Ok));
        blocks.push(Block::Table(table));
    }
    blocks.push(Block::Subheading("This report cannot claim"));
    if a.cannot_claim.is_empty() {
        blocks.push(Block::Note(
            "Every claim strength is supported by the evidence.".into(),
        ));
    } else {
        let rows = a
            .cannot_claim
            .iter()
            .map(|u| {
                vec![
                    vec![Inline::Badge(Tone::Bad, "✘ cannot claim".into())],
                    vec![code(u.strength.as_str())],
                    vec![text(&u.reason)],
                ]
            })
            .collect();
        let table = Table::new(&["", "strength", "why not"], "lll", rows)
            .toned(a.cannot_claim.iter().map(|_| Tone::Bad));
        blocks.push(Block::Table(table));
    }
    blocks.push(Block::Subheading("Missing evidence"));
    blocks.push(if a.missing_evidence.is_empty() {
        Block::Note(
            "Nothing: every kind of evidence the levels use is present on both sides.".into(),
        )
    } else {
        Block::List(a.missing_evidence.clone())
    });
    blocks.push(Block::Subheading("Causal scope"));
    blocks.push(match &a.causal_scope {
        Some(scope) => Block::Paragraph(vec![text(scope)]),
        None => Block::Note(super::findings::NO_CAUSAL.into()),
    });
    blocks
}

/// Plugins as a table: name, version, WIT and a short hash; with `full`,
/// the whole hash, the world and the path (the reproducibility section).
pub(super) fn plugins_table(plugins: &[PluginRecord], full: bool) -> Table {
    let rows = plugins
        .iter()
        .map(|p| {
            let mut row = vec![
                vec![code(&p.name)],
                vec![code(&p.version)],
                vec![code(&p.wit_version)],
                vec![if full {
                    code(&p.sha256)
                } else {
                    Inline::Hash(p.sha256.clone())
                }],
            ];
            if full {
                row.push(vec![code(&p.world)]);
                row.push(vec![code(&p.path)]);
            }
            row
        })
        .collect();
    if full {
        // The path sits under the name on the page, which keeps the full
        // hash on one line.
        Table::new(
            &["plugin", "version", "WIT", "sha256", "world", "path"],
            "llllll",
            rows,
        )
        .detail(5, 0, None)
    } else {
        Table::new(&["plugin", "version", "WIT", "sha256"], "llll", rows)
    }
}

/// Section 4: the prompts, the artifact coverage, and the plugins that ran
/// or failed.
pub(super) fn evidence(r: &Report) -> Vec<Block> {
    let e = &r.evidence;
    let mut blocks = vec![Block::Paragraph(vec![
        Inline::Highlight(e.prompts.to_string()),
        plain(" paired prompts."),
    ])];
    blocks.push(if e.categories.is_empty() {
        Block::Note("No prompt has a category.".into())
    } else {
        let rows = e
            .categories
            .iter()
            .map(|(c, n)| vec![vec![text(c)], vec![plain(n.to_string())]])
            .collect();
        Block::Table(Table::new(&["category", "prompts"], "lr", rows))
    });
    let kinds: Vec<&str> = e.kinds_in_both.iter().map(|k| k.as_str()).collect();
    blocks.push(Block::Paragraph(vec![
        plain("Kinds in every trace of both sides: "),
        codes(&kinds),
        plain("."),
    ]));
    blocks.push(Block::Subheading("Coverage"));
    blocks.push(if r.access.coverage.is_empty() {
        Block::Note("No coverage: the traces hold no artifact.".into())
    } else {
        let frac = |n: usize, of: usize| plain(format!("{n} / {of}"));
        let complete = |c: &crate::access::KindCoverage| {
            c.baseline == c.of_baseline && c.candidate == c.of_candidate
        };
        let rows = r
            .access
            .coverage
            .iter()
            .map(|c| {
                vec![
                    vec![code(c.kind.as_str())],
                    vec![frac(c.baseline, c.of_baseline)],
                    vec![match (c.candidate, c.of_candidate) {
                        (Some(n), Some(of)) => frac(n, of),
                        _ => plain("n/a (no candidate)"),
                    }],
                    vec![if complete(c) {
                        Inline::Badge(Tone::Ok, "complete".into())
                    } else {
                        Inline::Badge(Tone::Warn, "partial".into())
                    }],
                ]
            })
            .collect();
        let tones = r
            .access
            .coverage
            .iter()
            .map(|c| if complete(c) { Tone::Ok } else { Tone::Warn });
        Block::Table(
            Table::new(
                &[
                    "artifact kind",
                    "baseline traces",
                    "candidate traces",
                    "coverage",
                ],
                "lrrl",
                rows,
            )
            .toned(tones),
        )
    });
    blocks.push(Block::Subheading("Scorers"));
    blocks.push(if e.scorers.is_empty() {
        Block::Note("No scorer ran.".into())
    } else {
        Block::Table(plugins_table(&e.scorers, false))
    });
    if !e.judges.is_empty() {
        blocks.push(Block::Subheading("Judges"));
        blocks.push(Block::Paragraph(vec![plain(
            "Models the judged scorers asked about the replies: a judged metric's values \
             are these models' verdicts. Every question and answer is kept in the record, \
             which a replay reads instead of the judge.",
        )]));
        let rows = e
            .judges
            .iter()
            .map(|j| {
                vec![
                    vec![code(&j.name)],
                    vec![text(&j.model)],
                    vec![match &j.sha256 {
                        Some(h) => Inline::Hash(h.clone()),
                        None => Inline::Missing("n/a"),
                    }],
                    vec![text(&j.executor)],
                    vec![codes(
                        &j.scorers.iter().map(String::as_str).collect::<Vec<_>>(),
                    )],
                    vec![plain(j.requests.to_string())],
                    vec![match (&j.unavailable, j.refused) {
                        (Some(why), _) => Inline::Badge(Tone::Bad, format!("unavailable: {why}")),
                        (None, 0) => plain("0"),
                        (None, n) => Inline::Badge(Tone::Warn, n.to_string()),
                    }],
                    vec![code(&j.record)],
                ]
            })
            .collect();
        blocks.push(Block::Table(Table::new(
            &[
                "judge", "model", "sha256", "executor", "asked by", "requests", "refused", "record",
            ],
            "lllllrrl",
            rows,
        )));
    }
    blocks.push(Block::Subheading("Claim mappers"));
    blocks.push(if e.claim_mappers.is_empty() {
        Block::Note("No claim mapper ran.".into())
    } else {
        Block::Table(plugins_table(&e.claim_mappers, false))
    });
    blocks.push(Block::Subheading("Plugin failures"));
    blocks.push(if e.plugin_failures.is_empty() {
        Block::Note("No plugin failed.".into())
    } else {
        let rows = e
            .plugin_failures
            .iter()
            .map(|f| {
                vec![
                    vec![code(&f.plugin)],
                    vec![text(&f.stage)],
                    vec![
                        f.failure
                            .as_ref()
                            .map_or(plain("n/a"), |x| Inline::Badge(Tone::Bad, x.clone())),
                    ],
                    vec![text(&f.message)],
                ]
            })
            .collect();
        Block::Table(
            Table::new(&["plugin", "stage", "failure", "message"], "llll", rows)
                .toned(e.plugin_failures.iter().map(|_| Tone::Bad)),
        )
    });
    blocks
}
