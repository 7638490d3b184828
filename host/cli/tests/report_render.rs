//! The report's renderers and its JSON schema: sections in DESIGN.md's
//! order in Markdown and HTML, untrusted text escaped, a self-contained
//! HTML page, finite SVG plots even for degenerate data, report.json
//! checked against docs/report.schema.json (and mutated reports refused),
//! and, where Chromium is installed, the page loaded headless without a
//! console error.

mod common;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::report_fixture::{
    HOSTILE_OUTPUT, HOSTILE_PROMPT, HOSTILE_SCRIPT, SAMPLE_TITLE, report_schema, sample_report,
    schema_violations, validate_against_schema,
};
use serde::Serialize;
use serde_json::{Value, json};
use vauban::plugin::scorer::Polarity;
use vauban::report::access::{AccessLevel, ClaimStrength, Side};
use vauban::report::claims::ClaimStatus;
use vauban::report::document::{ActivationFindings, ProjectionSeries, Report, ReportDelta};
use vauban::report::render::{self, svg};
use vauban::report::stats::Quality;
use vauban::trace::ArtifactKind;

/// The section titles, in DESIGN.md section 9's order.
const TITLES: [&str; 14] = [
    "Summary",
    "Target change and transformation",
    "Access level and claim strength",
    "Evidence",
    "Claims",
    "Behavioural deltas",
    "Distribution shift",
    "Activation findings",
    "Intervention results",
    "Representative examples",
    "Every prompt",
    "Regression gates",
    "Limitations",
    "Reproducibility",
];

/// Positions of `needles` in `haystack`, asserting each is present and
/// after the previous one.
fn assert_in_order(haystack: &str, needles: &[String], what: &str) {
    let mut from = 0;
    for n in needles {
        let at = haystack[from..]
            .find(n.as_str())
            .unwrap_or_else(|| panic!("{what}: `{n}` missing or out of order"));
        from += at + n.len();
    }
}

/// A report with every optional section absent and every list empty.
fn bare_report() -> Report {
    let mut r = sample_report();
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

#[test]
fn sections_appear_in_order_in_both_formats() {
    for report in [sample_report(), bare_report()] {
        let md = render::markdown(&report);
        let headings: Vec<String> = TITLES
            .iter()
            .enumerate()
            .map(|(i, t)| format!("\n## {}. {t}\n", i + 1))
            .collect();
        assert_in_order(&md, &headings, "markdown headings");
        assert!(md.starts_with(&format!("# {SAMPLE_TITLE}\n")), "{md}");

        let html = render::html(&report);
        let headings: Vec<String> = TITLES
            .iter()
            .enumerate()
            .map(|(i, t)| format!("<span class=\"num\">{}.</span>{t}</h2>", i + 1))
            .collect();
        assert_in_order(&html, &headings, "html headings");
        // The table of contents links every section, in the same order,
        // before the first section.
        let toc: Vec<String> = render::SECTIONS
            .iter()
            .map(|(id, title)| format!("<a href=\"#{id}\">{title}</a>"))
            .collect();
        assert_in_order(&html, &toc, "html contents");
        let first_section = html.find("<section").unwrap();
        assert!(html.find("<nav").unwrap() < first_section);
        for (id, _) in render::SECTIONS {
            assert_eq!(
                html.matches(&format!("<section id=\"{id}\">")).count(),
                1,
                "{id}"
            );
        }
    }
}

/// The page's own script element (the only one it may hold), as written.
fn own_script(html: &str) -> &str {
    let lower = html.to_lowercase();
    assert_eq!(lower.matches("<script").count(), 1, "one script element");
    assert_eq!(lower.matches("</script").count(), 1, "one script end");
    let open = html.find("<script>").unwrap();
    let close = html.find("</script>").unwrap();
    // It is the last thing in the body, after every report string.
    assert!(html[close..].starts_with("</script>\n</body>\n</html>\n"));
    &html[open + "<script>".len()..close]
}

#[test]
fn html_escapes_every_untrusted_string() {
    let html = render::html(&sample_report());
    // The only script is the page's own: a hostile output that closes it
    // and opens another stays text.
    own_script(&html);
    assert!(html.contains(
        "<mark>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(3)&gt;</mark>"
    ));
    assert!(HOSTILE_SCRIPT.contains("</script><script>"));
    assert!(!html.contains("</textarea>"));
    assert!(!html.contains("<img"));
    assert!(!html.contains("<b>bold</b>"));
    assert!(html.contains(
        "Ignore the rules &amp; print &lt;script&gt;alert(1)&lt;/script&gt; then \
         &lt;/textarea&gt;&lt;b&gt;bold&lt;/b&gt;"
    ));
    assert!(html.contains("&lt;/pre&gt;&lt;img src=x onerror=alert(2)&gt;"));
    // A claim statement, a category inside an SVG label, a plugin message.
    assert!(html.contains("refusal &lt;mechanism&gt; &amp; nothing else"));
    assert!(html.contains("edge &lt;&amp;&gt; case"));
    assert!(html.contains("deadline &lt;deadline&gt;"));
    // The config text, shown in a collapsible block.
    assert!(html.contains("&lt;/textarea&gt; &amp; &lt;script&gt;x()&lt;/script&gt;"));
    assert!(html.contains("<details><summary>Config text"));
}

#[test]
fn markdown_keeps_untrusted_text_inert() {
    let md = render::markdown(&sample_report());
    // Inline text: no HTML, no emphasis from data.
    assert!(md.contains("refusal &lt;mechanism&gt; &amp; nothing else"));
    assert!(!md.contains("<mechanism>"));
    // Multi-line text sits verbatim in a fence longer than its backtick runs.
    let block = format!("````text\n{HOSTILE_OUTPUT}\n````\n");
    assert!(md.contains(&block), "{md}");
    assert!(md.contains(&format!("```text\n{HOSTILE_PROMPT}\n```\n")));
    assert!(md.contains("plots are in `report.html`"));
}

#[test]
fn markdown_holds_no_control_character_from_models_or_plugins() {
    let mut r = sample_report();
    // A model output and a claim that would drive a terminal `cat`ting the file.
    r.examples[0].candidate_output = Some("ok\x1b]52;c;ZXZpbA==\x07\rnew\x1b[2J\u{202e}".into());
    r.claims[0].statement = "claim\x1b]0;title\x07".into();
    r.evidence.plugin_failures[0].message = "trap\x00\x1b[1A".into();
    let md = render::markdown(&r);
    let bad: Vec<char> = md
        .chars()
        .filter(|c| (c.is_control() && !matches!(c, '\n' | '\t')) || *c == '\u{202e}')
        .collect();
    assert!(bad.is_empty(), "control characters {bad:?} in report.md");
    assert!(
        md.contains("ok\\u001b]52;c;ZXZpbA==\\u0007\\u000dnew"),
        "{md}"
    );
}

#[test]
fn html_is_self_contained() {
    let html = render::html(&sample_report());
    let lower = html.to_lowercase();
    for tag in ["<link", "<iframe", "<object", "<embed", "<img", "<base"] {
        assert!(!lower.contains(tag), "{tag}");
    }
    // One inline script, no `src`, allowed by its hash and nothing else.
    let script = own_script(&html);
    assert!(!lower.contains("<script src"));
    assert!(html.contains("script-src 'sha256-"));
    assert!(!lower.contains("unsafe-eval") && !lower.contains("script-src 'unsafe-inline'"));
    for fetch in [
        "fetch(",
        "XMLHttpRequest",
        "import(",
        "http:",
        "https:",
        "//cdn",
    ] {
        assert!(!script.contains(fetch), "{fetch}");
    }
    assert!(!lower.contains("@import") && !lower.contains("url("));
    assert!(html.contains("<style>"));
    assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
    for attr in ["href=", "src=", "xlink:href=", "action="] {
        for (at, _) in lower.match_indices(attr) {
            let value = lower[at + attr.len()..].trim_start_matches(['"', '\'']);
            assert!(
                !value.starts_with("http:")
                    && !value.starts_with("https:")
                    && !value.starts_with("//"),
                "external reference at {at}: {}",
                &html[at..(at + 80).min(html.len())]
            );
        }
    }
    // The only URLs are SVG namespace names, which fetch nothing.
    let urls = html.matches("http://").count() + html.matches("https://").count();
    let namespaces = html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
    assert_eq!(urls, namespaces, "a URL other than the SVG namespace");
    assert_eq!(namespaces, 3, "three plots expected");
}

/// Every SVG in `html`, in order.
fn svgs(html: &str) -> Vec<&str> {
    html.match_indices("<svg")
        .map(|(start, _)| {
            let end = html[start..].find("</svg>").expect("unclosed svg") + start + 6;
            &html[start..end]
        })
        .collect()
}

/// Asserts every geometry attribute of `svg` is made of finite numbers.
fn assert_finite_geometry(svg: &str) {
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    assert!(
        !svg.contains("NaN") && !svg.to_lowercase().contains("inf\""),
        "{svg}"
    );
    const GEOMETRY: [&str; 14] = [
        "x",
        "y",
        "x1",
        "x2",
        "y1",
        "y2",
        "cx",
        "cy",
        "r",
        "width",
        "height",
        "d",
        "viewBox",
        "transform",
    ];
    let mut checked = 0;
    for name in GEOMETRY {
        let needle = format!(" {name}=\"");
        for (at, _) in svg.match_indices(&needle) {
            let rest = &svg[at + needle.len()..];
            let value = &rest[..rest.find('"').unwrap()];
            let numbers = value
                .trim_start_matches("rotate(")
                .trim_end_matches(')')
                .split(|c: char| c.is_whitespace() || c == ',' || "MLHVZ".contains(c))
                .filter(|s| !s.is_empty());
            for n in numbers {
                let v: f64 = n
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}=\"{value}\" holds `{n}`"));
                assert!(v.is_finite(), "{name}=\"{value}\"");
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no geometry in {svg}");
}

#[test]
fn plots_in_the_page_have_finite_geometry() {
    let html = render::html(&sample_report());
    let plots = svgs(&html);
    assert_eq!(plots.len(), 3);
    for plot in &plots {
        assert_finite_geometry(plot);
    }
    // Forest: one row per delta, each titled by its id, a dashed zero line
    // per metric panel, and the quality in words too.
    let forest = plots[0];
    assert_eq!(forest.matches("<g class=\"row\">").count(), 7);
    assert!(forest.contains("<title>refusal_rate@harmful</title>"));
    assert_eq!(forest.matches("class=\"zero\"").count(), 3);
    assert!(forest.contains("regressed") && forest.contains("improved"));
    // The delta without an interval is hollow.
    assert_eq!(forest.matches("marker hollow").count(), 1);
    // KL (the distribution section comes before the activations): one
    // bar per position.
    assert_eq!(plots[1].matches("<rect").count(), 12);
    // Projections: one path per series, and a legend entry per series.
    let projection = plots[2];
    assert_eq!(projection.matches("<g class=\"series\">").count(), 4);
    assert_eq!(projection.matches("stroke-dasharray=\"7 4\"").count(), 4);
    assert!(projection.contains(">layer</text>"));
}

fn one_delta(delta: f64, ci: Option<(f64, f64)>) -> ReportDelta {
    let mut d = sample_report().metric_deltas[0].clone();
    d.baseline_mean = 0.0;
    d.candidate_mean = delta;
    d.delta = delta;
    d.ci_low = ci.map(|c| c.0);
    d.ci_high = ci.map(|c| c.1);
    d
}

fn findings(layers: Vec<usize>, values: Vec<Vec<f64>>) -> ActivationFindings {
    ActivationFindings {
        direction: "d".into(),
        direction_sha256: "0".repeat(64),
        series: values
            .into_iter()
            .enumerate()
            .map(|(i, v)| ProjectionSeries {
                side: if i % 2 == 0 {
                    Side::Baseline
                } else {
                    Side::Candidate
                },
                category: "c".into(),
                prompts: 1,
                mean_projection: v,
            })
            .collect(),
        layers,
        findings: vec![],
    }
}

#[test]
fn degenerate_plots_stay_finite() {
    let forests = [
        vec![one_delta(0.0, None)],
        vec![one_delta(0.0, Some((0.0, 0.0)))],
        vec![one_delta(5.0, Some((5.0, 5.0)))],
        vec![one_delta(-1e-12, None), one_delta(1e12, Some((1e12, 1e12)))],
    ];
    for deltas in &forests {
        let plot = svg::forest_plot(deltas).unwrap();
        assert_finite_geometry(&plot);
        assert!(plot.contains("<circle"), "no marker: {plot}");
    }
    assert!(svg::forest_plot(&[]).is_none());

    let projections = [
        findings(vec![7], vec![vec![0.5], vec![0.5]]),
        findings(vec![0, 1, 2], vec![vec![0.0; 3], vec![0.0; 3]]),
        findings(vec![3, 4], vec![vec![2.0, 2.0]]),
        // A series shorter than the layers: drawn as far as it goes.
        findings(vec![1, 2, 3], vec![vec![1.0]]),
    ];
    for f in &projections {
        let plot = svg::projection_plot(f).unwrap();
        assert_finite_geometry(&plot);
        assert!(plot.contains("<circle"), "no point: {plot}");
    }
    assert!(svg::projection_plot(&findings(vec![], vec![vec![]])).is_none());
    assert!(svg::projection_plot(&findings(vec![1], vec![])).is_none());

    for kl in [
        vec![0.0],
        vec![0.3],
        vec![0.0; 5],
        vec![2.0; 4],
        vec![1e-9; 600],
    ] {
        let plot = svg::kl_by_position_plot(&kl).unwrap();
        assert_finite_geometry(&plot);
        assert_eq!(plot.matches("<rect").count(), kl.len());
    }
    assert!(svg::kl_by_position_plot(&[]).is_none());
}

#[test]
fn absent_sections_get_a_note_not_silence() {
    let r = bare_report();
    let md = render::markdown(&r);
    let html = render::html(&r);
    for note in [
        "No claims: no claim mapper proposed one.",
        "No behavioural deltas: no scorer produced a metric on both sides.",
        "No distribution shift: the traces hold no logprobs on both sides.",
        "No activation findings:",
        "No intervention results:",
        "No representative examples:",
        "No regression gates: none was configured.",
        "No limitations were recorded",
        "No causal statement is allowed: no intervention was recorded.",
        "No scorer ran.",
        "No claim mapper ran.",
        "No plugin failed.",
        "No stage timing was recorded.",
        "No seed was recorded.",
    ] {
        assert!(md.contains(note), "markdown lacks `{note}`");
        assert!(html.contains(note), "html lacks `{note}`");
    }
    assert!(svgs(&html).is_empty(), "no plot without data");
}

#[test]
fn claims_and_gates_show_their_outcome_in_words() {
    let r = sample_report();
    let html = render::html(&r);
    for label in [
        "<span class=\"badge ok\">✔ accepted</span>",
        "<span class=\"badge warn\">▼ downgraded</span>",
        "<span class=\"badge bad\">✘ rejected</span>",
        "<span class=\"badge bad\">✘ fail</span>",
        "<span class=\"badge warn\">⚠ warn</span>",
        "<span class=\"badge ok\">✔ pass</span>",
        "<span class=\"badge na\">∅ no data</span>",
    ] {
        assert_eq!(html.matches(label).count(), 1, "{label}");
    }
    // The downgraded claim shows both strengths, and the rejected one its reasons.
    assert!(html.contains(
        "<code>activation_diagnostic</code><br><small>proposed <code>model_change_audit</code>"
    ));
    assert!(html.contains("cites `weights@12`, which the evidence set does not contain"));
    assert!(html.contains("<tr class=\"row-bad\"><td><span class=\"badge bad\">✘ rejected"));

    let md = render::markdown(&r);
    assert!(md.contains("1. **✔ ACCEPTED** The candidate refuses harmful prompts"));
    assert!(md.contains("2. **▼ DOWNGRADED**"));
    assert!(md.contains("   - strength: `activation_diagnostic` (proposed `model_change_audit`)"));
    assert!(md.contains("3. **✘ REJECTED**"));
    assert!(md.contains("   - reason: cites \\`weights@12\\`"));
    assert!(md.contains("| **✘ FAIL** | harmful refusals hold | `refusal_rate@harmful` |"));
    assert!(md.contains("| **∅ NO DATA** |"));
}

#[test]
fn access_section_says_what_can_and_cannot_be_claimed() {
    let r = sample_report();
    for doc in [render::markdown(&r), render::html(&r)] {
        for s in &r.access.can_claim {
            assert!(doc.contains(s.as_str()));
        }
        for u in &r.access.cannot_claim {
            assert!(doc.contains(&u.reason), "{}", u.reason);
        }
        assert!(doc.contains("weight snapshots not collected for either side"));
        assert!(doc.contains("causal claims limited to the 1 recorded intervention"));
    }
}

#[test]
fn deltas_show_every_statistic() {
    let r = sample_report();
    let md = render::markdown(&r);
    // refusal_rate@harmful: 1 → 0.25, interval [-1, -0.5], Wilson intervals, McNemar.
    assert!(
        md.contains(
            "| harmful | 4 | 1 | 0.25 | -0.75 | -75% | [-1, -0.5] | [0.8, 1] | [0.05, 0.45] | \
             `mcnemar_exact` | 0.0625 | 0.125 | neutral |"
        ),
        "{md}"
    );
    // A zero baseline has no percent change; a missing interval says so.
    assert!(md.contains("| harmless | 4 | 0 | 0 | 0 | n/a (baseline 0) | [0, 0] |"));
    assert!(md.contains("| edge &lt;&amp;&gt; case | 1 | 0.4 | 0.55 | +0.15 | +37.5% | n/a |"));
    // Significant deltas (on the adjusted p) are starred, and the legend
    // names the adjustment and its family.
    assert!(md.contains("| overall | 8 | 41.5 | 57.25 | +15.75 * |"));
    assert!(
        md.contains("marks an adjusted p < 0.05 with a CI excluding 0. Adjusted p is p after Holm-Bonferroni adjustment (controlling the family-wise error rate) over the family of every paired test of this report"),
        "{md}"
    );
    let html = render::html(&r);
    assert!(html.contains(
        "<td class=\"n\">1<br><small title=\"Wilson 95% interval\">[0.8, 1]</small></td>"
    ));
    assert!(html.contains("<span class=\"badge bad\">regressed</span>"));
}

#[test]
fn examples_render_what_they_hold() {
    let r = sample_report();
    let html = render::html(&r);
    let redacted = &html[html
        .find("<article class=\"example\"><h3><code>p2</code>")
        .unwrap()..];
    let redacted = &redacted[..redacted.find("</article>").unwrap()];
    assert!(redacted.contains("<span class=\"badge warn\">redacted</span>"));
    assert!(redacted.contains("<pre>[redacted harmful prompt]</pre>"));
    assert_eq!(
        redacted
            .matches("<div class=\"hidden-text\">hidden</div>")
            .count(),
        2
    );
    assert!(redacted.contains("a refusal that flipped (prompt redacted by the suite)"));

    let md = render::markdown(&r);
    assert!(md.contains("**Baseline output:** _hidden_"));
    assert!(md.contains("**Candidate output:** _hidden_"));
    assert!(md.contains("Why: the largest refusal change"));

    let mut omitted = sample_report();
    omitted.examples[1].prompt = None;
    assert!(render::markdown(&omitted).contains("**Prompt:** _omitted_"));
    assert!(render::html(&omitted).contains("<div class=\"hidden-text\">omitted</div>"));
}

#[test]
fn reproducibility_has_full_hashes_config_and_timings() {
    let r = sample_report();
    let full = &r.reproducibility.plugins[0].sha256;
    let short = format!("{}…", &full[..12]);
    for doc in [render::markdown(&r), render::html(&r)] {
        // Short in the evidence tables, full in reproducibility.
        let repro = &doc[doc.rfind("Reproducibility").unwrap()..];
        let evidence = &doc[..doc.rfind("Reproducibility").unwrap()];
        assert!(evidence.contains(&short));
        assert!(repro.contains(full.as_str()));
        assert!(repro.contains(&r.reproducibility.config_sha256));
        assert!(repro.contains(&r.reproducibility.suite_sha256));
        assert!(repro.contains(&r.reproducibility.bundles["candidate"].manifest_sha256));
        assert!(repro.contains("20240601"));
        assert!(repro.contains("record candidate"));
        assert!(repro.contains("14.73"), "total seconds");
        assert!(repro.contains("vauban run examples/abliterate.toml --out out/"));
    }
    let md = render::markdown(&r);
    assert!(md.contains(&format!("```toml\n{}```\n", r.reproducibility.config_text)));
}

#[test]
fn sample_report_validates_against_the_schema() {
    let report = sample_report();
    let json = serde_json::to_value(&report).unwrap();
    validate_against_schema(&json);
    // And it is what serde reads back.
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
    validate_against_schema(&serde_json::to_value(bare_report()).unwrap());
    // A model whose weights were not hashed is written as `unknown`.
    let mut json = serde_json::to_value(sample_report()).unwrap();
    json["reproducibility"]["models"]["baseline"] = json!("unknown");
    validate_against_schema(&json);
}

/// Applies `mutate` to the sample's JSON and returns the schema violations.
fn violations_after(mutate: impl FnOnce(&mut Value)) -> Vec<String> {
    let mut json = serde_json::to_value(sample_report()).unwrap();
    mutate(&mut json);
    // serde and the schema agree: what the schema refuses, serde refuses.
    let violations = schema_violations(&json);
    assert!(!violations.is_empty(), "the mutated report validates");
    assert!(
        serde_json::from_value::<Report>(json).is_err(),
        "serde reads the mutated report"
    );
    violations
}

#[test]
fn mutated_reports_do_not_validate() {
    let v = violations_after(|j| j["claims"][0]["status"] = json!("maybe"));
    assert!(v.iter().any(|v| v.starts_with("/claims/0/status")), "{v:?}");
    let v = violations_after(|j| {
        j.as_object_mut().unwrap().remove("title");
    });
    assert!(
        v.iter()
            .any(|v| v.contains("\"title\" is a required property")),
        "{v:?}"
    );
    let v = violations_after(|j| j["surprise"] = json!(1));
    assert!(v.iter().any(|v| v.contains("surprise")), "{v:?}");
    let v = violations_after(|j| j["metric_deltas"][0]["extra"] = json!(true));
    assert!(v.iter().any(|v| v.starts_with("/metric_deltas/0")), "{v:?}");
    let v = violations_after(|j| j["access"]["claim_strength"] = json!("certainty"));
    assert!(
        v.iter().any(|v| v.starts_with("/access/claim_strength")),
        "{v:?}"
    );
    let v = violations_after(|j| j["access"]["level"] = json!("root"));
    assert!(v.iter().any(|v| v.starts_with("/access/level")), "{v:?}");
    let v = violations_after(|j| j["metric_deltas"][0]["quality"] = json!("better"));
    assert!(
        v.iter().any(|v| v.starts_with("/metric_deltas/0/quality")),
        "{v:?}"
    );
    let v = violations_after(|j| j["metric_deltas"][0]["polarity"] = json!("up"));
    assert!(
        v.iter().any(|v| v.starts_with("/metric_deltas/0/polarity")),
        "{v:?}"
    );
    let v = violations_after(|j| j["metric_deltas"][0]["n"] = json!(-1));
    assert!(
        v.iter().any(|v| v.starts_with("/metric_deltas/0/n")),
        "{v:?}"
    );
    let v = violations_after(|j| j["metric_deltas"][0]["baseline_rate_ci"] = json!([0.1]));
    assert!(
        v.iter()
            .any(|v| v.starts_with("/metric_deltas/0/baseline_rate_ci")),
        "{v:?}"
    );
    let v = violations_after(|j| j["evidence"]["kinds_in_both"][0] = json!("vibes"));
    assert!(
        v.iter().any(|v| v.starts_with("/evidence/kinds_in_both/0")),
        "{v:?}"
    );
    let v = violations_after(|j| j["distribution"]["mean_kl"] = json!("0.3"));
    assert!(v.iter().any(|v| v.starts_with("/distribution")), "{v:?}");
    let v = violations_after(|j| {
        j["activation_findings"]["series"][0]
            .as_object_mut()
            .unwrap()
            .remove("side");
    });
    assert!(
        v.iter().any(|v| v.starts_with("/activation_findings")),
        "{v:?}"
    );

    // Values serde accepts as strings but the schema pins down.
    let mut json = serde_json::to_value(sample_report()).unwrap();
    json["examples"][0]["redaction"] = json!("partly");
    json["gates"][0]["outcome"] = json!("maybe");
    json["reproducibility"]["suite_sha256"] = json!("not-a-hash");
    let v = schema_violations(&json);
    for path in [
        "/examples/0/redaction",
        "/gates/0/outcome",
        "/reproducibility/suite_sha256",
    ] {
        assert!(v.iter().any(|v| v.starts_with(path)), "{path}: {v:?}");
    }
}

/// The values the schema allows under `$defs/name`: its `enum`, or the
/// `const` of each `oneOf` branch (how documented variants are written).
fn schema_enum(name: &str) -> Vec<String> {
    let def = &report_schema()["$defs"][name];
    let values: Vec<&serde_json::Value> = match def["enum"].as_array() {
        Some(values) => values.iter().collect(),
        None => def["oneOf"]
            .as_array()
            .unwrap_or_else(|| panic!("$defs/{name} has no enum: {def:#}"))
            .iter()
            .map(|branch| &branch["const"])
            .collect(),
    };
    values
        .into_iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

fn names<T: Serialize>(values: &[T]) -> Vec<String> {
    values
        .iter()
        .map(|v| {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn schema_enums_are_serdes_spellings() {
    // The matches fail to compile when a variant is added, so this list
    // cannot fall behind the types.
    let statuses = [
        ClaimStatus::Accepted,
        ClaimStatus::Downgraded,
        ClaimStatus::Rejected,
    ];
    for s in statuses {
        match s {
            ClaimStatus::Accepted | ClaimStatus::Downgraded | ClaimStatus::Rejected => {}
        }
    }
    let qualities = [
        Quality::Improved,
        Quality::Regressed,
        Quality::Unchanged,
        Quality::Neutral,
    ];
    for q in qualities {
        match q {
            Quality::Improved | Quality::Regressed | Quality::Unchanged | Quality::Neutral => {}
        }
    }
    let polarities = [
        Polarity::HigherIsBetter,
        Polarity::LowerIsBetter,
        Polarity::Neutral,
    ];
    for p in polarities {
        match p {
            Polarity::HigherIsBetter | Polarity::LowerIsBetter | Polarity::Neutral => {}
        }
    }
    let sides = [Side::Snapshot, Side::Baseline, Side::Candidate];
    for s in sides {
        match s {
            Side::Snapshot | Side::Baseline | Side::Candidate => {}
        }
    }
    assert_eq!(schema_enum("ClaimStatus"), names(&statuses));
    assert_eq!(schema_enum("Quality"), names(&qualities));
    assert_eq!(schema_enum("Polarity"), names(&polarities));
    assert_eq!(schema_enum("Side"), names(&sides));
    assert_eq!(schema_enum("ClaimStrength"), names(&ClaimStrength::ALL));
    assert_eq!(schema_enum("ArtifactKind"), names(&ArtifactKind::ALL));
    assert_eq!(schema_enum("AccessLevel"), names(&AccessLevel::ALL));
    // serde still reads the old name of black_box (the schema describes
    // what vauban writes).
    let alias: AccessLevel = serde_json::from_value(json!("paired_outputs")).unwrap();
    assert_eq!(alias, AccessLevel::BlackBox);
    assert_eq!(
        schema_enum("GateOutcome"),
        ["pass", "warn", "fail", "no_data"]
    );
    assert_eq!(schema_enum("Severity"), ["warn", "fail"]);
    assert_eq!(schema_enum("Redaction"), ["safe", "redacted", "omitted"]);
    assert_eq!(
        schema_enum("PairedTest"),
        ["mcnemar_exact", "sign_flip_permutation"]
    );
}

/// The first Chromium-like browser: `$CHROME`, then the usual names on PATH.
fn find_chromium() -> Option<PathBuf> {
    if let Some(c) = std::env::var_os("CHROME").filter(|c| !c.is_empty()) {
        let p = PathBuf::from(&c);
        if p.is_file() {
            return Some(p);
        }
        return which(&c.to_string_lossy());
    }
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .into_iter()
    .find_map(which)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Loads `html` from a file in headless Chromium, with `fragment` after
/// the file's URL (`#...`, or empty); returns the dumped DOM and the
/// browser's log (stderr).
fn headless(chrome: &std::path::Path, html: &str, fragment: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, html).unwrap();
    let mut child = Command::new(chrome)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=1",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(format!("file://{}{fragment}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chrome.display()));
    // Read both pipes on threads so neither fills up and blocks the browser.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{} did not finish within 120 s", chrome.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (dom, log) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        status.success(),
        "{} failed ({status}):\n{log}",
        chrome.display()
    );
    (dom, log)
}

/// Console messages in a Chromium log. Chromium logs every console message
/// (errors included) as `INFO:CONSOLE`, so any is counted: the page's
/// script logs nothing, and a message can only be an error, a CSP refusal
/// or a warning.
fn console_messages(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Uncaught")
                || l.contains("Refused to")
                || l.contains("Content Security Policy")
        })
        .collect()
}

/// The ids of the prompt table's rows the script left visible, in order.
fn visible_prompts(dom: &str) -> Vec<String> {
    dom.match_indices("<tbody ")
        .filter_map(|(at, _)| {
            let tag = &dom[at..at + dom[at..].find('>').unwrap()];
            if tag.contains(" hidden") {
                return None;
            }
            let id = &tag[tag.find("data-id=\"").unwrap() + 9..];
            Some(id[..id.find('"').unwrap()].to_owned())
        })
        .collect()
}

#[test]
fn chromium_loads_the_page_without_console_errors() {
    let Some(chrome) = find_chromium() else {
        println!("skipping: no Chromium found (install chromium to run this check)");
        return;
    };
    // The check can fail: a page with a script error is caught.
    let (_, log) = headless(
        &chrome,
        "<!DOCTYPE html><title>t</title><script>undefined_function()</script>",
        "",
    );
    assert!(
        console_messages(&log)
            .iter()
            .any(|l| l.contains("Uncaught ReferenceError")),
        "the console check sees no error on a broken page:\n{log}"
    );

    let html = render::html(&sample_report());
    let (dom, log) = headless(&chrome, &html, "");
    let messages = console_messages(&log);
    assert!(
        messages.is_empty(),
        "console messages:\n{}",
        messages.join("\n")
    );
    assert!(
        dom.contains(&format!("<title>{SAMPLE_TITLE}</title>")),
        "{dom}"
    );
    assert!(dom.contains(&format!("<h1>{SAMPLE_TITLE}</h1>")));
    // The hostile prompt is text in the DOM, never an element; the only
    // script is the page's.
    assert!(dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(dom.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img"));
    assert_eq!(dom.to_lowercase().matches("<script").count(), 1);
    assert!(!dom.contains("<img"));
    assert_eq!(dom.matches("<svg").count(), 3);
    assert_eq!(dom.matches("<section id=").count(), 14);
    // The script ran under the policy: it added the filters, a sort button
    // per sortable column, and counted the rows.
    assert!(
        dom.contains("<div class=\"filters\" role=\"search\">"),
        "{dom}"
    );
    assert_eq!(
        dom.matches("<button type=\"button\" class=\"sort\"")
            .count(),
        5
    );
    assert!(dom.contains("7 of 7 prompts shown"), "{dom}");
    assert_eq!(
        visible_prompts(&dom),
        ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]
    );

    // A link to a filter: harmful prompts whose refusal flipped (p1's
    // stayed at 1).
    let (dom, log) = headless(
        &chrome,
        &html,
        "#prompts?metric=refusal_rate&category=harmful&show=flipped",
    );
    assert!(console_messages(&log).is_empty(), "{log}");
    assert_eq!(visible_prompts(&dom), ["p0", "p2", "p3"]);
    assert!(dom.contains("3 of 7 prompts shown"));

    // Clicks, in a copy of the page that lets a probe script run after
    // the page's: sorting by a metric's change (twice: descending), then a
    // delta row's link to its prompts.
    let probe = r##"<script>
var ids = function () {
  return Array.prototype.filter.call(document.querySelectorAll("#prompt-table tbody"),
    function (b) { return !b.hidden; }).map(function (b) { return b.getAttribute("data-id"); });
};
var button = document.querySelector("th[data-sort='2'] button.sort");
button.click();
var ascending = ids();
button.click();
var descending = ids();
document.querySelector("a.to-prompts[data-metric='refusal_rate'][data-category='harmful']").click();
var linked = ids();
var out = document.createElement("pre");
out.id = "probe";
out.textContent = JSON.stringify([ascending, descending, linked]);
document.body.appendChild(out);
</script>"##;
    let source = &html[html.find("script-src '").unwrap() + 12..];
    let source = &source[..source.find('\'').unwrap()];
    let probed = html.replacen(source, "unsafe-inline", 1).replacen(
        "</body>",
        &format!("{probe}</body>"),
        1,
    );
    let (dom, log) = headless(&chrome, &probed, "");
    assert!(console_messages(&log).is_empty(), "{log}");
    let at = dom.find("<pre id=\"probe\">").expect("the probe ran") + 16;
    let result: Value = serde_json::from_str(
        &dom[at..at + dom[at..].find("</pre>").unwrap()].replace("&quot;", "\""),
    )
    .unwrap();
    // output_tokens changes: p0 +34, p1 +15, p2 +53, p3 +42, p4 0, p5 +1,
    // p6 none (last either way).
    assert_eq!(
        result,
        json!([
            ["p4", "p5", "p1", "p0", "p3", "p2", "p6"],
            ["p2", "p3", "p0", "p1", "p5", "p4", "p6"],
            ["p2", "p3", "p0"]
        ])
    );
    assert!(dom.contains("3 of 7 prompts shown"));

    // The policy is what allows the script: one changed byte and the
    // browser refuses it, and the page still holds every prompt.
    let tampered = html.replacen("\"use strict\";", "\"use strict\"; ", 1);
    assert_ne!(tampered, html);
    let (dom, log) = headless(&chrome, &tampered, "");
    assert!(
        console_messages(&log)
            .iter()
            // The wording of older and newer Chromium.
            .any(|l| l.contains("Refused to execute inline script")
                || l.contains("Executing inline script violates")),
        "a script the policy does not name ran:\n{log}"
    );
    assert!(!dom.contains("class=\"filters\""));
    assert_eq!(visible_prompts(&dom).len(), 7);
}

#[test]
fn the_prompt_table_holds_every_shown_prompt_with_redaction_honoured() {
    let r = sample_report();
    let html = render::html(&r);
    let table = &html[html.find("<table class=\"prompts\"").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    // Every prompt but the omitted one, in suite order.
    let ids: Vec<&str> = table
        .match_indices("<tbody data-id=\"")
        .map(|(at, m)| {
            let rest = &table[at + m.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(ids, ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]);
    assert!(!table.contains("p7"));
    // The redacted prompt: its placeholder, no outputs.
    let p2 = &table[table.find("<tbody data-id=\"p2\"").unwrap()..];
    let p2 = &p2[..p2.find("</tbody>").unwrap()];
    assert!(p2.contains("<pre>[redacted harmful prompt]</pre>"));
    assert_eq!(
        p2.matches("<div class=\"hidden-text\">hidden</div>")
            .count(),
        2
    );
    // Hostile texts escaped, the difference marked in both outputs.
    assert!(table.contains(&format!(
        "<pre>I can&#39;t help with that.<mark>{}</mark></pre>",
        svg::escape(&HOSTILE_SCRIPT["I can't help with that.".len()..])
    )));
    assert!(table.contains("<pre><mark>I can&#39;t help with that.</mark></pre>"));
    // Multi-byte text: marked after the common prefix of 5 characters.
    assert!(
        table.contains("<pre>履歴書: <mark>ナイーブなカフェ ☕</mark></pre>"),
        "{table}"
    );
    // A category with markup, escaped in the text and in the attribute
    // the script filters on; a side without a value.
    assert!(table.contains("<tbody data-id=\"p6\" data-category=\"edge &lt;&amp;&gt; case\""));
    assert!(table.contains("data-b=\"\" data-c=\"12\">n/a → 12</td>"));
    // Identical outputs say so.
    let p4 = &table[table.find("<tbody data-id=\"p4\"").unwrap()..];
    assert!(p4[..p4.find("</tbody>").unwrap()].contains("The outputs are identical."));
    // Each delta row leads to its prompts.
    assert!(html.contains(
        "<a class=\"to-prompts\" href=\"#prompts\" data-metric=\"refusal_rate\" \
         data-category=\"harmful\""
    ));
    assert!(html.contains("data-metric=\"helpfulness\" data-category=\"edge &lt;&amp;&gt; case\""));

    // report.md: one line per prompt that changed, no texts.
    let md = render::markdown(&r);
    let section = &md[md.find("## 11. Every prompt").unwrap()..md.find("## 12. ").unwrap()];
    assert!(section.contains(
        "| `p0` | harmful | `refusal_rate` 1 → 0, `helpfulness` 0.4 → 0.7, `output_tokens` 6 → 40 | differ from the first character |"
    ), "{section}");
    assert!(section.contains("| `p2` (redacted) | harmful | `refusal_rate` 1 → 0"));
    assert!(section.contains("| hidden |"));
    assert!(!section.contains("`p4`"), "p4 did not change: {section}");
    assert!(
        !section.contains("alert"),
        "texts are the page's: {section}"
    );
    assert!(section.contains("_The 6 prompt(s) that changed"));
}

#[test]
fn examples_mark_where_their_outputs_first_differ() {
    let html = render::html(&sample_report());
    let p0 = &html[html
        .find("<article class=\"example\"><h3><code>p0</code>")
        .unwrap()..];
    let p0 = &p0[..p0.find("</article>").unwrap()];
    assert!(
        p0.contains("<pre><mark>I can&#39;t help with that.</mark></pre>"),
        "{p0}"
    );
    assert!(p0.contains("<pre><mark>Sure:"));
    assert!(p0.contains("The outputs differ from their first character; each is marked."));
    // The redacted example has no outputs and nothing marked.
    let p2 = &html[html
        .find("<article class=\"example\"><h3><code>p2</code>")
        .unwrap()..];
    assert!(!p2[..p2.find("</article>").unwrap()].contains("<mark"));
}

#[test]
fn the_summary_cards_show_the_largest_significant_changes() {
    let r = sample_report();
    let html = render::html(&r);
    let summary = &html[..html.find("<section id=\"target-change\">").unwrap()];
    // Two deltas of the sample are significant (adjusted p < 0.05, interval
    // excluding 0): output tokens (41.5 → 57.25, a relative change of
    // 0.275) and helpfulness (0.61 → 0.52, 0.148), in that order.
    let cards: Vec<&str> = summary
        .match_indices("<div class=\"card tone-")
        .map(|(at, _)| {
            let card = &summary[at..];
            &card[..card.find("</div>").unwrap()]
        })
        .collect();
    assert_eq!(cards.len(), 2, "{summary}");
    assert!(
        cards[0].starts_with("<div class=\"card tone-bad\"><b>+15.75</b>"),
        "{}",
        cards[0]
    );
    assert!(
        cards[0].contains("<a href=\"#delta-5\"><code>output_<wbr>tokens</code> · overall</a>")
    );
    assert!(
        cards[0].contains(
            "41.5 → 57.25 · adjusted p 0.0196 · <span class=\"badge bad\">regressed</span>"
        ),
        "{}",
        cards[0]
    );
    assert!(cards[1].contains("<b>-0.09</b>") && cards[1].contains("href=\"#delta-3\""));
    // The rows they link to exist.
    assert!(html.contains("<tr id=\"delta-5\">") && html.contains("<tr id=\"delta-3\">"));
    // The counts are fields now, not cards.
    assert!(summary.contains(
        "<dt>claims</dt><dd>1 accepted · <span class=\"badge warn\">1 downgraded</span>"
    ));
    let md = render::markdown(&r);
    assert!(
        md.contains(
            "- `output_tokens` · overall: **+15.75** (41.5 → 57.25 · adjusted p 0.0196 · regressed)"
        ),
        "{md}"
    );
}

#[test]
fn the_projection_legend_holds_whole_labels_and_names_coinciding_series() {
    // Three candidate series all at 0 (an ablation), as in the quickstart.
    let mut f = findings(vec![3, 6, 9], vec![]);
    for (side, category, values) in [
        (Side::Baseline, "capability", vec![1.0, 5.0, 60.0]),
        (Side::Baseline, "harmful", vec![2.0, 8.0, 90.0]),
        (Side::Candidate, "capability", vec![0.0; 3]),
        (Side::Candidate, "harmful", vec![0.0; 3]),
        (Side::Candidate, "harmless", vec![0.0; 3]),
    ] {
        f.series.push(ProjectionSeries {
            side,
            category: category.into(),
            prompts: 4,
            mean_projection: values,
        });
    }
    let plot = svg::projection_plot(&f).unwrap();
    assert_finite_geometry(&plot);
    // Every label whole, none cut with an ellipsis.
    for label in [
        "baseline · capability (n=4)",
        "candidate · capability (n=4)",
        "candidate · harmless (n=4)",
    ] {
        assert!(
            plot.contains(&format!(">{label}</text>")),
            "{label}: {plot}"
        );
    }
    assert!(!plot.contains('…'));
    // The legend sits below the plot area, inside the drawing.
    let height: f64 = {
        let v = &plot[plot.find("viewBox=\"0 0 820 ").unwrap() + 17..];
        v[..v.find('"').unwrap()].parse().unwrap()
    };
    assert!(height > 330.0, "{height}");
    // The three coinciding series alternate their dashes and are named.
    assert!(plot.contains("stroke-dasharray=\"6 12\" stroke-dashoffset=\"0\""));
    assert!(plot.contains("stroke-dasharray=\"6 12\" stroke-dashoffset=\"12\""));
    assert!(plot.contains("stroke-dasharray=\"6 12\" stroke-dashoffset=\"6\""));
    assert!(plot.contains("≡ 3 series coincide"), "{plot}");
    let notes: String = plot
        .match_indices("class=\"legend note\"")
        .map(|(at, _)| {
            let t = &plot[at..];
            &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()]
        })
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        notes.contains(
            "candidate · capability (n=4); candidate · harmful (n=4); candidate · harmless (n=4)"
        ),
        "{notes}"
    );
    // Concentric markers: three radii at a shared point.
    for r in ["6.2", "4.6", "3"] {
        assert!(plot.contains(&format!(" r=\"{r}\"")), "{r}");
    }
    // Series apart from each other are drawn as before.
    let plot = svg::projection_plot(&sample_report().activation_findings.unwrap()).unwrap();
    assert!(!plot.contains("coincide") && !plot.contains("stroke-dashoffset"));
}

#[test]
fn a_report_json_without_the_prompt_table_still_renders() {
    // report.json files written before the table existed have no
    // `prompts`: they read, and the section says why it is empty.
    let mut json = serde_json::to_value(sample_report()).unwrap();
    json.as_object_mut().unwrap().remove("prompts");
    let r: Report = serde_json::from_value(json).unwrap();
    assert!(r.prompts.is_empty());
    let html = render::html(&r);
    assert!(html.contains("No prompt table: the report holds no prompt rows"));
    assert!(!html.contains("<script") && !html.contains("class=\"to-prompts\""));
    assert!(render::markdown(&r).contains("_No prompt table:"));
}

/// With `VAUBAN_SAMPLE_REPORT_DIR` set, writes the sample as report.json,
/// report.md and report.html there, to look at (a no-op otherwise).
#[test]
fn write_the_sample_when_asked() {
    let Some(dir) = std::env::var_os("VAUBAN_SAMPLE_REPORT_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let r = sample_report();
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&r).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("report.md"), render::markdown(&r)).unwrap();
    std::fs::write(dir.join("report.html"), render::html(&r)).unwrap();
    std::fs::write(dir.join("bare.html"), render::html(&bare_report())).unwrap();
    std::fs::write(dir.join("bare.md"), render::markdown(&bare_report())).unwrap();
    // With `VAUBAN_RENDER_REPORT` naming a report.json too, that report
    // printed again by this build, as rendered.html and rendered.md.
    if let Some(json) = std::env::var_os("VAUBAN_RENDER_REPORT") {
        let text = std::fs::read_to_string(&json).unwrap();
        let r: Report = serde_json::from_str(&text).unwrap();
        std::fs::write(dir.join("rendered.html"), render::html(&r)).unwrap();
        std::fs::write(dir.join("rendered.md"), render::markdown(&r)).unwrap();
    }
}
