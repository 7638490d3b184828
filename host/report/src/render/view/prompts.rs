//! Section 11: every prompt of the suite with both outputs and every
//! metric on both sides, from `report.prompts` (redaction applied when the
//! report was built: a redacted prompt is its placeholder, an omitted one
//! has no row).

use super::{Block, Inline, PromptLine, PromptTable, Table, code, plain, text_or_none};
use crate::document::{PromptRow, Redaction, Report};
use crate::render::words;

const NO_PROMPTS: &str = "No prompt table: the report holds no prompt rows (every prompt is \
                          omitted by the suite, or the report was written before the table \
                          existed).";

/// Section 11: what the table holds, then the table, or why there is none.
pub(super) fn prompts(r: &Report) -> Vec<Block> {
    if r.prompts.is_empty() {
        return vec![Block::Note(NO_PROMPTS.into())];
    }
    let metrics = metric_columns(r);
    // Outputs are hidden for a redacted prompt, absent when not recorded.
    let why = |p: &PromptRow| {
        if p.redaction == Redaction::Safe {
            "not recorded"
        } else {
            "hidden"
        }
    };
    let rows: Vec<PromptLine> = r
        .prompts
        .iter()
        .map(|p| PromptLine {
            id: p.prompt_id.clone(),
            category: p.category.clone(),
            redaction: p.redaction,
            prompt: p.prompt.clone(),
            outputs: [&p.baseline_output, &p.candidate_output]
                .map(|o| o.clone().ok_or_else(|| why(p))),
            first_difference: p.first_difference,
            values: metrics
                .iter()
                .map(|m| p.metrics.get(m).copied().unwrap_or([None, None]))
                .collect(),
            spread: metrics
                .iter()
                .map(|m| p.spread.get(m).copied().unwrap_or([None, None]))
                .collect(),
        })
        .collect();
    let changed: Vec<&PromptLine> = rows.iter().filter(|l| l.any_change()).collect();
    let omitted = r.evidence.prompts.saturating_sub(rows.len());
    let mut intro = format!(
        "{} prompt(s) in suite order, {} with a changed metric or differing outputs.",
        rows.len(),
        changed.len()
    );
    if omitted > 0 {
        intro.push_str(&format!(
            " {omitted} prompt(s) omitted by the suite have no row."
        ));
    }
    let page_note = "Each metric shows baseline → candidate, and the change under it (shaded \
                     where it changed); where both outputs are shown, both are marked from the \
                     first character where they differ. A delta's \u{201c}prompts\u{201d} link \
                     in Behavioural deltas shows the prompts behind it here."
        .to_owned();
    let listed = changed.len().min(PromptTable::TEXT_LINES);
    let compact_note = if listed == changed.len() {
        format!(
            "The {listed} prompt(s) that changed, in suite order, with the metrics that changed; \
             report.html has every prompt with both outputs and every metric (sortable and \
             filterable), report.json and scores.jsonl every value."
        )
    } else {
        format!(
            "The first {listed} of the {} prompt(s) that changed, in suite order, with the \
             metrics that changed; report.html has every prompt with both outputs and every \
             metric (sortable and filterable), report.json and scores.jsonl every value.",
            changed.len()
        )
    };
    let compact = Table::new(
        &[
            "prompt",
            "category",
            "changed metrics (baseline → candidate)",
            "outputs",
        ],
        "llll",
        changed
            .iter()
            .take(PromptTable::TEXT_LINES)
            .map(|l| compact_row(l, &metrics))
            .collect(),
    );
    vec![
        Block::Paragraph(vec![plain(intro)]),
        Block::Prompts(Box::new(PromptTable {
            metrics,
            rows,
            compact,
            compact_note,
            page_note,
        })),
    ]
}

/// The metrics in the order of the deltas' tables, then any other metric
/// a prompt has, by name.
fn metric_columns(r: &Report) -> Vec<String> {
    let mut metrics: Vec<String> = Vec::new();
    for d in &r.metric_deltas {
        if !metrics.contains(&d.metric) {
            metrics.push(d.metric.clone());
        }
    }
    let mut rest: Vec<&String> = r
        .prompts
        .iter()
        .flat_map(|p| p.metrics.keys())
        .filter(|m| !metrics.contains(m))
        .collect();
    rest.sort();
    rest.dedup();
    metrics.extend(rest.into_iter().cloned());
    metrics
}

/// One changed prompt as a line of the compact table.
fn compact_row(l: &PromptLine, metrics: &[String]) -> Vec<Vec<Inline>> {
    let mut changes = Vec::new();
    for (m, v) in metrics.iter().zip(&l.values) {
        if let [Some(b), Some(c)] = *v
            && b != c
        {
            if !changes.is_empty() {
                changes.push(plain(", "));
            }
            changes.push(code(m));
            changes.push(plain(format!(" {} → {}", words::num(b), words::num(c))));
        }
    }
    if changes.is_empty() {
        changes.push(Inline::Missing("none"));
    }
    let mut id = vec![code(&l.id)];
    if l.redaction != Redaction::Safe {
        id.push(Inline::Aside(vec![plain(l.redaction.as_str())]));
    }
    vec![
        id,
        vec![text_or_none(l.category.as_deref())],
        changes,
        vec![plain(l.outputs_in_words())],
    ]
}
