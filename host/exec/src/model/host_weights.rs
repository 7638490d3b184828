//! A model file's weights as f32 on the host, by GGUF name and in GGUF's
//! layout, with their shapes checked: what a backend without its own file
//! readers (torch, mlx) loads from. A GGUF file is dequantized by vauban's
//! own reader ([`GgufReader::read_f32`]); an HF folder is read through
//! [`HfWeights`].

use super::assets::ModelAssets;
use super::gguf_reader::{GgmlType, GgufReader};
use super::hf::HfWeights;
use super::{ModelError, ModelFormat, fused_part};

/// A tensor's shape and its f32 values, row-major.
pub type HostTensor = (Vec<usize>, Vec<f32>);

enum Source {
    Gguf(GgufReader<std::fs::File>),
    /// Boxed: it holds the model's whole description.
    Hf(Box<HfWeights>),
}

/// The weights of the model a [`ModelAssets`] describes.
pub struct HostWeights<'a> {
    assets: &'a ModelAssets,
    source: Source,
}

impl<'a> HostWeights<'a> {
    /// Opens the model's weight files.
    pub fn open(assets: &'a ModelAssets) -> Result<Self, ModelError> {
        let path = &assets.path;
        let source = match assets.format {
            ModelFormat::Gguf => {
                let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
                    path: path.clone(),
                    source,
                })?;
                Source::Gguf(GgufReader::open(file).map_err(|e| e.in_file(path))?)
            }
            ModelFormat::HfFolder => Source::Hf(Box::new(HfWeights::open(assets)?)),
        };
        Ok(HostWeights { assets, source })
    }

    /// How a GGUF file stores its tensors when any is not f32 (`Q4_1/Q8_0`,
    /// ggml's names): what reading them as f32 dequantizes. `None` for an
    /// HF folder, whose float tensors are only widened.
    pub fn stored_types(&self) -> Option<String> {
        let Source::Gguf(gguf) = &self.source else {
            return None;
        };
        let mut kinds: Vec<String> = gguf
            .tensors()
            .iter()
            .filter(|t| t.ggml_type != GgmlType::F32)
            .map(|t| t.ggml_type.to_string())
            .collect();
        kinds.sort();
        kinds.dedup();
        (!kinds.is_empty()).then(|| kinds.join("/"))
    }

    /// Whether the names in errors should be HF's (an HF folder).
    pub fn is_hf(&self) -> bool {
        matches!(self.source, Source::Hf(_))
    }

    /// The tensor GGUF calls `name`; `None` when the model has none. A
    /// matrix the file fuses with others (Phi-3) is its rows of the fused one.
    pub fn get(&mut self, name: &str) -> Result<Option<HostTensor>, ModelError> {
        let cpu = candle_core::Device::Cpu;
        let t = match &mut self.source {
            Source::Gguf(gguf) => {
                let part = fused_part(name, &self.assets.config);
                let stored = part.as_ref().map_or(name, |p| p.0.as_str());
                let Some(shape) = gguf.tensor(stored).map(|t| t.shape.clone()) else {
                    return Ok(None);
                };
                let values = gguf
                    .read_f32(stored)
                    .map_err(|e| e.in_file(&self.assets.path))?
                    .expect("the tensor is in the table");
                let t = candle_core::Tensor::from_vec(values, shape, &cpu)?;
                match part {
                    Some((_, start, rows)) => t.narrow(0, start, rows)?,
                    None => t,
                }
            }
            Source::Hf(hf) => match hf.get(name, &cpu)? {
                Some(t) => t,
                None => return Ok(None),
            },
        };
        let shape = t.dims().to_vec();
        let values = t
            .to_dtype(candle_core::DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())?;
        Ok(Some((shape, values)))
    }

    /// The tensor GGUF calls `name`, which must exist with `shape`.
    pub fn need(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let (found, values) = self.get(name)?.ok_or_else(|| ModelError::MissingTensor {
            tensor: name.to_owned(),
            path: Some(self.assets.path.clone()),
        })?;
        if found != shape {
            return Err(ModelError::ShapeMismatch {
                tensor: name.to_owned(),
                found,
                expected: shape.to_vec(),
                path: Some(self.assets.path.clone()),
            });
        }
        Ok(values)
    }
}
