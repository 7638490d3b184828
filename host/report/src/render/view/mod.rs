//! The report as people read it, built once from [`Report`]: its sections
//! in [`SECTIONS`] order, each a list of typed blocks holding the report's
//! sentences, tables and choices of what to show. `markdown.rs` and
//! `html.rs` print this view; they add syntax and escaping, never words
//! or content, so the two files cannot drift apart.
//!
//! Where the page can do more than Markdown (badges, status colours,
//! summary cards, plots, folded details, the sortable prompt table and the
//! links into it), the view says so as data (a [`Tone`], a
//! [`Block::Cards`], a [`Block::Plot`], a [`Block::Details`], a
//! [`Block::Prompts`], a [`Row::filter`]) and each printer renders it its
//! own way: Markdown skips plots and links, shows cards as a table or a
//! list, and the prompt table as one line per prompt that changed.
//!
//! Text comes in two kinds, and the difference is what keeps untrusted
//! strings inert: [`Inline::Text`] is anything that may come from a
//! prompt, a model, a plugin or a config (escaped by both printers), and
//! [`Inline::Plain`] is vauban's own words and figures (written as is in
//! Markdown, so they must never hold a report string).
//!
//! [`Report`]: crate::document::Report
//! [`SECTIONS`]: super::SECTIONS

mod findings;
mod overview;
mod prompts;
mod record;

use std::borrow::Cow;

use super::SECTIONS;
use super::words::Tone;
use crate::document::{Redaction, Report};

/// The whole report: the page's title and byline, then the sections.
pub struct Document {
    /// The report's title (untrusted: from the config).
    pub title: String,
    /// The line under the title: when, which schema, what access level.
    pub byline: Vec<Inline>,
    /// The version of vauban that wrote the report (the page's colophon).
    pub tool_version: String,
    /// The report's JSON schema (the page's colophon).
    pub schema: String,
    /// Every section of [`SECTIONS`], in its order.
    pub sections: Vec<Section>,
}

/// One numbered section.
pub struct Section {
    /// The HTML anchor (from [`SECTIONS`]).
    pub anchor: &'static str,
    /// The heading (from [`SECTIONS`]).
    pub title: &'static str,
    /// What the section shows, in order; never empty (an absent section
    /// holds a note saying why).
    pub blocks: Vec<Block>,
}

/// A block of a section, one variant per thing the printers lay out.
pub enum Block {
    /// The report's one-sentence headline (untrusted).
    Lead(String),
    /// A paragraph.
    Paragraph(Vec<Inline>),
    /// A one-sentence note, shown muted: why something is absent.
    Note(String),
    /// A bulleted list of report strings (untrusted).
    List(Vec<String>),
    /// Named values, one per line.
    Fields(Vec<(&'static str, Vec<Inline>)>),
    /// A heading inside a section that titles what follows (a metric).
    Heading(Vec<Inline>),
    /// A heading inside a section that names one of its fixed parts
    /// (`Scorers`, `Models`).
    Subheading(&'static str),
    /// Headline figures, each with a label and a tone.
    Cards(Vec<Card>),
    /// A table.
    Table(Table),
    /// Untrusted multi-line text shown verbatim, with an optional caption
    /// before it.
    Fenced {
        /// Words before the block (`Command`), when it needs an
        /// introduction.
        caption: Option<&'static str>,
        /// The Markdown info string (`sh`, `toml`).
        lang: &'static str,
        /// The text, verbatim.
        text: String,
    },
    /// An SVG plot with its caption. Only the page can show it, so
    /// whatever it shows is also in a table.
    Plot {
        /// The `<svg>` element, escaped by [`super::svg`].
        svg: String,
        /// One sentence on how to read it.
        caption: String,
    },
    /// Blocks a reader opens on demand, under a one-line summary.
    Details {
        /// What the folded blocks are.
        summary: Vec<Inline>,
        /// The folded blocks.
        blocks: Vec<Block>,
    },
    /// The claims, each with its status, strength, citations and reasons.
    Claims(Vec<Claim>),
    /// One representative example (boxed: by far the largest block).
    Example(Box<Example>),
    /// Every prompt with both outputs and every metric: a sortable,
    /// filterable table on the page, one line per changed prompt in
    /// Markdown.
    Prompts(Box<PromptTable>),
}

/// A run of text inside a block.
pub enum Inline {
    /// A string from the report that may be untrusted; each printer
    /// escapes it for its syntax.
    Text(String),
    /// vauban's own words and figures (numbers, intervals, fixed phrases).
    /// Markdown writes it verbatim, so it must never hold a report string.
    Plain(Cow<'static, str>),
    /// A key figure (vauban's own, like [`Inline::Plain`]): bold on the
    /// page, plain in Markdown, where `**` around every number of a table
    /// would bury the digits.
    Highlight(String),
    /// Strong emphasis in both formats.
    Strong(Vec<Inline>),
    /// An identifier, verbatim in code style.
    Code(String),
    /// Identifiers, each in code style; never empty (see [`codes`]).
    Codes(Vec<String>),
    /// A hash shown short, the full value at hand where the format allows
    /// (the page's tooltip).
    Hash(String),
    /// A muted word standing for an absent value (`none`, `unknown`).
    Missing(&'static str),
    /// A label with a tone: a badge on the page, the word in Markdown.
    Badge(Tone, String),
    /// A status a reader must not miss (a claim's or a gate's): a badge on
    /// the page, bold capitals in Markdown.
    Status(Tone, &'static str),
    /// A parenthetical remark after what precedes it.
    Aside(Vec<Inline>),
    /// A remark on what precedes it: a small second line on the page, a
    /// parenthetical in Markdown.
    Below(Vec<Inline>),
}

/// A headline figure.
pub struct Card {
    /// The figure: a number or an identifier of vauban's (never a report
    /// string).
    pub value: String,
    /// What it is (may hold a report string, as [`Inline::Text`]).
    pub label: Vec<Inline>,
    /// A second line under the label; empty for none. Cards with details
    /// are a list in Markdown, cards without a one-row table.
    pub detail: Vec<Inline>,
    /// The page's anchor the card stands for (a row of a table), if any.
    pub link: Option<String>,
    /// Whether it calls for attention.
    pub tone: Option<Tone>,
}

/// A table: its columns, then its rows.
pub struct Table {
    /// The columns, in the order Markdown shows them.
    pub columns: Vec<Column>,
    /// The rows, one cell per column.
    pub rows: Vec<Row>,
}

/// A column of a [`Table`].
pub struct Column {
    /// The header (may hold a report string, as [`Inline::Text`]).
    pub header: Vec<Inline>,
    /// Numbers are right-aligned.
    pub align: Align,
    /// A detail of another column: its own column in Markdown, a small
    /// line under that column's cell on the page.
    pub under: Option<Under>,
}

/// Where a detail column sits on the page.
pub struct Under {
    /// The index of the column it details.
    pub column: usize,
    /// The tooltip that says what the detail is, when its column has no
    /// header on the page.
    pub title: Option<&'static str>,
}

/// A column's alignment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A row of a [`Table`].
pub struct Row {
    /// One cell per column.
    pub cells: Vec<Vec<Inline>>,
    /// The row's status, for a coloured stripe on the page.
    pub tone: Option<Tone>,
    /// The row's anchor on the page (vauban's own, like `delta-3`), so a
    /// card can link to it.
    pub anchor: Option<String>,
    /// The prompts behind the row: on the page, a link to the prompt table
    /// filtered to them; nothing in Markdown.
    pub filter: Option<PromptFilter>,
}

/// Which prompts of the prompt table a link shows: those whose `metric`
/// changed, in `category` (every category when `None`).
pub struct PromptFilter {
    /// The metric's name (untrusted: from a scorer).
    pub metric: String,
    /// The category (untrusted: from the suite).
    pub category: Option<String>,
}

/// One claim as the Claims section shows it.
pub struct Claim {
    /// Accepted, downgraded or rejected, in words (a status, shown like
    /// [`Inline::Status`]).
    pub status: &'static str,
    /// How good the status is (the page's badge and row stripe).
    pub tone: Tone,
    /// The mapper's statement (untrusted).
    pub statement: String,
    /// The strength kept, and the one proposed when it differs.
    pub strength: Vec<Inline>,
    /// The evidence ids cited ([`Inline::Codes`] or `none`).
    pub evidence: Inline,
    /// Why the claim was downgraded or rejected.
    pub reasons: Vec<String>,
    /// What the claim does not cover.
    pub limitations: Vec<String>,
    /// The claim mapper that proposed it.
    pub mapper: String,
}

impl Claim {
    /// The label of a claim's strength.
    pub const STRENGTH: &str = "strength";
    /// The label of a claim's evidence ids.
    pub const EVIDENCE: &str = "evidence";
    /// The label of one reason.
    pub const REASON: &str = "reason";
    /// The label of one limitation.
    pub const LIMITATION: &str = "limitation";
    /// The label of the limitations together.
    pub const LIMITATIONS: &str = "limitations";
    /// The label of the claim's mapper.
    pub const MAPPER: &str = "mapper";
    /// The columns of the claims as a table.
    pub const COLUMNS: [&str; 4] = ["status", "claim", "strength", "reasons and limitations"];
    /// What a claim without reasons or limitations shows for them.
    pub const NO_REASONS: &str = "none";
}

/// One representative example.
pub struct Example {
    /// The prompt's id.
    pub id: String,
    /// Its category ([`Inline::Text`] or `none`).
    pub category: Inline,
    /// How much of it may be shown ([`Inline::Badge`]).
    pub redaction: Inline,
    /// Why it was selected (untrusted).
    pub why: String,
    /// The prompt, then the two outputs.
    pub texts: [Shown; 3],
    /// Where the two outputs first differ, in characters, when both are
    /// shown and differ (the page marks both from there).
    pub first_difference: Option<usize>,
    /// The metrics that changed on it, when any did.
    pub metrics: Option<Table>,
}

impl Example {
    /// The label of [`Example::why`].
    pub const WHY: &str = "Why";
}

/// A text an example shows, or why it does not.
pub struct Shown {
    /// What the text is (`Prompt`, `Baseline output`).
    pub label: &'static str,
    /// The text (untrusted), or the word for its absence.
    pub text: Result<String, &'static str>,
}

/// Every prompt, for [`Block::Prompts`].
pub struct PromptTable {
    /// The metric columns, in the order of the deltas' tables (then any
    /// metric without a delta, by name).
    pub metrics: Vec<String>,
    /// Every prompt of the report, in suite order.
    pub rows: Vec<PromptLine>,
    /// What a format without the page's table shows instead: one line per
    /// prompt that changed (at most [`PromptTable::TEXT_LINES`]).
    pub compact: Table,
    /// The sentence before [`PromptTable::compact`]: what it holds and
    /// where the rest is.
    pub compact_note: String,
    /// The sentence before the page's table: how to read it.
    pub page_note: String,
}

impl PromptTable {
    /// The most lines [`PromptTable::compact`] holds; the page has every
    /// row.
    pub const TEXT_LINES: usize = 200;
    /// The headers of the columns before the metrics on the page.
    pub const COLUMNS: [&str; 2] = ["prompt", "category"];
    /// The labels of a prompt's three texts on the page.
    pub const TEXTS: [&str; 3] = ["Prompt", "Baseline output", "Candidate output"];
}

/// One prompt of a [`PromptTable`].
pub struct PromptLine {
    /// The prompt's id (untrusted: from the suite).
    pub id: String,
    /// Its category (untrusted), if any.
    pub category: Option<String>,
    /// Whether the prompt is shown or a placeholder stands for it.
    pub redaction: Redaction,
    /// The prompt (untrusted), or its placeholder.
    pub prompt: String,
    /// The baseline's and the candidate's output (untrusted), or the word
    /// for why it is not shown.
    pub outputs: [Result<String, &'static str>; 2],
    /// Where the outputs first differ, in characters, when both are shown
    /// and differ.
    pub first_difference: Option<usize>,
    /// One `[baseline, candidate]` per metric column.
    pub values: Vec<[Option<f64>; 2]>,
    /// With several samples per prompt: each column's standard deviation
    /// over the samples, `[baseline, candidate]`.
    pub spread: Vec<[Option<f64>; 2]>,
}

impl PromptLine {
    /// Whether a metric's value differs between the sides (both present).
    pub fn changed(v: [Option<f64>; 2]) -> bool {
        matches!(v, [Some(b), Some(c)] if b != c)
    }

    /// Whether any metric changed or the outputs differ.
    pub fn any_change(&self) -> bool {
        self.first_difference.is_some() || self.values.iter().any(|v| Self::changed(*v))
    }

    /// The outputs in words: where they differ, or that they are equal,
    /// hidden or not recorded.
    pub fn outputs_in_words(&self) -> String {
        match (&self.outputs, self.first_difference) {
            ([Ok(_), Ok(_)], Some(0)) => "differ from the first character".into(),
            ([Ok(_), Ok(_)], Some(at)) => format!("differ after the first {at} character(s)"),
            ([Ok(_), Ok(_)], None) => "identical".into(),
            ([Err(why), _], _) | ([_, Err(why)], _) => (*why).into(),
        }
    }
}

/// Builds the view of `report`.
pub fn document(report: &Report) -> Document {
    let builders: [fn(&Report) -> Vec<Block>; 14] = [
        overview::summary,
        overview::target_change,
        overview::access,
        overview::evidence,
        findings::claims,
        findings::deltas,
        findings::distribution,
        findings::activations,
        findings::interventions,
        record::examples,
        prompts::prompts,
        record::gates,
        record::limitations,
        record::reproducibility,
    ];
    let sections = SECTIONS
        .iter()
        .zip(builders)
        .map(|(&(anchor, title), build)| Section {
            anchor,
            title,
            blocks: build(report),
        })
        .collect();
    Document {
        title: report.title.clone(),
        byline: vec![
            plain("Created "),
            Inline::Text(report.created_at.clone()),
            plain(" · schema "),
            code(&report.schema),
            plain(" · access level "),
            code(report.access.level.as_str()),
            plain(" · strongest claim "),
            code(report.access.claim_strength.as_str()),
        ],
        tool_version: report.reproducibility.tool_version.clone(),
        schema: report.schema.clone(),
        sections,
    }
}

/// vauban's own words.
fn plain(s: impl Into<Cow<'static, str>>) -> Inline {
    Inline::Plain(s.into())
}

/// A report string.
fn text(s: &str) -> Inline {
    Inline::Text(s.to_owned())
}

/// An identifier.
fn code(s: &str) -> Inline {
    Inline::Code(s.to_owned())
}

/// A report string, or `none`.
fn text_or_none(s: Option<&str>) -> Inline {
    s.map_or(Inline::Missing("none"), text)
}

/// Identifiers, or `none` when there are none.
fn codes<T: AsRef<str>>(items: &[T]) -> Inline {
    if items.is_empty() {
        Inline::Missing("none")
    } else {
        Inline::Codes(items.iter().map(|i| i.as_ref().to_owned()).collect())
    }
}

impl Table {
    /// A table whose columns are `headers` (vauban's words), aligned by
    /// `align` (one `l` or `r` per column).
    fn new(headers: &[&'static str], align: &str, rows: Vec<Vec<Vec<Inline>>>) -> Table {
        let headers = headers.iter().map(|&h| vec![plain(h)]).collect();
        Table::with_headers(headers, align, rows)
    }

    /// A table whose headers may hold report strings.
    fn with_headers(headers: Vec<Vec<Inline>>, align: &str, rows: Vec<Vec<Vec<Inline>>>) -> Table {
        debug_assert_eq!(headers.len(), align.len());
        Table {
            columns: headers
                .into_iter()
                .zip(align.chars())
                .map(|(header, a)| Column {
                    header,
                    align: if a == 'r' { Align::Right } else { Align::Left },
                    under: None,
                })
                .collect(),
            rows: rows
                .into_iter()
                .map(|cells| Row {
                    cells,
                    tone: None,
                    anchor: None,
                    filter: None,
                })
                .collect(),
        }
    }

    /// The same table with one tone per row.
    fn toned(mut self, tones: impl IntoIterator<Item = Tone>) -> Table {
        for (row, tone) in self.rows.iter_mut().zip(tones) {
            row.tone = Some(tone);
        }
        self
    }

    /// The same table with column `detail` shown under column `main` on
    /// the page.
    fn detail(mut self, detail: usize, main: usize, title: Option<&'static str>) -> Table {
        self.columns[detail].under = Some(Under {
            column: main,
            title,
        });
        self
    }
}

#[cfg(test)]
mod tests;
