//! The report rendered for people: `report.md` and a self-contained
//! `report.html`, both from [`Report`] alone.
//!
//! - [`markdown()`]: tables, fenced blocks for untrusted text, no plots;
//! - [`html()`]: one file with inline CSS and inline SVG plots, no script,
//!   no external resource, every report string escaped;
//! - [`svg`]: the plots (forest plot of deltas, per-layer projections, KL by
//!   position), generated here without a plotting crate.
//!
//! Both renderers write the same sections in the same order ([`SECTIONS`]),
//! and an absent optional section gets a one-line note saying why, so a
//! reader can tell "not measured" from "nothing changed".
//!
//! [`Report`]: super::document::Report

mod html;
mod markdown;
pub mod svg;

pub use html::html;
pub use markdown::markdown;

use super::document::ReportDelta;

/// The report's sections in the order a reader needs them: the HTML anchor
/// and the title both renderers use.
pub const SECTIONS: [(&str, &str); 13] = [
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
    ("gates", "Regression gates"),
    ("limitations", "Limitations"),
    ("reproducibility", "Reproducibility"),
];

// One sentence per absent section, shared so both formats say the same.
const NO_CLAIMS: &str = "No claims: no claim mapper proposed one.";
const NO_DELTAS: &str = "No behavioural deltas: no scorer produced a metric on both sides.";
const NO_DISTRIBUTION: &str = "No distribution shift: the traces hold no logprobs on both sides.";

/// Why the report has no distribution shift.
fn no_distribution(r: &crate::document::Report) -> String {
    match &r.distribution_unavailable {
        Some(why) => format!("No distribution shift: {why}."),
        None => NO_DISTRIBUTION.into(),
    }
}

/// The tokens the KL is over, in words.
fn kl_support(d: &crate::document::DistributionShift) -> String {
    match (d.top_k, d.baseline_rest_mass) {
        (Some(k), Some(rest)) => format!(
            "the baseline's {k} most likely tokens at each position plus one bucket for the rest \
             ({:.2}% of the baseline's probability on average; the KL is a lower bound)",
            rest * 100.0
        ),
        _ => format!("the {} support", d.support),
    }
}
const NO_ACTIVATIONS: &str = "No activation findings: they need raw activations recorded on \
                              both sides and a direction to project them onto.";
const NO_INTERVENTIONS: &str =
    "No intervention results: the traces record no intervention or transformation.";
const NO_EXAMPLES: &str = "No representative examples: none was selected (prompts marked \
                           omitted are never shown).";
const NO_GATES: &str = "No regression gates: none was configured.";
const NO_LIMITATIONS: &str = "No limitations were recorded beyond those listed with each claim.";
const NO_CAUSAL: &str = "No causal statement is allowed: no intervention was recorded.";

/// `x` to about 4 significant digits, without trailing zeros; scientific
/// notation for very large or small magnitudes.
fn num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    // Below 1e-12 is rounding noise (a Wilson bound of 2.8e-17 is 0); the
    // JSON keeps the exact value.
    if x.abs() < 1e-12 {
        return "0".into();
    }
    let a = x.abs();
    if !(1e-3..1e5).contains(&a) {
        return format!("{x:.2e}");
    }
    let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s }
}

/// [`num`] with an explicit `+` on positive values (deltas).
fn signed(x: f64) -> String {
    let s = num(x);
    if x > 0.0 && x.is_finite() && s != "0" {
        format!("+{s}")
    } else {
        s
    }
}

/// An optional value, or `n/a`.
fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), num)
}

/// A percent change, signed, or why there is none.
fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a (baseline 0)".into(), |p| format!("{}%", signed(p)))
}

/// A p-value; tiny ones as a bound rather than a misleading digit string.
fn p_value(p: Option<f64>) -> String {
    match p {
        None => "n/a".into(),
        Some(p) if p < 1e-4 => "< 0.0001".into(),
        Some(p) => num(p),
    }
}

/// `[lo, hi]`, or `n/a` when either bound is missing.
fn interval(lo: Option<f64>, hi: Option<f64>) -> String {
    match (lo, hi) {
        (Some(lo), Some(hi)) => format!("[{}, {}]", num(lo), num(hi)),
        _ => "n/a".into(),
    }
}

/// A delta's 95% bootstrap interval.
fn delta_ci(d: &ReportDelta) -> String {
    interval(d.ci_low, d.ci_high)
}

/// A Wilson interval of a rate, or `n/a`.
fn rate_ci(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(|| "n/a".into(), |[lo, hi]| interval(Some(lo), Some(hi)))
}

/// A hash cut to 12 characters for tables (the full value is in the
/// reproducibility section).
fn short_hash(h: &str) -> String {
    match h.char_indices().nth(12) {
        Some((cut, _)) => format!("{}…", &h[..cut]),
        None => h.to_owned(),
    }
}

/// The metric deltas grouped by metric, in order of first appearance, the
/// overall row (no category) first in each group.
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

/// A delta's row label: its category, or `overall`.
fn category_label(category: Option<&str>) -> &str {
    category.unwrap_or("overall")
}

/// The total of the stage timings, in seconds.
fn total_seconds(stages: &[super::document::StageRecord]) -> f64 {
    stages.iter().map(|s| s.seconds).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_never_negative_zero() {
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(41.5), "41.5");
        assert_eq!(num(-0.0), "0");
        assert_eq!(num(2.78e-17), "0");
        assert_eq!(num(3e-9), "3.00e-9");
        assert_eq!(num(-0.000_04), "-4.00e-5");
        assert_eq!(num(123_456.0), "1.23e5");
        assert_eq!(num(2.0 / 3.0), "0.6667");
        assert_eq!(signed(0.25), "+0.25");
        assert_eq!(signed(-0.25), "-0.25");
        assert_eq!(percent(None), "n/a (baseline 0)");
        assert_eq!(percent(Some(-75.0)), "-75%");
        assert_eq!(p_value(Some(3e-7)), "< 0.0001");
        assert_eq!(interval(Some(-1.0), None), "n/a");
        assert_eq!(short_hash(&"ab".repeat(32)), "abababababab…");
        assert_eq!(short_hash("abc"), "abc");
    }
}
