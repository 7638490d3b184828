//! Device evidence on an NVIDIA GPU for the trace's stage profiles: the
//! device's name, its memory in use and in total, and a synchronisation at
//! the end of each stage so its time is the device's, not the launch
//! queue's.
//!
//! tch exposes no allocator statistics (PyTorch's `memory_allocated` and
//! `memory_reserved` live in its C++ caching allocator, which the C API
//! tch wraps does not reach), so the memory figures come from the CUDA
//! runtime libtorch itself loaded (`cudaMemGetInfo`): the whole device's
//! memory in use, which includes the allocator's reserved pool and the
//! CUDA context. The runtime is opened by name at run time, so a build
//! needs no CUDA toolkit, and on a machine without one nothing is opened.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// The CUDA runtime's functions vauban reads device evidence through.
struct Runtime {
    set_device: unsafe extern "C" fn(c_int) -> c_int,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int,
    device_properties: unsafe extern "C" fn(*mut c_void, c_int) -> c_int,
    // Keeps the library loaded while the function pointers above are used.
    _lib: libloading::Library,
}

/// The runtime libtorch links (CUDA 13 for the 2.13.0 wheels, 12 for
/// older builds), opened once; `None` where there is none.
fn runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
                .iter()
                .find_map(|name| {
                    // SAFETY: the CUDA runtime's initialisers have no
                    // preconditions; libtorch has usually loaded it already.
                    let lib = unsafe { libloading::Library::new(*name) }.ok()?;
                    // SAFETY: the symbols' C signatures, as cuda_runtime_api.h
                    // declares them.
                    unsafe {
                        let set_device = *lib.get(b"cudaSetDevice\0").ok()?;
                        let mem_get_info = *lib.get(b"cudaMemGetInfo\0").ok()?;
                        let device_properties = *lib
                            .get(b"cudaGetDeviceProperties_v2\0")
                            .or_else(|_| lib.get(b"cudaGetDeviceProperties\0"))
                            .ok()?;
                        Some(Runtime {
                            set_device,
                            mem_get_info,
                            device_properties,
                            _lib: lib,
                        })
                    }
                })
        })
        .as_ref()
}

/// Loads libtorch's CUDA library (`libtorch_cuda.so`), once. A Rust
/// binary links it only "as needed", and nothing in vauban names one of its
/// symbols, so the linker drops it and libtorch would see no CUDA device;
/// loading it at run time registers libtorch's CUDA backend (as `import
/// torch` does). On a machine without the CUDA libraries it depends on, the
/// error says which is missing.
pub fn load_torch_cuda() -> Result<(), String> {
    static LOADED: OnceLock<Result<libloading::Library, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // SAFETY: libtorch's own library; its initialisers register the
            // CUDA backend with the libtorch already loaded.
            unsafe { libloading::Library::new("libtorch_cuda.so") }.map_err(|e| {
                // libloading's message is "dlopen failed"; the loader's own
                // (which library is missing) is its source.
                match std::error::Error::source(&e) {
                    Some(why) => format!("{e}: {why}"),
                    None => e.to_string(),
                }
            })
        })
        .as_ref()
        .map(drop)
        .map_err(Clone::clone)
}

/// What a stage profile records of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes in use on the whole device (total − free).
    pub used: u64,
    pub total: u64,
}

/// The device's memory in use and in total, after waiting for its queued
/// work (one synchronisation point).
pub fn memory(index: usize) -> Option<DeviceMemory> {
    tch::Cuda::synchronize(index as i64);
    let rt = runtime()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: plain out-parameters; errors are return codes.
    let ok = unsafe {
        (rt.set_device)(index as c_int) == 0 && (rt.mem_get_info)(&mut free, &mut total) == 0
    };
    ok.then(|| DeviceMemory {
        used: (total - free) as u64,
        total: total as u64,
    })
}

/// The device's name (`NVIDIA H200`).
pub fn name(index: usize) -> Option<String> {
    let rt = runtime()?;
    // `cudaDeviceProp` starts with `char name[256]`; the buffer is larger
    // than the structure in every CUDA release so far (about 1 KB).
    let mut props = vec![0u8; 16 * 1024];
    // SAFETY: the runtime writes at most one `cudaDeviceProp` into it.
    let ok = unsafe { (rt.device_properties)(props.as_mut_ptr().cast(), index as c_int) == 0 };
    if !ok {
        return None;
    }
    let name = &props[..256];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}
