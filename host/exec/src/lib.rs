//! vauban's executors: who runs a model and records its trace.
//!
//! - [`executor`]: the [`executor::Executor`] trait every caller holds an
//!   executor through, the [`executor::Backend`] enum that dispatches to a
//!   backend, the backend-neutral decode loop, and the candle backend;
//! - [`model`]: the llama-family model on candle, loaded from GGUF or an
//!   HF folder, with its tokenizer, chat template and sampler;
//! - [`intervene`]: direction files read to `f32` and intervention specs
//!   resolved against a model (the values themselves are
//!   `vauban_format::intervention`).

use vauban_format::{hash, input, text, trace};

pub mod executor;
pub mod intervene;
pub mod model;
