//! `report.md`: the report as Markdown tables and lists.
//!
//! Report strings are untrusted (prompts, model outputs, plugin messages):
//! inline text is escaped so it cannot form links, emphasis, headings or
//! raw HTML, and multi-line text goes in fenced blocks whose fence is
//! longer than any backtick run inside. Plots exist only in `report.html`.

use std::fmt::Write as _;

use super::super::document::{
    ActivationFindings, DistributionShift, EvidenceSection, Example, GateOutcome, PluginRecord,
    Report, Reproducibility,
};
use super::*;
use crate::claims::ClaimStatus;

/// Renders `report` as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", text(&report.title));
    let _ = writeln!(
        out,
        "Created {} · schema {} · plots are in `report.html`\n",
        text(&report.created_at),
        code(&report.schema)
    );
    out.push_str("## Contents\n\n");
    for (i, (_, title)) in SECTIONS.iter().enumerate() {
        let heading = format!("{}. {title}", i + 1);
        let _ = writeln!(out, "{}. [{title}](#{})", i + 1, slug(&heading));
    }
    out.push('\n');
    let sections: [fn(&mut String, &Report); 13] = [
        summary,
        target_change,
        access,
        evidence,
        claims,
        deltas,
        distribution,
        activations,
        interventions,
        examples,
        gates,
        limitations,
        reproducibility,
    ];
    for (i, ((_, title), section)) in SECTIONS.iter().zip(sections).enumerate() {
        let _ = writeln!(out, "## {}. {title}\n", i + 1);
        section(&mut out, report);
        // Exactly one blank line between sections, whatever the last block was.
        while out.ends_with("\n\n") {
            out.pop();
        }
        out.push('\n');
    }
    out
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped,
/// spaces as hyphens (the titles are ours, so this simple form suffices).
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// Inline text, escaped: no emphasis, links, code, headings or HTML can
/// come from it, and it stays on one line.
fn text(s: &str) -> String {
    let s = &*crate::text::printable(s);
    let mut out = String::with_capacity(s.len());
    // Leading digits then `.` or `)` would start an ordered list.
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    for (i, ch) in s.chars().enumerate() {
        match ch {
            '.' | ')' if i == digits && i > 0 => {
                out.push('\\');
                out.push(ch);
            }
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '~' => {
                out.push('\\');
                out.push(ch);
            }
            // A leading list or block-quote marker would restructure the line.
            '-' | '+' | '=' if i == 0 => {
                out.push('\\');
                out.push(ch);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' | '\t' => out.push(' '),
            _ => out.push(ch),
        }
    }
    out
}

/// An inline code span holding `s` verbatim (on one line).
fn code(s: &str) -> String {
    let s = crate::text::printable(s).replace(['\n', '\r'], " ");
    let fence = "`".repeat(longest_run(&s, '`') + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') || s.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A fenced block holding `s` verbatim.
fn fenced(out: &mut String, s: &str, lang: &str) {
    // Model outputs and plugin stderr: no control character reaches the file.
    let s = &*crate::text::printable(s);
    let fence = "`".repeat(longest_run(s, '`').max(2) + 1);
    let _ = writeln!(out, "{fence}{lang}");
    out.push_str(s);
    if !s.ends_with('\n') {
        out.push('\n');
    }
    let _ = writeln!(out, "{fence}");
}

fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for ch in s.chars() {
        run = if ch == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

/// A table; `align` has one of `l`/`r` per column. Cells are Markdown
/// already; their pipes are escaped here, the one place that knows they
/// are table cells.
fn table(out: &mut String, headers: &[&str], align: &str, rows: &[Vec<String>]) {
    let headers: Vec<String> = headers.iter().map(|h| h.replace('|', "\\|")).collect();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let rule: Vec<&str> = align
        .chars()
        .map(|a| if a == 'r' { "---:" } else { "---" })
        .collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

fn bullets(out: &mut String, items: &[String]) {
    for item in items {
        let _ = writeln!(out, "- {}", text(item));
    }
    out.push('\n');
}

fn note(out: &mut String, s: &str) {
    let _ = writeln!(out, "_{}_\n", text(s));
}

fn or_none(s: Option<&str>) -> String {
    s.map_or_else(|| "none".into(), text)
}

fn codes<T: AsRef<str>>(items: &[T]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items
            .iter()
            .map(|i| code(i.as_ref()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn status_label(s: ClaimStatus) -> &'static str {
    match s {
        ClaimStatus::Accepted => "✔ ACCEPTED",
        ClaimStatus::Downgraded => "▼ DOWNGRADED",
        ClaimStatus::Rejected => "✘ REJECTED",
    }
}

fn outcome_label(outcome: GateOutcome) -> &'static str {
    match outcome {
        GateOutcome::Pass => "✔ PASS",
        GateOutcome::Warn => "⚠ WARN",
        GateOutcome::Fail => "✘ FAIL",
        GateOutcome::NoData => "∅ NO DATA",
    }
}

fn summary(out: &mut String, r: &Report) {
    let s = &r.summary;
    let _ = writeln!(out, "**{}**\n", text(&s.headline));
    if !s.lines.is_empty() {
        bullets(out, &s.lines);
    }
    table(
        out,
        &[
            "prompts",
            "access level",
            "strongest claim",
            "claims accepted / downgraded / rejected",
            "gates failed / warned",
            "plugin failures",
        ],
        "rllrrr",
        &[vec![
            s.prompts.to_string(),
            code(r.access.level.as_str()),
            code(r.access.claim_strength.as_str()),
            format!(
                "{} / {} / {}",
                s.claims_accepted, s.claims_downgraded, s.claims_rejected
            ),
            format!("{} / {}", s.gates_failed, s.gates_warned),
            s.plugin_failures.to_string(),
        ]],
    );
}

fn target_change(out: &mut String, r: &Report) {
    let t = &r.target_change;
    let _ = writeln!(out, "- change: {}", or_none(t.description.as_deref()));
    let _ = writeln!(
        out,
        "- transformation kind: {}",
        t.transformation_kind
            .as_deref()
            .map_or_else(|| "none".into(), code)
    );
    let _ = writeln!(
        out,
        "- transformation: {}\n",
        or_none(t.transformation_summary.as_deref())
    );
    let rows: Vec<Vec<String>> = [&t.baseline, &t.candidate]
        .iter()
        .map(|m| {
            vec![
                text(&m.label),
                text(&m.model_name),
                m.model_sha256
                    .as_deref()
                    .map_or_else(|| "unknown".into(), |h| code(&short_hash(h))),
                code(&m.executor),
                code(&m.device),
                or_none(m.transformation.as_deref()),
            ]
        })
        .collect();
    table(
        out,
        &[
            "side",
            "model",
            "sha256",
            "executor",
            "device",
            "host-applied transformation",
        ],
        "llllll",
        &rows,
    );
}

fn access(out: &mut String, r: &Report) {
    let a = &r.access;
    let _ = writeln!(
        out,
        "Access level **{}**; the strongest claim it allows is **{}**.\n",
        text(a.level.as_str()),
        text(a.claim_strength.as_str())
    );
    out.push_str("**This report can claim:**\n\n");
    if a.can_claim.is_empty() {
        note(out, "No claim strength is supported by the evidence.");
    } else {
        for s in &a.can_claim {
            let _ = writeln!(out, "- {}: backed by {}", code(s.as_str()), text(s.needs()));
        }
        out.push('\n');
    }
    out.push_str("**This report cannot claim:**\n\n");
    if a.cannot_claim.is_empty() {
        note(out, "Every claim strength is supported by the evidence.");
    } else {
        for u in &a.cannot_claim {
            let _ = writeln!(out, "- {}: {}", code(u.strength.as_str()), text(&u.reason));
        }
        out.push('\n');
    }
    out.push_str("**Missing evidence:**\n\n");
    if a.missing_evidence.is_empty() {
        note(
            out,
            "Nothing: every kind of evidence the levels use is present on both sides.",
        );
    } else {
        bullets(out, &a.missing_evidence);
    }
    let _ = writeln!(
        out,
        "**Causal scope:** {}\n",
        a.causal_scope
            .as_deref()
            .map_or_else(|| text(NO_CAUSAL), text)
    );
}

fn plugins_table(out: &mut String, plugins: &[PluginRecord], full: bool) {
    let rows: Vec<Vec<String>> = plugins
        .iter()
        .map(|p| {
            let mut row = vec![
                code(&p.name),
                code(&p.version),
                code(&p.wit_version),
                code(
                    if full {
                        p.sha256.clone()
                    } else {
                        short_hash(&p.sha256)
                    }
                    .as_str(),
                ),
            ];
            if full {
                row.push(code(&p.world));
                row.push(code(&p.path));
            }
            row
        })
        .collect();
    if full {
        table(
            out,
            &["plugin", "version", "WIT", "sha256", "world", "path"],
            "llllll",
            &rows,
        );
    } else {
        table(out, &["plugin", "version", "WIT", "sha256"], "llll", &rows);
    }
}

fn evidence(out: &mut String, r: &Report) {
    let e: &EvidenceSection = &r.evidence;
    let _ = writeln!(out, "{} paired prompts.\n", e.prompts);
    if e.categories.is_empty() {
        note(out, "No prompt has a category.");
    } else {
        let rows: Vec<Vec<String>> = e
            .categories
            .iter()
            .map(|(c, n)| vec![text(c), n.to_string()])
            .collect();
        table(out, &["category", "prompts"], "lr", &rows);
    }
    let kinds: Vec<&str> = e.kinds_in_both.iter().map(|k| k.as_str()).collect();
    let _ = writeln!(
        out,
        "Kinds in every trace of both sides: {}.\n",
        codes(&kinds)
    );
    if r.access.coverage.is_empty() {
        note(out, "No coverage: the traces hold no artifact.");
    } else {
        let frac = |n: usize, of: usize| format!("{n} / {of}");
        let rows: Vec<Vec<String>> = r
            .access
            .coverage
            .iter()
            .map(|c| {
                vec![
                    code(c.kind.as_str()),
                    frac(c.baseline, c.of_baseline),
                    match (c.candidate, c.of_candidate) {
                        (Some(n), Some(of)) => frac(n, of),
                        _ => "n/a (no candidate)".into(),
                    },
                ]
            })
            .collect();
        table(
            out,
            &["artifact kind", "baseline traces", "candidate traces"],
            "lrr",
            &rows,
        );
    }
    out.push_str("**Scorers**\n\n");
    if e.scorers.is_empty() {
        note(out, "No scorer ran.");
    } else {
        plugins_table(out, &e.scorers, false);
    }
    out.push_str("**Claim mappers**\n\n");
    if e.claim_mappers.is_empty() {
        note(out, "No claim mapper ran.");
    } else {
        plugins_table(out, &e.claim_mappers, false);
    }
    out.push_str("**Plugin failures**\n\n");
    if e.plugin_failures.is_empty() {
        note(out, "No plugin failed.");
    } else {
        let rows: Vec<Vec<String>> = e
            .plugin_failures
            .iter()
            .map(|f| {
                vec![
                    code(&f.plugin),
                    text(&f.stage),
                    f.failure.as_deref().map_or_else(|| "n/a".into(), code),
                    text(&f.message),
                ]
            })
            .collect();
        table(
            out,
            &["plugin", "stage", "failure", "message"],
            "llll",
            &rows,
        );
    }
}

fn claims(out: &mut String, r: &Report) {
    if r.claims.is_empty() {
        note(out, NO_CLAIMS);
        return;
    }
    for (i, c) in r.claims.iter().enumerate() {
        let marker = format!("{}. ", i + 1);
        let _ = writeln!(
            out,
            "{marker}**{}** {}",
            status_label(c.status),
            text(&c.statement)
        );
        // Sub-items are indented to the item's text, whatever the number's width.
        let pad = " ".repeat(marker.len());
        let strength = match c.strength {
            Some(s) if s == c.proposed_strength => code(s.as_str()),
            Some(s) => format!(
                "{} (proposed {})",
                code(s.as_str()),
                code(c.proposed_strength.as_str())
            ),
            None => format!("none (proposed {})", code(c.proposed_strength.as_str())),
        };
        let _ = writeln!(out, "{pad}- strength: {strength}");
        let _ = writeln!(out, "{pad}- evidence: {}", codes(&c.evidence));
        for reason in &c.reasons {
            let _ = writeln!(out, "{pad}- reason: {}", text(reason));
        }
        for l in &c.limitations {
            let _ = writeln!(out, "{pad}- limitation: {}", text(l));
        }
        let _ = writeln!(out, "{pad}- mapper: {}", code(&c.mapper));
    }
    out.push('\n');
}

fn deltas(out: &mut String, r: &Report) {
    if r.metric_deltas.is_empty() {
        note(out, NO_DELTAS);
        return;
    }
    out.push_str(
        "Delta is candidate − baseline; change is the delta over |baseline| in percent; 95% CI \
         is the paired bootstrap interval of the delta; rate CIs are each side's Wilson 95% \
         interval (0/1 metrics); p is McNemar's exact test for 0/1 metrics and a sign-flip \
         permutation test otherwise; `*` marks p < 0.05 with a CI excluding 0.\n\n",
    );
    for (metric, rows) in deltas_by_metric(&r.metric_deltas) {
        let first = rows[0];
        let _ = writeln!(
            out,
            "### {} ({}, {}, scorer {})\n",
            code(metric),
            text(&first.unit),
            text(polarity(first)),
            code(&first.scorer)
        );
        // Wilson columns only for metrics that have rates (0/1 values).
        let rates = rows
            .iter()
            .any(|d| d.baseline_rate_ci.is_some() || d.candidate_rate_ci.is_some());
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|d| {
                let mut row = vec![
                    text(category_label(d.category.as_deref())),
                    d.n.to_string(),
                    num(d.baseline_mean),
                    num(d.candidate_mean),
                    format!(
                        "{}{}",
                        signed(d.delta),
                        if d.significant { " *" } else { "" }
                    ),
                    percent(d.percent_change),
                    delta_ci(d),
                ];
                if rates {
                    row.push(rate_ci(d.baseline_rate_ci));
                    row.push(rate_ci(d.candidate_rate_ci));
                }
                row.push(code(d.test.as_str()));
                row.push(p_value(d.p_value));
                row.push(super::svg::quality_name(d.quality).into());
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
        headers.extend(["test", "p", "quality"]);
        let align = if rates { "lrrrrrrrrlrl" } else { "lrrrrrrlrl" };
        table(out, &headers, align, &cells);
    }
}

fn polarity(d: &super::super::document::ReportDelta) -> &'static str {
    use crate::evidence::Polarity;
    match d.polarity {
        Polarity::HigherIsBetter => "higher is better",
        Polarity::LowerIsBetter => "lower is better",
        Polarity::Neutral => "no better direction",
    }
}

/// Positions listed in the Markdown table; the full series is in report.json.
const MAX_POSITIONS: usize = 32;

fn distribution(out: &mut String, r: &Report) {
    let Some(d): Option<&DistributionShift> = r.distribution.as_ref() else {
        note(out, &no_distribution(r));
        return;
    };
    let _ = writeln!(
        out,
        "KL(baseline ‖ candidate) in nats along the baseline's continuation, each side after \
         its own prompt, over {}: first generated token {}, mean over the teacher-forced \
         continuation {}.\n",
        text(&kl_support(d)),
        num(d.first_token_kl_mean),
        num(d.mean_kl)
    );
    if d.by_category.is_empty() {
        note(out, "No category has a KL figure.");
    } else {
        let rows: Vec<Vec<String>> = d
            .by_category
            .iter()
            .map(|(c, v)| vec![text(c), num(*v)])
            .collect();
        table(out, &["category", "first-token KL"], "lr", &rows);
    }
    if d.by_position.is_empty() {
        note(out, "No per-position KL was recorded.");
    } else {
        let rows: Vec<Vec<String>> = d
            .by_position
            .iter()
            .take(MAX_POSITIONS)
            .enumerate()
            .map(|(i, v)| vec![i.to_string(), num(*v)])
            .collect();
        table(out, &["position", "mean KL"], "rr", &rows);
        if d.by_position.len() > MAX_POSITIONS {
            note(
                out,
                &format!(
                    "{} more positions in report.json.",
                    d.by_position.len() - MAX_POSITIONS
                ),
            );
        }
    }
    if d.per_prompt.is_empty() {
        note(out, "No per-prompt KL was recorded.");
    } else {
        let rows: Vec<Vec<String>> = d
            .per_prompt
            .iter()
            .map(|p| {
                vec![
                    code(&p.prompt_id),
                    or_none(p.category.as_deref()),
                    num(p.first_token_kl),
                    num(p.mean_kl),
                    p.positions.to_string(),
                ]
            })
            .collect();
        table(
            out,
            &[
                "prompt",
                "category",
                "first-token KL",
                "mean KL",
                "positions",
            ],
            "llrrr",
            &rows,
        );
    }
}

fn activations(out: &mut String, r: &Report) {
    let Some(a): Option<&ActivationFindings> = r.activation_findings.as_ref() else {
        note(out, NO_ACTIVATIONS);
        return;
    };
    let _ = writeln!(
        out,
        "Direction {} (sha256 {}).\n",
        code(&a.direction),
        code(&short_hash(&a.direction_sha256))
    );
    if a.findings.is_empty() {
        note(out, "No finding was derived.");
    } else {
        bullets(out, &a.findings);
    }
    if a.series.is_empty() || a.layers.is_empty() {
        note(out, "No projection series was recorded.");
        return;
    }
    let headers: Vec<String> = std::iter::once("layer".to_string())
        .chain(a.series.iter().map(|s| {
            format!(
                "{} · {} (n={})",
                text(s.side.as_str()),
                text(&s.category),
                s.prompts
            )
        }))
        .collect();
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let rows: Vec<Vec<String>> = a
        .layers
        .iter()
        .enumerate()
        .map(|(i, layer)| {
            std::iter::once(layer.to_string())
                .chain(
                    a.series
                        .iter()
                        .map(|s| opt(s.mean_projection.get(i).copied())),
                )
                .collect()
        })
        .collect();
    out.push_str("Mean projection per layer:\n\n");
    table(out, &header_refs, &"r".repeat(headers.len()), &rows);
}

fn interventions(out: &mut String, r: &Report) {
    if r.interventions.is_empty() {
        note(out, NO_INTERVENTIONS);
    } else {
        let rows: Vec<Vec<String>> = r
            .interventions
            .iter()
            .map(|i| {
                vec![
                    text(i.side.as_str()),
                    text(&i.description),
                    i.traces.to_string(),
                    layers(&i.layers),
                    labels(&i.labels),
                ]
            })
            .collect();
        table(
            out,
            &["side", "intervention", "traces", "layers", "labels"],
            "llrll",
            &rows,
        );
    }
    let refs = &r.access.interventions;
    if !refs.is_empty() {
        let _ = writeln!(
            out,
            "Intervention records (the scope of any causal statement): {}\n",
            refs.len()
        );
        let rows: Vec<Vec<String>> = refs
            .iter()
            .map(|i| {
                vec![
                    code(i.side.as_str()),
                    code(&i.trace),
                    code(&i.artifact),
                    i.layer.map_or_else(|| "n/a".into(), |l| l.to_string()),
                    labels(&i.labels),
                ]
            })
            .collect();
        table(
            out,
            &["side", "trace", "artifact", "layer", "labels"],
            "lllrl",
            &rows,
        );
    }
}

fn layers(layers: &[usize]) -> String {
    if layers.is_empty() {
        "n/a".into()
    } else {
        layers
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn labels(labels: &std::collections::BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        "none".into()
    } else {
        labels
            .iter()
            .map(|(k, v)| code(&format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn examples(out: &mut String, r: &Report) {
    if r.examples.is_empty() {
        note(out, NO_EXAMPLES);
        return;
    }
    for e in &r.examples {
        example(out, e);
    }
}

fn example(out: &mut String, e: &Example) {
    let _ = writeln!(
        out,
        "### {} ({}, {})\n",
        code(&e.prompt_id),
        or_none(e.category.as_deref()),
        text(e.redaction.as_str())
    );
    let _ = writeln!(out, "Why: {}\n", text(&e.why));
    let block = |out: &mut String, name: &str, body: Option<&str>, hidden: &str| match body {
        Some(b) => {
            let _ = writeln!(out, "**{name}:**\n");
            fenced(out, b, "text");
            out.push('\n');
        }
        None => {
            let _ = writeln!(out, "**{name}:** _{hidden}_\n");
        }
    };
    block(out, "Prompt", e.prompt.as_deref(), "omitted");
    block(
        out,
        "Baseline output",
        e.baseline_output.as_deref(),
        "hidden",
    );
    block(
        out,
        "Candidate output",
        e.candidate_output.as_deref(),
        "hidden",
    );
    if !e.changed_metrics.is_empty() {
        let rows: Vec<Vec<String>> = e
            .changed_metrics
            .iter()
            .map(|(m, [b, c])| vec![code(m), num(*b), num(*c)])
            .collect();
        table(out, &["metric", "baseline", "candidate"], "lrr", &rows);
    }
}

fn gates(out: &mut String, r: &Report) {
    if r.gates.is_empty() {
        note(out, NO_GATES);
        return;
    }
    let rows: Vec<Vec<String>> = r
        .gates
        .iter()
        .map(|g| {
            vec![
                format!("**{}**", outcome_label(g.outcome)),
                text(&g.name),
                code(&match &g.category {
                    Some(c) => format!("{}@{c}", g.metric),
                    None => g.metric.clone(),
                }),
                text(g.severity.as_str()),
                interval_bounds(g.min_delta, g.max_delta),
                g.observed_delta
                    .map_or_else(|| "not measured".into(), signed),
                text(&g.message),
            ]
        })
        .collect();
    table(
        out,
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
        &rows,
    );
}

/// A gate's allowed range, open ends shown as unbounded.
fn interval_bounds(min: Option<f64>, max: Option<f64>) -> String {
    let lo = min.map_or_else(|| "−∞".into(), num);
    let hi = max.map_or_else(|| "+∞".into(), num);
    format!("[{lo}, {hi}]")
}

fn limitations(out: &mut String, r: &Report) {
    if r.limitations.is_empty() {
        note(out, NO_LIMITATIONS);
    } else {
        bullets(out, &r.limitations);
    }
}

fn reproducibility(out: &mut String, r: &Report) {
    let p: &Reproducibility = &r.reproducibility;
    out.push_str("Command:\n\n");
    fenced(out, &p.command, "sh");
    out.push('\n');
    let _ = writeln!(out, "- tool version: {}", code(&p.tool_version));
    let _ = writeln!(
        out,
        "- config: {} (sha256 {})",
        code(&p.config_path),
        code(&p.config_sha256)
    );
    let _ = writeln!(out, "- suite sha256: {}\n", code(&p.suite_sha256));
    let _ = writeln!(out, "Config text ({}):\n", code(&p.config_path));
    fenced(out, &p.config_text, "toml");
    out.push('\n');
    out.push_str("**Models**\n\n");
    if p.models.is_empty() {
        note(out, "No model hash was recorded.");
    } else {
        let rows: Vec<Vec<String>> = p
            .models
            .iter()
            .map(|(s, h)| vec![text(s), code(h)])
            .collect();
        table(out, &["side", "sha256"], "ll", &rows);
    }
    out.push_str("**Plugins**\n\n");
    if p.plugins.is_empty() {
        note(out, "No plugin ran.");
    } else {
        plugins_table(out, &p.plugins, true);
    }
    out.push_str("**Trace bundles**\n\n");
    if p.bundles.is_empty() {
        note(out, "No trace bundle was recorded.");
    } else {
        let rows: Vec<Vec<String>> = p
            .bundles
            .iter()
            .map(|(s, b)| {
                vec![
                    text(s),
                    code(&b.path),
                    code(&b.manifest_sha256),
                    b.traces.to_string(),
                    b.reused.to_string(),
                ]
            })
            .collect();
        table(
            out,
            &["side", "path", "manifest sha256", "traces", "reused"],
            "lllrr",
            &rows,
        );
    }
    out.push_str("**Seeds**\n\n");
    if p.seeds.is_empty() {
        note(out, "No seed was recorded.");
    } else {
        let rows: Vec<Vec<String>> = p
            .seeds
            .iter()
            .map(|(k, v)| vec![text(k), v.to_string()])
            .collect();
        table(out, &["seed", "value"], "lr", &rows);
    }
    out.push_str("**Stage timings**\n\n");
    if p.stages.is_empty() {
        note(out, "No stage timing was recorded.");
    } else {
        let mut rows: Vec<Vec<String>> = p
            .stages
            .iter()
            .map(|s| vec![text(&s.stage), num(s.seconds), text(&s.note)])
            .collect();
        rows.push(vec![
            "**total**".into(),
            num(total_seconds(&p.stages)),
            String::new(),
        ]);
        table(out, &["stage", "seconds", "note"], "lrl", &rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_text_cannot_form_markup() {
        assert_eq!(text("<b>a</b> & *x*"), "&lt;b&gt;a&lt;/b&gt; &amp; \\*x\\*");
        assert_eq!(text("# h\nnext"), "\\# h next");
        assert_eq!(text("- item"), "\\- item");
        assert_eq!(text("12. twelve 1."), "12\\. twelve 1.");
        assert_eq!(text("[link](http://x)"), "\\[link\\](http://x)");
    }

    #[test]
    fn code_spans_and_fences_outgrow_backticks_inside() {
        assert_eq!(code("a"), "`a`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        let mut out = String::new();
        fenced(&mut out, "````\nx", "");
        assert!(out.starts_with("`````\n"), "{out}");
        assert!(out.ends_with("\n`````\n"), "{out}");
    }

    #[test]
    fn slugs_match_github_anchors() {
        assert_eq!(
            slug("2. Target change and transformation"),
            "2-target-change-and-transformation"
        );
        assert_eq!(slug("1. Summary"), "1-summary");
    }
}
