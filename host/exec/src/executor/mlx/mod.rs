//! The MLX executor, through mlx-rs (the `mlx` feature): the same
//! llama-family model as candle's and libtorch's, from the same model
//! description ([`ModelConfig`](crate::model::config::ModelConfig), the
//! GGUF tensor names) and the same assets
//! ([`ModelAssets`](crate::model::assets::ModelAssets)), behind the same
//! [`Executor`](super::Executor) trait as every backend. The executor,
//! its sessions, hook and traced run are the ones every tensor-library
//! backend shares ([`super::tensor_lib`]); this module holds what is
//! MLX's own:
//!
//! - [`model`]: the forward pass with a KV cache and a hook after every block;
//! - [`intervene`]: the activation primitive on MLX arrays;
//! - [`weights`]: float weights, and MLX-quantized checkpoints kept packed.
//!
//! On Linux MLX runs on the CPU (built against the `mlx-cpu` wheel:
//! `eval "$(bash scripts/setup-mlx.sh)"`); on macOS mlx-rs builds MLX with
//! Metal, which this module opens as `metal` (unverified: no Mac here).
//! GGUF files are dequantized to f32 at load; HF folders' float weights
//! are read as f32, and an mlx-community checkpoint's quantized matrices
//! are kept packed.

pub mod intervene;
pub mod model;
pub mod weights;

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::LocalKey;

use self::intervene::Mlx;
use self::model::MlxLlama;
use super::DeviceSpec;
use super::tensor_lib::{LibExecutor, LibHook, LibSession};

/// A model loaded through MLX, behind the [`Executor`](super::Executor) trait.
pub type MlxExecutor = LibExecutor<MlxLlama>;
/// A generation session on MLX.
pub type MlxSession<'a> = LibSession<'a, MlxLlama>;
/// The block hook on MLX arrays.
pub type MlxHook<'a> = LibHook<'a, Mlx>;

/// Held while MLX evaluates anything vauban asked for (a forward pass, a
/// copy to the host, an orthogonalization, the weights at load). MLX's
/// evaluation is not documented as safe from several threads at once,
/// and a loaded executor can be shared between threads (a server's
/// requests), so they take turns. A thread that holds it may ask again
/// (a hook copying an activation inside a pass): the inner guard is a
/// no-op. A poisoned lock is taken anyway: it guards no data of its own.
pub(crate) fn evaluating() -> Evaluating {
    static EVAL: Mutex<()> = Mutex::new(());
    thread_local! {
        static HELD: Cell<bool> = const { Cell::new(false) };
    }
    if HELD.get() {
        return Evaluating { guard: None };
    }
    let guard = EVAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HELD.set(true);
    Evaluating {
        guard: Some((guard, &HELD)),
    }
}

/// What [`evaluating`] holds; the lock is released when the outermost
/// guard of the thread drops.
pub(crate) struct Evaluating {
    guard: Option<(MutexGuard<'static, ()>, &'static LocalKey<Cell<bool>>)>,
}

impl Drop for Evaluating {
    fn drop(&mut self) {
        if let Some((_, held)) = &self.guard {
            held.set(false);
        }
    }
}

// SAFETY: `mlx_rs::Array` is `Send` but not `Sync`. A `&MlxExecutor`
// reaches its arrays only through the shared executor's own code, which
// reads the weights in forward passes and copies arrays to the host, and
// every one of those evaluations holds `evaluating()`'s lock, so no two
// threads ever evaluate at once; the weights are evaluated at load, so a
// pass only reads them, and they change only in `orthogonalize`, through
// `&mut self`. The model is reachable only inside this crate
// (`LibExecutor::model` is crate-private), so no caller reaches an array
// through `&self` either.
unsafe impl Sync for MlxExecutor {}

/// Whether this MLX was built with Metal and sees a GPU (a macOS build).
pub fn metal_available() -> bool {
    let mut available = false;
    // SAFETY: a plain out-parameter; a non-zero return is an error.
    let ok = unsafe { mlx_sys::mlx_metal_is_available(&mut available) } == 0;
    ok && available
}

/// The version of the MLX library this process loaded (`0.32.4`).
pub fn mlx_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        // SAFETY: mlx-c's string API: a new string, filled by
        // `mlx_version`, read while alive, then freed.
        unsafe {
            let mut s = mlx_sys::mlx_string_new();
            let read = match mlx_sys::mlx_version(&mut s) {
                0 => {
                    let data = mlx_sys::mlx_string_data(s);
                    (!data.is_null()).then(|| CStr::from_ptr(data).to_string_lossy().into_owned())
                }
                _ => None,
            };
            mlx_sys::mlx_string_free(s);
            read.unwrap_or_else(|| "version unknown".into())
        }
    })
}

/// Whether MLX can run on `spec` here: `Ok(true)` for the GPU (Metal),
/// `Ok(false)` for the CPU; a device MLX does not have here is refused
/// naming what it has (never a silent fall-back to the CPU). Changes
/// nothing: a model applies its device when it runs ([`use_device`]).
pub fn check_device(spec: DeviceSpec) -> Result<bool, String> {
    let available = || match metal_available() {
        true => "cpu, metal",
        false => "cpu",
    };
    match spec {
        DeviceSpec::Cpu => Ok(false),
        DeviceSpec::Metal(0) if metal_available() => Ok(true),
        DeviceSpec::Metal(0) => Err(format!(
            "device `metal`: this MLX was built without Metal (MLX's GPU backend, on Apple silicon under macOS; available: {})",
            available()
        )),
        DeviceSpec::Metal(_) => Err(format!(
            "device `{spec}`: MLX sees one GPU, `metal` (available: {})",
            available()
        )),
        DeviceSpec::Mps => Err(format!(
            "device `mps` is the Torch executor's name for an Apple GPU; the MLX executor's is `metal` (available: {})",
            available()
        )),
        DeviceSpec::Cuda(_) => Err(format!(
            "device `{spec}`: the MLX executor has no CUDA backend (mlx-rs binds MLX's CPU and Metal backends; available: {}); run CUDA with executor = \"torch\" or candle",
            available()
        )),
    }
}

/// Makes MLX's default device the GPU (`gpu`) or the CPU. MLX's default
/// is one per process, so each model sets its own, under the evaluation
/// lock, before it builds and evaluates anything.
pub(crate) fn use_device(gpu: bool) {
    let device = match gpu {
        true => mlx_rs::Device::gpu(),
        false => mlx_rs::Device::cpu(),
    };
    mlx_rs::Device::set_default(&device);
}
