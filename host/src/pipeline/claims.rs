//! The claims stage: every claim mapper, in its sandbox, proposes claims
//! from the evidence set; the host checks each against the evidence it
//! cites and the claim ladder, and the report keeps the checked claim. A
//! mapper that fails is a failure the report lists.

use super::plugins::{failure, record_of, sandbox};
use super::{Plan, Stages};
use crate::plugin::PluginHost;
use crate::plugin::claims::{ClaimMapper, EvidenceSet};
use crate::report::document::{PluginFailure, PluginRecord, ReportClaim};

/// The checked claims, by mapper.
pub(crate) struct Claims {
    pub claims: Vec<ReportClaim>,
    /// The mappers that loaded.
    pub plugins: Vec<PluginRecord>,
    pub failures: Vec<PluginFailure>,
}

pub(super) fn check(
    plan: &Plan,
    host: &PluginHost,
    evidence: &EvidenceSet,
    stages: &mut Stages,
) -> anyhow::Result<Claims> {
    stages.run("claims", |note| {
        let mut out = Claims {
            claims: Vec::new(),
            plugins: Vec::new(),
            failures: Vec::new(),
        };
        for p in &plan.claim_mappers {
            let mapper = match host
                .load(&p.path)
                .and_then(|plugin| ClaimMapper::new(plugin, &p.config_json, sandbox(plan, p)))
            {
                Ok(m) => m,
                Err(e) => {
                    out.failures.push(failure(&p.name, "load", &e));
                    continue;
                }
            };
            out.plugins
                .push(record_of(mapper.plugin(), mapper.info(), "claim-mapper"));
            match mapper.propose(evidence) {
                Ok(proposed) => {
                    let by = &mapper.info().name;
                    out.claims.extend(
                        crate::report::claims::check_all(&proposed, evidence)
                            .into_iter()
                            .map(|checked| checked.proposed_by(by)),
                    );
                }
                Err(e) => out.failures.push(failure(&p.name, "propose", &e)),
            }
        }
        *note = format!("{} claim(s) checked", out.claims.len());
        Ok(out)
    })
}
