//! GGUF files: the assets from the metadata ([`ModelAssets::from_gguf`]),
//! and the weights (quantized ones kept
//! quantized unless [`WeightMode::F32`] asks otherwise).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::GgmlDType;
use vauban_kernels::{Format, QMatrix};

use super::LoadedModel;
use super::llama::{Llama, Weight};
use crate::executor::candle::gguf_file::GgufFile;
use crate::model::assets::ModelAssets;
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
    let (content, mut file) = file.into_parts();
    // Quantized matrices stay as stored on the CPU, for vauban's kernels.
    let kernels = matches!(device, Device::Cpu) && mode == WeightMode::Native;
    let mut read = |name: &str| -> Result<Option<Weight>, ModelError> {
        let Some(info) = content.tensor_infos.get(name) else {
            return Ok(None);
        };
        let problem = |problem: String| ModelError::Tensor {
            path: path.to_path_buf(),
            tensor: name.to_owned(),
            problem,
        };
        if kernels && let Some(format) = block_format(info.ggml_dtype) {
            let format = format.map_err(problem)?;
            // A matrix, or a stack of them (a mixture's experts, `[experts,
            // rows, cols]`), held as its rows one after another.
            let dims = info.shape.dims();
            let (Some(&cols), true) = (dims.last(), dims.len() >= 2) else {
                return Err(problem(format!(
                    "is a {format} tensor of shape {dims:?}; only matrices and stacks of them are block-quantized"
                )));
            };
            let rows = dims[..dims.len() - 1].iter().product::<usize>();
            let bytes = (rows * cols).div_ceil(format.block_len()) * format.block_bytes();
            let mut data = vec![0u8; bytes];
            file.seek(SeekFrom::Start(content.tensor_data_offset + info.offset))
                .and_then(|_| file.read_exact(&mut data))
                .map_err(|e| problem(format!("could not be read: {e}")))?;
            let q = QMatrix::new(format, rows, cols, data).map_err(|e| problem(e.to_string()))?;
            return Ok(Some(Weight::Blocks(q)));
        }
        content
            .tensor(&mut file, name, device)
            .map(|q| Some(Weight::Quant(q)))
            .map_err(|e| ModelError::Tensor {
                path: path.to_path_buf(),
                tensor: name.to_owned(),
                problem: e.to_string(),
            })
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

/// The kernel format of a ggml tensor type: `None` for the float types
/// (loaded dense), an error naming the choices for a quantized type vauban
/// has no kernel for (never a silent slow path).
fn block_format(dtype: GgmlDType) -> Option<Result<Format, String>> {
    use GgmlDType as G;
    Some(Ok(match dtype {
        G::F32 | G::F16 | G::BF16 => return None,
        G::Q4_0 => Format::Q4_0,
        G::Q4_1 => Format::Q4_1,
        G::Q5_0 => Format::Q5_0,
        G::Q5_1 => Format::Q5_1,
        G::Q8_0 => Format::Q8_0,
        G::Q4K => Format::Q4_K,
        G::Q5K => Format::Q5_K,
        G::Q6K => Format::Q6_K,
        other => {
            let runs: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
            let runs = runs.join(", ");
            // Advice only where it works: candle's reader dequantizes the
            // K-quants, not Q8_1 (a type ggml keeps for activations).
            return Some(Err(match other {
                G::Q2K | G::Q3K => format!(
                    "is stored as {other:?}, which vauban has no CPU kernel for (it runs {runs} as stored); load the model dequantized with `--weights f32` (`weights = \"f32\"` in a config), or use a GGUF quantized to one of those"
                ),
                _ => format!(
                    "is stored as {other:?}, which vauban can neither run as stored (it runs {runs}) nor dequantize; use a GGUF quantized to one of those"
                ),
            }));
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_without_a_kernel_is_refused_with_advice_that_works() {
        let e = block_format(GgmlDType::Q3K).unwrap().unwrap_err();
        assert!(e.contains("Q3K") && e.contains("--weights f32"), "{e}");
        assert!(
            e.contains("Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K"),
            "{e}"
        );
        let e = block_format(GgmlDType::Q8_1).unwrap().unwrap_err();
        assert!(e.contains("Q8_1") && !e.contains("--weights f32"), "{e}");
        assert!(block_format(GgmlDType::F16).is_none());
        assert_eq!(block_format(GgmlDType::Q5_1), Some(Ok(Format::Q5_1)));
    }
}
