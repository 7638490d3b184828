//! GGUF files: the assets from the metadata ([`ModelAssets::from_gguf`]),
//! and the weights (quantized ones kept
//! quantized unless [`WeightMode::F32`] asks otherwise), read through
//! vauban's own reader ([`crate::model::gguf_reader`]).

use std::fs::File;
use std::path::Path;

use candle_core::quantized::{GgmlDType, ggml_file};
use candle_core::{Device, Tensor};
use vauban_kernels::QMatrix;

use super::LoadedModel;
use super::llama::{Llama, Weight};
use crate::model::assets::ModelAssets;
use crate::model::gguf::GgufFile;
use crate::model::gguf_reader::{GgmlType, TensorInfo, supported_types};
use crate::model::{ModelError, WeightMode, fused_part};

/// Reads the metadata, builds the tokenizer, loads every weight.
pub fn load(path: &Path, mode: WeightMode, device: &Device) -> Result<LoadedModel, ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file =
        GgufFile::read(File::open(path).map_err(io)?).map_err(|message| ModelError::Gguf {
            path: path.to_path_buf(),
            message,
        })?;
    let assets = ModelAssets::from_gguf(path, &mut file)?;
    let mut gguf = file.into_reader();
    let mut read = |name: &str| -> Result<Option<Weight>, ModelError> {
        let Some(info) = gguf.tensor(name).cloned() else {
            return Ok(None);
        };
        let problem = |problem: String| ModelError::Tensor {
            path: path.to_path_buf(),
            tensor: name.to_owned(),
            problem,
        };
        let mut bytes = || -> Result<Vec<u8>, ModelError> {
            let bytes = gguf.read_bytes(name).map_err(|e| e.in_file(path))?;
            Ok(bytes.expect("the tensor is in the table"))
        };
        Ok(Some(
            match how_to_load(&info, mode, device).map_err(problem)? {
                Load::Blocks(format) => {
                    // A matrix, or a stack of them (a mixture's experts,
                    // `[experts, rows, cols]`), held as its rows one after
                    // another.
                    let dims = &info.shape;
                    let (Some(&cols), true) = (dims.last(), dims.len() >= 2) else {
                        return Err(problem(format!(
                            "is a {format} tensor of shape {dims:?}; only matrices and stacks of them are block-quantized"
                        )));
                    };
                    let rows = dims[..dims.len() - 1].iter().product::<usize>();
                    let q = QMatrix::new(format, rows, cols, bytes()?)
                        .map_err(|e| problem(e.to_string()))?;
                    Weight::Blocks(q)
                }
                Load::Candle(dtype) => Weight::Quant(
                    ggml_file::qtensor_from_ggml(dtype, &bytes()?, info.shape.clone(), device)
                        .map_err(|e| problem(e.to_string()))?,
                ),
                Load::Dequantized => {
                    let values = gguf.read_f32(name).map_err(|e| e.in_file(path))?;
                    let values = values.expect("the tensor is in the table");
                    Weight::Dense(Tensor::from_vec(values, info.shape.clone(), device)?)
                }
            },
        ))
    };
    // A matrix the file fuses with others (Phi-3): its rows of the fused one.
    let config = &assets.config;
    let mut load = |name: &str| -> Result<Option<Weight>, ModelError> {
        match fused_part(name, config) {
            Some((fused, start, rows)) => match read(&fused)? {
                Some(w) => w.rows(start, rows, device).map(Some),
                None => Ok(None),
            },
            None => read(name),
        }
    };
    let model = Llama::load(config, mode, &mut load, device).map_err(|e| e.in_file(path))?;
    Ok(LoadedModel {
        assets,
        model,
        weight_mode: mode,
    })
}

/// How one tensor becomes a [`Weight`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// As stored, for vauban's CPU kernels ([`Weight::Blocks`]).
    Blocks(vauban_kernels::Format),
    /// As stored in a candle quantized tensor ([`Weight::Quant`]): the
    /// float types everywhere, and on a GPU the block types candle
    /// multiplies there.
    Candle(GgmlDType),
    /// Dequantized by vauban to a dense f32 tensor ([`Weight::Dense`]).
    Dequantized,
}

/// How a tensor of its type loads in `mode` on `device`; a type vauban can
/// neither run nor dequantize is an error naming the type and the types
/// vauban runs (never a silent slow path, never advice that would not
/// work: `--weights f32` dequantizes exactly what the kernels run).
fn how_to_load(info: &TensorInfo, mode: WeightMode, device: &Device) -> Result<Load, String> {
    let ty = info.ggml_type;
    let candle = candle_dtype(ty);
    // F32 tensors, and the norms and biases of any float type (vectors,
    // which a `QMatrix` is not), stay candle tensors; F16 and BF16
    // matrices run as stored on vauban's float kernels like the blocks.
    let float = matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    if ty == GgmlType::F32 || (float && info.shape.len() < 2) || (float && mode == WeightMode::F32)
    {
        return Ok(Load::Candle(candle.expect("candle holds the float types")));
    }
    match (ty.format(), mode, device.is_cpu()) {
        (Some(format), WeightMode::Native, true) => Ok(Load::Blocks(format)),
        // On a GPU, a type candle knows keeps candle's quantized matmul; a
        // type it does not (the IQ formats) is dequantized to f32 there.
        (_, WeightMode::Native, false) if candle.is_some() => {
            Ok(Load::Candle(candle.expect("checked")))
        }
        (Some(_), _, _) => Ok(Load::Dequantized),
        (None, _, _) => Err(format!(
            "is stored as {ty}, which vauban can neither run as stored nor dequantize (it runs {}); use a GGUF quantized to one of those",
            supported_types()
        )),
    }
}

/// candle's dtype for a type its `qtensor_from_ggml` builds tensors of.
fn candle_dtype(ty: GgmlType) -> Option<GgmlDType> {
    use GgmlDType as G;
    Some(match ty.id() {
        0 => G::F32,
        1 => G::F16,
        30 => G::BF16,
        2 => G::Q4_0,
        3 => G::Q4_1,
        6 => G::Q5_0,
        7 => G::Q5_1,
        8 => G::Q8_0,
        10 => G::Q2K,
        11 => G::Q3K,
        12 => G::Q4K,
        13 => G::Q5K,
        14 => G::Q6K,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u32) -> TensorInfo {
        TensorInfo {
            name: "w".into(),
            shape: vec![2, 256],
            ggml_type: GgmlType::from_id(id),
            offset: 0,
        }
    }

    #[test]
    fn a_type_without_a_kernel_is_refused_with_advice_that_works() {
        let cpu = &Device::Cpu;
        // Q8_1 (a type ggml keeps for activations), IQ2_XXS and an id
        // vauban does not know: no kernel, no dequantization, in either
        // mode, so no `--weights f32` advice.
        for (id, name) in [(9, "Q8_1"), (16, "IQ2_XXS"), (99, "unknown type 99")] {
            for mode in [WeightMode::Native, WeightMode::F32] {
                let e = how_to_load(&info(id), mode, cpu).unwrap_err();
                assert!(e.contains(&format!("stored as {name},")), "{e}");
                assert!(e.contains(&supported_types()), "{e}");
                assert!(!e.contains("--weights f32"), "{e}");
            }
        }
        for format in vauban_kernels::Format::ALL {
            assert!(supported_types().contains(format.name()), "{format}");
        }
        // Every block format (F16 and BF16 matrices among them) runs as
        // stored on the CPU; with `--weights f32` a block format is
        // dequantized by vauban, a float one widened by candle.
        for format in vauban_kernels::Format::ALL {
            let id = (0..64)
                .find(|&id| vauban_kernels::Format::from_ggml(id) == Some(format))
                .unwrap();
            let t = info(id);
            let native = how_to_load(&t, WeightMode::Native, cpu);
            assert_eq!(native, Ok(Load::Blocks(format)));
            let f32 = how_to_load(&t, WeightMode::F32, cpu).unwrap();
            match format.pairing() {
                vauban_kernels::Pairing::F32 => assert!(matches!(f32, Load::Candle(_))),
                _ => assert_eq!(f32, Load::Dequantized),
            }
        }
        // F32 tensors, and float vectors (norms), stay candle's tensors.
        for (id, dtype) in [
            (0, GgmlDType::F32),
            (1, GgmlDType::F16),
            (30, GgmlDType::BF16),
        ] {
            let vector = TensorInfo {
                shape: vec![256],
                ..info(id)
            };
            assert_eq!(
                how_to_load(&vector, WeightMode::Native, cpu),
                Ok(Load::Candle(dtype))
            );
        }
        let f32 = how_to_load(&info(0), WeightMode::Native, cpu);
        assert_eq!(f32, Ok(Load::Candle(GgmlDType::F32)));
    }
}
