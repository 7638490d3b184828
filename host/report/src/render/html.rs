//! `report.html`: the report's view printed as one self-contained file.
//! Inline CSS (light and dark via `prefers-color-scheme`), inline SVG
//! plots, no font, image or stylesheet fetched from anywhere, and one
//! small inline script ([`SCRIPT`], `prompts.js`) that sorts and filters
//! the prompt table. The Content-Security-Policy allows inline styles and
//! that script by its sha256, nothing else, so a string that slipped
//! through could neither load nor run anything. The page reads the same
//! without the script: the full prompt table is in the markup. Every
//! report string is escaped, since prompts and model outputs are
//! untrusted; the script reads only the DOM (no JSON island, no HTML
//! parsing). Statuses carry a word and a symbol as well as a colour.

use std::fmt::Write as _;

use super::svg::escape as e;
use super::view::{
    self, Align, Block, Card, Claim, Column, Example, Inline, PromptLine, PromptTable, Row, Shown,
    Table,
};
use super::words::{self, Tone, short_hash};
use crate::document::{Redaction, Report};

/// The page's one script: sorting and filtering the prompt table. The
/// page's Content-Security-Policy allows it by its sha256
/// ([`script_hash`]), computed from these bytes as they are written.
pub const SCRIPT: &str = include_str!("prompts.js");

const CSS: &str = r#"
:root{color-scheme:light dark;--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--border:#d1d9e0;--link:#0969da;
--ok:#1a7f37;--ok-bg:#dafbe1;--warn:#7d4e00;--warn-bg:#fff8c5;--bad:#cf222e;--bad-bg:#ffebe9;--info:#0969da;--info-bg:#ddf4ff;--na:#59636e;--na-bg:#eff2f5;--mark:#fff1a8}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;--panel:#151b23;--border:#3d444d;--link:#4493f8;
--ok:#3fb950;--ok-bg:#12261e;--warn:#d29922;--warn-bg:#272115;--bad:#f85149;--bad-bg:#2d1214;--info:#4493f8;--info-bg:#121d2f;--na:#9198a1;--na-bg:#1f242c;--mark:#5a4a00}}
*{box-sizing:border-box}
body{margin:0;font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--link)}
header.top{padding:1.4rem 2rem 1rem;border-bottom:1px solid var(--border)}
h1{font-size:1.6rem;line-height:1.25;margin:0 0 .4rem}
.meta{color:var(--muted);margin:0;font-size:.9rem}
.layout{display:grid;grid-template-columns:15rem minmax(0,1fr);gap:2.5rem;max-width:92rem;margin:0 auto;padding:0 2rem}
nav.toc{position:sticky;top:0;align-self:start;max-height:100vh;overflow-y:auto;padding:1.2rem 0;font-size:.9rem}
nav.toc h2{font-size:.8rem;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:0 0 .5rem}
nav.toc ol{margin:0;padding-left:2.4em}nav.toc li{margin:0;padding:.125rem 0;break-inside:avoid}nav.toc a{text-decoration:none}nav.toc a:hover{text-decoration:underline}
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
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,15rem),1fr));gap:.6rem;margin:.6rem 0 1rem}
.card{border:1px solid var(--border);border-left-width:4px;border-radius:8px;background:var(--panel);padding:.55rem .8rem;min-width:0}
.card b{display:block;font-size:1.3rem;line-height:1.3;font-variant-numeric:tabular-nums}
.card .what{display:block;font-size:.9rem;overflow-wrap:break-word}.card .what a{color:inherit}
.card small{display:block;color:var(--muted);font-size:.8rem;margin-top:.15rem}
.card.tone-bad{border-color:var(--bad)}.card.tone-bad b{color:var(--bad)}.card.tone-warn{border-color:var(--warn)}.card.tone-warn b{color:var(--warn)}
.card.tone-ok{border-color:var(--ok)}.card.tone-ok b{color:var(--ok)}.card.tone-info{border-color:var(--info)}.card.tone-info b{color:var(--info)}
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
a.to-prompts{font-size:.78rem;white-space:nowrap}
mark{background:var(--mark);color:inherit;border-radius:2px}mark.end:empty::after{content:"(ends here)";color:var(--muted);font-style:italic}
.diff-at{color:var(--muted);font-size:.82rem;margin:.1rem 0 .3rem}
table.prompts{font-size:.84rem;container-type:inline-size}table.prompts tbody{border-top:2px solid var(--border)}
table.prompts thead th:first-child,table.prompts tr:not(.texts)>td:first-child{position:sticky;left:0;z-index:1;background:var(--panel)}
table.prompts th.n{min-width:5.5rem}table.prompts td:first-child code{white-space:nowrap}table.prompts td.n small{color:var(--muted)}
table.prompts td.chg{background:var(--warn-bg)}table.prompts td.chg small{color:var(--fg)}
table.prompts tr.texts td{background:var(--bg)}
.texts3{display:grid;grid-template-columns:minmax(0,.8fr) minmax(0,1fr) minmax(0,1fr);gap:.6rem;min-width:36rem;position:sticky;left:.6rem;width:calc(100cqw - 1.4rem)}
.texts3 pre{max-height:13rem;overflow:auto;margin:.15rem 0 .3rem}.texts3 .hidden-text{margin:.15rem 0 .3rem;padding:.3rem .6rem}
.filters{display:flex;flex-wrap:wrap;gap:.4rem 1rem;align-items:center;margin:.6rem 0;padding:.5rem .7rem;border:1px solid var(--border);border-radius:6px;background:var(--panel);font-size:.88rem}
.filters input,.filters select,.filters button{font:inherit;color:var(--fg);background:var(--bg);border:1px solid var(--border);border-radius:4px;padding:.15rem .35rem}
.filters input{width:14rem;max-width:100%}.filters output{color:var(--muted)}
button.sort{font:inherit;font-weight:600;color:inherit;background:none;border:0;padding:0;cursor:pointer;text-align:inherit}
button.sort::after{content:" ↕";color:var(--muted);font-weight:400}th[aria-sort=ascending] button.sort::after{content:" ▲"}th[aria-sort=descending] button.sort::after{content:" ▼"}
details.cites{margin:0;font-size:.85em}details.cites summary{font-weight:400}
footer{color:var(--muted);font-size:.8rem;text-align:center;padding:1.5rem}
@media (max-width:60rem){.layout{grid-template-columns:1fr;padding:0 1rem}nav.toc{position:static;max-height:none;border-bottom:1px solid var(--border)}nav.toc ol{columns:2;column-gap:2rem}.sides{grid-template-columns:1fr}}
@media (max-width:36rem){nav.toc ol{columns:1}}
@media print{nav.toc,.filters{display:none}.layout{display:block}}
"#;

/// Renders `report` as one self-contained HTML page.
pub fn html(report: &Report) -> String {
    let doc = view::document(report);
    let mut out = String::with_capacity(64 * 1024);
    let title = e(&doc.title);
    // The script runs only where there is a prompt table to sort; the
    // policy allows it by its hash, and no other script at all.
    let scripted = doc
        .sections
        .iter()
        .flat_map(|s| &s.blocks)
        .any(|b| matches!(b, Block::Prompts(_)));
    let script_src = if scripted {
        format!("; script-src '{}'", script_hash())
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:{script_src}\">\n\
         <meta name=\"generator\" content=\"vauban {}\">\n<title>{title}</title>\n\
         <style>{CSS}</style>\n</head>\n<body>\n",
        e(&doc.tool_version)
    );
    let _ = writeln!(
        out,
        "<header class=\"top\"><h1>{title}</h1><p class=\"meta\">{}</p></header>",
        inlines(&doc.byline)
    );
    out.push_str(
        "<div class=\"layout\">\n<nav class=\"toc\" aria-label=\"Contents\"><h2>Contents</h2><ol>",
    );
    for s in &doc.sections {
        let _ = write!(out, "<li><a href=\"#{}\">{}</a></li>", s.anchor, s.title);
    }
    out.push_str("</ol></nav>\n<main>\n");
    for (i, s) in doc.sections.iter().enumerate() {
        let _ = write!(
            out,
            "<section id=\"{}\">\n<h2><span class=\"num\">{}.</span>{}</h2>\n",
            s.anchor,
            i + 1,
            s.title
        );
        for b in &s.blocks {
            block(&mut out, b);
        }
        out.push_str("</section>\n");
    }
    let _ = write!(
        out,
        "</main>\n</div>\n<footer>Written by vauban {} from report.json (schema {}).</footer>\n",
        e(&doc.tool_version),
        e(&doc.schema)
    );
    if scripted {
        let _ = writeln!(out, "<script>{SCRIPT}</script>");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// The CSP source that allows [`SCRIPT`]: `sha256-` and the base64 of the
/// sha256 of its bytes.
pub fn script_hash() -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(SCRIPT.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// Escapes vauban's own words for element content: they hold no quote
/// that matters outside an attribute, and stay readable in the source.
fn plain(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The CSS class of a tone (badges, cards, row stripes).
fn class(tone: Tone) -> &'static str {
    match tone {
        Tone::Ok => "ok",
        Tone::Warn => "warn",
        Tone::Bad => "bad",
        Tone::Info => "info",
        Tone::Na => "na",
    }
}

fn code(s: &str) -> String {
    format!("<code>{}</code>", e(s))
}

/// One block. Headings of a section's fixed parts run into what follows;
/// everything else ends its line, which keeps the source diffable.
fn block(out: &mut String, b: &Block) {
    match b {
        Block::Lead(s) => {
            let _ = writeln!(out, "<p class=\"headline\">{}</p>", e(s));
        }
        Block::Paragraph(p) => {
            let _ = writeln!(out, "<p>{}</p>", inlines(p));
        }
        Block::Note(s) => {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", e(s));
        }
        Block::List(items) => {
            list(out, items);
            out.push('\n');
        }
        Block::Fields(fields) => {
            out.push_str("<dl class=\"kv\">");
            for (name, value) in fields {
                let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", plain(name), inlines(value));
            }
            out.push_str("</dl>\n");
        }
        Block::Heading(h) => {
            let _ = writeln!(out, "<h3>{}</h3>", inlines(h));
        }
        Block::Subheading(s) => {
            let _ = write!(out, "<h3>{}</h3>", plain(s));
        }
        Block::Cards(cards) => {
            out.push_str("<div class=\"cards\">");
            for c in cards {
                card(out, c);
            }
            out.push_str("</div>\n");
        }
        Block::Table(t) => table(out, t),
        Block::Fenced { caption, text, .. } => {
            if let Some(caption) = caption {
                let _ = write!(out, "<p>{}:</p>", plain(caption));
            }
            let _ = write!(out, "<pre><code>{}</code></pre>", e(text));
        }
        Block::Plot { svg, caption } => {
            let _ = writeln!(
                out,
                "<figure>{svg}<figcaption>{}</figcaption></figure>",
                plain(caption)
            );
        }
        Block::Details { summary, blocks } => {
            let _ = write!(out, "<details><summary>{}</summary>", inlines(summary));
            for b in blocks {
                block(out, b);
            }
            out.push_str("</details>\n");
        }
        Block::Claims(claims) => self::claims(out, claims),
        Block::Example(x) => example(out, x),
        Block::Prompts(t) => prompts(out, t),
    }
}

fn list(out: &mut String, items: &[String]) {
    out.push_str("<ul>");
    for item in items {
        let _ = write!(out, "<li>{}</li>", e(item));
    }
    out.push_str("</ul>");
}

/// A card: the figure, what it is (a link to its row when it has one),
/// and its detail. Identifiers break after their underscores, never
/// mid-word.
fn card(out: &mut String, c: &Card) {
    let tone = c
        .tone
        .map_or_else(String::new, |t| format!(" tone-{}", class(t)));
    let mut what = breakable(&inlines(&c.label));
    if let Some(anchor) = &c.link {
        what = format!("<a href=\"#{}\">{what}</a>", e(anchor));
    }
    let _ = write!(
        out,
        "<div class=\"card{tone}\"><b>{}</b><span class=\"what\">{what}</span>",
        breakable(&e(&c.value))
    );
    if !c.detail.is_empty() {
        let _ = write!(out, "<small>{}</small>", inlines(&c.detail));
    }
    out.push_str("</div>");
}

/// HTML with a break opportunity after each underscore of its text, so a
/// long identifier wraps at its words rather than overflowing or breaking
/// anywhere. Tags are left alone: escaped text holds no `<` or `>`, so
/// every `<` opens markup and the next `>` closes it.
fn breakable(html: &str) -> String {
    let mut out = String::with_capacity(html.len() + 16);
    let mut in_tag = false;
    for ch in html.chars() {
        out.push(ch);
        match ch {
            '<' => in_tag = true,
            '>' => in_tag = false,
            '_' if !in_tag => out.push_str("<wbr>"),
            _ => {}
        }
    }
    out
}

/// Inline runs, concatenated.
fn inlines(runs: &[Inline]) -> String {
    runs.iter().map(inline).collect()
}

fn inline(run: &Inline) -> String {
    match run {
        Inline::Text(s) => e(s),
        Inline::Plain(s) => plain(s),
        Inline::Highlight(s) => format!("<b>{}</b>", plain(s)),
        Inline::Strong(runs) => format!("<b>{}</b>", inlines(runs)),
        Inline::Code(s) => code(s),
        // Code spans are boxed on the page: a space sets them apart.
        Inline::Codes(items) => items.iter().map(|i| code(i)).collect::<Vec<_>>().join(" "),
        Inline::Hash(h) => format!("<code title=\"{}\">{}</code>", e(h), e(&short_hash(h))),
        Inline::Missing(s) => format!("<span class=\"note\">{}</span>", e(s)),
        Inline::Badge(tone, label) => badge(*tone, label),
        Inline::Status(tone, label) => badge(*tone, label),
        Inline::Aside(runs) => format!(" <small>({})</small>", inlines(runs)),
        Inline::Below(runs) => format!("<br><small>{}</small>", inlines(runs)),
    }
}

fn badge(tone: Tone, label: &str) -> String {
    format!("<span class=\"badge {}\">{}</span>", class(tone), e(label))
}

/// Whether a cell has nothing to show under another.
fn is_missing(cell: &[Inline]) -> bool {
    cell.iter().all(|i| matches!(i, Inline::Missing(_)))
}

/// A table. A detail column is no column here: each of its cells sits
/// under the cell it details, unless it is missing.
fn table(out: &mut String, t: &Table) {
    let own: Vec<(usize, &Column)> = t
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| c.under.is_none())
        .collect();
    let headers: Vec<(String, Align)> = own
        .iter()
        .map(|(_, c)| (inlines(&c.header), c.align))
        .collect();
    let rows: Vec<GridRow> = t
        .rows
        .iter()
        .map(|row| {
            let cells = own
                .iter()
                .enumerate()
                .map(|(n, &(j, _))| {
                    let mut cell = inlines(&row.cells[j]);
                    for (k, c) in t.columns.iter().enumerate() {
                        let Some(under) = c.under.as_ref().filter(|u| u.column == j) else {
                            continue;
                        };
                        if is_missing(&row.cells[k]) {
                            continue;
                        }
                        let title = under
                            .title
                            .map_or_else(String::new, |t| format!(" title=\"{}\"", e(t)));
                        let _ =
                            write!(cell, "<br><small{title}>{}</small>", inlines(&row.cells[k]));
                    }
                    if n == 0 {
                        cell.push_str(&prompt_link(row));
                    }
                    cell
                })
                .collect();
            GridRow {
                tone: row.tone,
                anchor: row.anchor.clone(),
                cells,
            }
        })
        .collect();
    grid(out, &headers, &rows);
}

/// A row's link to the prompts behind it, in the prompt table (which the
/// page's script filters to them); empty for a row without one.
fn prompt_link(row: &Row) -> String {
    let Some(f) = &row.filter else {
        return String::new();
    };
    let category = f
        .category
        .as_ref()
        .map_or_else(String::new, |c| format!(" data-category=\"{}\"", e(c)));
    format!(
        "<br><a class=\"to-prompts\" href=\"#prompts\" data-metric=\"{}\"{category} \
         title=\"the prompts of this row whose metric changed, in the prompt table\">\
         prompts ↓</a>",
        e(&f.metric)
    )
}

/// A row of [`grid`]: its status stripe, its anchor, its cells (HTML).
struct GridRow {
    tone: Option<Tone>,
    anchor: Option<String>,
    cells: Vec<String>,
}

/// A table from escaped headers and HTML cells, each row with an optional
/// status stripe and anchor.
fn grid(out: &mut String, headers: &[(String, Align)], rows: &[GridRow]) {
    let numeric = |i: usize| {
        if headers.get(i).is_some_and(|(_, a)| *a == Align::Right) {
            " class=\"n\""
        } else {
            ""
        }
    };
    out.push_str("<table><thead><tr>");
    for (i, (h, _)) in headers.iter().enumerate() {
        let _ = write!(out, "<th{}>{h}</th>", numeric(i));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr");
        if let Some(anchor) = &row.anchor {
            let _ = write!(out, " id=\"{}\"", e(anchor));
        }
        if let Some(t) = row.tone {
            let _ = write!(out, " class=\"row-{}\"", class(t));
        }
        out.push('>');
        for (i, cell) in row.cells.iter().enumerate() {
            let _ = write!(out, "<td{}>{cell}</td>", numeric(i));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
}

/// The claims as a table of four columns, so it fits beside the
/// contents: the citations and the mapper sit under the statement.
fn claims(out: &mut String, claims: &[Claim]) {
    let headers: Vec<(String, Align)> =
        Claim::COLUMNS.iter().map(|h| (e(h), Align::Left)).collect();
    let rows: Vec<GridRow> = claims
        .iter()
        .map(|c| {
            let mut why = String::new();
            if !c.reasons.is_empty() {
                list(&mut why, &c.reasons);
            }
            if !c.limitations.is_empty() {
                let _ = write!(why, "<small>{}:</small>", Claim::LIMITATIONS);
                list(&mut why, &c.limitations);
            }
            if why.is_empty() {
                why = inline(&Inline::Missing(Claim::NO_REASONS));
            }
            let cells = vec![
                inline(&Inline::Status(c.tone, c.status)),
                format!(
                    "<div class=\"wide\">{}</div><small>{}: {}</small><br>{}",
                    e(&c.statement),
                    Claim::MAPPER,
                    code(&c.mapper),
                    evidence_list(&c.evidence)
                ),
                inlines(&c.strength),
                format!("<div class=\"wide\">{why}</div>"),
            ];
            GridRow {
                tone: Some(c.tone),
                anchor: None,
                cells,
            }
        })
        .collect();
    grid(out, &headers, &rows);
}

/// A claim's cited evidence; a long list folds away so the claim stays
/// readable.
fn evidence_list(evidence: &Inline) -> String {
    match evidence {
        Inline::Codes(ids) if ids.len() > 6 => format!(
            "<details class=\"cites\"><summary>{}: {} ids</summary>{}</details>",
            Claim::EVIDENCE,
            ids.len(),
            inline(evidence)
        ),
        _ => format!("<small>{}: {}</small>", Claim::EVIDENCE, inline(evidence)),
    }
}

/// An example as an article: the prompt, then the two outputs side by
/// side.
fn example(out: &mut String, x: &Example) {
    let _ = write!(
        out,
        "<article class=\"example\"><h3>{} <small>{}</small> {}</h3>\
         <p><b>{}:</b> {}</p>",
        code(&x.id),
        inline(&x.category),
        inline(&x.redaction),
        Example::WHY,
        e(&x.why)
    );
    let [prompt, sides @ ..] = &x.texts;
    shown(out, prompt, None);
    out.push_str("<div class=\"sides\">");
    for s in sides {
        shown(out, s, x.first_difference);
    }
    out.push_str("</div>");
    if let Some(at) = x.first_difference {
        let _ = write!(out, "<p class=\"diff-at\">{}</p>", differ_words(at));
    }
    if let Some(t) = &x.metrics {
        table(out, t);
    }
    out.push_str("</article>\n");
}

/// A text block, marked from character `mark` on, or a note saying it is
/// not shown.
fn shown(out: &mut String, s: &Shown, mark: Option<usize>) {
    let _ = write!(out, "<div><b>{}</b>", e(s.label));
    text_block(out, &s.text, mark);
    out.push_str("</div>");
}

/// Untrusted text in a `<pre>`, escaped, the part from character `mark`
/// on in a `<mark>` (an empty one where the text ends there); or the word
/// for why it is not shown.
fn text_block(out: &mut String, text: &Result<String, &'static str>, mark: Option<usize>) {
    match text {
        Ok(body) => {
            // The offset is counted in characters; one past the end (or a
            // damaged report's offset) marks nothing.
            let split = mark.and_then(|m| match body.char_indices().nth(m) {
                Some((at, _)) => Some(at),
                None => (body.chars().count() == m).then_some(body.len()),
            });
            match split {
                Some(at) => {
                    let (head, tail) = body.split_at(at);
                    let end = if tail.is_empty() {
                        " class=\"end\""
                    } else {
                        ""
                    };
                    let _ = write!(out, "<pre>{}<mark{end}>{}</mark></pre>", e(head), e(tail));
                }
                None => {
                    let _ = write!(out, "<pre>{}</pre>", e(body));
                }
            }
        }
        Err(missing) => {
            let _ = write!(out, "<div class=\"hidden-text\">{}</div>", e(missing));
        }
    }
}

/// Where two outputs first differ, in words.
fn differ_words(at: usize) -> String {
    match at {
        0 => "The outputs differ from their first character; each is marked.".into(),
        at => format!(
            "The outputs agree on their first {at} character(s); each is marked from where \
             they differ."
        ),
    }
}

/// The prompt table: per prompt a `<tbody>` of two rows (the figures,
/// then the three texts), which the script sorts and hides as one. The
/// attributes the script reads are escaped like any text.
fn prompts(out: &mut String, t: &PromptTable) {
    let columns = PromptTable::COLUMNS.len() + t.metrics.len();
    let _ = writeln!(out, "<p>{}</p>", plain(&t.page_note));
    out.push_str("<table class=\"prompts\" id=\"prompt-table\"><thead><tr>");
    let _ = write!(
        out,
        "<th data-sort=\"id\">{}</th><th data-sort=\"category\">{}</th>",
        e(PromptTable::COLUMNS[0]),
        e(PromptTable::COLUMNS[1])
    );
    for (i, m) in t.metrics.iter().enumerate() {
        let _ = write!(
            out,
            "<th class=\"n\" data-sort=\"{i}\" data-metric=\"{}\">{}</th>",
            e(m),
            breakable(&e(m))
        );
    }
    out.push_str("</tr></thead>\n");
    for l in &t.rows {
        prompt_rows(out, l, columns);
    }
    out.push_str("</table>\n");
}

/// One prompt of the table.
fn prompt_rows(out: &mut String, l: &PromptLine, columns: usize) {
    let _ = write!(out, "<tbody data-id=\"{}\"", e(&l.id));
    if let Some(c) = &l.category {
        let _ = write!(out, " data-category=\"{}\"", e(c));
    }
    if l.first_difference.is_some() {
        out.push_str(" data-differ=\"\"");
    }
    let _ = write!(out, "><tr><td>{}", code(&l.id));
    if l.redaction != Redaction::Safe {
        let _ = write!(out, " {}", badge(Tone::Warn, l.redaction.as_str()));
    }
    let _ = write!(
        out,
        "</td><td>{}</td>",
        l.category
            .as_deref()
            .map_or_else(|| inline(&Inline::Missing("none")), e)
    );
    for (v, sd) in l.values.iter().zip(&l.spread) {
        // Full precision in the attributes the script sorts on.
        let attr = |x: Option<f64>| x.map_or_else(String::new, |x| x.to_string());
        let changed = PromptLine::changed(*v);
        let _ = write!(
            out,
            "<td class=\"n{}\" data-b=\"{}\" data-c=\"{}\">",
            if changed { " chg" } else { "" },
            attr(v[0]),
            attr(v[1])
        );
        match *v {
            [None, None] => out.push_str(&inline(&Inline::Missing("n/a"))),
            [b, c] => {
                let _ = write!(
                    out,
                    "{} → {}",
                    plain(&words::num_or_na(b)),
                    plain(&words::num_or_na(c))
                );
                if let [Some(b), Some(c)] = *v {
                    let _ = write!(out, "<br><small>{}</small>", plain(&words::signed(c - b)));
                }
                // Several samples: means, with each side's spread under them.
                if sd.iter().any(Option::is_some) {
                    let _ = write!(
                        out,
                        "<br><small title=\"standard deviation over the prompt's samples\">± {} | ± {}</small>",
                        plain(&words::num_or_na(sd[0])),
                        plain(&words::num_or_na(sd[1]))
                    );
                }
            }
        }
        out.push_str("</td>");
    }
    let _ = write!(
        out,
        "</tr><tr class=\"texts\"><td colspan=\"{columns}\"><div class=\"texts3\">"
    );
    let [label, outputs @ ..] = PromptTable::TEXTS;
    let _ = write!(out, "<div><b>{}</b>", e(label));
    text_block(out, &Ok(l.prompt.clone()), None);
    out.push_str("</div>");
    for (label, text) in outputs.iter().zip(&l.outputs) {
        let _ = write!(out, "<div><b>{}</b>", e(label));
        text_block(out, text, l.first_difference);
        out.push_str("</div>");
    }
    out.push_str("</div>");
    match (&l.outputs, l.first_difference) {
        (_, Some(at)) => {
            let _ = write!(out, "<p class=\"diff-at\">{}</p>", differ_words(at));
        }
        ([Ok(_), Ok(_)], None) => {
            out.push_str("<p class=\"diff-at\">The outputs are identical.</p>");
        }
        _ => {}
    }
    out.push_str("</td></tr></tbody>\n");
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
    fn identifiers_break_after_underscores_outside_tags_only() {
        assert_eq!(
            breakable("<code title=\"a_b\">x_y</code> &lt;z_&gt;"),
            "<code title=\"a_b\">x_<wbr>y</code> &lt;z_<wbr>&gt;"
        );
    }

    #[test]
    fn own_words_escape_only_what_element_content_needs() {
        assert_eq!(
            plain("p < 0.05 & the baseline's"),
            "p &lt; 0.05 &amp; the baseline's"
        );
    }
}
