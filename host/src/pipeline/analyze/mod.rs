//! From two sides' metrics and traces to the report's numbers: paired
//! deltas per metric and category, the next-token distribution shift,
//! per-layer projections, representative examples, the prompt table and
//! regression gates. One file per kind of finding; each reads the traces
//! and the scores and nothing the others computed.

mod activations;
mod distribution;
mod examples;
mod gates;
mod stats;
mod tensors;

pub use activations::*;
pub use distribution::*;
pub use examples::*;
pub use gates::*;
pub use stats::*;
use tensors::{raw_tensor, table};

#[cfg(test)]
mod tests;
