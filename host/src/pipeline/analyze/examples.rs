//! What the report shows of the outputs: representative examples and the
//! prompt table, from each side's first sample of a prompt.

use std::collections::{BTreeMap, HashMap};

use crate::config::{Prompt, Redaction, Suite};
use crate::report::document::{Example, PromptRow, first_difference};
use crate::trace::{ArtifactData, ArtifactKind as K, Role, Trace};

use super::*;

/// The text of a trace's `text` artifact with `role`.
pub fn text_of(t: &Trace, role: Role) -> Option<String> {
    t.artifacts_of(K::Text).find_map(|a| match &a.data {
        ArtifactData::Text { text } if a.role() == Some(role) => Some(text.clone()),
        _ => None,
    })
}

/// Token ids of a trace's `tokens` artifact with `role`.
pub fn tokens_of(t: &Trace, role: Role) -> Option<Vec<u32>> {
    t.artifacts_of(K::Tokens).find_map(|a| match &a.data {
        ArtifactData::TokenIds { ids } if a.role() == Some(role) => Some(ids.clone()),
        _ => None,
    })
}

/// How the report may show one prompt and its outputs, from the suite's
/// `redaction` and the config's `report.record_outputs`: the one rule the
/// examples and the prompt table both follow.
struct Shown<'a> {
    /// Each side's trace of a prompt, by prompt id.
    traces: [HashMap<&'a str, &'a Trace>; 2],
    record_outputs: bool,
}

impl<'a> Shown<'a> {
    fn new(baseline: &[&'a Trace], candidate: &[&'a Trace], record_outputs: bool) -> Self {
        let index = |ts: &[&'a Trace]| {
            let mut by_id = HashMap::new();
            for t in ts {
                if let Some(id) = t.request.prompt_id.as_deref() {
                    // The first trace of a prompt, as a linear search finds it.
                    by_id.entry(id).or_insert(*t);
                }
            }
            by_id
        };
        Shown {
            traces: [index(baseline), index(candidate)],
            record_outputs,
        }
    }

    /// The prompt's text: as written when safe, a placeholder naming its
    /// category when redacted; `None` when omitted.
    fn prompt(p: &Prompt) -> Option<String> {
        match p.redaction {
            Redaction::Safe => Some(p.text.clone()),
            Redaction::Redacted => Some(format!(
                "[redacted {} prompt]",
                p.category.as_deref().unwrap_or("uncategorised")
            )),
            Redaction::Omitted => None,
        }
    }

    /// Whether the prompt's outputs may be shown.
    fn outputs_shown(&self, p: &Prompt) -> bool {
        self.record_outputs && p.redaction == Redaction::Safe
    }

    /// Both sides' completions of `p` as the report may show them: `None`
    /// where hidden or not recorded.
    fn outputs(&self, p: &Prompt) -> [Option<String>; 2] {
        let shown = self.outputs_shown(p);
        self.traces.each_ref().map(|by_id| {
            by_id
                .get(p.id.as_str())
                .filter(|_| shown)
                .and_then(|t| text_of(t, Role::Completion))
        })
    }
}

/// Representative examples: the prompts whose metrics changed most (by
/// the number of changed metrics, then the largest change), then the
/// rest, skipping omitted prompts; redaction honoured.
pub fn examples(
    suite: &Suite,
    baseline: &[&Trace],
    candidate: &[&Trace],
    values: (&Values, &Values),
    metrics: &[String],
    max: usize,
    record_outputs: bool,
) -> Vec<Example> {
    let shown = Shown::new(baseline, candidate, record_outputs);
    // (changed metrics, largest relative change, prompt, the changes)
    type Ranked<'a> = (usize, f64, &'a Prompt, BTreeMap<String, [f64; 2]>);
    let mut scored: Vec<Ranked<'_>> = suite
        .prompts
        .iter()
        .filter(|p| p.redaction != Redaction::Omitted)
        .map(|p| {
            let mut changed = BTreeMap::new();
            let mut largest: f64 = 0.0;
            for m in metrics {
                let k = (p.id.clone(), m.clone());
                if let (Some(b), Some(c)) = (values.0.get(&k), values.1.get(&k))
                    && b != c
                {
                    changed.insert(m.clone(), [*b, *c]);
                    largest = largest.max((c - b).abs() / b.abs().max(1.0));
                }
            }
            (changed.len(), largest, p, changed)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)));
    scored
        .into_iter()
        .take(max)
        .map(|(n, _, p, changed)| {
            let [baseline_output, candidate_output] = shown.outputs(p);
            Example {
                prompt_id: p.id.clone(),
                category: p.category.clone(),
                redaction: p.redaction,
                prompt: Shown::prompt(p),
                baseline_output,
                candidate_output,
                changed_metrics: changed,
                why: match (n, shown.outputs_shown(p)) {
                    (0, _) => "no metric changed on this prompt".into(),
                    (n, true) => format!("{n} metric(s) changed on this prompt"),
                    (n, false) if !record_outputs => {
                        format!("{n} metric(s) changed; outputs not recorded (report.record_outputs = false)")
                    }
                    (n, false) => format!("{n} metric(s) changed; outputs hidden (redacted prompt)"),
                },
            }
        })
        .collect()
}

/// Every prompt of the suite in suite order, for the prompt table: its
/// text and outputs as [`examples`] shows them (the same rule), every
/// metric of `metrics` with a value on either side, and where the outputs
/// first differ. Omitted prompts have no row.
pub fn prompt_rows(
    suite: &Suite,
    baseline: &[&Trace],
    candidate: &[&Trace],
    values: (&Values, &Values),
    spread: (&Values, &Values),
    metrics: &[String],
    record_outputs: bool,
) -> Vec<PromptRow> {
    let shown = Shown::new(baseline, candidate, record_outputs);
    suite
        .prompts
        .iter()
        .filter_map(|p| {
            let prompt = Shown::prompt(p)?;
            let [baseline_output, candidate_output] = shown.outputs(p);
            // Metric → [baseline, candidate] of `of`, where a side has it.
            let by_metric = |of: (&Values, &Values)| {
                metrics
                    .iter()
                    .filter_map(|m| {
                        let k = (p.id.clone(), m.clone());
                        let pair = [of.0.get(&k).copied(), of.1.get(&k).copied()];
                        pair.iter().any(Option::is_some).then(|| (m.clone(), pair))
                    })
                    .collect()
            };
            let (spread, metrics) = (by_metric(spread), by_metric(values));
            let first_difference = match (&baseline_output, &candidate_output) {
                (Some(b), Some(c)) => first_difference(b, c),
                _ => None,
            };
            Some(PromptRow {
                prompt_id: p.id.clone(),
                category: p.category.clone(),
                redaction: p.redaction,
                prompt,
                baseline_output,
                candidate_output,
                metrics,
                spread,
                first_difference,
            })
        })
        .collect()
}
