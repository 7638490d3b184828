//! vauban's report logic: what the evidence allows a report to claim, the
//! paired statistics, and the report's rendering. No model, no plugin
//! runtime, no file writes: it reads traces and evidence (from
//! `vauban-format`) and returns data and text.
//!
//! - [`access`]: the access level and the strongest claim the traces allow;
//! - [`claims`]: the epistemic rule enforced on proposed claims: accepted,
//!   downgraded or rejected, with reasons;
//! - [`document`]: the report as data (`report.json`), section by section;
//! - [`deltas`]: one metric's paired comparison (means, delta, bootstrap
//!   interval, McNemar or sign-flip p-value), as claim mappers see it;
//! - [`stats`]: paired statistics (Wilson, McNemar exact, paired
//!   bootstrap, KL divergence) for baseline-versus-candidate deltas;
//! - [`usl`]: the Universal Scalability Law fitted to a controlled
//!   concurrency sweep, with bootstrap intervals;
//! - [`render`]: the report as Markdown and as self-contained HTML with
//!   inline SVG plots, both printed from one view of the report; its
//!   [`render::words`] spells the figures and status words (p-values,
//!   deltas, qualities, claim statuses, gate outcomes) for every other
//!   view too, such as the command line's summary.

use vauban_format::{evidence, text, trace};

pub mod access;
pub mod claims;
pub mod deltas;
pub mod judged;
pub use vauban_format::document;
pub mod render;
pub mod stats;
pub mod usl;

pub use access::{
    Access, AccessError, AccessLevel, ClaimStrength, Evidence, InterventionRef, KindCoverage, Side,
    Unclaimable, access_from_evidence,
};
