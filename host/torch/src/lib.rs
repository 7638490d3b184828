//! The Torch backend (issue 19), through `tch` and libtorch: work in
//! progress. Today it holds the llama-family forward pass with a KV cache
//! ([`model`]), checked against candle's on SmolLM2 (`tests/forward.rs`),
//! and the activation primitive ([`intervene`]), checked against candle's
//! for every mode (`tests/intervene.rs`); the executor
//! behind the `Executor` trait, the trace recording and the contract
//! (`host/cli/tests/contract.rs`) come next.
//!
//! Everything here is behind the `torch` feature, which needs libtorch at
//! build time (`eval "$(bash scripts/setup-torch.sh)"`); without it the
//! crate is empty and the default build needs nothing.

#[cfg(feature = "torch")]
pub mod intervene;
#[cfg(feature = "torch")]
pub mod model;
