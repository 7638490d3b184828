//! vauban's executors: who runs a model and records its trace.
//!
//! - [`executor`]: the [`executor::Executor`] trait every caller holds an
//!   executor through, the [`executor::Backend`] enum that dispatches to a
//!   backend, the backend-neutral decode loop, and the backends (candle,
//!   replay);
//! - [`model`]: what every backend knows about a model before running it:
//!   its shape, tokenizer, chat template and sampler;
//! - [`gguf`]: GGUF as a file format (metadata and f32 tensors), for the
//!   parts that read GGUF files without running them;
//! - [`intervene`]: direction files read to `f32` and intervention specs
//!   resolved against a model (the values themselves are
//!   `vauban_format::intervention`).

use vauban_format::{hash, input, text, trace};

pub mod executor;
pub mod intervene;
pub mod model;

pub use model::gguf;
