//! The report's plots as inline SVG, written by hand: a forest plot of the
//! metric deltas, per-layer mean projections, and KL by position.
//!
//! Every coordinate goes through `P`, which never prints a non-finite
//! number, and every scale widens a degenerate domain (one point, identical
//! values) so nothing divides by zero. Text from the report is escaped.
//! Colours are presentation attributes, which the page's CSS may override
//! (dark mode); qualities are also written out in words, not colour alone.

use std::fmt::{self, Write as _};

use super::super::document::{ActivationFindings, ReportDelta};
use super::super::stats::Quality;
use super::deltas_by_metric;
use super::words::{self, num, signed};

/// Escapes text for XML and HTML (text and attribute values).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

/// A coordinate: one decimal, and 0 instead of a non-finite value (the
/// scales never produce one; this is the last guard).
#[derive(Clone, Copy)]
struct P(f64);

impl fmt::Display for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = if self.0.is_finite() { self.0 } else { 0.0 };
        let v = (v * 10.0).round() / 10.0;
        // `-0` reads oddly in the markup.
        write!(f, "{}", if v == 0.0 { 0.0 } else { v })
    }
}

/// The colour a quality is drawn in.
pub fn quality_colour(q: Quality) -> &'static str {
    match q {
        Quality::Improved => "#1a7f37",
        Quality::Regressed => "#cf222e",
        Quality::Unchanged => "#6e7781",
        Quality::Neutral => "#0969da",
    }
}

/// The word for a quality ([`words::quality`], kept here for the plots'
/// callers).
pub fn quality_name(q: Quality) -> &'static str {
    words::quality(q)
}

/// Colours for categories, distinguishable for common colour blindness
/// (Okabe-Ito).
const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f6000", "#000000",
];

/// The smallest and largest finite values, or `None` when there are none.
fn extent(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// A linear map from a data domain to a pixel range.
#[derive(Debug, Clone, Copy)]
struct Scale {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl Scale {
    /// Maps `[lo, hi]` onto `[r0, r1]`; an empty or non-finite domain is
    /// widened around its value (or becomes `[0, 1]`).
    fn new((lo, hi): (f64, f64), r0: f64, r1: f64) -> Scale {
        let (d0, d1) = if lo.is_finite() && hi.is_finite() && hi > lo {
            (lo, hi)
        } else if lo.is_finite() {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo - pad, lo + pad)
        } else {
            (0.0, 1.0)
        };
        Scale { d0, d1, r0, r1 }
    }

    /// The domain widened by `fraction` of its width on each side.
    fn padded(self, fraction: f64) -> Scale {
        let pad = (self.d1 - self.d0) * fraction;
        Scale {
            d0: self.d0 - pad,
            d1: self.d1 + pad,
            ..self
        }
    }

    fn at(&self, v: f64) -> f64 {
        let t = (v - self.d0) / (self.d1 - self.d0);
        self.r0 + t.clamp(-0.05, 1.05) * (self.r1 - self.r0)
    }

    fn domain(&self) -> (f64, f64) {
        (self.d0, self.d1)
    }
}

/// About `target` round tick values inside `[lo, hi]`.
fn ticks((lo, hi): (f64, f64), target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return if lo.is_finite() { vec![lo] } else { vec![] };
    }
    let rough = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil();
    // Round to one digit below the step, so 3 × 0.2 prints as 0.6.
    let digits = 10f64.powi((-step.log10().floor()).max(0.0) as i32 + 1);
    (0..=100)
        .map(|i| (first + i as f64) * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .map(|v| {
            let v = (v * digits).round() / digits;
            if v.abs() < step * 1e-9 { 0.0 } else { v }
        })
        .collect()
}

/// Opens an `<svg>` with a title, sized by its view box so it scales.
fn open(out: &mut String, width: f64, height: f64, class: &str, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot {class}\" viewBox=\"0 0 {} {}\" \
         width=\"{}\" role=\"img\" aria-label=\"{t}\" font-family=\"system-ui, sans-serif\" \
         font-size=\"12\"><title>{t}</title>",
        P(width),
        P(height),
        P(width),
        t = escape(title),
    );
}

/// Text at a point; `anchor` is `start`, `middle` or `end`.
fn text(out: &mut String, x: f64, y: f64, anchor: &str, class: &str, s: &str) {
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\" class=\"{class}\" fill=\"#24292f\">{}</text>",
        P(x),
        P(y),
        escape(s)
    );
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), class: &str, stroke: &str) {
    let _ = write!(
        out,
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"{class}\" stroke=\"{stroke}\"/>",
        P(x1),
        P(y1),
        P(x2),
        P(y2)
    );
}

/// `s` cut to `max` characters with an ellipsis (labels in a fixed column).
fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// A horizontal axis at `y` with ticks and labels.
fn x_axis(out: &mut String, x: &Scale, y: f64, tick_values: &[f64]) {
    line(out, (x.r0, y), (x.r1, y), "axis", "#57606a");
    for &t in tick_values {
        let px = x.at(t);
        line(out, (px, y), (px, y + 4.0), "axis", "#57606a");
        text(out, px, y + 16.0, "middle", "tick", &num(t));
    }
}

/// A vertical axis at `x` with ticks, labels and light grid lines to `x_end`.
fn y_axis(out: &mut String, y: &Scale, x: f64, x_end: f64, tick_values: &[f64]) {
    line(out, (x, y.r0), (x, y.r1), "axis", "#57606a");
    for &t in tick_values {
        let py = y.at(t);
        line(out, (x, py), (x_end, py), "grid", "#d0d7de");
        line(out, (x - 4.0, py), (x, py), "axis", "#57606a");
        text(out, x - 7.0, py + 4.0, "end", "tick", &num(t));
    }
}

/// Forest plot of the metric deltas: one panel per metric (each with its
/// own axis, since metrics have different units), one row per delta with
/// its 95% interval as a whisker, a dashed zero line, the marker coloured
/// by quality and the numbers and quality in words on the right. A delta
/// without an interval is drawn as a hollow marker. `None` without deltas.
pub fn forest_plot(deltas: &[ReportDelta]) -> Option<String> {
    if deltas.is_empty() {
        return None;
    }
    const WIDTH: f64 = 820.0;
    const LABEL_END: f64 = 200.0;
    const PLOT: (f64, f64) = (215.0, 560.0);
    const ROW: f64 = 22.0;
    let groups = deltas_by_metric(deltas);
    let legend_h = 26.0;
    let height = legend_h
        + groups
            .iter()
            .map(|(_, rows)| 24.0 + ROW * rows.len() as f64 + 34.0)
            .sum::<f64>();
    let mut out = String::new();
    open(
        &mut out,
        WIDTH,
        height,
        "forest",
        "Metric deltas (candidate − baseline) with 95% paired bootstrap intervals",
    );
    // Legend: colour and word for each quality.
    let mut lx = PLOT.0;
    for q in [
        Quality::Improved,
        Quality::Regressed,
        Quality::Unchanged,
        Quality::Neutral,
    ] {
        let _ = write!(
            out,
            "<circle cx=\"{}\" cy=\"12\" r=\"5\" fill=\"{}\"/>",
            P(lx),
            quality_colour(q)
        );
        text(&mut out, lx + 9.0, 16.0, "start", "legend", quality_name(q));
        lx += 95.0;
    }
    let mut y = legend_h;
    for (metric, rows) in groups {
        let first = rows[0];
        let header = format!(
            "{metric} ({}, {})",
            first.unit,
            words::polarity(first.polarity)
        );
        text(&mut out, 8.0, y + 16.0, "start", "panel-title", &header);
        y += 24.0;
        let values = rows
            .iter()
            .flat_map(|d| [Some(d.delta), d.ci_low, d.ci_high])
            .flatten()
            .chain([0.0]);
        let x = Scale::new(extent(values).unwrap_or((0.0, 0.0)), PLOT.0, PLOT.1).padded(0.05);
        let top = y;
        let bottom = y + ROW * rows.len() as f64;
        // Zero line first so the markers sit on top of it.
        let zx = x.at(0.0);
        let _ = write!(
            out,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"zero\" stroke=\"#57606a\" \
             stroke-dasharray=\"4 3\"/>",
            P(zx),
            P(top),
            P(zx),
            P(bottom)
        );
        for d in &rows {
            let cy = y + ROW / 2.0;
            let colour = quality_colour(d.quality);
            let _ = write!(out, "<g class=\"row\"><title>{}</title>", escape(&d.id));
            text(
                &mut out,
                LABEL_END,
                cy + 4.0,
                "end",
                "label",
                &clip(words::category(d.category.as_deref()), 28),
            );
            let ci = match (d.ci_low, d.ci_high) {
                (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() => Some((lo, hi)),
                _ => None,
            };
            if let Some((lo, hi)) = ci {
                let (x0, x1) = (x.at(lo), x.at(hi));
                let _ = write!(
                    out,
                    "<path d=\"M{} {}H{}M{} {}V{}M{} {}V{}\" stroke=\"{colour}\" \
                     stroke-width=\"1.6\" fill=\"none\"/>",
                    P(x0),
                    P(cy),
                    P(x1),
                    P(x0),
                    P(cy - 5.0),
                    P(cy + 5.0),
                    P(x1),
                    P(cy - 5.0),
                    P(cy + 5.0)
                );
            }
            if d.delta.is_finite() {
                let (fill, class) = if ci.is_some() {
                    (colour, "marker")
                } else {
                    ("#ffffff", "marker hollow")
                };
                let _ = write!(
                    out,
                    "<circle cx=\"{}\" cy=\"{}\" r=\"4.5\" class=\"{class}\" fill=\"{fill}\" \
                     stroke=\"{colour}\" stroke-width=\"1.6\"/>",
                    P(x.at(d.delta)),
                    P(cy)
                );
            }
            let ci_words = match ci {
                Some((lo, hi)) => words::interval(Some(lo), Some(hi)),
                None => "no interval".into(),
            };
            let value = format!(
                "{} {ci_words} · {}{}",
                signed(d.delta),
                quality_name(d.quality),
                if d.significant { " *" } else { "" }
            );
            text(&mut out, PLOT.1 + 12.0, cy + 4.0, "start", "value", &value);
            out.push_str("</g>");
            y += ROW;
        }
        x_axis(&mut out, &x, bottom + 4.0, &ticks(x.domain(), 5));
        y = bottom + 34.0;
    }
    out.push_str("</svg>");
    Some(out)
}

/// A rough width of `chars` characters of 12 px legend text, in pixels
/// (generous, so a label never runs into the next column).
fn text_width(chars: usize) -> f64 {
    chars as f64 * 6.9
}

/// Greedy word wrap of `s` into lines of at most `max` characters (a word
/// longer than `max` is cut with an ellipsis).
fn wrap(s: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let word = clip(word, max);
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Groups of series drawn on top of each other: every point within a
/// pixel of the first series of the group. Singletons are left out.
fn coinciding(points: &[Vec<(f64, f64)>]) -> Vec<Vec<usize>> {
    let close = |a: &[(f64, f64)], b: &[(f64, f64)]| {
        !a.is_empty()
            && a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(p, q)| (p.0 - q.0).abs() < 1.0 && (p.1 - q.1).abs() < 1.0)
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        match groups.iter_mut().find(|g| close(&points[g[0]], p)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups.retain(|g| g.len() > 1);
    groups
}

/// Per-layer mean projection, one line per (side, category) series:
/// colour by category, solid for the baseline and dashed for the
/// candidate, with axes, ticks and a legend below the plot that holds
/// every label in full. Series that lie on top of each other (the same
/// values at every layer, to the pixel) are drawn in alternating dashes
/// of their colours with concentric markers, so each stays visible, and
/// the legend names them. `None` without layers or series.
pub fn projection_plot(findings: &ActivationFindings) -> Option<String> {
    if findings.layers.is_empty() || findings.series.is_empty() {
        return None;
    }
    const WIDTH: f64 = 820.0;
    const PLOT_HEIGHT: f64 = 330.0;
    let (left, right, top, bottom) = (70.0, 800.0, 20.0, PLOT_HEIGHT - 45.0);
    let layers: Vec<f64> = findings.layers.iter().map(|&l| l as f64).collect();
    let x = Scale::new(
        extent(layers.iter().copied()).unwrap_or((0.0, 0.0)),
        left,
        right,
    )
    .padded(0.03);
    let values = findings
        .series
        .iter()
        .flat_map(|s| s.mean_projection.iter().take(layers.len()).copied());
    let y = Scale::new(extent(values).unwrap_or((0.0, 0.0)), bottom, top).padded(0.05);
    let style = SeriesStyle::of(findings);
    let labels: Vec<String> = findings
        .series
        .iter()
        .map(|s| format!("{} · {} (n={})", s.side, s.category, s.prompts))
        .collect();
    let points: Vec<Vec<(f64, f64)>> = findings
        .series
        .iter()
        .map(|s| {
            layers
                .iter()
                .zip(&s.mean_projection)
                .filter(|(_, v)| v.is_finite())
                .map(|(&l, &v)| (x.at(l), y.at(v)))
                .collect()
        })
        .collect();
    let groups = coinciding(&points);
    let legend = Legend::lay_out(&labels, &groups, WIDTH, PLOT_HEIGHT + 4.0);

    let mut out = String::new();
    open(
        &mut out,
        WIDTH,
        legend.bottom(),
        "projection",
        "Mean projection onto the direction, per layer",
    );
    y_axis(&mut out, &y, left, right, &ticks(y.domain(), 6));
    // Layer ticks: every layer when few, round values otherwise.
    let x_ticks: Vec<f64> = if layers.len() <= 16 {
        layers.clone()
    } else {
        let mut t: Vec<f64> = ticks(x.domain(), 10).into_iter().map(f64::round).collect();
        t.dedup();
        t
    };
    x_axis(&mut out, &x, bottom, &x_ticks);
    text(
        &mut out,
        (left + right) / 2.0,
        bottom + 36.0,
        "middle",
        "axis-label",
        "layer",
    );
    let _ = write!(
        out,
        "<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\" \
         class=\"axis-label\" fill=\"#24292f\">mean projection</text>",
        P((top + bottom) / 2.0),
        P((top + bottom) / 2.0)
    );
    for (i, s) in findings.series.iter().enumerate() {
        let (dashes, radius) = match groups.iter().find(|g| g.contains(&i)) {
            Some(g) => coinciding_style(g, i),
            None => (style.dash(s), 3.0),
        };
        let line = Line {
            label: &labels[i],
            colour: style.colour(s),
            dashes: &dashes,
            radius,
        };
        line.draw(&mut out, &points[i]);
    }
    legend.draw(&mut out, findings, &labels, &style);
    out.push_str("</svg>");
    Some(out)
}

/// How a projection series is drawn: a colour per category, solid for
/// the baseline and dashed for the candidate.
struct SeriesStyle<'a> {
    categories: Vec<&'a str>,
}

impl<'a> SeriesStyle<'a> {
    fn of(findings: &'a ActivationFindings) -> Self {
        let mut categories: Vec<&str> = Vec::new();
        for s in &findings.series {
            if !categories.contains(&s.category.as_str()) {
                categories.push(&s.category);
            }
        }
        SeriesStyle { categories }
    }

    fn colour(&self, s: &crate::document::ProjectionSeries) -> &'static str {
        PALETTE[self
            .categories
            .iter()
            .position(|c| *c == s.category)
            .unwrap_or(0)
            % PALETTE.len()]
    }

    fn dash(&self, s: &crate::document::ProjectionSeries) -> String {
        if s.side == crate::document::Side::Baseline {
            String::new()
        } else {
            " stroke-dasharray=\"7 4\"".to_owned()
        }
    }
}

/// In a group `g` of k coinciding series, the dashes and marker radius of
/// series `i`: it draws every k-th dash, so the colours alternate along
/// the shared line, and its marker is a ring around the next one's.
fn coinciding_style(g: &[usize], i: usize) -> (String, f64) {
    let (k, at) = (g.len(), g.iter().position(|&j| j == i).unwrap_or(0));
    const DASH: f64 = 6.0;
    (
        format!(
            " stroke-dasharray=\"{} {}\" stroke-dashoffset=\"{}\"",
            P(DASH),
            P(DASH * (k - 1) as f64),
            P(DASH * ((k - at) % k) as f64)
        ),
        3.0 + 1.6 * (k - 1 - at) as f64,
    )
}

/// One series of a line plot: its name, colour, dashes and markers.
struct Line<'a> {
    label: &'a str,
    colour: &'a str,
    dashes: &'a str,
    radius: f64,
}

impl Line<'_> {
    /// The line through `pts` (when there are two or more) and a marker
    /// at each, titled with the series' name.
    fn draw(&self, out: &mut String, pts: &[(f64, f64)]) {
        let (colour, style) = (self.colour, self.dashes);
        let _ = write!(
            out,
            "<g class=\"series\"><title>{}</title>",
            escape(self.label)
        );
        if pts.len() > 1 {
            let path: String = pts
                .iter()
                .enumerate()
                .map(|(j, (px, py))| {
                    format!("{}{} {}", if j == 0 { "M" } else { "L" }, P(*px), P(*py))
                })
                .collect();
            let _ = write!(
                out,
                "<path d=\"{path}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{style}/>"
            );
        }
        for (px, py) in pts {
            let _ = write!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{colour}\"/>",
                P(*px),
                P(*py),
                P(self.radius)
            );
        }
        out.push_str("</g>");
    }
}

/// The legend below a projection plot: as many columns as the longest
/// label allows (at most 3), each label whole unless it alone is wider
/// than the plot; then one wrapped note per group of coinciding series.
struct Legend {
    top: f64,
    columns: usize,
    column_width: f64,
    label_chars: usize,
    rows: usize,
    notes: Vec<Vec<String>>,
}

impl Legend {
    const LINE: f64 = 20.0;
    const SAMPLE: f64 = 30.0;

    fn lay_out(labels: &[String], groups: &[Vec<usize>], width: f64, top: f64) -> Legend {
        let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        let avail = width - 2.0 * 16.0;
        let columns = (1..=3)
            .rev()
            .find(|&c| avail / c as f64 >= Self::SAMPLE + 8.0 + text_width(longest) + 16.0)
            .unwrap_or(1);
        let column_width = avail / columns as f64;
        let label_chars = ((column_width - Self::SAMPLE - 8.0 - 16.0) / 6.9)
            .floor()
            .max(8.0) as usize;
        let note_chars = ((avail - 16.0) / 6.9).floor().max(20.0) as usize;
        let notes = groups
            .iter()
            .map(|g| {
                let names: Vec<&str> = g.iter().map(|&i| labels[i].as_str()).collect();
                wrap(
                    &format!(
                        "≡ {} series coincide (the same value at every layer), drawn as \
                         alternating dashes: {}",
                        g.len(),
                        names.join("; ")
                    ),
                    note_chars,
                )
            })
            .collect();
        Legend {
            top,
            columns,
            column_width,
            label_chars,
            rows: labels.len().div_ceil(columns),
            notes,
        }
    }

    /// The figure's height with the legend under the plot.
    fn bottom(&self) -> f64 {
        let note_lines: usize = self.notes.iter().map(Vec::len).sum();
        self.top + Self::LINE * (self.rows + note_lines) as f64 + 10.0
    }

    /// A line sample in each series' own style, and its name; then the notes.
    fn draw(
        &self,
        out: &mut String,
        findings: &ActivationFindings,
        labels: &[String],
        style: &SeriesStyle<'_>,
    ) {
        debug_assert!(self.columns >= 1);
        out.push_str("<g class=\"legend\">");
        for (i, s) in findings.series.iter().enumerate() {
            let (row, column) = (i % self.rows, i / self.rows);
            let lx = 16.0 + self.column_width * column as f64;
            let ly = self.top + Self::LINE * row as f64 + 10.0;
            let _ = write!(
                out,
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" \
                 stroke-width=\"2\"{}/>",
                P(lx),
                P(ly),
                P(lx + Self::SAMPLE),
                P(ly),
                style.colour(s),
                style.dash(s)
            );
            text(
                out,
                lx + Self::SAMPLE + 8.0,
                ly + 4.0,
                "start",
                "legend",
                &clip(&labels[i], self.label_chars),
            );
        }
        let mut ly = self.top + Self::LINE * self.rows as f64 + 10.0;
        for line in self.notes.iter().flatten() {
            text(out, 16.0, ly + 4.0, "start", "legend note", line);
            ly += Self::LINE;
        }
        out.push_str("</g>");
    }
}

/// Mean KL(baseline ‖ candidate) by generated position, as bars from zero.
/// `None` without positions.
pub fn kl_by_position_plot(by_position: &[f64]) -> Option<String> {
    if by_position.is_empty() {
        return None;
    }
    const WIDTH: f64 = 820.0;
    const HEIGHT: f64 = 260.0;
    let (left, right, top, bottom) = (70.0, 800.0, 16.0, HEIGHT - 50.0);
    let n = by_position.len();
    let (lo, hi) = extent(by_position.iter().copied()).unwrap_or((0.0, 0.0));
    let y = Scale::new((lo.min(0.0), hi.max(0.0)), bottom, top).padded(0.04);
    let band = (right - left) / n as f64;
    let mut out = String::new();
    open(
        &mut out,
        WIDTH,
        HEIGHT,
        "kl",
        "Mean KL(baseline ‖ candidate) by generated position, in nats",
    );
    y_axis(&mut out, &y, left, right, &ticks(y.domain(), 5));
    let zero = y.at(0.0);
    line(&mut out, (left, zero), (right, zero), "axis", "#57606a");
    for (i, v) in by_position.iter().enumerate() {
        let px = left + band * i as f64 + band * 0.1;
        let w = (band * 0.8).max(0.5);
        let _ = write!(out, "<rect x=\"{}\" width=\"{}\" ", P(px), P(w));
        if v.is_finite() {
            let py = y.at(*v);
            let _ = write!(
                out,
                "y=\"{}\" height=\"{}\" fill=\"#0969da\"><title>position {i}: {} nats</title></rect>",
                P(py.min(zero)),
                P((py - zero).abs()),
                escape(&num(*v))
            );
        } else {
            // A missing value is shown as missing, not as zero.
            let _ = write!(
                out,
                "y=\"{}\" height=\"0\" fill=\"none\"><title>position {i}: no value</title></rect>",
                P(zero)
            );
        }
    }
    // Position ticks: integers, about 10 of them, centred on their bars.
    let mut positions: Vec<f64> = ticks((0.0, (n - 1) as f64), 10)
        .into_iter()
        .map(f64::round)
        .collect();
    positions.dedup();
    line(&mut out, (left, bottom), (right, bottom), "axis", "#57606a");
    for p in positions {
        let px = left + band * (p + 0.5);
        line(
            &mut out,
            (px, bottom),
            (px, bottom + 4.0),
            "axis",
            "#57606a",
        );
        text(&mut out, px, bottom + 16.0, "middle", "tick", &num(p));
    }
    text(
        &mut out,
        (left + right) / 2.0,
        HEIGHT - 12.0,
        "middle",
        "axis-label",
        "generated position (0 = first generated token)",
    );
    let _ = write!(
        out,
        "<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\" \
         class=\"axis-label\" fill=\"#24292f\">KL (nats)</text>",
        P((top + bottom) / 2.0),
        P((top + bottom) / 2.0)
    );
    out.push_str("</svg>");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degenerate_domains_are_widened() {
        let s = Scale::new((3.0, 3.0), 0.0, 100.0);
        assert_eq!(s.at(3.0), 50.0);
        let s = Scale::new((0.0, 0.0), 0.0, 100.0);
        assert_eq!(s.domain(), (-1.0, 1.0));
        let s = Scale::new((f64::NAN, f64::NAN), 0.0, 100.0);
        assert!(s.at(0.5).is_finite());
    }

    #[test]
    fn ticks_are_round_and_inside() {
        assert_eq!(ticks((0.0, 1.0), 5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(ticks((-0.3, 0.3), 3), vec![-0.2, 0.0, 0.2]);
        assert_eq!(ticks((2.0, 2.0), 5), vec![2.0]);
        assert!(ticks((0.0, 1e9), 5).len() <= 11);
    }

    #[test]
    fn coordinates_never_print_non_finite_values() {
        assert_eq!(P(f64::NAN).to_string(), "0");
        assert_eq!(P(f64::INFINITY).to_string(), "0");
        assert_eq!(P(-0.04).to_string(), "0");
        assert_eq!(P(12.345).to_string(), "12.3");
    }
}
