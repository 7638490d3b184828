//! Per-layer projections onto a direction, and how a mixture of experts'
//! routing moved, read from the bundles' activations.

use std::collections::{BTreeMap, HashMap};

use std::path::Path;

use crate::bundle::Bundle;
use crate::config::Suite;
use crate::pipeline::plan::{DirectionRef, Plan};
use crate::pipeline::sides::{SideName, Sides};
use crate::report::document::{ActivationFindings, ProjectionSeries, RoutingFindings, Side};
use crate::trace::{ArtifactData, ArtifactKind as K, Role, Site};

use super::*;

/// Mean projection of the last prompt token's residual onto the unit
/// `direction`, per observed layer, per side and category, from raw
/// activations. `None` when a side lacks raw activations.
/// None when no trace holds a raw residual activation (or the direction is
/// zero); an error naming the tensor when one cannot be read or has no row
/// to project: damaged evidence is never dropped in silence.
pub fn projections(
    suite: &Suite,
    sides: [(Side, &Bundle); 2],
    direction: &[f32],
) -> anyhow::Result<Option<(Vec<usize>, Vec<ProjectionSeries>)>> {
    let norm = direction
        .iter()
        .map(|v| f64::from(*v).powi(2))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 {
        return Ok(None);
    }
    let mut layers: Vec<usize> = Vec::new();
    let mut series = Vec::new();
    for (side, bundle) in sides {
        // category → layer → (sum, n)
        let mut acc: BTreeMap<String, BTreeMap<usize, (f64, usize)>> = BTreeMap::new();
        for t in bundle.traces() {
            let cat = t.request.category.clone().unwrap_or_else(|| "all".into());
            for a in t.artifacts_of(K::Activation) {
                if a.site().is_some_and(|s| s != Site::ResidPost) {
                    continue;
                }
                let (Some(layer), ArtifactData::Tensor { raw: true, .. }) = (a.layer, &a.data)
                else {
                    continue;
                };
                let (r, what) = raw_tensor(bundle, side, t, a, "activation")?;
                let width = r.shape.last().copied().unwrap_or(0);
                if width != direction.len() {
                    anyhow::bail!(
                        "{what} has rows of {width} values; the report's direction has {}: they are not from the same model",
                        direction.len()
                    );
                }
                let v = r.to_f32_vec();
                let Some(start) = v.len().checked_sub(width).filter(|_| !v.is_empty()) else {
                    anyhow::bail!("{what} has shape {:?}: no token row to project", r.shape);
                };
                let last = &v[start..];
                let p: f64 = last
                    .iter()
                    .zip(direction)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>()
                    / norm;
                let e = acc
                    .entry(cat.clone())
                    .or_default()
                    .entry(layer)
                    .or_insert((0.0, 0));
                e.0 += p;
                e.1 += 1;
                if !layers.contains(&layer) {
                    layers.push(layer);
                }
            }
        }
        for (cat, per_layer) in acc {
            let prompts = suite
                .prompts
                .iter()
                .filter(|p| p.category.as_deref().unwrap_or("all") == cat)
                .count();
            series.push((side, cat, prompts, per_layer));
        }
    }
    if layers.is_empty() {
        return Ok(None);
    }
    layers.sort_unstable();
    let series = series
        .into_iter()
        .map(|(side, category, prompts, per_layer)| ProjectionSeries {
            side,
            category,
            prompts,
            mean_projection: layers
                .iter()
                .map(|l| per_layer.get(l).map_or(0.0, |(s, n)| s / *n as f64))
                .collect(),
        })
        .collect();
    Ok(Some((layers, series)))
}

/// Layer → (router probabilities, experts, experts used).
type Routes = BTreeMap<usize, (Vec<f32>, usize, usize)>;

/// Each prompt's tokens and routing, from its first sample's raw router
/// activations; prompts without any are left out.
fn routes_of(
    bundle: &Bundle,
    side: SideName,
) -> anyhow::Result<HashMap<String, (Vec<u32>, Routes)>> {
    let mut prompts = HashMap::new();
    for t in bundle.traces() {
        let Some(id) = t.request.prompt_id.clone() else {
            continue;
        };
        if prompts.contains_key(&id) {
            continue; // another sample of the prompt: its first decides
        }
        let tokens = t
            .artifacts_of(K::Tokens)
            .find(|a| a.role() == Some(Role::Prompt))
            .and_then(|a| match &a.data {
                ArtifactData::TokenIds { ids } => Some(ids.clone()),
                _ => None,
            });
        let mut routes = Routes::new();
        for a in t.artifacts_of(K::Activation) {
            if a.site() != Some(Site::Router) {
                continue;
            }
            let (Some(layer), ArtifactData::Tensor { raw: true, .. }) = (a.layer, &a.data) else {
                continue;
            };
            let used: usize = match a.labels.get("experts_used").map(|u| u.parse()) {
                Some(Ok(u)) => u,
                _ => anyhow::bail!(
                    "router activation `{}` of trace `{}` in the {side} bundle has no `experts_used` label",
                    a.id,
                    t.id
                ),
            };
            let (r, what) = raw_tensor(bundle, side, t, a, "router activation")?;
            let experts = r.shape.last().copied().unwrap_or(0);
            if experts == 0 || used == 0 || used > experts {
                anyhow::bail!("{what} has shape {:?} for {used} experts used", r.shape);
            }
            routes.insert(layer, (r.to_f32_vec(), experts, used));
        }
        if let (Some(tokens), false) = (tokens, routes.is_empty()) {
            prompts.insert(id, (tokens, routes));
        }
    }
    Ok(prompts)
}

/// A mixture of experts' routing, candidate against baseline: per observed
/// layer, the share of prompt tokens whose chosen experts differ and the
/// mean total variation between the router distributions, over the
/// prompts whose prompt tokens the two sides share (a token's routing is
/// comparable only at the same token in the same context). From the raw
/// `router` activations (`[1, tokens, experts]`, labelled with the experts
/// each token used); `None` when a side recorded none.
pub fn routing(bundles: Sides<&Bundle>) -> anyhow::Result<Option<RoutingFindings>> {
    let per_side = Sides::try_from_fn(|side| routes_of(bundles[side], side))?;
    let (base, cand) = (&per_side.baseline, &per_side.candidate);
    // layer → (tokens changed, total variation summed, tokens), and the shared k
    let mut acc: BTreeMap<usize, (usize, f64, usize)> = BTreeMap::new();
    let mut prompts = 0;
    let mut used_k = None;
    for (id, (tokens, routes)) in base {
        let Some((other_tokens, other_routes)) = cand.get(id) else {
            continue;
        };
        if tokens != other_tokens {
            continue;
        }
        prompts += 1;
        for (layer, (p, experts, used)) in routes {
            let Some((q, e2, u2)) = other_routes.get(layer) else {
                continue;
            };
            if (experts, used) != (e2, u2) {
                anyhow::bail!(
                    "layer {layer}'s routers differ between the sides ({experts} experts, {used} used against {e2}, {u2}): not the same model family"
                );
            }
            used_k = Some(*used);
            let top = |row: &[f32]| {
                let mut order: Vec<usize> = (0..row.len()).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                let mut chosen = order[..*used].to_vec();
                chosen.sort_unstable();
                chosen
            };
            let entry = acc.entry(*layer).or_insert((0, 0.0, 0));
            for (a, b) in p.chunks_exact(*experts).zip(q.chunks_exact(*experts)) {
                entry.0 += usize::from(top(a) != top(b));
                entry.1 += 0.5
                    * a.iter()
                        .zip(b)
                        .map(|(x, y)| f64::from((x - y).abs()))
                        .sum::<f64>();
                entry.2 += 1;
            }
        }
    }
    let Some(used) = used_k else {
        return Ok(None);
    };
    let layers: Vec<usize> = acc.keys().copied().collect();
    let changed: Vec<f64> = acc.values().map(|v| v.0 as f64 / v.2 as f64).collect();
    let tv: Vec<f64> = acc.values().map(|v| v.1 / v.2 as f64).collect();
    let tokens = acc.values().map(|v| v.2).max().unwrap_or(0);
    let mut findings = Vec::new();
    if let Some((i, &most)) = changed
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
    {
        findings.push(match most > 0.0 {
            true => format!(
                "Routing moved most at layer {}: the {used} experts chosen differ for {:.1}% of {tokens} prompt tokens (mean total variation of the router's distribution {:.3}).",
                layers[i],
                most * 100.0,
                tv[i]
            ),
            false => format!(
                "Routing did not move: every one of {tokens} prompt tokens chose the same {used} experts at every compared layer (largest mean total variation {:.3}).",
                tv.iter().copied().fold(0.0, f64::max)
            ),
        });
    }
    let same: Vec<String> = layers
        .iter()
        .zip(&changed)
        .filter(|(_, c)| **c == 0.0)
        .map(|(l, _)| l.to_string())
        .collect();
    if !same.is_empty() && same.len() < layers.len() {
        findings.push(format!(
            "At layer{} {} every token chose the same experts on both sides.",
            if same.len() > 1 { "s" } else { "" },
            same.join(", ")
        ));
    }
    Ok(Some(RoutingFindings {
        experts_per_token: used,
        layers,
        changed_choices: changed,
        mean_total_variation: tv,
        tokens,
        prompts,
        findings,
    }))
}

/// Sentences about the projections: where the categories separate most
/// (baseline) and where the candidate moved most from the baseline.
pub fn projection_findings(layers: &[usize], series: &[ProjectionSeries]) -> Vec<String> {
    let mut out = Vec::new();
    let get = |side: Side| {
        series
            .iter()
            .filter(move |s| s.side == side)
            .collect::<Vec<_>>()
    };
    let base = get(Side::Baseline);
    // the pair of categories and the layer with the largest gap
    let mut best: Option<(f64, usize, &ProjectionSeries, &ProjectionSeries)> = None;
    for (i, a) in base.iter().enumerate() {
        for b in &base[i + 1..] {
            for (l, (x, y)) in a.mean_projection.iter().zip(&b.mean_projection).enumerate() {
                if best.is_none_or(|(g, ..)| (x - y).abs() > g) {
                    best = Some(((x - y).abs(), l, a, b));
                }
            }
        }
    }
    if let Some((_, i, a, b)) = best {
        out.push(format!(
            "On the baseline, {} and {} prompts separate most along the direction at layer {} (mean projection {} vs {}, gap {:+.3}).",
            a.category,
            b.category,
            layers[i],
            signed3(a.mean_projection[i]),
            signed3(b.mean_projection[i]),
            a.mean_projection[i] - b.mean_projection[i]
        ));
    }
    for c in get(Side::Candidate) {
        if let Some(b) = base.iter().find(|b| b.category == c.category)
            && let Some((i, shift)) = c
                .mean_projection
                .iter()
                .zip(&b.mean_projection)
                .map(|(x, y)| x - y)
                .enumerate()
                .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
        {
            out.push(format!(
                "On {} prompts the candidate's mean projection moved most at layer {}: {} → {} ({:+.3}).",
                c.category,
                layers[i],
                signed3(b.mean_projection[i]),
                signed3(c.mean_projection[i]),
                shift
            ));
        }
    }
    out
}

/// The findings section, when projections exist.
pub fn activation_findings(
    direction_label: String,
    direction_sha256: String,
    found: Option<(Vec<usize>, Vec<ProjectionSeries>)>,
) -> Option<ActivationFindings> {
    let (layers, series) = found?;
    Some(ActivationFindings {
        findings: projection_findings(&layers, &series),
        direction: direction_label,
        direction_sha256,
        layers,
        series,
    })
}

/// `x` signed, to three decimals; a value that rounds to zero reads
/// `0.000` (an ablated projection of ±1e-9 has no sign worth printing).
fn signed3(x: f64) -> String {
    match format!("{x:+.3}") {
        s if s == "+0.000" || s == "-0.000" => "0.000".into(),
        s => s,
    }
}

/// Per-layer projections of both sides onto the report's direction, when
/// there is one and the traces hold activations. A configured direction
/// that cannot be read here (a replay on another machine) gives no findings
/// and the reason, which the report lists among its limitations.
pub(crate) fn findings_on_direction(
    plan: &Plan,
    measured: Option<&Path>,
    baseline: &Bundle,
    candidate: &Bundle,
) -> anyhow::Result<(Option<ActivationFindings>, Option<String>)> {
    let (v, label, sha) = match report_direction(plan, measured) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok((None, None)),
        Err(why) => {
            return Ok((None, Some(format!("no activation findings: {why}"))));
        }
    };
    let projections = projections(
        &plan.suite,
        [(Side::Baseline, baseline), (Side::Candidate, candidate)],
        &v,
    )?;
    Ok((activation_findings(label, sha, projections), None))
}

/// The unit direction for activation findings, with its label and sha256;
/// none when the config names none; why not when it names one that cannot
/// be read.
fn report_direction(
    plan: &Plan,
    measured: Option<&Path>,
) -> Result<Option<(Vec<f32>, String, String)>, String> {
    let Some((d, tensor)) = plan.report_direction.as_ref() else {
        return Ok(None);
    };
    let (path, tensor) = match d {
        DirectionRef::File(p) => (p.clone(), tensor.clone()),
        DirectionRef::Measured => {
            let Some(p) = measured
                .map(Path::to_path_buf)
                .or_else(|| plan.measure.as_ref().map(|m| m.out.clone()))
            else {
                return Err("the report direction is `measured`, but nothing was measured".into());
            };
            (
                p,
                Some(tensor.clone().unwrap_or_else(|| "direction".into())),
            )
        }
    };
    let dir = crate::intervene::load_direction(&path, tensor.as_deref(), None, 0)
        .map_err(|e| format!("the report direction cannot be read here: {e}"))?;
    let v = dir.basis;
    Ok(Some((
        v,
        format!("{} (tensor {})", path.display(), dir.tensor),
        dir.file_sha256,
    )))
}
