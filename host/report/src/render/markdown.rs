//! `report.md`: the report's view printed as Markdown tables and lists.
//!
//! Report strings are untrusted (prompts, model outputs, plugin messages):
//! inline text is escaped so it cannot form links, emphasis, headings or
//! raw HTML, and multi-line text goes in fenced blocks whose fence is
//! longer than any backtick run inside. Plots exist only in `report.html`;
//! what they show is in the tables here too.

use std::fmt::Write as _;

use super::view::{self, Align, Block, Claim, Example, Inline, Table};
use super::words::short_hash;
use crate::document::Report;

/// Renders `report` as Markdown.
pub fn markdown(report: &Report) -> String {
    let doc = view::document(report);
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", text(&doc.title));
    // The plots are the one thing this file leaves out, so it says where
    // they are.
    let _ = writeln!(
        out,
        "{} · plots are in `report.html`\n",
        inlines(&doc.byline)
    );
    out.push_str("## Contents\n\n");
    for (i, section) in doc.sections.iter().enumerate() {
        let heading = format!("{}. {}", i + 1, section.title);
        let _ = writeln!(out, "{}. [{}](#{})", i + 1, section.title, slug(&heading));
    }
    out.push('\n');
    for (i, section) in doc.sections.iter().enumerate() {
        let _ = writeln!(out, "## {}. {}\n", i + 1, section.title);
        for b in &section.blocks {
            block(&mut out, b);
        }
        // Exactly one blank line between sections, whatever the last block was.
        while out.ends_with("\n\n") {
            out.pop();
        }
        out.push('\n');
    }
    out
}

/// One block, followed by a blank line.
fn block(out: &mut String, b: &Block) {
    match b {
        Block::Lead(s) => {
            let _ = writeln!(out, "**{}**\n", text(s));
        }
        Block::Paragraph(p) => {
            let _ = writeln!(out, "{}\n", inlines(p));
        }
        Block::Note(s) => {
            let _ = writeln!(out, "_{}_\n", text(s));
        }
        Block::List(items) => {
            for item in items {
                let _ = writeln!(out, "- {}", text(item));
            }
            out.push('\n');
        }
        Block::Fields(fields) => {
            for (name, value) in fields {
                let _ = writeln!(out, "- {name}: {}", inlines(value));
            }
            out.push('\n');
        }
        Block::Heading(h) => {
            let _ = writeln!(out, "### {}\n", inlines(h));
        }
        Block::Subheading(s) => {
            let _ = writeln!(out, "**{s}**\n");
        }
        Block::Cards(cards) if cards.iter().any(|c| !c.detail.is_empty()) => {
            // Cards with details: a list, each item the label, the
            // figure and its detail.
            for c in cards {
                let _ = write!(out, "- {}: **{}**", inlines(&c.label), c.value);
                if !c.detail.is_empty() {
                    let _ = write!(out, " ({})", inlines(&c.detail));
                }
                out.push('\n');
            }
            out.push('\n');
        }
        Block::Cards(cards) => {
            // Markdown has no cards: one table row of figures, each under
            // its label.
            let headers: Vec<String> = cards.iter().map(|c| inlines(&c.label)).collect();
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            let values: Vec<String> = cards.iter().map(|c| c.value.clone()).collect();
            let align = vec![Align::Right; cards.len()];
            rows(out, &headers, &align, &[values]);
        }
        Block::Table(t) => table(out, t),
        Block::Fenced {
            caption,
            lang,
            text,
        } => {
            if let Some(caption) = caption {
                let _ = writeln!(out, "{caption}:\n");
            }
            fenced(out, text, lang);
            out.push('\n');
        }
        // Plots are the page's; their data is in the tables.
        Block::Plot { .. } => {}
        Block::Details { summary, blocks } => {
            let _ = writeln!(out, "{}:\n", inlines(summary));
            for b in blocks {
                block(out, b);
            }
        }
        Block::Claims(claims) => {
            for (i, c) in claims.iter().enumerate() {
                claim(out, i + 1, c);
            }
            out.push('\n');
        }
        Block::Example(x) => example(out, x),
        // The page's table holds every prompt with its texts; here, the
        // prompts that changed, one line each.
        Block::Prompts(t) => {
            let _ = writeln!(out, "_{}_\n", text(&t.compact_note));
            if !t.compact.rows.is_empty() {
                table(out, &t.compact);
            }
        }
    }
}

/// A claim as a numbered item with its details as sub-items (a Markdown
/// table cell cannot hold the lists a claim's reasons need).
fn claim(out: &mut String, number: usize, c: &Claim) {
    let marker = format!("{number}. ");
    let _ = writeln!(
        out,
        "{marker}{} {}",
        inline(&Inline::Status(c.tone, c.status)),
        text(&c.statement)
    );
    // Sub-items are indented to the item's text, whatever the number's width.
    let pad = " ".repeat(marker.len());
    let _ = writeln!(out, "{pad}- {}: {}", Claim::STRENGTH, inlines(&c.strength));
    let _ = writeln!(out, "{pad}- {}: {}", Claim::EVIDENCE, inline(&c.evidence));
    for reason in &c.reasons {
        let _ = writeln!(out, "{pad}- {}: {}", Claim::REASON, text(reason));
    }
    for l in &c.limitations {
        let _ = writeln!(out, "{pad}- {}: {}", Claim::LIMITATION, text(l));
    }
    let _ = writeln!(out, "{pad}- {}: {}", Claim::MAPPER, code(&c.mapper));
}

fn example(out: &mut String, x: &Example) {
    let _ = writeln!(
        out,
        "### {} ({}, {})\n",
        code(&x.id),
        inline(&x.category),
        inline(&x.redaction)
    );
    let _ = writeln!(out, "{}: {}\n", Example::WHY, text(&x.why));
    for shown in &x.texts {
        match &shown.text {
            Ok(body) => {
                let _ = writeln!(out, "**{}:**\n", shown.label);
                fenced(out, body, "text");
                out.push('\n');
            }
            Err(hidden) => {
                let _ = writeln!(out, "**{}:** _{}_\n", shown.label, text(hidden));
            }
        }
    }
    if let Some(t) = &x.metrics {
        table(out, t);
    }
}

/// Inline runs, concatenated.
fn inlines(runs: &[Inline]) -> String {
    runs.iter().map(inline).collect()
}

/// One inline run. Only [`Inline::Plain`] and [`Inline::Highlight`], which
/// hold vauban's own words and figures, are written unescaped.
fn inline(run: &Inline) -> String {
    match run {
        Inline::Text(s) => text(s),
        Inline::Plain(s) => s.to_string(),
        Inline::Highlight(s) => s.clone(),
        Inline::Strong(runs) => format!("**{}**", inlines(runs)),
        Inline::Code(s) => code(s),
        Inline::Codes(items) => items.iter().map(|i| code(i)).collect::<Vec<_>>().join(", "),
        Inline::Hash(h) => code(&short_hash(h)),
        Inline::Missing(s) => text(s),
        Inline::Badge(_, label) => text(label),
        // Capitals and bold stand in for the page's coloured badge.
        Inline::Status(_, label) => format!("**{}**", label.to_uppercase()),
        Inline::Aside(runs) | Inline::Below(runs) => format!(" ({})", inlines(runs)),
    }
}

/// A table. A detail column the page puts under another is its own
/// column here.
fn table(out: &mut String, t: &Table) {
    let headers: Vec<String> = t.columns.iter().map(|c| inlines(&c.header)).collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let align: Vec<Align> = t.columns.iter().map(|c| c.align).collect();
    let cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| r.cells.iter().map(|c| inlines(c)).collect())
        .collect();
    rows(out, &headers, &align, &cells);
}

/// A table from Markdown cells. Their pipes are escaped here, the one
/// place that knows they are table cells.
fn rows(out: &mut String, headers: &[&str], align: &[Align], rows: &[Vec<String>]) {
    let headers: Vec<String> = headers.iter().map(|h| h.replace('|', "\\|")).collect();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let rule: Vec<&str> = align
        .iter()
        .map(|a| match a {
            Align::Right => "---:",
            Align::Left => "---",
        })
        .collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
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
