//! What the evidence allows a report to claim.
//!
//! - [`access`]: the access level and the strongest claim the traces allow
//!   (DESIGN.md section 5);
//! - [`claims`]: the epistemic rule enforced on proposed claims: accepted,
//!   downgraded or rejected, with reasons;
//! - [`document`]: the report as data (`report.json`), section by section;
//! - [`deltas`]: one metric's paired comparison (means, delta, bootstrap
//!   interval, McNemar or sign-flip p-value), as claim mappers see it;
//! - [`stats`]: paired statistics (Wilson, McNemar exact, paired
//!   bootstrap, KL divergence) for baseline-versus-candidate deltas;
//! - [`render`]: the report as Markdown and as self-contained HTML with
//!   inline SVG plots.

pub mod access;
pub mod claims;
pub mod deltas;
pub mod document;
pub mod render;
pub mod stats;

pub use access::{
    Access, AccessError, AccessLevel, ClaimStrength, Evidence, InterventionRef, KindCoverage, Side,
    Unclaimable, access_from_evidence,
};
