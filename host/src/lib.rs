//! vauban: audit how a language model's behaviour changed, and prove each
//! claim with evidence.
//!
//! This crate is the run itself (config → plan → executors → traces →
//! plugins → evidence → claims → report files); the `vauban` binary is a
//! thin shell over it (`vauban-cli`, `host/cli`). It
//! re-exports the host's other crates under the names the code uses:
//! - [`trace`], [`bundle`] (`vauban-format`): the evidence-bearing record
//!   of a run and its files;
//! - [`executor`], [`model`], [`intervene`] (`vauban-exec`): who runs a
//!   model (candle, or replay of a bundle) and records its trace;
//! - [`plugin`] (`vauban-plugin-host`): sandboxed WebAssembly scorers,
//!   policies and claim mappers;
//! - [`report`] (`vauban-report`): what the evidence allows a report to
//!   claim, the statistics and the renderers.
//!
//! Its own modules: [`config`] (the TOML run config and prompt suites),
//! [`pipeline`] (the plan and the run), [`measure`] (the refusal direction,
//! from harmful and harmless prompts) and [`profile`] (cost summaries and
//! sweeps).

pub use vauban_exec::{executor, gguf, intervene, model};
pub use vauban_format::{atomic_file, bundle, hash, input, text, trace};
pub use vauban_plugin_host as plugin;
pub use vauban_report as report;

pub mod config;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod import;
pub mod interrupt;
pub mod judge;
pub mod measure;
pub mod pipeline;
pub mod profile;
pub mod serve;
