//! Intervention policies: the host computes per-token projections onto the
//! policy's declared directions, the plugin decides, and the host checks
//! each op and turns it into the native activation primitive.

use std::collections::BTreeMap;

pub use crate::intervention::policy::{Observation, PolicyOp};
use crate::intervention::policy::{StepPolicy, Watch};
use crate::intervention::primitive::{Direction, Mode};

use super::error::{Failure, PluginError};
use super::host::Plugin;
use super::sandbox::SandboxOptions;
use super::scorer::PluginInfo;
use super::wit::current::policy as b;
use super::wit::{PolicyInstance, PolicyPre};
use super::{Live, World, check_info, provisional_info, typed_pre};

use b::exports::vauban::plugin::intervention_policy as wp;

/// A direction a policy needs and the layers it watches.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DirectionNeed {
    pub name: String,
    pub layers: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PolicyInfo {
    pub plugin: PluginInfo,
    pub directions: Vec<DirectionNeed>,
}

/// A loaded, configured intervention policy.
pub struct Policy {
    plugin: Plugin,
    pre: PolicyPre,
    info: PolicyInfo,
    config_json: String,
    sandbox: SandboxOptions,
}

impl Policy {
    /// Configures and describes the plugin once (configure first: the
    /// directions a policy declares come from its config).
    pub fn new(
        plugin: Plugin,
        config_json: &str,
        sandbox: SandboxOptions,
    ) -> Result<Policy, PluginError> {
        plugin.expect_world(World::InterventionPolicy)?;
        let version = plugin.facts.wit;
        let pre = typed_pre(&plugin, |p| PolicyPre::new(p, version))?;
        let mut policy = Policy {
            info: PolicyInfo {
                plugin: provisional_info(&plugin),
                directions: Vec::new(),
            },
            plugin,
            pre,
            config_json: config_json.to_owned(),
            sandbox,
        };
        let mut s = policy.session()?;
        let raw = s.live.call("describe", |st, i| i.describe(st))?;
        let info = PolicyInfo {
            plugin: raw.plugin.into(),
            directions: raw
                .directions
                .into_iter()
                .map(|d| DirectionNeed {
                    name: d.name,
                    layers: d.layers.into_iter().map(|l| l as usize).collect(),
                })
                .collect(),
        };
        check_info(&info.plugin)
            .and_then(|()| match info.directions.len() {
                1..=64 => Ok(()),
                _ => Err("a policy declares 1 to 64 directions".into()),
            })
            .map_err(|m| s.live.fail("describe", Failure::Malformed(m)))?;
        drop(s);
        policy.info = info;
        Ok(policy)
    }

    pub fn info(&self) -> &PolicyInfo {
        &self.info
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// One live, configured instance: a generation keeps it for every step.
    pub fn session(&self) -> Result<PolicySession<'_>, PluginError> {
        let mut live = Live::start(&self.plugin, &self.info.plugin.name, &self.sandbox, |s| {
            self.pre.instantiate(s)
        })?;
        let json = &self.config_json;
        live.call_checked("configure", |st, i| i.configure(st, json))?;
        Ok(PolicySession { policy: self, live })
    }
}

pub struct PolicySession<'a> {
    policy: &'a Policy,
    live: Live<PolicyInstance>,
}

/// Most ops one step may return.
const MAX_OPS: usize = 1024;

impl PolicySession<'_> {
    /// The ops for one forward step, checked against the observations.
    pub fn decide(&mut self, observations: &[Observation]) -> Result<Vec<PolicyOp>, PluginError> {
        let wire: Vec<wp::Observation> = observations
            .iter()
            .map(|o| wp::Observation {
                layer: o.layer as u32,
                direction: o.direction.clone(),
                offset: o.offset as u64,
                projections: o.projections.clone(),
            })
            .collect();
        let ops = self
            .live
            .call_checked("decide", |s, i| i.decide(s, &wire))?;
        check_ops(ops, observations, &self.policy.info)
            .map_err(|m| self.live.fail("decide", Failure::Malformed(m)))
    }
}

fn check_ops(
    ops: Vec<wp::Op>,
    observations: &[Observation],
    info: &PolicyInfo,
) -> Result<Vec<PolicyOp>, String> {
    if ops.len() > MAX_OPS {
        return Err(format!("{} ops in one step (at most {MAX_OPS})", ops.len()));
    }
    ops.into_iter()
        .map(|op| {
            let layer = op.layer as usize;
            let need = info
                .directions
                .iter()
                .find(|d| d.name == op.direction)
                .ok_or_else(|| {
                    format!(
                        "op names direction {:?}, which describe did not declare",
                        op.direction
                    )
                })?;
            if !need.layers.contains(&layer) {
                return Err(format!(
                    "op on layer {layer}, which direction {} does not watch",
                    op.direction
                ));
            }
            let obs = observations
                .iter()
                .find(|o| o.layer == layer && o.direction == op.direction)
                .ok_or_else(|| {
                    format!(
                        "op on layer {layer} / {} has no observation this step",
                        op.direction
                    )
                })?;
            if !op.alpha.is_finite() || op.alpha.abs() > 1e4 {
                return Err(format!(
                    "op alpha {} is not a finite number within ±1e4",
                    op.alpha
                ));
            }
            let mode = mode_from(op.mode);
            match (mode, op.value) {
                (Mode::Clamp, Some(v)) if v.is_finite() => {}
                (Mode::Clamp, _) => return Err("a clamp op needs a finite value".into()),
                (_, Some(_)) => return Err(format!("a {} op takes no value", mode.as_str())),
                (_, None) => {}
            }
            let n = obs.projections.len();
            let mut tokens: Vec<usize> = if op.tokens.is_empty() {
                (0..n).collect()
            } else {
                op.tokens.iter().map(|&t| t as usize).collect()
            };
            if let Some(bad) = tokens.iter().find(|&&t| t >= n) {
                return Err(format!(
                    "op token {bad} is outside the observation's {n} tokens"
                ));
            }
            tokens.sort_unstable();
            tokens.dedup();
            Ok(PolicyOp {
                layer,
                direction: op.direction,
                mode,
                alpha: op.alpha,
                value: op.value,
                positions: tokens.into_iter().map(|t| obs.offset + t).collect(),
            })
        })
        .collect()
}

fn mode_from(m: wp::Mode) -> Mode {
    match m {
        wp::Mode::Project => Mode::Project,
        wp::Mode::Subtract => Mode::Subtract,
        wp::Mode::Add => Mode::Add,
        wp::Mode::SubspaceProject => Mode::SubspaceProject,
        wp::Mode::SubspaceRemove => Mode::SubspaceRemove,
        wp::Mode::SubspaceAdd => Mode::SubspaceAdd,
        wp::Mode::Clamp => Mode::Clamp,
        wp::Mode::Steer => Mode::Steer,
    }
}

impl Policy {
    /// A live instance bound to direction vectors by name, ready to run in
    /// the forward pass. Each direction is scaled to unit norm: a policy's
    /// observations are projections onto unit directions, and its ops act
    /// on the same unit vectors.
    pub fn bind(
        &self,
        directions: &BTreeMap<String, Direction>,
    ) -> Result<PolicyRun<'_>, PluginError> {
        let mut watches = Vec::new();
        for need in &self.info.directions {
            let d = directions.get(&need.name).ok_or_else(|| {
                PluginError::Sandbox(format!(
                    "policy {} needs direction `{}`; bind it to a file (`--policy-direction {}=FILE`)",
                    self.info.plugin.name, need.name, need.name
                ))
            })?;
            let unit = d.unit().map_err(|e| {
                PluginError::Sandbox(format!("direction `{}` for a policy: {e}", need.name))
            })?;
            watches.push(Watch {
                name: need.name.clone(),
                layers: need.layers.clone(),
                direction: unit,
            });
        }
        Ok(PolicyRun {
            describe: format!(
                "{} {} (sha256 {})",
                self.info.plugin.name, self.info.plugin.version, self.plugin.sha256
            ),
            session: self.session()?,
            watches,
        })
    }
}

/// A policy instance bound to its directions: what the executor calls.
pub struct PolicyRun<'a> {
    describe: String,
    session: PolicySession<'a>,
    watches: Vec<Watch>,
}

impl StepPolicy for PolicyRun<'_> {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn watches(&self) -> &[Watch] {
        &self.watches
    }

    fn decide(&mut self, observations: &[Observation]) -> Result<Vec<PolicyOp>, String> {
        self.session.decide(observations).map_err(|e| e.to_string())
    }
}
