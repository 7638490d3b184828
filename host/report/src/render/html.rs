//! `report.html`: one self-contained file. Inline CSS (light and dark via
//! `prefers-color-scheme`), inline SVG plots, no script, no font, image or
//! stylesheet fetched from anywhere; a Content-Security-Policy that allows
//! nothing else makes that hold even if a string slipped through. Every
//! report string is escaped, since prompts and model outputs are untrusted.
//! Statuses carry a word and a symbol as well as a colour.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::super::document::{
    ActivationFindings, DistributionShift, Example, GateOutcome, PluginRecord, Redaction, Report,
    ReportDelta,
};
use super::svg::{self, escape as e};
use super::*;
use crate::claims::ClaimStatus;
use crate::stats::Quality;

const CSS: &str = r#"
:root{color-scheme:light dark;--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--border:#d1d9e0;--link:#0969da;
--ok:#1a7f37;--ok-bg:#dafbe1;--warn:#7d4e00;--warn-bg:#fff8c5;--bad:#cf222e;--bad-bg:#ffebe9;--info:#0969da;--info-bg:#ddf4ff;--na:#59636e;--na-bg:#eff2f5}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;--panel:#151b23;--border:#3d444d;--link:#4493f8;
--ok:#3fb950;--ok-bg:#12261e;--warn:#d29922;--warn-bg:#272115;--bad:#f85149;--bad-bg:#2d1214;--info:#4493f8;--info-bg:#121d2f;--na:#9198a1;--na-bg:#1f242c}}
*{box-sizing:border-box}
body{margin:0;font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--link)}
header.top{padding:1.4rem 2rem 1rem;border-bottom:1px solid var(--border)}
h1{font-size:1.6rem;line-height:1.25;margin:0 0 .4rem}
.meta{color:var(--muted);margin:0;font-size:.9rem}
.layout{display:grid;grid-template-columns:15rem minmax(0,1fr);gap:2.5rem;max-width:92rem;margin:0 auto;padding:0 2rem}
nav.toc{position:sticky;top:0;align-self:start;max-height:100vh;overflow-y:auto;padding:1.2rem 0;font-size:.9rem}
nav.toc h2{font-size:.8rem;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:0 0 .5rem}
nav.toc ol{margin:0;padding-left:1.5rem}nav.toc li{margin:.25rem 0}nav.toc a{text-decoration:none}nav.toc a:hover{text-decoration:underline}
main{min-width:0;padding-bottom:4rem}
section{border-bottom:1px solid var(--border);padding:.6rem 0 1.2rem}
h2{font-size:1.35rem;margin:1rem 0 .7rem}h2 .num{color:var(--muted);font-weight:400;margin-right:.4rem}
h3{font-size:1.05rem;margin:1.3rem 0 .4rem}
p{margin:.4rem 0 .8rem}ul{margin:.3rem 0 .9rem;padding-left:1.4rem}li{margin:.15rem 0}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.88rem;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid var(--border);padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:var(--panel);font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:.85em}
code{background:var(--panel);border-radius:4px;padding:.05em .3em;overflow-wrap:break-word}
pre{background:var(--panel);border:1px solid var(--border);border-radius:6px;padding:.6rem .8rem;margin:.3rem 0 .8rem;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{background:none;padding:0}
.badge{display:inline-block;border:1px solid currentColor;border-radius:999px;padding:0 .55rem;font-size:.78rem;font-weight:600;white-space:nowrap;line-height:1.6}
.ok{color:var(--ok);background:var(--ok-bg)}.warn{color:var(--warn);background:var(--warn-bg)}.bad{color:var(--bad);background:var(--bad-bg)}
.info{color:var(--info);background:var(--info-bg)}.na{color:var(--na);background:var(--na-bg)}
tr.row-ok td:first-child{box-shadow:inset 4px 0 var(--ok)}tr.row-warn td:first-child{box-shadow:inset 4px 0 var(--warn)}
tr.row-bad td:first-child{box-shadow:inset 4px 0 var(--bad)}tr.row-na td:first-child{box-shadow:inset 4px 0 var(--na)}
.note{color:var(--muted);font-style:italic}
.wide{min-width:15rem}
.headline{font-size:1.15rem;font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(10rem,1fr));gap:.6rem;margin:1rem 0}
.card{border:1px solid var(--border);border-radius:8px;background:var(--panel);padding:.55rem .8rem}
.card b{display:block;font-size:1.3rem;line-height:1.3;overflow-wrap:anywhere}.card span{color:var(--muted);font-size:.82rem}
.card.bad{border-color:var(--bad)}.card.warn{border-color:var(--warn)}
dl.kv{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.25rem 1rem;margin:.5rem 0 1rem}dl.kv dt{color:var(--muted)}dl.kv dd{margin:0;overflow-wrap:anywhere}
figure{margin:1rem 0 1.4rem}figcaption{color:var(--muted);font-size:.85rem;margin-top:.3rem}
svg.plot{display:block;max-width:100%;height:auto;border:1px solid var(--border);border-radius:6px;background:var(--bg)}
svg.plot text{fill:var(--fg)}svg.plot .tick,svg.plot .value{fill:var(--muted)}svg.plot .panel-title{font-weight:600}
svg.plot .axis,svg.plot .zero{stroke:var(--muted)}svg.plot .grid{stroke:var(--border)}svg.plot .hollow{fill:var(--bg)}
article.example{border:1px solid var(--border);border-radius:8px;padding:.4rem 1rem .6rem;margin:1rem 0}
article.example h3{margin-top:.6rem}
.sides{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1rem}
.hidden-text{color:var(--muted);font-style:italic;border:1px dashed var(--border);border-radius:6px;padding:.6rem .8rem;margin:.3rem 0 .8rem}
details{margin:.5rem 0 1rem}summary{cursor:pointer;font-weight:600}
details.cites{margin:0;font-size:.85em}details.cites summary{font-weight:400}
footer{color:var(--muted);font-size:.8rem;text-align:center;padding:1.5rem}
@media (max-width:60rem){.layout{grid-template-columns:1fr;padding:0 1rem}nav.toc{position:static;max-height:none;border-bottom:1px solid var(--border)}.sides{grid-template-columns:1fr}}
@media print{nav.toc{display:none}.layout{display:block}}
"#;

/// Renders `report` as one self-contained HTML page.
pub fn html(report: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = e(&report.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"generator\" content=\"vauban {}\">\n<title>{title}</title>\n\
         <style>{CSS}</style>\n</head>\n<body>\n",
        e(&report.reproducibility.tool_version)
    );
    let _ = writeln!(
        out,
        "<header class=\"top\"><h1>{title}</h1><p class=\"meta\">Created {} · schema <code>{}</code> \
         · access level <code>{}</code> · strongest claim <code>{}</code></p></header>",
        e(&report.created_at),
        e(&report.schema),
        report.access.level.as_str(),
        report.access.claim_strength.as_str()
    );
    out.push_str(
        "<div class=\"layout\">\n<nav class=\"toc\" aria-label=\"Contents\"><h2>Contents</h2><ol>",
    );
    for (id, name) in SECTIONS {
        let _ = write!(out, "<li><a href=\"#{id}\">{name}</a></li>");
    }
    out.push_str("</ol></nav>\n<main>\n");
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
    for (i, ((id, name), section)) in SECTIONS.iter().zip(sections).enumerate() {
        let _ = write!(
            out,
            "<section id=\"{id}\">\n<h2><span class=\"num\">{}.</span>{name}</h2>\n",
            i + 1
        );
        section(&mut out, report);
        out.push_str("</section>\n");
    }
    let _ = write!(
        out,
        "</main>\n</div>\n<footer>Written by vauban {} from report.json (schema {}).</footer>\n\
         </body>\n</html>\n",
        e(&report.reproducibility.tool_version),
        e(&report.schema)
    );
    out
}

fn code(s: &str) -> String {
    format!("<code>{}</code>", e(s))
}

fn note(out: &mut String, s: &str) {
    let _ = writeln!(out, "<p class=\"note\">{}</p>", e(s));
}

fn badge(class: &str, label: &str) -> String {
    format!("<span class=\"badge {class}\">{}</span>", e(label))
}

fn list(out: &mut String, items: &[String]) {
    out.push_str("<ul>");
    for item in items {
        let _ = write!(out, "<li>{}</li>", e(item));
    }
    out.push_str("</ul>\n");
}

/// A table; `align` has one of `l`/`r` per column; cells are HTML already.
/// `row_classes`, when given, has one class per row (a status stripe).
fn table(
    out: &mut String,
    headers: &[&str],
    align: &str,
    rows: &[Vec<String>],
    row_classes: &[&str],
) {
    let class = |i: usize| {
        if align.as_bytes().get(i) == Some(&b'r') {
            " class=\"n\""
        } else {
            ""
        }
    };
    out.push_str("<table><thead><tr>");
    for (i, h) in headers.iter().enumerate() {
        let _ = write!(out, "<th{}>{}</th>", class(i), e(h));
    }
    out.push_str("</tr></thead><tbody>");
    for (r, row) in rows.iter().enumerate() {
        match row_classes.get(r) {
            Some(c) => {
                let _ = write!(out, "<tr class=\"{c}\">");
            }
            None => out.push_str("<tr>"),
        }
        for (i, cell) in row.iter().enumerate() {
            let _ = write!(out, "<td{}>{cell}</td>", class(i));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
}

fn or_none(s: Option<&str>) -> String {
    s.map_or_else(|| "<span class=\"note\">none</span>".into(), e)
}

fn codes<T: AsRef<str>>(items: &[T]) -> String {
    if items.is_empty() {
        "<span class=\"note\">none</span>".into()
    } else {
        items
            .iter()
            .map(|i| code(i.as_ref()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The badge class and label of a claim status.
fn status(s: ClaimStatus) -> (&'static str, &'static str) {
    match s {
        ClaimStatus::Accepted => ("ok", "✔ accepted"),
        ClaimStatus::Downgraded => ("warn", "▼ downgraded"),
        ClaimStatus::Rejected => ("bad", "✘ rejected"),
    }
}

/// The badge class and label of a gate outcome.
fn outcome(o: GateOutcome) -> (&'static str, &'static str) {
    match o {
        GateOutcome::Pass => ("ok", "✔ pass"),
        GateOutcome::Warn => ("warn", "⚠ warn"),
        GateOutcome::Fail => ("bad", "✘ fail"),
        GateOutcome::NoData => ("na", "∅ no data"),
    }
}

fn quality_badge(q: Quality) -> String {
    let class = match q {
        Quality::Improved => "ok",
        Quality::Regressed => "bad",
        Quality::Unchanged => "na",
        Quality::Neutral => "info",
    };
    badge(class, svg::quality_name(q))
}

fn card(out: &mut String, value: &str, label: &str, class: &str) {
    let _ = write!(
        out,
        "<div class=\"card {class}\"><b>{}</b><span>{}</span></div>",
        // Identifiers break after their underscores, not mid-word.
        e(value).replace('_', "_<wbr>"),
        e(label)
    );
}

fn summary(out: &mut String, r: &Report) {
    let s = &r.summary;
    let _ = writeln!(out, "<p class=\"headline\">{}</p>", e(&s.headline));
    if !s.lines.is_empty() {
        list(out, &s.lines);
    }
    out.push_str("<div class=\"cards\">");
    card(out, &s.prompts.to_string(), "paired prompts", "");
    card(out, r.access.level.as_str(), "access level", "");
    card(
        out,
        r.access.claim_strength.as_str(),
        "strongest claim allowed",
        "",
    );
    card(out, &s.claims_accepted.to_string(), "claims accepted", "");
    card(
        out,
        &s.claims_downgraded.to_string(),
        "claims downgraded",
        if s.claims_downgraded > 0 { "warn" } else { "" },
    );
    card(
        out,
        &s.claims_rejected.to_string(),
        "claims rejected",
        if s.claims_rejected > 0 { "bad" } else { "" },
    );
    card(
        out,
        &s.gates_failed.to_string(),
        "gates failed",
        if s.gates_failed > 0 { "bad" } else { "" },
    );
    card(
        out,
        &s.gates_warned.to_string(),
        "gates warned",
        if s.gates_warned > 0 { "warn" } else { "" },
    );
    card(
        out,
        &s.plugin_failures.to_string(),
        "plugin failures",
        if s.plugin_failures > 0 { "warn" } else { "" },
    );
    out.push_str("</div>\n");
}

fn target_change(out: &mut String, r: &Report) {
    let t = &r.target_change;
    let _ = writeln!(
        out,
        "<dl class=\"kv\"><dt>change</dt><dd>{}</dd><dt>transformation kind</dt><dd>{}</dd>\
         <dt>transformation</dt><dd>{}</dd></dl>",
        or_none(t.description.as_deref()),
        t.transformation_kind
            .as_deref()
            .map_or_else(|| or_none(None), code),
        or_none(t.transformation_summary.as_deref())
    );
    let rows: Vec<Vec<String>> = [&t.baseline, &t.candidate]
        .iter()
        .map(|m| {
            vec![
                e(&m.label),
                e(&m.model_name),
                m.model_sha256.as_deref().map_or_else(
                    || "<span class=\"note\">unknown</span>".into(),
                    |h| format!("<code title=\"{}\">{}</code>", e(h), e(&short_hash(h))),
                ),
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
        &[],
    );
}

fn access(out: &mut String, r: &Report) {
    let a = &r.access;
    let _ = writeln!(
        out,
        "<p>Access level <b>{}</b>; the strongest claim it allows is <b>{}</b>. The level comes \
         from what the traces hold, not from what was requested.</p>",
        code(a.level.as_str()),
        code(a.claim_strength.as_str())
    );
    out.push_str("<h3>This report can claim</h3>");
    if a.can_claim.is_empty() {
        note(out, "No claim strength is supported by the evidence.");
    } else {
        let rows: Vec<Vec<String>> = a
            .can_claim
            .iter()
            .map(|s| vec![badge("ok", "✔ can claim"), code(s.as_str()), e(s.needs())])
            .collect();
        let classes = vec!["row-ok"; rows.len()];
        table(out, &["", "strength", "backed by"], "lll", &rows, &classes);
    }
    out.push_str("<h3>This report cannot claim</h3>");
    if a.cannot_claim.is_empty() {
        note(out, "Every claim strength is supported by the evidence.");
    } else {
        let rows: Vec<Vec<String>> = a
            .cannot_claim
            .iter()
            .map(|u| {
                vec![
                    badge("bad", "✘ cannot claim"),
                    code(u.strength.as_str()),
                    e(&u.reason),
                ]
            })
            .collect();
        let classes = vec!["row-bad"; rows.len()];
        table(out, &["", "strength", "why not"], "lll", &rows, &classes);
    }
    out.push_str("<h3>Missing evidence</h3>");
    if a.missing_evidence.is_empty() {
        note(
            out,
            "Nothing: every kind of evidence the levels use is present on both sides.",
        );
    } else {
        list(out, &a.missing_evidence);
    }
    out.push_str("<h3>Causal scope</h3>");
    match &a.causal_scope {
        Some(scope) => {
            let _ = writeln!(out, "<p>{}</p>", e(scope));
        }
        None => note(out, NO_CAUSAL),
    }
}

fn plugins_table(out: &mut String, plugins: &[PluginRecord], full: bool) {
    let rows: Vec<Vec<String>> = plugins
        .iter()
        .map(|p| {
            let hash = if full {
                code(&p.sha256)
            } else {
                format!(
                    "<code title=\"{}\">{}</code>",
                    e(&p.sha256),
                    e(&short_hash(&p.sha256))
                )
            };
            if full {
                // The path under the name keeps the full hash on one line.
                vec![
                    format!("{}<br><small>{}</small>", code(&p.name), e(&p.path)),
                    code(&p.world),
                    code(&p.version),
                    code(&p.wit_version),
                    hash,
                ]
            } else {
                vec![code(&p.name), code(&p.version), code(&p.wit_version), hash]
            }
        })
        .collect();
    if full {
        table(
            out,
            &["plugin", "world", "version", "WIT", "sha256"],
            "lllll",
            &rows,
            &[],
        );
    } else {
        table(
            out,
            &["plugin", "version", "WIT", "sha256"],
            "llll",
            &rows,
            &[],
        );
    }
}

fn evidence(out: &mut String, r: &Report) {
    let ev = &r.evidence;
    let _ = writeln!(out, "<p><b>{}</b> paired prompts.</p>", ev.prompts);
    if ev.categories.is_empty() {
        note(out, "No prompt has a category.");
    } else {
        let rows: Vec<Vec<String>> = ev
            .categories
            .iter()
            .map(|(c, n)| vec![e(c), n.to_string()])
            .collect();
        table(out, &["category", "prompts"], "lr", &rows, &[]);
    }
    let kinds: Vec<&str> = ev.kinds_in_both.iter().map(|k| k.as_str()).collect();
    let _ = writeln!(
        out,
        "<p>Kinds in every trace of both sides: {}</p>",
        codes(&kinds)
    );
    out.push_str("<h3>Coverage</h3>");
    if r.access.coverage.is_empty() {
        note(out, "No coverage: the traces hold no artifact.");
    } else {
        let frac = |n: usize, of: usize| format!("{n} / {of}");
        let mut classes = Vec::new();
        let rows: Vec<Vec<String>> = r
            .access
            .coverage
            .iter()
            .map(|c| {
                let full = c.baseline == c.of_baseline && c.candidate == c.of_candidate;
                classes.push(if full { "row-ok" } else { "row-warn" });
                vec![
                    code(c.kind.as_str()),
                    frac(c.baseline, c.of_baseline),
                    match (c.candidate, c.of_candidate) {
                        (Some(n), Some(of)) => frac(n, of),
                        _ => "n/a (no candidate)".into(),
                    },
                    if full {
                        badge("ok", "complete")
                    } else {
                        badge("warn", "partial")
                    },
                ]
            })
            .collect();
        table(
            out,
            &[
                "artifact kind",
                "baseline traces",
                "candidate traces",
                "coverage",
            ],
            "lrrl",
            &rows,
            &classes,
        );
    }
    out.push_str("<h3>Scorers</h3>");
    if ev.scorers.is_empty() {
        note(out, "No scorer ran.");
    } else {
        plugins_table(out, &ev.scorers, false);
    }
    out.push_str("<h3>Claim mappers</h3>");
    if ev.claim_mappers.is_empty() {
        note(out, "No claim mapper ran.");
    } else {
        plugins_table(out, &ev.claim_mappers, false);
    }
    out.push_str("<h3>Plugin failures</h3>");
    if ev.plugin_failures.is_empty() {
        note(out, "No plugin failed.");
    } else {
        let rows: Vec<Vec<String>> = ev
            .plugin_failures
            .iter()
            .map(|f| {
                vec![
                    code(&f.plugin),
                    e(&f.stage),
                    f.failure
                        .as_deref()
                        .map_or_else(|| "n/a".into(), |x| badge("bad", x)),
                    e(&f.message),
                ]
            })
            .collect();
        let classes = vec!["row-bad"; rows.len()];
        table(
            out,
            &["plugin", "stage", "failure", "message"],
            "llll",
            &rows,
            &classes,
        );
    }
}

fn claims(out: &mut String, r: &Report) {
    if r.claims.is_empty() {
        note(out, NO_CLAIMS);
        return;
    }
    let mut classes = Vec::new();
    let rows: Vec<Vec<String>> = r
        .claims
        .iter()
        .map(|c| {
            let (class, label) = status(c.status);
            classes.push(match class {
                "ok" => "row-ok",
                "warn" => "row-warn",
                _ => "row-bad",
            });
            let strength = match c.strength {
                Some(s) if s == c.proposed_strength => code(s.as_str()),
                Some(s) => format!(
                    "{}<br><small>proposed {}</small>",
                    code(s.as_str()),
                    code(c.proposed_strength.as_str())
                ),
                None => format!(
                    "none<br><small>proposed {}</small>",
                    code(c.proposed_strength.as_str())
                ),
            };
            let mut why = String::new();
            if !c.reasons.is_empty() {
                why.push_str("<ul>");
                for reason in &c.reasons {
                    let _ = write!(why, "<li>{}</li>", e(reason));
                }
                why.push_str("</ul>");
            }
            if !c.limitations.is_empty() {
                why.push_str("<small>limitations:</small><ul>");
                for l in &c.limitations {
                    let _ = write!(why, "<li>{}</li>", e(l));
                }
                why.push_str("</ul>");
            }
            if why.is_empty() {
                why = "<span class=\"note\">none</span>".into();
            }
            // Four columns, so the table fits beside the contents: the
            // citations and the mapper sit under the statement.
            vec![
                badge(class, label),
                format!(
                    "<div class=\"wide\">{}</div><small>mapper: {}</small><br>{}",
                    e(&c.statement),
                    code(&c.mapper),
                    evidence_list(&c.evidence)
                ),
                strength,
                format!("<div class=\"wide\">{why}</div>"),
            ]
        })
        .collect();
    table(
        out,
        &["status", "claim", "strength", "reasons and limitations"],
        "llll",
        &rows,
        &classes,
    );
}

/// A claim's cited evidence; a long list folds away so the claim stays readable.
fn evidence_list(ids: &[String]) -> String {
    if ids.len() > 6 {
        format!(
            "<details class=\"cites\"><summary>evidence: {} ids</summary>{}</details>",
            ids.len(),
            codes(ids)
        )
    } else {
        format!("<small>evidence: {}</small>", codes(ids))
    }
}

fn deltas(out: &mut String, r: &Report) {
    if r.metric_deltas.is_empty() {
        note(out, NO_DELTAS);
        return;
    }
    if let Some(plot) = svg::forest_plot(&r.metric_deltas) {
        let _ = writeln!(
            out,
            "<figure>{plot}<figcaption>Delta per metric and category with its 95% paired \
             bootstrap interval; dashed line: no change; hollow marker: no interval.\
             </figcaption></figure>"
        );
    }
    out.push_str(
        "<p>Delta is candidate − baseline; change is the delta over |baseline| in percent; 95% CI \
         is the paired bootstrap interval of the delta; the bracket under a 0/1 metric's \
         rate is that side's Wilson 95% interval; p is McNemar's exact test for 0/1 metrics and a \
         sign-flip permutation test otherwise; * marks p &lt; 0.05 with a CI excluding 0.</p>\n",
    );
    for (metric, rows) in deltas_by_metric(&r.metric_deltas) {
        delta_table(out, metric, &rows);
    }
}

fn delta_table(out: &mut String, metric: &str, rows: &[&ReportDelta]) {
    let first = rows[0];
    let polarity = match first.polarity {
        crate::evidence::Polarity::HigherIsBetter => "higher is better",
        crate::evidence::Polarity::LowerIsBetter => "lower is better",
        crate::evidence::Polarity::Neutral => "no better direction",
    };
    let _ = writeln!(
        out,
        "<h3>{} <small>({}, {polarity}, scorer {})</small></h3>",
        code(metric),
        e(&first.unit),
        code(&first.scorer)
    );
    // A rate's Wilson interval sits under the rate itself, which keeps the
    // table narrow enough to read without scrolling.
    let with_ci = |mean: f64, ci: Option<[f64; 2]>| match ci {
        Some(_) => format!(
            "{}<br><small title=\"Wilson 95% interval\">{}</small>",
            num(mean),
            e(&rate_ci(ci))
        ),
        None => num(mean),
    };
    let headers = [
        "category",
        "n",
        "baseline",
        "candidate",
        "delta",
        "change",
        "95% CI",
        "test",
        "p",
        "quality",
    ];
    let align = "lrrrrrrlrl";
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|d| {
            vec![
                e(category_label(d.category.as_deref())),
                d.n.to_string(),
                with_ci(d.baseline_mean, d.baseline_rate_ci),
                with_ci(d.candidate_mean, d.candidate_rate_ci),
                format!(
                    "<b>{}</b>{}",
                    e(&signed(d.delta)),
                    if d.significant { " *" } else { "" }
                ),
                e(&percent(d.percent_change)),
                e(&delta_ci(d)),
                code(d.test.as_str()),
                e(&p_value(d.p_value)),
                quality_badge(d.quality),
            ]
        })
        .collect();
    table(out, &headers, align, &cells, &[]);
}

fn distribution(out: &mut String, r: &Report) {
    let Some(d): Option<&DistributionShift> = r.distribution.as_ref() else {
        note(out, &no_distribution(r));
        return;
    };
    let _ = writeln!(
        out,
        "<p>KL(baseline ‖ candidate) between next-token distributions along the baseline's \
         continuation, each side after its own prompt, in nats, over {}.</p>",
        e(&kl_support(d))
    );
    out.push_str("<div class=\"cards\">");
    card(
        out,
        &num(d.first_token_kl_mean),
        "first-token KL, mean over prompts",
        "",
    );
    card(
        out,
        &num(d.mean_kl),
        "mean KL over the teacher-forced continuation",
        "",
    );
    out.push_str("</div>\n");
    if d.by_category.is_empty() {
        note(out, "No category has a KL figure.");
    } else {
        let rows: Vec<Vec<String>> = d
            .by_category
            .iter()
            .map(|(c, v)| vec![e(c), num(*v)])
            .collect();
        table(out, &["category", "first-token KL"], "lr", &rows, &[]);
    }
    match svg::kl_by_position_plot(&d.by_position) {
        Some(plot) => {
            let _ = writeln!(
                out,
                "<figure>{plot}<figcaption>Mean KL by generated position ({} positions).\
                 </figcaption></figure>",
                d.by_position.len()
            );
        }
        None => note(out, "No per-position KL was recorded."),
    }
    if d.per_prompt.is_empty() {
        note(out, "No per-prompt KL was recorded.");
    } else {
        let _ = write!(
            out,
            "<details><summary>Per prompt ({} prompts)</summary>",
            d.per_prompt.len()
        );
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
            &[],
        );
        out.push_str("</details>\n");
    }
}

fn activations(out: &mut String, r: &Report) {
    let Some(a): Option<&ActivationFindings> = r.activation_findings.as_ref() else {
        note(out, NO_ACTIVATIONS);
        return;
    };
    let _ = writeln!(
        out,
        "<p>Mean projection of the last prompt token's residual onto the direction {} \
         (sha256 <code title=\"{}\">{}</code>), per layer, per side and category.</p>",
        code(&a.direction),
        e(&a.direction_sha256),
        e(&short_hash(&a.direction_sha256))
    );
    if a.findings.is_empty() {
        note(out, "No finding was derived.");
    } else {
        list(out, &a.findings);
    }
    match svg::projection_plot(a) {
        Some(plot) => {
            let _ = writeln!(
                out,
                "<figure>{plot}<figcaption>Solid lines: baseline; dashed: candidate; one colour \
                 per category.</figcaption></figure>"
            );
        }
        None => {
            note(out, "No projection series was recorded.");
            return;
        }
    }
    let headers: Vec<String> = std::iter::once("layer".to_string())
        .chain(
            a.series
                .iter()
                .map(|s| format!("{} · {} (n={})", s.side, s.category, s.prompts)),
        )
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
    out.push_str("<details><summary>Mean projection per layer (table)</summary>");
    table(out, &header_refs, &"r".repeat(headers.len()), &rows, &[]);
    out.push_str("</details>\n");
}

fn labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "<span class=\"note\">none</span>".into();
    }
    labels
        .iter()
        .map(|(k, v)| code(&format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn layer_list(layers: &[usize]) -> String {
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

fn interventions(out: &mut String, r: &Report) {
    if r.interventions.is_empty() {
        note(out, NO_INTERVENTIONS);
    } else {
        let rows: Vec<Vec<String>> = r
            .interventions
            .iter()
            .map(|i| {
                vec![
                    e(i.side.as_str()),
                    e(&i.description),
                    i.traces.to_string(),
                    layer_list(&i.layers),
                    labels(&i.labels),
                ]
            })
            .collect();
        table(
            out,
            &["side", "intervention", "traces", "layers", "labels"],
            "llrll",
            &rows,
            &[],
        );
    }
    let refs = &r.access.interventions;
    if !refs.is_empty() {
        let _ = write!(
            out,
            "<details><summary>Intervention records, the scope of any causal statement ({})</summary>",
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
            &[],
        );
        out.push_str("</details>\n");
    }
}

fn examples(out: &mut String, r: &Report) {
    if r.examples.is_empty() {
        note(out, NO_EXAMPLES);
        return;
    }
    for x in &r.examples {
        example(out, x);
    }
}

/// A text block, or a note saying it is not shown.
fn shown(out: &mut String, label: &str, body: Option<&str>, missing: &str) {
    let _ = write!(out, "<div><b>{}</b>", e(label));
    match body {
        Some(b) => {
            let _ = write!(out, "<pre>{}</pre>", e(b));
        }
        None => {
            let _ = write!(out, "<div class=\"hidden-text\">{}</div>", e(missing));
        }
    }
    out.push_str("</div>");
}

fn example(out: &mut String, x: &Example) {
    let redaction = match x.redaction {
        Redaction::Safe => badge("ok", "safe"),
        Redaction::Redacted => badge("warn", "redacted"),
        Redaction::Omitted => badge("na", "omitted"),
    };
    let _ = write!(
        out,
        "<article class=\"example\"><h3>{} <small>{}</small> {redaction}</h3>\
         <p><b>Why:</b> {}</p>",
        code(&x.prompt_id),
        or_none(x.category.as_deref()),
        e(&x.why)
    );
    shown(out, "Prompt", x.prompt.as_deref(), "omitted");
    out.push_str("<div class=\"sides\">");
    shown(
        out,
        "Baseline output",
        x.baseline_output.as_deref(),
        "hidden",
    );
    shown(
        out,
        "Candidate output",
        x.candidate_output.as_deref(),
        "hidden",
    );
    out.push_str("</div>");
    if !x.changed_metrics.is_empty() {
        let rows: Vec<Vec<String>> = x
            .changed_metrics
            .iter()
            .map(|(m, [b, c])| vec![code(m), num(*b), num(*c)])
            .collect();
        table(out, &["metric", "baseline", "candidate"], "lrr", &rows, &[]);
    }
    out.push_str("</article>\n");
}

fn gates(out: &mut String, r: &Report) {
    if r.gates.is_empty() {
        note(out, NO_GATES);
        return;
    }
    let mut classes = Vec::new();
    let rows: Vec<Vec<String>> = r
        .gates
        .iter()
        .map(|g| {
            let (class, label) = outcome(g.outcome);
            classes.push(match class {
                "ok" => "row-ok",
                "warn" => "row-warn",
                "bad" => "row-bad",
                _ => "row-na",
            });
            let metric = match &g.category {
                Some(c) => format!("{}@{c}", g.metric),
                None => g.metric.clone(),
            };
            let lo = g.min_delta.map_or_else(|| "−∞".into(), num);
            let hi = g.max_delta.map_or_else(|| "+∞".into(), num);
            vec![
                badge(class, label),
                e(&g.name),
                code(&metric),
                e(g.severity.as_str()),
                e(&format!("[{lo}, {hi}]")),
                g.observed_delta.map_or_else(
                    || "<span class=\"note\">not measured</span>".into(),
                    |d| e(&signed(d)),
                ),
                e(&g.message),
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
        &classes,
    );
}

fn limitations(out: &mut String, r: &Report) {
    if r.limitations.is_empty() {
        note(out, NO_LIMITATIONS);
    } else {
        list(out, &r.limitations);
    }
}

fn reproducibility(out: &mut String, r: &Report) {
    let p = &r.reproducibility;
    let _ = writeln!(
        out,
        "<p>Command:</p><pre><code>{}</code></pre>\
         <dl class=\"kv\"><dt>tool version</dt><dd>{}</dd><dt>config</dt><dd>{}</dd>\
         <dt>config sha256</dt><dd>{}</dd><dt>suite sha256</dt><dd>{}</dd></dl>",
        e(&p.command),
        code(&p.tool_version),
        code(&p.config_path),
        code(&p.config_sha256),
        code(&p.suite_sha256)
    );
    let _ = writeln!(
        out,
        "<details><summary>Config text ({})</summary><pre><code>{}</code></pre></details>",
        e(&p.config_path),
        e(&p.config_text)
    );
    out.push_str("<h3>Models</h3>");
    if p.models.is_empty() {
        note(out, "No model hash was recorded.");
    } else {
        let rows: Vec<Vec<String>> = p.models.iter().map(|(s, h)| vec![e(s), code(h)]).collect();
        table(out, &["side", "sha256"], "ll", &rows, &[]);
    }
    out.push_str("<h3>Plugins</h3>");
    if p.plugins.is_empty() {
        note(out, "No plugin ran.");
    } else {
        plugins_table(out, &p.plugins, true);
    }
    out.push_str("<h3>Trace bundles</h3>");
    if p.bundles.is_empty() {
        note(out, "No trace bundle was recorded.");
    } else {
        let rows: Vec<Vec<String>> = p
            .bundles
            .iter()
            .map(|(s, b)| {
                vec![
                    e(s),
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
            &[],
        );
    }
    out.push_str("<h3>Seeds</h3>");
    if p.seeds.is_empty() {
        note(out, "No seed was recorded.");
    } else {
        let rows: Vec<Vec<String>> = p
            .seeds
            .iter()
            .map(|(k, v)| vec![e(k), v.to_string()])
            .collect();
        table(out, &["seed", "value"], "lr", &rows, &[]);
    }
    out.push_str("<h3>Stage timings</h3>");
    if p.stages.is_empty() {
        note(out, "No stage timing was recorded.");
    } else {
        let mut rows: Vec<Vec<String>> = p
            .stages
            .iter()
            .map(|s| vec![e(&s.stage), num(s.seconds), e(&s.note)])
            .collect();
        rows.push(vec![
            "<b>total</b>".into(),
            format!("<b>{}</b>", num(total_seconds(&p.stages))),
            String::new(),
        ]);
        table(out, &["stage", "seconds", "note"], "lrl", &rows, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_text_and_attributes() {
        assert_eq!(
            e("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn every_gate_outcome_has_its_own_badge() {
        use GateOutcome as G;
        let labels: Vec<&str> = [G::Pass, G::Warn, G::Fail, G::NoData]
            .into_iter()
            .map(|o| outcome(o).1)
            .collect();
        assert_eq!(labels, ["✔ pass", "⚠ warn", "✘ fail", "∅ no data"]);
    }
}
