//! The report's figures and status words, for every place that shows a
//! report to a person: `report.md`, `report.html`, the plots, and the
//! command line's one-screen summary. Each function here is the only
//! spelling of what it formats, so a p-value or a gate outcome reads the
//! same wherever it appears.
//!
//! Everything returns plain text (no markup, no escaping): the caller
//! escapes for its own format.

use crate::claims::ClaimStatus;
use crate::document::GateOutcome;
use crate::evidence::Polarity;
use crate::stats::Quality;

/// `x` to about 4 significant digits, without trailing zeros; scientific
/// notation for very large or small magnitudes; never `-0`.
///
/// ```
/// use vauban_report::render::words::num;
/// assert_eq!(num(2.0 / 3.0), "0.6667");
/// assert_eq!(num(123_456.0), "1.23e5");
/// ```
pub fn num(x: f64) -> String {
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

/// [`num`] with an explicit `+` on positive values: how a delta is shown.
pub fn signed(x: f64) -> String {
    let s = num(x);
    if x > 0.0 && x.is_finite() && s != "0" {
        format!("+{s}")
    } else {
        s
    }
}

/// An optional value with [`num`], or `n/a`.
pub fn num_or_na(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), num)
}

/// A percent change, signed, or why there is none (a zero baseline).
pub fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a (baseline 0)".into(), |p| format!("{}%", signed(p)))
}

/// A p-value; a tiny one as a bound (`< 0.0001`) rather than a misleading
/// digit string; `n/a` when no test ran.
pub fn p_value(p: Option<f64>) -> String {
    match p {
        None => "n/a".into(),
        Some(p) if p < 1e-4 => "< 0.0001".into(),
        Some(p) => num(p),
    }
}

/// An interval as `[lo, hi]`, or `n/a` when either bound is missing (a
/// delta's bootstrap interval).
pub fn interval(lo: Option<f64>, hi: Option<f64>) -> String {
    match (lo, hi) {
        (Some(lo), Some(hi)) => format!("[{}, {}]", num(lo), num(hi)),
        _ => "n/a".into(),
    }
}

/// A rate's Wilson interval as `[lo, hi]`, or `n/a` (a metric that is not
/// 0/1).
pub fn rate_interval(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(|| "n/a".into(), |[lo, hi]| interval(Some(lo), Some(hi)))
}

/// A gate's allowed range of deltas, an open end shown as `−∞` or `+∞`.
pub fn allowed_range(min: Option<f64>, max: Option<f64>) -> String {
    let lo = min.map_or_else(|| "−∞".into(), num);
    let hi = max.map_or_else(|| "+∞".into(), num);
    format!("[{lo}, {hi}]")
}

/// A hash cut to 12 characters and an ellipsis, for tables; the full
/// value belongs somewhere the reader can copy it from.
pub fn short_hash(h: &str) -> String {
    match h.char_indices().nth(12) {
        Some((cut, _)) => format!("{}…", &h[..cut]),
        None => h.to_owned(),
    }
}

/// A delta's category, or `overall` for the row over every prompt.
pub fn category(category: Option<&str>) -> &str {
    category.unwrap_or("overall")
}

/// Which direction of a metric is better, in words.
pub fn polarity(p: Polarity) -> &'static str {
    match p {
        Polarity::HigherIsBetter => "higher is better",
        Polarity::LowerIsBetter => "lower is better",
        Polarity::Neutral => "no better direction",
    }
}

/// A delta's quality, in words (plots colour it too, never alone).
pub fn quality(q: Quality) -> &'static str {
    match q {
        Quality::Improved => "improved",
        Quality::Regressed => "regressed",
        Quality::Unchanged => "unchanged",
        Quality::Neutral => "neutral",
    }
}

/// A claim's status: a symbol and a word, so it reads without colour.
pub fn claim_status(s: ClaimStatus) -> &'static str {
    match s {
        ClaimStatus::Accepted => "✔ accepted",
        ClaimStatus::Downgraded => "▼ downgraded",
        ClaimStatus::Rejected => "✘ rejected",
    }
}

/// A regression gate's outcome: a symbol and words, so it reads without
/// colour.
pub fn gate_outcome(o: GateOutcome) -> &'static str {
    match o {
        GateOutcome::Pass => "✔ pass",
        GateOutcome::Warn => "⚠ warn",
        GateOutcome::Fail => "✘ fail",
        GateOutcome::NoData => "∅ no data",
    }
}

/// How good or bad a status is, for a format that can colour it (the
/// page's badges and row stripes, a terminal). The words above always say
/// it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Good: accepted, passed, improved, complete.
    Ok,
    /// Needs a look: downgraded, warned, partial.
    Warn,
    /// Bad: rejected, failed, regressed.
    Bad,
    /// Neither good nor bad: a change with no better direction.
    Info,
    /// Nothing to judge: unchanged, no data, omitted.
    Na,
}

/// The tone of a delta's quality.
pub fn quality_tone(q: Quality) -> Tone {
    match q {
        Quality::Improved => Tone::Ok,
        Quality::Regressed => Tone::Bad,
        Quality::Unchanged => Tone::Na,
        Quality::Neutral => Tone::Info,
    }
}

/// The tone of a claim's status.
pub fn claim_status_tone(s: ClaimStatus) -> Tone {
    match s {
        ClaimStatus::Accepted => Tone::Ok,
        ClaimStatus::Downgraded => Tone::Warn,
        ClaimStatus::Rejected => Tone::Bad,
    }
}

/// The tone of a gate's outcome.
pub fn gate_outcome_tone(o: GateOutcome) -> Tone {
    match o {
        GateOutcome::Pass => Tone::Ok,
        GateOutcome::Warn => Tone::Warn,
        GateOutcome::Fail => Tone::Bad,
        GateOutcome::NoData => Tone::Na,
    }
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
        assert_eq!(signed(1e-13), "0");
        assert_eq!(num_or_na(None), "n/a");
        assert_eq!(percent(None), "n/a (baseline 0)");
        assert_eq!(percent(Some(-75.0)), "-75%");
        assert_eq!(p_value(Some(3e-7)), "< 0.0001");
        assert_eq!(p_value(None), "n/a");
        assert_eq!(interval(Some(-1.0), None), "n/a");
        assert_eq!(rate_interval(Some([0.05, 0.45])), "[0.05, 0.45]");
        assert_eq!(allowed_range(Some(-0.2), None), "[-0.2, +∞]");
        assert_eq!(allowed_range(None, Some(0.0)), "[−∞, 0]");
        assert_eq!(short_hash(&"ab".repeat(32)), "abababababab…");
        assert_eq!(short_hash("abc"), "abc");
        assert_eq!(category(None), "overall");
    }

    #[test]
    fn every_status_has_a_symbol_and_a_word() {
        use GateOutcome as G;
        let outcomes: Vec<&str> = [G::Pass, G::Warn, G::Fail, G::NoData]
            .into_iter()
            .map(gate_outcome)
            .collect();
        assert_eq!(outcomes, ["✔ pass", "⚠ warn", "✘ fail", "∅ no data"]);
        let statuses: Vec<&str> = [
            ClaimStatus::Accepted,
            ClaimStatus::Downgraded,
            ClaimStatus::Rejected,
        ]
        .into_iter()
        .map(claim_status)
        .collect();
        assert_eq!(statuses, ["✔ accepted", "▼ downgraded", "✘ rejected"]);
        assert_eq!(gate_outcome_tone(G::NoData), Tone::Na);
        assert_eq!(quality_tone(Quality::Regressed), Tone::Bad);
    }
}
