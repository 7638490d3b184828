//! Sections 10 and 12 to 14: examples to read, the gates' verdicts, what
//! the report cannot say, and what is needed to run it again (section 11,
//! every prompt, is `prompts.rs`).

use super::{Block, Example, Inline, Shown, Table, code, plain, text, text_or_none};
use crate::document::{Redaction, Report, first_difference};
use crate::render::words::{self, Tone};

const NO_EXAMPLES: &str = "No representative examples: none was selected (prompts marked \
                           omitted are never shown).";
const NO_GATES: &str = "No regression gates: none was configured.";
const NO_LIMITATIONS: &str = "No limitations were recorded beyond those listed with each claim.";

/// Section 10: each example with its texts, or why a text is not shown.
pub(super) fn examples(r: &Report) -> Vec<Block> {
    if r.examples.is_empty() {
        return vec![Block::Note(NO_EXAMPLES.into())];
    }
    r.examples
        .iter()
        .map(|x| {
            let tone = match x.redaction {
                Redaction::Safe => Tone::Ok,
                Redaction::Redacted => Tone::Warn,
                Redaction::Omitted => Tone::Na,
            };
            let shown = |label, body: &Option<String>, missing| Shown {
                label,
                text: body.clone().ok_or(missing),
            };
            let metrics = (!x.changed_metrics.is_empty()).then(|| {
                let rows = x
                    .changed_metrics
                    .iter()
                    .map(|(m, [b, c])| {
                        vec![
                            vec![code(m)],
                            vec![plain(words::num(*b))],
                            vec![plain(words::num(*c))],
                        ]
                    })
                    .collect();
                Table::new(&["metric", "baseline", "candidate"], "lrr", rows)
            });
            Block::Example(Box::new(Example {
                id: x.prompt_id.clone(),
                category: text_or_none(x.category.as_deref()),
                redaction: Inline::Badge(tone, x.redaction.as_str().into()),
                why: x.why.clone(),
                texts: [
                    shown("Prompt", &x.prompt, "omitted"),
                    shown("Baseline output", &x.baseline_output, "hidden"),
                    shown("Candidate output", &x.candidate_output, "hidden"),
                ],
                first_difference: match (&x.baseline_output, &x.candidate_output) {
                    (Some(b), Some(c)) => first_difference(b, c),
                    _ => None,
                },
                metrics,
            }))
        })
        .collect()
}

/// Section 12: one row per gate, its outcome first.
pub(super) fn gates(r: &Report) -> Vec<Block> {
    if r.gates.is_empty() {
        return vec![Block::Note(NO_GATES.into())];
    }
    let rows = r
        .gates
        .iter()
        .map(|g| {
            let metric = match &g.category {
                Some(c) => format!("{}@{c}", g.metric),
                None => g.metric.clone(),
            };
            vec![
                vec![Inline::Status(
                    words::gate_outcome_tone(g.outcome),
                    words::gate_outcome(g.outcome),
                )],
                vec![text(&g.name)],
                vec![code(&metric)],
                vec![plain(g.severity.as_str())],
                vec![plain(words::allowed_range(g.min_delta, g.max_delta))],
                vec![
                    g.observed_delta
                        .map_or(Inline::Missing("not measured"), |d| plain(words::signed(d))),
                ],
                vec![text(&g.message)],
            ]
        })
        .collect();
    let table = Table::new(
        &[
            "outcome",
            "gate",
            "metric",
            "severity",
            "allowed delta",
            "observed delta",
            "message",
        ],
        "llllrrl",
        rows,
    )
    .toned(r.gates.iter().map(|g| words::gate_outcome_tone(g.outcome)));
    vec![Block::Table(table)]
}

/// Section 13: what the report cannot say.
pub(super) fn limitations(r: &Report) -> Vec<Block> {
    vec![if r.limitations.is_empty() {
        Block::Note(NO_LIMITATIONS.into())
    } else {
        Block::List(r.limitations.clone())
    }]
}

/// Section 14: the command, the hashes, the config, and what ran with
/// which seeds and how long it took.
pub(super) fn reproducibility(r: &Report) -> Vec<Block> {
    let p = &r.reproducibility;
    let mut blocks = vec![
        Block::Fenced {
            caption: Some("Command"),
            lang: "sh",
            text: p.command.clone(),
        },
        Block::Fields(vec![
            ("tool version", vec![code(&p.tool_version)]),
            ("config", vec![code(&p.config_path)]),
            ("config sha256", vec![code(&p.config_sha256)]),
            ("suite sha256", vec![code(&p.suite_sha256)]),
        ]),
        Block::Details {
            summary: vec![plain("Config text ("), code(&p.config_path), plain(")")],
            blocks: vec![Block::Fenced {
                caption: None,
                lang: "toml",
                text: p.config_text.clone(),
            }],
        },
    ];
    blocks.push(Block::Subheading("Models"));
    blocks.push(if p.models.is_empty() {
        Block::Note("No model hash was recorded.".into())
    } else {
        let rows = p
            .models
            .iter()
            .map(|(s, h)| vec![vec![text(s)], vec![code(h)]])
            .collect();
        Block::Table(Table::new(&["side", "sha256"], "ll", rows))
    });
    blocks.push(Block::Subheading("Plugins"));
    blocks.push(if p.plugins.is_empty() {
        Block::Note("No plugin ran.".into())
    } else {
        Block::Table(super::overview::plugins_table(&p.plugins, true))
    });
    blocks.push(Block::Subheading("Trace bundles"));
    blocks.push(if p.bundles.is_empty() {
        Block::Note("No trace bundle was recorded.".into())
    } else {
        let rows = p
            .bundles
            .iter()
            .map(|(s, b)| {
                vec![
                    vec![text(s)],
                    vec![code(&b.path)],
                    vec![code(&b.manifest_sha256)],
                    vec![plain(b.traces.to_string())],
                    vec![plain(b.reused.to_string())],
                ]
            })
            .collect();
        Block::Table(Table::new(
            &["side", "path", "manifest sha256", "traces", "reused"],
            "lllrr",
            rows,
        ))
    });
    blocks.push(Block::Subheading("Seeds"));
    blocks.push(if p.seeds.is_empty() {
        Block::Note("No seed was recorded.".into())
    } else {
        let rows = p
            .seeds
            .iter()
            .map(|(k, v)| vec![vec![text(k)], vec![plain(v.to_string())]])
            .collect();
        Block::Table(Table::new(&["seed", "value"], "lr", rows))
    });
    blocks.push(Block::Subheading("Stage timings"));
    blocks.push(if p.stages.is_empty() {
        Block::Note("No stage timing was recorded.".into())
    } else {
        let mut rows: Vec<_> = p
            .stages
            .iter()
            .map(|s| {
                vec![
                    vec![text(&s.stage)],
                    vec![plain(words::num(s.seconds))],
                    vec![text(&s.note)],
                ]
            })
            .collect();
        let total: f64 = p.stages.iter().map(|s| s.seconds).sum();
        rows.push(vec![
            vec![Inline::Strong(vec![plain("total")])],
            vec![Inline::Highlight(words::num(total))],
            vec![],
        ]);
        Block::Table(Table::new(&["stage", "seconds", "note"], "lrl", rows))
    });
    blocks
}
