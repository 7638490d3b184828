//! The WIT versions the host runs, one module each, and a small enum per
//! world that dispatches a call to the version a component was built
//! against. The host's plugin code speaks only the current version's types
//! ([`current`]); an older version's module converts to and from them.
//!
//! Adding a version: freeze the released WIT under `wit/since_vX.Y.Z/`, add
//! its module here with bindings and conversions to the current types, add a
//! [`WitVersion`] variant and an arm to each enum below.

pub mod since_v0_1_0;
pub mod since_v0_2_0;
pub mod since_v0_3_0;

pub use since_v0_3_0 as current;

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::sandbox::SandboxState;

use current::claims::exports::vauban::plugin::claim_mapper as wc;
use current::judged::exports::vauban::plugin::judged_scorer as wj;
use current::policy::exports::vauban::plugin::intervention_policy as wp;
use current::scorer::vauban::plugin::scoring as ws;

/// A `vauban:plugin` version the host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WitVersion {
    V0_1,
    V0_2,
    V0_3,
}

impl WitVersion {
    /// The version the SDK and first-party plugins are built against.
    pub const CURRENT: WitVersion = WitVersion::V0_3;

    /// The version a component's `vauban:plugin/...@VERSION` names belong
    /// to: same major, and for 0.x the same minor (semver for WIT).
    pub fn of(version: &str) -> Option<WitVersion> {
        let mut it = version.split('.');
        let major: u64 = it.next()?.parse().ok()?;
        let minor: u64 = it.next()?.parse().ok()?;
        // A patch part, when there is one, must be a number too.
        if let Some(patch) = it.next() {
            patch.parse::<u64>().ok()?;
        }
        match (major, minor) {
            (0, 1) => Some(WitVersion::V0_1),
            (0, 2) => Some(WitVersion::V0_2),
            (0, 3) => Some(WitVersion::V0_3),
            _ => None,
        }
    }
}

type Guest<T> = Result<T, current::scorer::vauban::plugin::types::PluginError>;

/// A scorer, linked and type-checked for its version and world (a judged
/// scorer exists from 0.3.0 on).
pub enum ScorerPre {
    V0_1(since_v0_1_0::scorer::ScorerPluginPre<SandboxState>),
    V0_2(since_v0_2_0::scorer::ScorerPluginPre<SandboxState>),
    V0_3(current::scorer::ScorerPluginPre<SandboxState>),
    Judged(current::judged::JudgedScorerPluginPre<SandboxState>),
}

pub enum ScorerInstance {
    V0_1(since_v0_1_0::scorer::ScorerPlugin),
    V0_2(since_v0_2_0::scorer::ScorerPlugin),
    V0_3(current::scorer::ScorerPlugin),
    Judged(current::judged::JudgedScorerPlugin),
}

impl ScorerPre {
    pub fn new(
        pre: InstancePre<SandboxState>,
        v: WitVersion,
        judged: bool,
    ) -> wasmtime::Result<ScorerPre> {
        Ok(match (v, judged) {
            (WitVersion::V0_1, _) => {
                ScorerPre::V0_1(since_v0_1_0::scorer::ScorerPluginPre::new(pre)?)
            }
            (WitVersion::V0_2, _) => {
                ScorerPre::V0_2(since_v0_2_0::scorer::ScorerPluginPre::new(pre)?)
            }
            (WitVersion::V0_3, false) => {
                ScorerPre::V0_3(current::scorer::ScorerPluginPre::new(pre)?)
            }
            (WitVersion::V0_3, true) => {
                ScorerPre::Judged(current::judged::JudgedScorerPluginPre::new(pre)?)
            }
        })
    }

    pub fn instantiate(&self, s: &mut Store<SandboxState>) -> wasmtime::Result<ScorerInstance> {
        Ok(match self {
            ScorerPre::V0_1(p) => ScorerInstance::V0_1(p.instantiate(s)?),
            ScorerPre::V0_2(p) => ScorerInstance::V0_2(p.instantiate(s)?),
            ScorerPre::V0_3(p) => ScorerInstance::V0_3(p.instantiate(s)?),
            ScorerPre::Judged(p) => ScorerInstance::Judged(p.instantiate(s)?),
        })
    }
}

impl ScorerInstance {
    /// The scorer's declaration, and the judges it asks (none but for a
    /// judged scorer).
    pub fn describe(
        &self,
        s: &mut Store<SandboxState>,
    ) -> wasmtime::Result<(ws::ScorerInfo, Vec<wj::JudgeNeed>)> {
        match self {
            ScorerInstance::V0_1(i) => Ok((
                i.vauban_plugin_scorer().call_describe(s)?.into(),
                Vec::new(),
            )),
            ScorerInstance::V0_2(i) => Ok((
                i.vauban_plugin_scorer().call_describe(s)?.into(),
                Vec::new(),
            )),
            ScorerInstance::V0_3(i) => Ok((i.vauban_plugin_scorer().call_describe(s)?, Vec::new())),
            ScorerInstance::Judged(i) => {
                let info = i.vauban_plugin_judged_scorer().call_describe(s)?;
                Ok((info.scorer, info.judges))
            }
        }
    }

    /// A judged scorer's requests for a batch; a plain scorer asks nothing.
    pub fn plan(
        &self,
        s: &mut Store<SandboxState>,
        views: &[ws::TraceView],
    ) -> wasmtime::Result<Guest<Vec<wj::JudgeRequest>>> {
        match self {
            ScorerInstance::Judged(i) => i.vauban_plugin_judged_scorer().call_plan(s, views),
            _ => Ok(Ok(Vec::new())),
        }
    }

    pub fn configure(
        &self,
        s: &mut Store<SandboxState>,
        json: &str,
    ) -> wasmtime::Result<Guest<()>> {
        match self {
            ScorerInstance::V0_1(i) => i.vauban_plugin_scorer().call_configure(s, json),
            ScorerInstance::V0_2(i) => i.vauban_plugin_scorer().call_configure(s, json),
            ScorerInstance::V0_3(i) => i.vauban_plugin_scorer().call_configure(s, json),
            ScorerInstance::Judged(i) => i.vauban_plugin_judged_scorer().call_configure(s, json),
        }
    }

    /// Scores a batch; `answers` (to the batch's plan) reach a judged
    /// scorer only.
    pub fn score(
        &self,
        s: &mut Store<SandboxState>,
        views: &[ws::TraceView],
        answers: &[wj::JudgeAnswer],
    ) -> wasmtime::Result<Guest<Vec<ws::Metric>>> {
        match self {
            ScorerInstance::V0_1(i) => {
                let views: Vec<_> = views.iter().map(since_v0_1_0::trace_view).collect();
                let r = i.vauban_plugin_scorer().call_score(s, &views)?;
                Ok(r.map(|ms| ms.into_iter().map(Into::into).collect()))
            }
            ScorerInstance::V0_2(i) => {
                let views: Vec<_> = views.iter().map(since_v0_2_0::trace_view).collect();
                let r = i.vauban_plugin_scorer().call_score(s, &views)?;
                Ok(r.map(|ms| ms.into_iter().map(Into::into).collect()))
            }
            ScorerInstance::V0_3(i) => i.vauban_plugin_scorer().call_score(s, views),
            ScorerInstance::Judged(i) => i
                .vauban_plugin_judged_scorer()
                .call_score(s, views, answers),
        }
    }
}

type PolicyGuest<T> = Result<T, current::policy::vauban::plugin::types::PluginError>;

/// An intervention policy, linked and type-checked for its version.
pub enum PolicyPre {
    V0_1(since_v0_1_0::policy::InterventionPolicyPluginPre<SandboxState>),
    V0_2(since_v0_2_0::policy::InterventionPolicyPluginPre<SandboxState>),
    V0_3(current::policy::InterventionPolicyPluginPre<SandboxState>),
}

pub enum PolicyInstance {
    V0_1(since_v0_1_0::policy::InterventionPolicyPlugin),
    V0_2(since_v0_2_0::policy::InterventionPolicyPlugin),
    V0_3(current::policy::InterventionPolicyPlugin),
}

impl PolicyPre {
    pub fn new(pre: InstancePre<SandboxState>, v: WitVersion) -> wasmtime::Result<PolicyPre> {
        Ok(match v {
            WitVersion::V0_1 => {
                PolicyPre::V0_1(since_v0_1_0::policy::InterventionPolicyPluginPre::new(pre)?)
            }
            WitVersion::V0_2 => {
                PolicyPre::V0_2(since_v0_2_0::policy::InterventionPolicyPluginPre::new(pre)?)
            }
            WitVersion::V0_3 => {
                PolicyPre::V0_3(current::policy::InterventionPolicyPluginPre::new(pre)?)
            }
        })
    }

    pub fn instantiate(&self, s: &mut Store<SandboxState>) -> wasmtime::Result<PolicyInstance> {
        Ok(match self {
            PolicyPre::V0_1(p) => PolicyInstance::V0_1(p.instantiate(s)?),
            PolicyPre::V0_2(p) => PolicyInstance::V0_2(p.instantiate(s)?),
            PolicyPre::V0_3(p) => PolicyInstance::V0_3(p.instantiate(s)?),
        })
    }
}

impl PolicyInstance {
    pub fn describe(&self, s: &mut Store<SandboxState>) -> wasmtime::Result<wp::PolicyInfo> {
        match self {
            PolicyInstance::V0_1(i) => Ok(i
                .vauban_plugin_intervention_policy()
                .call_describe(s)?
                .into()),
            PolicyInstance::V0_2(i) => Ok(i
                .vauban_plugin_intervention_policy()
                .call_describe(s)?
                .into()),
            PolicyInstance::V0_3(i) => i.vauban_plugin_intervention_policy().call_describe(s),
        }
    }

    pub fn configure(
        &self,
        s: &mut Store<SandboxState>,
        json: &str,
    ) -> wasmtime::Result<PolicyGuest<()>> {
        match self {
            PolicyInstance::V0_1(i) => i
                .vauban_plugin_intervention_policy()
                .call_configure(s, json),
            PolicyInstance::V0_2(i) => i
                .vauban_plugin_intervention_policy()
                .call_configure(s, json),
            PolicyInstance::V0_3(i) => i
                .vauban_plugin_intervention_policy()
                .call_configure(s, json),
        }
    }

    pub fn decide(
        &self,
        s: &mut Store<SandboxState>,
        observations: &[wp::Observation],
    ) -> wasmtime::Result<PolicyGuest<Vec<wp::Op>>> {
        match self {
            PolicyInstance::V0_1(i) => {
                let obs: Vec<_> = observations.iter().map(since_v0_1_0::observation).collect();
                let r = i.vauban_plugin_intervention_policy().call_decide(s, &obs)?;
                Ok(r.map(|ops| ops.into_iter().map(Into::into).collect()))
            }
            PolicyInstance::V0_2(i) => {
                let obs: Vec<_> = observations.iter().map(since_v0_2_0::observation).collect();
                let r = i.vauban_plugin_intervention_policy().call_decide(s, &obs)?;
                Ok(r.map(|ops| ops.into_iter().map(Into::into).collect()))
            }
            PolicyInstance::V0_3(i) => i
                .vauban_plugin_intervention_policy()
                .call_decide(s, observations),
        }
    }
}

type ClaimsGuest<T> = Result<T, current::claims::vauban::plugin::types::PluginError>;

/// A claim mapper, linked and type-checked for its version.
pub enum ClaimMapperPre {
    V0_1(since_v0_1_0::claims::ClaimMapperPluginPre<SandboxState>),
    V0_2(since_v0_2_0::claims::ClaimMapperPluginPre<SandboxState>),
    V0_3(current::claims::ClaimMapperPluginPre<SandboxState>),
}

pub enum ClaimMapperInstance {
    V0_1(since_v0_1_0::claims::ClaimMapperPlugin),
    V0_2(since_v0_2_0::claims::ClaimMapperPlugin),
    V0_3(current::claims::ClaimMapperPlugin),
}

impl ClaimMapperPre {
    pub fn new(pre: InstancePre<SandboxState>, v: WitVersion) -> wasmtime::Result<ClaimMapperPre> {
        Ok(match v {
            WitVersion::V0_1 => {
                ClaimMapperPre::V0_1(since_v0_1_0::claims::ClaimMapperPluginPre::new(pre)?)
            }
            WitVersion::V0_2 => {
                ClaimMapperPre::V0_2(since_v0_2_0::claims::ClaimMapperPluginPre::new(pre)?)
            }
            WitVersion::V0_3 => {
                ClaimMapperPre::V0_3(current::claims::ClaimMapperPluginPre::new(pre)?)
            }
        })
    }

    pub fn instantiate(
        &self,
        s: &mut Store<SandboxState>,
    ) -> wasmtime::Result<ClaimMapperInstance> {
        Ok(match self {
            ClaimMapperPre::V0_1(p) => ClaimMapperInstance::V0_1(p.instantiate(s)?),
            ClaimMapperPre::V0_2(p) => ClaimMapperInstance::V0_2(p.instantiate(s)?),
            ClaimMapperPre::V0_3(p) => ClaimMapperInstance::V0_3(p.instantiate(s)?),
        })
    }
}

impl ClaimMapperInstance {
    pub fn describe(
        &self,
        s: &mut Store<SandboxState>,
    ) -> wasmtime::Result<current::claims::vauban::plugin::types::PluginInfo> {
        match self {
            ClaimMapperInstance::V0_1(i) => i.vauban_plugin_claim_mapper().call_describe(s),
            ClaimMapperInstance::V0_2(i) => i.vauban_plugin_claim_mapper().call_describe(s),
            ClaimMapperInstance::V0_3(i) => i.vauban_plugin_claim_mapper().call_describe(s),
        }
    }

    pub fn configure(
        &self,
        s: &mut Store<SandboxState>,
        json: &str,
    ) -> wasmtime::Result<ClaimsGuest<()>> {
        match self {
            ClaimMapperInstance::V0_1(i) => i.vauban_plugin_claim_mapper().call_configure(s, json),
            ClaimMapperInstance::V0_2(i) => i.vauban_plugin_claim_mapper().call_configure(s, json),
            ClaimMapperInstance::V0_3(i) => i.vauban_plugin_claim_mapper().call_configure(s, json),
        }
    }

    /// Proposes claims; a 0.1 mapper is shown what 0.1 carried (deltas and
    /// intervention ids), so it can cite no finding it was not shown.
    pub fn propose(
        &self,
        s: &mut Store<SandboxState>,
        evidence: &wc::EvidenceSet,
    ) -> wasmtime::Result<ClaimsGuest<Vec<wc::Claim>>> {
        match self {
            ClaimMapperInstance::V0_1(i) => {
                let old = since_v0_1_0::evidence_set(evidence);
                let r = i.vauban_plugin_claim_mapper().call_propose(s, &old)?;
                Ok(r.map(|cs| cs.into_iter().map(Into::into).collect()))
            }
            ClaimMapperInstance::V0_2(i) => {
                let old = since_v0_2_0::evidence_set(evidence);
                let r = i.vauban_plugin_claim_mapper().call_propose(s, &old)?;
                Ok(r.map(|cs| cs.into_iter().map(Into::into).collect()))
            }
            ClaimMapperInstance::V0_3(i) => {
                i.vauban_plugin_claim_mapper().call_propose(s, evidence)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_wit_semver() {
        assert_eq!(WitVersion::of("0.1.0"), Some(WitVersion::V0_1));
        assert_eq!(WitVersion::of("0.1.7"), Some(WitVersion::V0_1));
        assert_eq!(WitVersion::of("0.2.0"), Some(WitVersion::V0_2));
        assert_eq!(WitVersion::of("0.3.0"), Some(WitVersion::V0_3));
        assert_eq!(WitVersion::of("0.4.0"), None);
        assert_eq!(WitVersion::of("0.0.9"), None);
        assert_eq!(WitVersion::of("1.1.0"), None);
        assert_eq!(WitVersion::of("0.1.x"), None);
        assert_eq!(WitVersion::of(""), None);
    }
}
