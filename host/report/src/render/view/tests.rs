//! The view and both printers over it: every section of the view reaches
//! both formats in order, every report string reaches both formats
//! escaped, and an absent section is a note in both.

use std::collections::BTreeMap;

use super::{Block, Inline, document};
use crate::claims::ClaimStatus;
use crate::document::{
    Access, ActivationFindings, Adjustment, BundleRecord, DistributionShift, EvidenceSection,
    Example, GateOutcome, GateResult, IntervalMethod, InterventionRef, InterventionSummary,
    KindCoverage, ModelSide, MultipleComparisons, PairedTest, PluginFailure, PluginRecord,
    ProjectionSeries, PromptKl, PromptRow, Redaction, Report, ReportClaim, ReportDelta,
    Reproducibility, Severity, Side, StageRecord, Summary, TargetChange, Unclaimable,
};
use crate::evidence::{AccessLevel, ClaimStrength, Polarity};
use crate::render::{SECTIONS, html, markdown};
use crate::stats::Quality;
use crate::trace::ArtifactKind;

/// An untrusted string that names its field: markup in both formats if it
/// were written raw, and a marker a test can find once escaped.
fn hostile(field: &str) -> String {
    format!("<x-{field}> & *em* _u_ [l](u) | #")
}

/// How [`hostile`]'s marker reads once escaped (the same in both formats).
fn escaped(field: &str) -> String {
    format!("&lt;x-{field}&gt;")
}

/// The report strings of [`report`] that are prose (not identifiers, which
/// are shown verbatim in code), by the name their marker carries. Multi-
/// line texts (prompts, outputs, the command, the config) are checked on
/// their own: they are fenced, not escaped, in Markdown.
const PROSE: [&str; 34] = [
    "title",
    "created",
    "headline",
    "line",
    "description",
    "summary",
    "label",
    "model",
    "transformation",
    "reason",
    "missing",
    "scope",
    "category",
    "stage",
    "failure",
    "message",
    "statement",
    "claim-reason",
    "claim-limitation",
    "unit",
    "support",
    "kl-category",
    "finding",
    "series-category",
    "intervention",
    "why",
    "gate",
    "gate-message",
    "limitation",
    "model-side",
    "bundle-side",
    "seed",
    "stage-note",
    "row-category",
];

fn plugin(name: &str) -> PluginRecord {
    PluginRecord {
        name: name.into(),
        version: "1.0.0".into(),
        wit_version: "0.1.0".into(),
        sha256: "b".repeat(64),
        world: "scorer".into(),
        path: format!("plugins/{name}.wasm"),
    }
}

fn delta(category: Option<String>, rates: bool) -> ReportDelta {
    ReportDelta {
        id: "refusal".into(),
        metric: "refusal".into(),
        category,
        scorer: "scorer".into(),
        unit: hostile("unit"),
        polarity: Polarity::LowerIsBetter,
        n: 4,
        baseline_mean: 1.0,
        candidate_mean: 0.25,
        delta: -0.75,
        percent_change: Some(-75.0),
        ci_low: Some(-1.0),
        ci_high: Some(-0.5),
        baseline_rate_ci: rates.then_some([0.5, 1.0]),
        candidate_rate_ci: rates.then_some([0.05, 0.7]),
        interval: IntervalMethod::PairedBootstrap,
        rate_interval: rates.then_some(IntervalMethod::Wilson),
        test: PairedTest::McnemarExact,
        p_value: Some(0.0625),
        p_adjusted: Some(0.125),
        significant: false,
        quality: Quality::Improved,
        rests_on: Vec::new(),
        judged_by: Vec::new(),
        corrected: None,
        corrected_unavailable: None,
    }
}

/// A report with every section present and a hostile string in every
/// prose field.
fn report() -> Report {
    let h = hostile;
    let side = |label: &str| ModelSide {
        label: h(label),
        model_name: h("model"),
        model_sha256: Some("a".repeat(64)),
        executor: "candle".into(),
        device: "cpu".into(),
        transformation: Some(h("transformation")),
    };
    Report {
        schema: "vauban.report/1".into(),
        title: h("title"),
        created_at: h("created"),
        summary: Summary {
            headline: h("headline"),
            lines: vec![h("line")],
            prompts: 4,
            claims_accepted: 1,
            claims_downgraded: 0,
            claims_rejected: 1,
            gates_failed: 1,
            gates_warned: 0,
            plugin_failures: 1,
        },
        target_change: TargetChange {
            description: Some(h("description")),
            transformation_kind: Some("abliterate".into()),
            transformation_summary: Some(h("summary")),
            baseline: side("label"),
            candidate: side("label"),
        },
        access: Access {
            level: AccessLevel::Activations,
            claim_strength: ClaimStrength::ActivationDiagnostic,
            can_claim: vec![ClaimStrength::BlackBoxBehavioralDiff],
            cannot_claim: vec![Unclaimable {
                strength: ClaimStrength::WeightDiff,
                reason: h("reason"),
            }],
            missing_evidence: vec![h("missing")],
            coverage: vec![KindCoverage {
                kind: ArtifactKind::Text,
                baseline: 4,
                candidate: Some(4),
                of_baseline: 4,
                of_candidate: Some(4),
            }],
            interventions: vec![InterventionRef {
                side: Side::Candidate,
                trace: "candidate-p0".into(),
                artifact: "intervention-0".into(),
                layer: Some(3),
                labels: BTreeMap::from([("mode".into(), "subtract".into())]),
            }],
            causal_scope: Some(h("scope")),
        },
        evidence: EvidenceSection {
            prompts: 4,
            categories: BTreeMap::from([(h("category"), 4)]),
            kinds_in_both: vec![ArtifactKind::Text],
            scorers: vec![plugin("scorer")],
            claim_mappers: vec![plugin("mapper")],
            judges: Vec::new(),
            plugin_failures: vec![PluginFailure {
                plugin: "slow".into(),
                stage: h("stage"),
                failure: Some(h("failure")),
                message: h("message"),
            }],
        },
        claims: vec![
            ReportClaim {
                statement: h("statement"),
                strength: Some(ClaimStrength::BlackBoxBehavioralDiff),
                proposed_strength: ClaimStrength::BlackBoxBehavioralDiff,
                status: ClaimStatus::Accepted,
                evidence: vec!["refusal".into()],
                limitations: vec![h("claim-limitation")],
                reasons: vec![],
                scope: None,
                mapper: "mapper".into(),
            },
            ReportClaim {
                statement: "Weights changed.".into(),
                strength: None,
                proposed_strength: ClaimStrength::WeightDiff,
                status: ClaimStatus::Rejected,
                evidence: vec![],
                limitations: vec![],
                reasons: vec![h("claim-reason")],
                scope: None,
                mapper: "mapper".into(),
            },
        ],
        evidence_set: None,
        metric_deltas: vec![delta(None, true), delta(Some("harmful".into()), false)],
        distribution: Some(DistributionShift {
            support: h("support"),
            positions: Default::default(),
            top_k: None,
            baseline_rest_mass: None,
            first_token_kl_mean: 0.5,
            mean_kl: 0.25,
            per_prompt: vec![PromptKl {
                prompt_id: "p0".into(),
                category: None,
                first_token_kl: 0.5,
                mean_kl: 0.25,
                positions: 3,
            }],
            by_position: vec![0.5, 0.2, 0.05],
            by_category: BTreeMap::from([(h("kl-category"), 0.5)]),
        }),
        distribution_unavailable: None,
        routing: None,
        activation_findings: Some(ActivationFindings {
            direction: "refusal.safetensors".into(),
            direction_sha256: "e".repeat(64),
            layers: vec![0, 1],
            series: vec![ProjectionSeries {
                side: Side::Baseline,
                category: h("series-category"),
                prompts: 4,
                mean_projection: vec![0.5, 1.5],
            }],
            findings: vec![h("finding")],
        }),
        interventions: vec![InterventionSummary {
            side: Side::Candidate,
            description: h("intervention"),
            traces: 4,
            layers: vec![3],
            labels: BTreeMap::new(),
        }],
        examples: vec![Example {
            prompt_id: "p0".into(),
            category: Some(h("category")),
            redaction: Redaction::Safe,
            prompt: Some("<x-prompt>\n```\n".into()),
            baseline_output: Some("<x-baseline-output>".into()),
            candidate_output: None,
            changed_metrics: BTreeMap::from([("refusal".into(), [1.0, 0.0])]),
            why: h("why"),
        }],
        prompts: vec![
            PromptRow {
                prompt_id: "p0".into(),
                category: Some(h("row-category")),
                redaction: Redaction::Safe,
                prompt: "<x-row-prompt>".into(),
                baseline_output: Some("日本語 <x-row-baseline>".into()),
                candidate_output: Some("日本人 <x-row-candidate>".into()),
                metrics: BTreeMap::from([("refusal".into(), [Some(1.0), Some(0.0)])]),
                // Three samples on the candidate side.
                spread: BTreeMap::from([("refusal".into(), [None, Some(0.5)])]),
                first_difference: Some(2),
            },
            PromptRow {
                prompt_id: "p1".into(),
                category: None,
                redaction: Redaction::Redacted,
                prompt: "[redacted harmful prompt]".into(),
                baseline_output: None,
                candidate_output: None,
                metrics: BTreeMap::from([("refusal".into(), [Some(0.0), None])]),
                spread: BTreeMap::new(),
                first_difference: None,
            },
        ],
        gates: vec![GateResult {
            name: h("gate"),
            metric: "refusal".into(),
            category: None,
            severity: Severity::Fail,
            min_delta: Some(-0.2),
            max_delta: None,
            observed_delta: Some(-0.75),
            outcome: GateOutcome::Fail,
            message: h("gate-message"),
        }],
        multiple_comparisons: MultipleComparisons {
            method: Adjustment::Holm,
            alpha: 0.05,
            tests: 2,
            family: h("family"),
        },
        limitations: vec![h("limitation")],
        reproducibility: Reproducibility {
            command: "vauban run <x-command>".into(),
            tool_version: "0.1.0".into(),
            config_path: "vauban.toml".into(),
            config_sha256: "f".repeat(64),
            config_text: "title = \"<x-config>\"\n".into(),
            suite_sha256: "1".repeat(64),
            models: BTreeMap::from([(h("model-side"), "a".repeat(64))]),
            plugins: vec![plugin("scorer")],
            bundles: BTreeMap::from([(
                h("bundle-side"),
                BundleRecord {
                    path: "out/bundles/baseline".into(),
                    manifest_sha256: "2".repeat(64),
                    traces: 4,
                    reused: 0,
                },
            )]),
            seeds: BTreeMap::from([(h("seed"), 7)]),
            stages: vec![StageRecord {
                stage: "record".into(),
                seconds: 1.5,
                note: h("stage-note"),
            }],
        },
    }
}

/// `report` with every optional section and every list empty.
fn bare() -> Report {
    let mut r = report();
    r.claims.clear();
    r.metric_deltas.clear();
    r.distribution = None;
    r.activation_findings = None;
    r.interventions.clear();
    r.access.interventions.clear();
    r.access.causal_scope = None;
    r.examples.clear();
    r.prompts.clear();
    r.gates.clear();
    r.limitations.clear();
    r.evidence.scorers.clear();
    r.evidence.claim_mappers.clear();
    r.evidence.plugin_failures.clear();
    r.reproducibility.plugins.clear();
    r.reproducibility.stages.clear();
    r.reproducibility.seeds.clear();
    r.reproducibility.bundles.clear();
    r.reproducibility.models.clear();
    r
}

/// Asserts `needles` occur in `haystack` in order.
fn assert_in_order(haystack: &str, needles: &[String]) {
    let mut from = 0;
    for n in needles {
        let at = haystack[from..]
            .find(n.as_str())
            .unwrap_or_else(|| panic!("`{n}` missing or out of order"));
        from += at + n.len();
    }
}

/// `md` without its fenced blocks, where text is verbatim by design.
fn outside_fences(md: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<usize> = None;
    for line in md.lines() {
        let ticks = line.chars().take_while(|c| *c == '`').count();
        match fence {
            None if ticks >= 3 => fence = Some(ticks),
            Some(open) if ticks >= open && line.trim_end_matches('`').is_empty() => fence = None,
            Some(_) => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// A block's words as both formats print them, for the order checks: a
/// note (vauban's own sentences here) or a part's title.
fn needle(b: &Block) -> Option<String> {
    match b {
        Block::Note(s) => Some(s.clone()),
        Block::Subheading(s) => Some((*s).into()),
        _ => None,
    }
}

#[test]
fn the_view_has_every_section_in_order_and_none_empty() {
    for r in [report(), bare()] {
        let doc = document(&r);
        let sections: Vec<(&str, &str)> =
            doc.sections.iter().map(|s| (s.anchor, s.title)).collect();
        assert_eq!(sections, SECTIONS);
        for s in &doc.sections {
            assert!(!s.blocks.is_empty(), "{} is empty", s.anchor);
        }
    }
}

#[test]
fn both_printers_emit_every_section_of_the_view_in_order() {
    for r in [report(), bare()] {
        let doc = document(&r);
        let (md, page) = (markdown(&r), html(&r));
        // Section by section: the heading, then every note and part title
        // of that section, before the next heading.
        let mut md_needles = Vec::new();
        let mut html_needles = Vec::new();
        for (i, s) in doc.sections.iter().enumerate() {
            md_needles.push(format!("\n## {}. {}\n", i + 1, s.title));
            html_needles.push(format!(
                "<section id=\"{}\">\n<h2><span class=\"num\">{}.</span>{}</h2>",
                s.anchor,
                i + 1,
                s.title
            ));
            for b in &s.blocks {
                if let Some(n) = needle(b) {
                    md_needles.push(n.clone());
                    html_needles.push(n);
                }
            }
        }
        assert_in_order(&md, &md_needles);
        assert_in_order(&page, &html_needles);
    }
}

#[test]
fn every_report_string_reaches_both_formats_escaped() {
    let r = report();
    let md = markdown(&r);
    let page = html(&r);
    let md_text = outside_fences(&md);
    for field in PROSE {
        let marker = escaped(field);
        assert!(md_text.contains(&marker), "markdown lacks {field}");
        assert!(page.contains(&marker), "html lacks {field}");
    }
    // No report string makes markup: no raw tag outside code fences in
    // Markdown, none at all on the page.
    assert!(!md_text.contains("<x-"), "raw HTML in report.md");
    assert!(!page.contains("<x-"), "raw HTML in report.html");
    // Markdown's own syntax is escaped in text too.
    assert!(md_text.contains("\\*em\\* \\_u\\_ \\[l\\](u)"));
    assert!(!md_text.contains("[l](u)"));
    // Multi-line texts are verbatim in a fence longer than their
    // backtick runs in Markdown, and escaped on the page.
    assert!(md.contains("````text\n<x-prompt>\n```\n````\n"), "{md}");
    assert!(md.contains("```text\n<x-baseline-output>\n```\n"));
    assert!(md.contains("```sh\nvauban run <x-command>\n```\n"));
    assert!(md.contains("```toml\ntitle = \"<x-config>\"\n```\n"));
    for s in ["prompt", "baseline-output", "command", "config"] {
        assert!(page.contains(&escaped(s)), "html lacks {s}");
    }
}

#[test]
fn markdown_table_cells_cannot_break_their_row() {
    let mut r = report();
    r.evidence.plugin_failures[0].message = "a | b\nc".into();
    let md = markdown(&r);
    assert!(md.contains("| a \\| b c |"), "{md}");
}

#[test]
fn absent_sections_are_notes_in_both_formats() {
    let r = bare();
    let doc = document(&r);
    let (md, page) = (markdown(&r), html(&r));
    let notes: Vec<&String> = doc
        .sections
        .iter()
        .flat_map(|s| &s.blocks)
        .filter_map(|b| match b {
            Block::Note(s) => Some(s),
            _ => None,
        })
        .collect();
    assert!(notes.len() >= 12, "{notes:?}");
    for n in notes {
        assert!(md.contains(&format!("_{n}_")), "markdown lacks `{n}`");
        assert!(
            page.contains(&format!("<p class=\"note\">{n}</p>")),
            "html lacks `{n}`"
        );
    }
    assert!(!page.contains("<svg"), "a plot without data");
}

#[test]
fn plots_are_the_pages_and_their_data_is_in_both() {
    let r = report();
    let doc = document(&r);
    let plots = doc
        .sections
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| matches!(b, Block::Plot { .. }))
        .count();
    assert_eq!(plots, 3);
    let (md, page) = (markdown(&r), html(&r));
    assert_eq!(page.matches("<svg").count(), 3);
    assert!(!md.contains("<svg") && !md.contains("<figure"));
    // The KL by position, plotted on the page, is a table in both.
    for doc in [&md, &page] {
        assert!(doc.contains("Mean KL by generated position (table)"));
    }
}

#[test]
fn statuses_read_without_colour_in_both_formats() {
    let r = report();
    let (md, page) = (markdown(&r), html(&r));
    assert!(md.contains("1. **✔ ACCEPTED** "), "{md}");
    assert!(md.contains("2. **✘ REJECTED** Weights changed."));
    assert!(md.contains("| **✘ FAIL** | "));
    assert!(page.contains("<tr class=\"row-bad\"><td><span class=\"badge bad\">✘ fail</span>"));
    assert!(page.contains("<span class=\"badge ok\">✔ accepted</span>"));
    // A quality is a word in Markdown, a badge on the page.
    assert!(md.contains("| improved |"));
    assert!(page.contains("<span class=\"badge ok\">improved</span>"));
}

#[test]
fn a_rate_interval_is_a_column_in_markdown_and_under_the_rate_on_the_page() {
    let r = report();
    let (md, page) = (markdown(&r), html(&r));
    assert!(md.contains("| baseline rate CI | candidate rate CI |"));
    // The row without rates says so in Markdown and shows nothing extra
    // on the page.
    assert!(
        md.contains(
            "| overall | 4 | 1 | 0.25 | -0.75 | -75% | [-1, -0.5] | [0.5, 1] | [0.05, 0.7] |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| [-1, -0.5] | n/a | n/a | `mcnemar_exact` |"),
        "{md}"
    );
    assert!(page.contains(
        "<td class=\"n\">1<br><small title=\"Wilson 95% interval\">[0.5, 1]</small></td>"
    ));
    assert!(!page.contains("rate CI</th>"));
    assert!(!page.contains("<small title=\"Wilson 95% interval\"><span"));
}

#[test]
fn plain_words_are_never_report_strings() {
    // Plain text is written verbatim in Markdown; a report string there
    // would be markup. Every hostile marker must arrive as Text (or in
    // code), whatever block holds it.
    fn check(runs: &[Inline]) {
        for run in runs {
            match run {
                Inline::Plain(s) => assert!(!s.contains("<x-"), "report string as plain: {s}"),
                Inline::Highlight(s) => assert!(!s.contains("<x-"), "report string as plain: {s}"),
                Inline::Strong(r) | Inline::Aside(r) | Inline::Below(r) => check(r),
                _ => {}
            }
        }
    }
    fn walk(blocks: &[Block]) {
        for b in blocks {
            match b {
                Block::Paragraph(p) | Block::Heading(p) => check(p),
                Block::Fields(f) => f.iter().for_each(|(_, v)| check(v)),
                Block::Cards(cards) => cards.iter().for_each(|c| {
                    assert!(!c.value.contains("<x-"), "{}", c.value);
                    check(&c.label);
                    check(&c.detail);
                }),
                Block::Prompts(t) => {
                    t.compact
                        .rows
                        .iter()
                        .flat_map(|r| &r.cells)
                        .for_each(|c| check(c));
                    assert!(!t.compact_note.contains("<x-"));
                }
                Block::Table(t) => {
                    t.columns.iter().for_each(|c| check(&c.header));
                    t.rows.iter().flat_map(|r| &r.cells).for_each(|c| check(c));
                }
                Block::Details { summary, blocks } => {
                    check(summary);
                    walk(blocks);
                }
                Block::Claims(claims) => claims.iter().for_each(|c| check(&c.strength)),
                Block::Example(x) => {
                    if let Some(t) = &x.metrics {
                        t.rows.iter().flat_map(|r| &r.cells).for_each(|c| check(c));
                    }
                }
                _ => {}
            }
        }
    }
    let doc = document(&report());
    check(&doc.byline);
    for s in &doc.sections {
        walk(&s.blocks);
    }
}

/// The page's one script element, and the sha256 source its CSP allows.
fn script_and_policy(page: &str) -> (&str, &str) {
    let open = page.find("<script>").expect("a script") + "<script>".len();
    let close = open + page[open..].find("</script>").unwrap();
    let csp = &page[page.find("script-src '").expect("a script-src") + "script-src '".len()..];
    (&page[open..close], &csp[..csp.find('\'').unwrap()])
}

#[test]
fn the_page_runs_one_script_its_policy_allows_by_hash() {
    let page = html(&report());
    // Exactly one script element: the page's own, verbatim.
    assert_eq!(page.matches("<script").count(), 1);
    assert_eq!(page.matches("</script").count(), 1);
    let (script, source) = script_and_policy(&page);
    assert_eq!(script, crate::render::html::SCRIPT);
    // The policy's source is the hash of exactly the bytes on the page
    // (the hex digest re-encoded here, independently of the printer).
    let hex = vauban_format::hash::sha256_hex(script.as_bytes());
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    use base64::Engine as _;
    assert_eq!(
        source,
        format!(
            "sha256-{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        )
    );
    assert_eq!(source.len(), "sha256-".len() + 44);
    assert!(page.contains(&format!(
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{source}'\""
    )));
    // Nothing else may run: no inline handler, no javascript: URL.
    let lower = page.to_lowercase();
    for bad in [" onclick=", " onerror=", " onload=", "javascript:"] {
        assert!(!lower.contains(bad), "{bad}");
    }
    // The script reads the DOM and builds nodes from text, never markup.
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "{sink}");
    }
    // Without a prompt table there is no script, and the policy allows none.
    let page = html(&bare());
    assert!(!page.contains("<script") && !page.contains("script-src"));
}

#[test]
fn the_prompt_table_has_every_row_its_figures_and_texts_escaped() {
    let page = html(&report());
    let table = &page[page
        .find("<table class=\"prompts\" id=\"prompt-table\">")
        .unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    // The sortable headers: id, category, one per metric with its name.
    assert!(table.contains(
        "<th data-sort=\"id\">prompt</th><th data-sort=\"category\">category</th>\
         <th class=\"n\" data-sort=\"0\" data-metric=\"refusal\">refusal</th>"
    ));
    assert_eq!(table.matches("<tbody").count(), 2);
    // Several samples: the spread under the means, once (p0 only).
    assert_eq!(table.matches("± n/a | ± 0.5</small>").count(), 1);
    // p0: its category escaped in the attribute the script reads, the
    // change marked, the figures full precision for sorting.
    assert!(table.contains(&format!(
        "<tbody data-id=\"p0\" data-category=\"{}\" data-differ=\"\">",
        crate::render::svg::escape(&hostile("row-category"))
    )));
    assert!(table.contains(
        "<td class=\"n chg\" data-b=\"1\" data-c=\"0\">1 → 0<br><small>-1</small><br><small \
         title=\"standard deviation over the prompt's samples\">± n/a | ± 0.5</small></td>"
    ));
    // Both outputs marked from the first difference, counted in
    // characters (日本 is 2 characters, 6 bytes).
    assert!(table.contains("<pre>日本<mark>語 &lt;x-row-baseline&gt;</mark></pre>"));
    assert!(table.contains("<pre>日本<mark>人 &lt;x-row-candidate&gt;</mark></pre>"));
    assert!(table.contains("agree on their first 2 character(s)"));
    assert!(table.contains("<pre>&lt;x-row-prompt&gt;</pre>"));
    // p1, redacted: its placeholder, outputs hidden, a side without a value.
    assert!(table.contains("<code>p1</code> <span class=\"badge warn\">redacted</span>"));
    assert!(table.contains("<pre>[redacted harmful prompt]</pre>"));
    assert_eq!(
        table
            .matches("<div class=\"hidden-text\">hidden</div>")
            .count(),
        2
    );
    assert!(table.contains("data-b=\"0\" data-c=\"\">0 → n/a</td>"));
    assert!(!page.contains("<x-"));
}

#[test]
fn markdown_lists_the_prompts_that_changed_in_one_line_each() {
    let md = markdown(&report());
    let section = &md[md.find("## 11. Every prompt").unwrap()..md.find("## 12.").unwrap()];
    assert!(
        section.contains("_The 1 prompt(s) that changed"),
        "{section}"
    );
    assert!(
        section.contains(&format!(
            "| `p0` | {} | `refusal` 1 → 0 | differ after the first 2 character(s) |",
            escaped("row-category") + " &amp; \\*em\\* \\_u\\_ \\[l\\](u) \\| \\#"
        )),
        "{section}"
    );
    // The texts are the page's; no output reaches the Markdown table.
    assert!(!section.contains("row-baseline") && !section.contains("row-prompt"));
    assert!(
        !section.contains("`p1`"),
        "an unchanged prompt is not listed"
    );
}

#[test]
fn delta_rows_link_to_their_prompts_and_carry_the_cards_anchors() {
    let mut r = report();
    r.metric_deltas[1].significant = true;
    let page = html(&r);
    assert!(page.contains("<tr id=\"delta-0\">"));
    assert!(page.contains("<tr id=\"delta-1\""));
    assert!(page.contains(
        "<a class=\"to-prompts\" href=\"#prompts\" data-metric=\"refusal\" data-category=\"harmful\""
    ));
    // The overall row's link names no category: every category.
    assert!(
        page.contains("<a class=\"to-prompts\" href=\"#prompts\" data-metric=\"refusal\" title=")
    );
    // The summary's card for the significant delta links to its row.
    let summary = &page[..page.find("<section id=\"target-change\">").unwrap()];
    assert_eq!(
        summary.matches("<div class=\"card tone-").count(),
        1,
        "{summary}"
    );
    assert!(summary.contains("<a href=\"#delta-1\"><code>refusal</code> · harmful</a>"));
    assert!(summary.contains("<b>-0.75</b>"));
    assert!(
        summary.contains("1 → 0.25 · adjusted p 0.125 · <span class=\"badge ok\">improved</span>")
    );
    // Markdown has no links, and a list for the cards.
    let md = markdown(&r);
    assert!(!md.contains("to-prompts") && !md.contains("delta-1"));
    assert!(
        md.contains("- `refusal` · harmful: **-0.75** (1 → 0.25 · adjusted p 0.125 · improved)"),
        "{md}"
    );
    // Without prompt rows, no link leads to an empty table.
    let mut r = report();
    r.prompts.clear();
    assert!(!html(&r).contains("class=\"to-prompts\""));
}

#[test]
fn the_summary_shows_the_largest_significant_changes_and_the_counts_below() {
    let mut r = report();
    // No significant change: a note, no card.
    let page = html(&r);
    let summary = &page[..page.find("<section id=\"target-change\">").unwrap()];
    assert!(!summary.contains("class=\"card "));
    assert!(
        summary
            .contains("No significant change: none of the 2 deltas has an adjusted p below 0.05")
    );
    // The counts that were cards are fields, alarming ones as badges.
    assert!(summary.contains("<dt>claims</dt><dd>1 accepted · 0 downgraded · <span class=\"badge bad\">1 rejected</span></dd>"), "{summary}");
    assert!(
        summary.contains(
            "<dt>gates</dt><dd><span class=\"badge bad\">1 failed</span> · 0 warned</dd>"
        )
    );
    assert!(summary.contains("<dt>evidence</dt><dd>access level <code>activations</code>, claims up to <code>activation_diagnostic</code></dd>"));
    // Significant deltas: the largest relative change first, at most six.
    let base = r.metric_deltas[0].clone();
    r.metric_deltas = (0..8)
        .map(|i| {
            let mut d = base.clone();
            d.metric = format!("m{i}");
            d.id = d.metric.clone();
            d.category = None;
            d.significant = true;
            d.baseline_mean = 10.0;
            d.candidate_mean = 10.0 + i as f64;
            d.delta = i as f64;
            d
        })
        .collect();
    let page = html(&r);
    let summary = &page[..page.find("<section id=\"target-change\">").unwrap()];
    assert_eq!(summary.matches("<div class=\"card tone-").count(), 6);
    let order: Vec<usize> = (0..8)
        .filter_map(|i| summary.find(&format!("<code>m{i}</code>")))
        .collect();
    assert_eq!(order.len(), 6);
    assert!(summary.find("<code>m7</code>").unwrap() < summary.find("<code>m2</code>").unwrap());
    assert!(!summary.contains("<code>m1</code>") && !summary.contains("<code>m0</code>"));
    assert!(summary.contains("2 more significant change(s) in Behavioural deltas."));
}

#[test]
fn many_intervention_records_are_summarised_by_side_mode_and_layer() {
    let mut r = report();
    let record = r.access.interventions[0].clone();
    r.access.interventions = (0..16)
        .flat_map(|t| {
            let record = record.clone();
            (0..30).map(move |layer| {
                let mut x = record.clone();
                x.trace = format!("candidate-p{t}");
                x.artifact = format!("intervention-{layer}");
                x.layer = Some(layer);
                x.labels.insert("alpha".into(), "1".into());
                x
            })
        })
        .collect();
    let md = markdown(&r);
    let section = &md[md.find("## 9. Intervention results").unwrap()..md.find("## 10.").unwrap()];
    assert!(
        section.contains("| candidate | `subtract` | 0–29 | 480 | 16 | `alpha=1` |"),
        "{section}"
    );
    assert!(section.contains("The 480 individual records"));
    assert!(
        !section.contains("intervention-29"),
        "a record listed: {section}"
    );
    assert!(section.lines().count() < 30, "{section}");
    // A few records are still listed one by one, after the summary.
    let md = markdown(&report());
    assert!(
        md.contains("| candidate | `subtract` | 3 | 1 | 1 | none |"),
        "{md}"
    );
    assert!(
        md.contains("| `candidate` | `candidate-p0` | `intervention-0` | 3 | `mode=subtract` |")
    );
}

#[test]
fn layer_lists_read_as_ranges() {
    use super::findings::layer_ranges as ranges;
    assert_eq!(ranges(&[Some(0), Some(1), Some(2), Some(3)]), "0–3");
    assert_eq!(ranges(&[Some(3), Some(6), Some(9)]), "3, 6, 9");
    assert_eq!(ranges(&[Some(1), Some(2), Some(5), None]), "1, 2, 5, n/a");
}

#[test]
fn markdown_lists_at_most_200_prompts_and_says_where_the_rest_are() {
    let mut r = report();
    let row = r.prompts[0].clone();
    r.prompts = (0..250)
        .map(|i| {
            let mut x = row.clone();
            x.prompt_id = format!("q{i}");
            x
        })
        .collect();
    let md = markdown(&r);
    let section = &md[md.find("## 11. Every prompt").unwrap()..md.find("## 12.").unwrap()];
    assert!(section.contains("_The first 200 of the 250 prompt(s) that changed"));
    assert!(section.contains("| `q199` |") && !section.contains("| `q200` |"));
    // The page has every row.
    assert_eq!(html(&r).matches("<tbody data-id=").count(), 250);
}
