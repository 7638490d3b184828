//! The MLX backend (issue 20), through mlx-rs: work in progress. Today it
//! holds the llama-family forward pass with a KV cache ([`model`]), from
//! the same model description and assets as candle's and libtorch's,
//! checked against candle's (`tests/mlx_forward.rs`); the executor behind
//! the `Executor` trait comes next.
//!
//! Behind the `mlx` feature, which needs MLX at build time
//! (`eval "$(bash scripts/setup-mlx.sh)"` on Linux).

pub mod model;
