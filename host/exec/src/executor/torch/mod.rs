//! The Torch executor, through `tch` and libtorch (the `torch` feature):
//! the same llama-family model as candle's, from the same description
//! ([`ModelConfig`](crate::model::config::ModelConfig) and GGUF tensor
//! names) and the same assets (tokenizer, chat template, special tokens:
//! [`ModelAssets`](crate::model::assets::ModelAssets)), on CPU, CUDA or MPS, behind the same [`Executor`](super::Executor)
//! trait and trace recorder. GGUF weights are dequantized at load (the
//! trace says so); HF folders load f32, f16 or bf16 safetensors.
//!
//! - [`model`]: the forward pass with a KV cache and a hook after every block;
//! - [`intervene`]: the activation primitive on libtorch tensors;
//! - [`cuda`]: device evidence on an NVIDIA GPU for stage profiles.
//!
//! The executor, its sessions, hook and traced run are the ones every
//! tensor-library backend shares ([`super::tensor_lib`]).

pub mod cuda;
pub mod intervene;
pub mod model;

use std::path::Path;
use std::sync::OnceLock;

use tch::Device;

use self::intervene::Torch;
use self::model::TorchLlama;
use super::DeviceSpec;
use super::tensor_lib::{LibExecutor, LibHook, LibSession};

/// The libtorch device a [`DeviceSpec`] names; a device this libtorch or
/// machine does not have is refused naming what is available (never a
/// silent fall-back to the CPU).
pub fn open_device(spec: DeviceSpec) -> Result<Device, String> {
    let available = || {
        // libtorch registers its CUDA backend once; load it before the
        // first count, so no path counts before it is there.
        let _ = cuda::load_torch_cuda();
        let mut names = vec!["cpu".to_owned()];
        names.extend((0..tch::Cuda::device_count()).map(|i| format!("cuda:{i}")));
        if tch::utils::has_mps() {
            names.push("mps".into());
        }
        names.join(", ")
    };
    match spec {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(i) => {
            let loaded = cuda::load_torch_cuda();
            let count = tch::Cuda::device_count().max(0) as usize;
            if i < count {
                return Ok(Device::Cuda(i));
            }
            let why = match loaded {
                Ok(()) => String::new(),
                Err(e) => format!("; libtorch's CUDA library did not load: {e}"),
            };
            Err(format!(
                "device `{spec}`: libtorch sees {count} CUDA device{} here (available: {}){why}",
                if count == 1 { "" } else { "s" },
                available()
            ))
        }
        DeviceSpec::Mps if tch::utils::has_mps() => Ok(Device::Mps),
        DeviceSpec::Mps => Err(format!(
            "device `mps`: this libtorch has no MPS backend (Apple silicon, macOS builds only; available: {})",
            available()
        )),
        DeviceSpec::Metal(_) => Err(format!(
            "device `{spec}` is candle's name for an Apple GPU; the Torch executor's is `mps`"
        )),
    }
}

/// A model loaded on a libtorch device, behind the [`Executor`](super::Executor) trait.
pub type TorchExecutor = LibExecutor<TorchLlama>;
/// A generation session on libtorch.
pub type TorchSession<'a> = LibSession<'a, TorchLlama>;
/// The block hook on libtorch tensors.
pub type TorchHook<'a> = LibHook<'a, Torch>;

// SAFETY: `tch::Tensor` is `Send` but not `Sync` because some of its
// methods change a tensor through `&self`. A `&TorchExecutor` reaches its
// tensors only through the shared executor's own code, which runs forward
// passes (reading the weights; libtorch's tensors are safe to read from
// several threads, their reference counts are atomic) and never changes
// one through a shared reference: the weights change only in
// `orthogonalize`, through `&mut self`. The model field is private so no
// caller can reach a tensor through `&self` either. This lets a loaded
// executor be shared (a `OnceLock<Backend>` in a test, an `Arc` in a server).
unsafe impl Sync for TorchExecutor {}

/// The version of the libtorch this process loaded (`2.13.0`,
/// `2.11.0+cu130`), for the trace's kernel note: read from the `version.py`
/// (or `build-version`) beside the loaded `libtorch_cpu.so`, found in
/// `/proc/self/maps`; "version unknown" where neither is there.
pub(crate) fn libtorch_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let lib = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.ends_with("/libtorch_cpu.so"))
            .map(Path::new);
        let root = lib.and_then(|l| l.parent()?.parent());
        let read = |name: &str| std::fs::read_to_string(root?.join(name)).ok();
        read("version.py")
            .and_then(|v| {
                let line = v.lines().find(|l| l.starts_with("__version__"))?;
                Some(line.split(['\'', '"']).nth(1)?.to_owned())
            })
            .or_else(|| read("build-version").map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| "version unknown".into())
    })
}
