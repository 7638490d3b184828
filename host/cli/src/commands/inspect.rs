//! `vauban trace inspect`: one serialisable view of a bundle, rendered as
//! JSON for machines or as text for people. Only trace JSON is read; raw
//! tensors stay on disk.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use vauban::bundle::{Bundle, Manifest};
use vauban::profile::{TraceProfileSummary, summarize_trace};
use vauban::text::{excerpt, list};
use vauban::trace::{ArtifactData, ArtifactKind, MissingArtifact, Role, Stage, Trace};

/// Everything `inspect` shows.
#[derive(Debug, Serialize)]
pub struct BundleInspection {
    pub bundle: String,
    pub manifest: ManifestView,
    /// Per artifact kind that any trace requested or holds.
    pub coverage: Vec<KindCount>,
    pub traces: Vec<TraceView>,
}

/// The manifest without its file list.
#[derive(Debug, Serialize)]
pub struct ManifestView {
    pub schema_version: u32,
    pub tool: String,
    pub created_at: String,
    pub executors: Vec<vauban::trace::Capabilities>,
    pub models: Vec<vauban::trace::ModelRef>,
    pub plugins: Vec<vauban::bundle::PluginRef>,
    pub files: usize,
    pub bytes: u64,
}

/// How many traces hold, miss, or cannot produce one kind.
#[derive(Debug, Serialize)]
pub struct KindCount {
    pub kind: ArtifactKind,
    pub traces_with: usize,
    pub missing: usize,
    pub unsupported: usize,
    pub of: usize,
}

/// One trace, summarised.
#[derive(Debug, Serialize)]
pub struct TraceView {
    pub id: String,
    pub model: String,
    pub executor: String,
    pub device: String,
    pub prompt_id: Option<String>,
    pub input: String,
    /// The completion's text, when the trace recorded one.
    pub completion: Option<String>,
    pub requested: Vec<ArtifactKind>,
    pub layers: Vec<usize>,
    pub spans: Vec<SpanView>,
    pub artifacts: BTreeMap<ArtifactKind, usize>,
    pub raw_tensors: usize,
    pub missing: Vec<MissingArtifact>,
    pub unsupported: Vec<ArtifactKind>,
    pub profile: TraceProfileSummary,
}

/// One span, in execution order.
#[derive(Debug, Serialize)]
pub struct SpanView {
    pub id: String,
    pub stage: Stage,
    pub duration_ns: u64,
    pub token_count: u64,
    pub batch_size: u32,
    pub memory_bytes: Option<u64>,
    pub outputs: Vec<String>,
}

impl BundleInspection {
    /// The view of an opened bundle.
    pub fn of(bundle: &Bundle) -> Self {
        let traces = bundle.traces();
        BundleInspection {
            bundle: bundle.root().display().to_string(),
            manifest: ManifestView::of(bundle.manifest()),
            coverage: coverage(traces),
            traces: traces.iter().map(TraceView::of).collect(),
        }
    }
}

impl ManifestView {
    fn of(m: &Manifest) -> Self {
        ManifestView {
            schema_version: m.schema_version,
            tool: format!("{} {}", m.tool.name, m.tool.version),
            created_at: m.created_at.to_rfc3339(),
            executors: m.executors.clone(),
            models: m.models.clone(),
            plugins: m.plugins.clone(),
            files: m.files.len(),
            bytes: m
                .files
                .values()
                .fold(0u64, |sum, f| sum.saturating_add(f.bytes)),
        }
    }
}

fn coverage(traces: &[Trace]) -> Vec<KindCount> {
    ArtifactKind::ALL
        .into_iter()
        .map(|kind| KindCount {
            kind,
            traces_with: traces.iter().filter(|t| t.has(kind)).count(),
            missing: traces
                .iter()
                .filter(|t| t.missing.iter().any(|m| m.kind == kind))
                .count(),
            unsupported: traces
                .iter()
                .filter(|t| t.unsupported.contains(&kind))
                .count(),
            of: traces.len(),
        })
        .filter(|c| c.traces_with + c.missing + c.unsupported > 0)
        .collect()
}

impl TraceView {
    fn of(t: &Trace) -> Self {
        let mut artifacts = BTreeMap::new();
        for a in &t.artifacts {
            *artifacts.entry(a.kind).or_insert(0) += 1;
        }
        let input = match (&t.request.text, &t.request.token_ids) {
            (Some(text), _) => format!("text {}", excerpt(text, 60)),
            (None, Some(ids)) => format!("{} token ids", ids.len()),
            (None, None) => "none".into(),
        };
        TraceView {
            id: t.id.clone(),
            model: t.model.to_string(),
            executor: t.capabilities.executor.clone(),
            device: t.device.clone(),
            prompt_id: t.request.prompt_id.clone(),
            input,
            completion: t
                .artifacts_of(ArtifactKind::Text)
                .find_map(|a| match &a.data {
                    ArtifactData::Text { text } if a.role() == Some(Role::Completion) => {
                        Some(text.clone())
                    }
                    _ => None,
                }),
            requested: t.request.observe.clone(),
            layers: t.request.layers.clone(),
            spans: t
                .spans
                .iter()
                .map(|s| SpanView {
                    id: s.id.clone(),
                    stage: s.stage,
                    duration_ns: s.profile.duration_ns,
                    token_count: s.profile.token_count,
                    batch_size: s.profile.batch_size,
                    memory_bytes: s.profile.memory_bytes,
                    outputs: s.outputs.clone(),
                })
                .collect(),
            artifacts,
            raw_tensors: t
                .artifacts
                .iter()
                .filter(|a| matches!(a.data, ArtifactData::Tensor { raw: true, .. }))
                .count(),
            missing: t.missing.clone(),
            unsupported: t.unsupported.clone(),
            profile: summarize_trace(t),
        }
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The text rendering.
pub fn render_text(r: &BundleInspection, out: &mut dyn Write) -> io::Result<()> {
    let m = &r.manifest;
    writeln!(out, "bundle     {}", r.bundle)?;
    writeln!(
        out,
        "written    {} by {}, schema v{}; {} files, {}",
        m.created_at,
        m.tool,
        m.schema_version,
        m.files,
        bytes(m.bytes)
    )?;
    for model in &m.models {
        writeln!(out, "model      {model}")?;
    }
    for e in &m.executors {
        let levels: Vec<String> = e
            .artifacts
            .iter()
            .map(|(k, level)| format!("{k} {level}"))
            .collect();
        writeln!(
            out,
            "executor   {} on {}: {}",
            e.executor,
            list(&e.device_kinds),
            levels.join(", ")
        )?;
    }
    for p in &m.plugins {
        writeln!(
            out,
            "plugin     {} {} (sha256 {})",
            p.name,
            p.version,
            p.sha256.chars().take(12).collect::<String>()
        )?;
    }

    writeln!(out, "\ncoverage   ({} traces)", r.traces.len())?;
    for c in &r.coverage {
        let mut line = format!(
            "  {:<20} {}/{} traces",
            c.kind.as_str(),
            c.traces_with,
            c.of
        );
        if c.missing > 0 {
            line.push_str(&format!(", missing in {}", c.missing));
        }
        if c.unsupported > 0 {
            line.push_str(&format!(", unsupported in {}", c.unsupported));
        }
        writeln!(out, "{line}")?;
    }

    for t in &r.traces {
        writeln!(out, "\ntrace {}", t.id)?;
        writeln!(out, "  model      {}", t.model)?;
        writeln!(out, "  executor   {} on {}", t.executor, t.device)?;
        if let Some(p) = &t.prompt_id {
            writeln!(out, "  prompt     {p}")?;
        }
        writeln!(out, "  input      {}", t.input)?;
        if let Some(c) = &t.completion {
            writeln!(out, "  completion {}", excerpt(c, 200))?;
        }
        let layers = if t.layers.is_empty() {
            String::new()
        } else {
            format!(" (layers {})", list(&t.layers))
        };
        writeln!(out, "  requested  {}{layers}", list(&t.requested))?;
        writeln!(out, "  spans")?;
        for (i, s) in t.spans.iter().enumerate() {
            let mem = s
                .memory_bytes
                .map(|b| format!(", mem {}", bytes(b)))
                .unwrap_or_default();
            writeln!(
                out,
                "    {:>2}. {:<14} {:>12}  {} tok × {}{mem}  → {}",
                i + 1,
                s.stage.as_str(),
                ms(s.duration_ns),
                s.token_count,
                s.batch_size,
                list(&s.outputs)
            )?;
        }
        let held: Vec<String> = t
            .artifacts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            out,
            "  artifacts  {} ({} raw tensors kept)",
            list(&held),
            t.raw_tensors
        )?;
        for m in &t.missing {
            writeln!(out, "  missing    {}: {}", m.kind, m.reason)?;
        }
        if !t.unsupported.is_empty() {
            writeln!(
                out,
                "  unsupported {} (executor {} declares it cannot produce these)",
                list(&t.unsupported),
                t.executor
            )?;
        }
        let p = &t.profile;
        let rate = p
            .tokens_per_s
            .map(|r| format!("{r:.1} tok/s"))
            .unwrap_or_else(|| "tok/s n/a".into());
        let peak = p
            .peak_memory_bytes
            .map(bytes)
            .unwrap_or_else(|| "not measured".into());
        writeln!(
            out,
            "  profile    {} total, {} tokens × batch {}, {rate}, peak memory {peak}",
            ms(p.total_duration_ns),
            p.token_count,
            p.batch_size
        )?;
        writeln!(
            out,
            "             in {} / out {}, {} host↔device copies, {} syncs, max queue depth {}",
            bytes(p.input_bytes),
            bytes(p.output_bytes),
            p.host_device_copies,
            p.sync_points,
            p.max_queue_depth
        )?;
    }
    Ok(())
}
