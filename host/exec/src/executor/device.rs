//! Device names on the command line (`cpu`, `cuda`, `cuda:1`, `metal`) and
//! the candle device they open.

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

use crate::trace::DeviceKind;

/// candle works out its default thread count (reading /proc/cpuinfo and
/// cgroup files) on every matmul unless `RAYON_NUM_THREADS` is set; that
/// cost 27% of decode time for SmolLM2 with f32 weights (19.6 → 26.7 tok/s,
/// `vauban -v generate … --weights f32` with and without the variable).
/// This works the default out once and pins it.
///
/// # Safety
/// Sets an environment variable: call it before any other thread starts
/// (first thing in `main`).
pub unsafe fn pin_thread_count() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = candle_core::utils::get_num_threads();
        // SAFETY: the caller guarantees no other thread runs yet.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
}

/// A device as the user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    Cuda(usize),
    Metal(usize),
}

impl DeviceSpec {
    pub fn kind(self) -> DeviceKind {
        match self {
            DeviceSpec::Cpu => DeviceKind::Cpu,
            DeviceSpec::Cuda(_) => DeviceKind::Cuda,
            DeviceSpec::Metal(_) => DeviceKind::Metal,
        }
    }

    /// Opens the device; a GPU this build was not compiled for is refused
    /// with the feature to build with (never a silent fall-back to the CPU).
    pub fn open(self) -> Result<Device, String> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(i) => {
                if !candle_core::utils::cuda_is_available() {
                    return Err(format!(
                        "device `{self}`: this vauban was built without CUDA; rebuild with `cargo build --release --features cuda`"
                    ));
                }
                Device::new_cuda(i).map_err(|e| format!("device `{self}`: {e}"))
            }
            DeviceSpec::Metal(i) => {
                if !candle_core::utils::metal_is_available() {
                    return Err(format!(
                        "device `{self}`: this vauban was built without Metal; rebuild with `cargo build --release --features metal`"
                    ));
                }
                Device::new_metal(i).map_err(|e| format!("device `{self}`: {e}"))
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceSpec::Metal(i) => write!(f, "metal:{i}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, index) = match s.split_once(':') {
            Some((n, i)) => (
                n,
                i.parse::<usize>()
                    .map_err(|_| format!("device `{s}`: `{i}` is not a device index"))?,
            ),
            None => (s, 0),
        };
        match name {
            "cpu" if index == 0 => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(index)),
            "metal" => Ok(DeviceSpec::Metal(index)),
            _ => Err(format!(
                "unknown device `{s}`; expected cpu, cuda, cuda:N, metal or metal:N"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        assert_eq!("cpu".parse::<DeviceSpec>(), Ok(DeviceSpec::Cpu));
        assert_eq!("cuda".parse::<DeviceSpec>(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!(
            "cuda:1".parse::<DeviceSpec>().unwrap().to_string(),
            "cuda:1"
        );
        assert!(
            "tpu"
                .parse::<DeviceSpec>()
                .unwrap_err()
                .contains("expected cpu")
        );
        assert!(
            "cuda:x"
                .parse::<DeviceSpec>()
                .unwrap_err()
                .contains("not a device index")
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_names_the_feature() {
        let e = DeviceSpec::Cuda(0).open().unwrap_err();
        assert!(e.contains("--features cuda"), "{e}");
    }
}
