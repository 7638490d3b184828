//! The report rendered for people: `report.md` and a self-contained
//! `report.html`, both from [`Report`] alone.
//!
//! - [`markdown()`]: tables, fenced blocks for untrusted text, no plots;
//! - [`html()`]: one file with inline CSS, inline SVG plots and one small
//!   inline script (sorting and filtering the prompt table, allowed by its
//!   hash and nothing else), no external resource, every report string
//!   escaped;
//! - [`svg`]: the plots (forest plot of deltas, per-layer projections, KL by
//!   position), generated here without a plotting crate.
//!
//! - [`words`]: the figures and status words (numbers, p-values,
//!   intervals, qualities, claim statuses, gate outcomes) every view of a
//!   report shares, the command line's summary included.
//!
//! The sections, their sentences and their tables are built once, as a
//! typed view of the report (`view`); the two renderers print that view,
//! adding only syntax and escaping. So both write the same sections in the
//! same order ([`SECTIONS`]), and an absent optional section gets a
//! one-line note saying why, so a reader can tell "not measured" from
//! "nothing changed".
//!
//! [`Report`]: super::document::Report

mod html;
mod markdown;
pub mod svg;
mod view;
pub mod words;

pub use html::html;
pub use markdown::markdown;

use super::document::ReportDelta;

/// The report's sections in the order a reader needs them: the HTML anchor
/// and the title both renderers use.
pub const SECTIONS: [(&str, &str); 14] = [
    ("summary", "Summary"),
    ("target-change", "Target change and transformation"),
    ("access", "Access level and claim strength"),
    ("evidence", "Evidence"),
    ("claims", "Claims"),
    ("deltas", "Behavioural deltas"),
    ("distribution", "Distribution shift"),
    ("activations", "Activation findings"),
    ("interventions", "Intervention results"),
    ("examples", "Representative examples"),
    ("prompts", "Every prompt"),
    ("gates", "Regression gates"),
    ("limitations", "Limitations"),
    ("reproducibility", "Reproducibility"),
];

/// The metric deltas grouped by metric, in order of first appearance, the
/// overall row (no category) first in each group: the order of the deltas'
/// tables and of the forest plot's panels.
fn deltas_by_metric(deltas: &[ReportDelta]) -> Vec<(&str, Vec<&ReportDelta>)> {
    let mut groups: Vec<(&str, Vec<&ReportDelta>)> = Vec::new();
    for d in deltas {
        match groups.iter_mut().find(|(m, _)| *m == d.metric) {
            Some((_, rows)) => rows.push(d),
            None => groups.push((&d.metric, vec![d])),
        }
    }
    for (_, rows) in &mut groups {
        // Stable: categories keep the report's order.
        rows.sort_by_key(|d| d.category.is_some());
    }
    groups
}
