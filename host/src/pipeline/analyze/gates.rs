//! Regression gates: each configured gate judged on its metric's delta.

use crate::config::file::{GateSection, Severity};
use crate::report::document::{GateOutcome, GateResult, ReportDelta};

use super::*;

/// Each gate's outcome against the deltas.
pub fn gates(gates: &[GateSection], deltas: &[ReportDelta]) -> Vec<GateResult> {
    gates
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let id = delta_id(&g.metric, g.category.as_deref());
            let name = g.name.clone().unwrap_or_else(|| format!("gate {}: {id}", i + 1));
            let observed = deltas.iter().find(|d| d.id == id).map(|d| d.delta);
            let bounds = match (g.min_delta, g.max_delta) {
                (Some(a), Some(b)) => format!("in [{a}, {b}]"),
                (Some(a), None) => format!(">= {a}"),
                (None, Some(b)) => format!("<= {b}"),
                (None, None) => "unbounded".into(),
            };
            let out_of_bounds = match g.severity {
                Severity::Warn => GateOutcome::Warn,
                Severity::Fail => GateOutcome::Fail,
            };
            let (outcome, message) = match observed {
                None => (
                    GateOutcome::NoData,
                    format!(
                        "no data: no scorer produced \"{}\" on both sides{}; a gate without data counts as {}",
                        g.metric,
                        g.category.as_deref().map(|c| format!(" in category \"{c}\"")).unwrap_or_default(),
                        g.severity.as_str()
                    ),
                ),
                Some(d) => {
                    let ok = g.min_delta.is_none_or(|a| d >= a) && g.max_delta.is_none_or(|b| d <= b);
                    if ok {
                        (GateOutcome::Pass, format!("delta {d:+.4} is {bounds}"))
                    } else {
                        (out_of_bounds, format!("delta {d:+.4} is not {bounds}"))
                    }
                }
            };
            GateResult {
                name,
                metric: g.metric.clone(),
                category: g.category.clone(),
                severity: g.severity,
                min_delta: g.min_delta,
                max_delta: g.max_delta,
                observed_delta: observed,
                outcome,
                message,
            }
        })
        .collect()
}

/// Whether a gate result fails the run (exit code 3).
pub fn gate_fails(g: &GateResult) -> bool {
    g.fails()
}
