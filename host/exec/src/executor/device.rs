//! Device names on the command line (`cpu`, `cuda`, `cuda:1`, `metal`,
//! `mps`).
//! Each backend opens them its own way (`candle::device::open`).

use std::fmt;
use std::str::FromStr;

use crate::trace::DeviceKind;

/// A device as the user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    Cuda(usize),
    Metal(usize),
    /// An Apple GPU through PyTorch's MPS backend (the Torch executor's
    /// name for it; candle's is `metal`).
    Mps,
}

impl DeviceSpec {
    pub fn kind(self) -> DeviceKind {
        match self {
            DeviceSpec::Cpu => DeviceKind::Cpu,
            DeviceSpec::Cuda(_) => DeviceKind::Cuda,
            DeviceSpec::Metal(_) => DeviceKind::Metal,
            DeviceSpec::Mps => DeviceKind::Mps,
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceSpec::Metal(i) => write!(f, "metal:{i}"),
            DeviceSpec::Mps => f.write_str("mps"),
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
            "mps" if index == 0 => Ok(DeviceSpec::Mps),
            _ => Err(format!(
                "unknown device `{s}`; expected cpu, cuda, cuda:N, metal, metal:N or mps"
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
}
