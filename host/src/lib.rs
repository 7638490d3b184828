//! vauban: audit how a language model's behaviour changed, and prove each
//! claim with evidence.
//!
//! The library is organised by concept (DESIGN.md section 3):
//! - [`trace`]: the evidence-bearing record of a run, and its rules;
//! - [`bundle`]: traces on disk, verified and lazily loaded;
//! - [`profile`]: per-trace cost summaries and controlled sweeps;
//! - [`report`]: what the evidence allows a report to claim;
//! - [`measure`]: the refusal direction, measured from harmful and harmless prompts;
//! - [`cli`]: the `vauban` command line (a thin shell over the above).

pub use vauban_exec::{executor, intervene, model};
pub use vauban_format::{atomic_file, bundle, hash, input, text, trace};
pub use vauban_plugin_host as plugin;
pub use vauban_report as report;

pub mod cli;
pub mod config;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod measure;
pub mod pipeline;
pub mod profile;
