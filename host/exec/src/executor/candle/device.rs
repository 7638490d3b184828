//! The candle device a [`DeviceSpec`] names, and candle's thread count.

use candle_core::Device;

use crate::executor::DeviceSpec;

/// candle works out its default thread count (reading /proc/cpuinfo and
/// cgroup files) on every matmul unless `RAYON_NUM_THREADS` is set; that
/// cost 27% of decode time for SmolLM2 with f32 weights (19.6 → 26.7 tok/s,
/// `vauban -v generate … --weights f32` with and without the variable).
/// This works the default out once and pins it.
///
/// # Safety
/// Sets an environment variable: call it before any other thread starts
/// (first thing in `main`).
///
/// It also shortens how long candle's own worker threads (`candle-bp-N`,
/// which run large elementwise ops) spin after a job before sleeping, from
/// candle's 25,000 spins to 100, unless `CANDLE_BARRIER_POOL_SPIN_LIMIT` is
/// set. Spinning, they took a core from vauban's kernels: 14% of a
/// prefill's samples were `candle-bp-0` spinning (`perf record` on the
/// model bench), and 100 took SmolLM2's 64-token prefill from 632 to 793
/// tok/s with decode unchanged (`CANDLE_BARRIER_POOL_SPIN_LIMIT=25000|100
/// cargo bench -p vauban --bench model -- 64 32 9`).
pub unsafe fn pin_thread_count() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = candle_core::utils::get_num_threads();
        // SAFETY: the caller guarantees no other thread runs yet.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        // SAFETY: as above.
        unsafe { std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "100") };
    }
}

/// Opens the device; a GPU this build was not compiled for is refused
/// with the feature to build with (never a silent fall-back to the CPU).
pub fn open(spec: DeviceSpec) -> Result<Device, String> {
    match spec {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(i) => {
            if !candle_core::utils::cuda_is_available() {
                return Err(format!(
                    "device `{spec}`: this vauban was built without CUDA; rebuild with `cargo build --release --features cuda`"
                ));
            }
            Device::new_cuda(i).map_err(|e| format!("device `{spec}`: {e}"))
        }
        DeviceSpec::Metal(i) => {
            if !candle_core::utils::metal_is_available() {
                return Err(format!(
                    "device `{spec}`: this vauban was built without Metal; rebuild with `cargo build --release --features metal`"
                ));
            }
            Device::new_metal(i).map_err(|e| format!("device `{spec}`: {e}"))
        }
        DeviceSpec::Mps => Err(format!(
            "device `{spec}` is the Torch executor's name for an Apple GPU; candle's is `metal` (or set `executor = \"torch\"`)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_names_the_feature() {
        let e = open(DeviceSpec::Cuda(0)).unwrap_err();
        assert!(e.contains("--features cuda"), "{e}");
    }
}
