//! The MLX model's weights and where they come from.
//!
//! - Float weights (a GGUF file, dequantized; an HF folder's f32, f16 or
//!   bf16 safetensors) are read as f32 on the host through the same
//!   [`HostWeights`] as libtorch's.
//! - An HF folder quantized by MLX (an mlx-community checkpoint, written
//!   by `mlx_lm.convert -q`) is read by MLX itself: each quantized matrix
//!   is a `uint32` array packing `bits`-bit values along its rows, with a
//!   `scales` and a `biases` array per group of `group_size` values
//!   (MLX's affine mode), kept packed and multiplied by
//!   `quantized_matmul`. Its bits and group size are read from the
//!   shapes (so checkpoints that quantize some layers differently load
//!   too) and checked against what MLX runs.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use crate::model::assets::ModelAssets;
use crate::model::config::{ModelConfig, RopeStyle};
use crate::model::host_weights::HostWeights;
use crate::model::{Matrix as ModelMatrix, ModelError, ModelFormat, hf_name};

/// A matrix packed by MLX's affine quantization: `w` is `[out, in·bits/32]`
/// (`uint32`), `scales` and `biases` `[out, in/group]` (in the model's
/// dtype).
#[derive(Clone)]
pub(super) struct Packed {
    w: Array,
    scales: Array,
    biases: Array,
    group: i32,
    bits: i32,
}

impl Packed {
    /// `x · Wᵀ` for `x` `[n, in]`.
    fn matmul_t(&self, x: &Array) -> Result<Array, Exception> {
        mlx_rs::ops::quantized_matmul(
            x,
            &self.w,
            &self.scales,
            &self.biases,
            true,
            self.group,
            self.bits,
        )
    }

    /// The matrix as f32 values, `[out, in]`.
    fn dense(&self) -> Result<Array, Exception> {
        mlx_rs::ops::dequantize(&self.w, &self.scales, &self.biases, self.group, self.bits)
    }

    /// Rows `ids` as f32 values (an embedding lookup).
    fn rows(&self, ids: &Array) -> Result<Array, Exception> {
        mlx_rs::ops::dequantize(
            self.w.take_axis(ids, 0)?,
            self.scales.take_axis(ids, 0)?,
            &self.biases.take_axis(ids, 0)?,
            self.group,
            self.bits,
        )
    }

    /// How it is stored, for the trace's kernel note.
    fn describe(&self) -> String {
        format!("{}-bit, groups of {}", self.bits, self.group)
    }
}

/// A matrix `[out, in]` as the model keeps it.
#[derive(Clone)]
pub(super) enum Matrix {
    /// f32 `Wᵀ`, `[in, out]`: a transposed view of `W` as stored (MLX's
    /// matmul reads the strides; rows of `W`, an embedding's lookups, stay
    /// contiguous).
    DenseT(Array),
    Packed(Packed),
}

impl Matrix {
    /// `x · Wᵀ`.
    pub(super) fn matmul_t(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Matrix::DenseT(w_t) => x.matmul(w_t),
            Matrix::Packed(p) => p.matmul_t(x),
        }
    }

    /// The matrix as f32 values, `[out, in]`.
    pub(super) fn dense(&self) -> Result<Array, Exception> {
        match self {
            Matrix::DenseT(w_t) => w_t.transpose(),
            Matrix::Packed(p) => p.dense(),
        }
    }

    /// Rows `ids` of the matrix as f32 values (an embedding lookup).
    pub(super) fn rows(&self, ids: &Array) -> Result<Array, Exception> {
        match self {
            Matrix::DenseT(w_t) => w_t.take_axis(ids, 1)?.transpose(),
            Matrix::Packed(p) => p.rows(ids),
        }
    }

    /// Packs a dense matrix by MLX's affine quantization (`bits` bits in
    /// groups of `group` along its rows), as `mlx_lm.convert -q` does; a
    /// packed one stays as it is.
    pub(super) fn make_packed(&mut self, group: i32, bits: i32) -> Result<(), Exception> {
        if let Matrix::DenseT(w_t) = self {
            let (w, scales, biases) = mlx_rs::ops::quantize(w_t.t(), group, bits)?;
            *self = Matrix::Packed(Packed {
                w,
                scales,
                biases,
                group,
                bits,
            });
        }
        Ok(())
    }

    /// Makes a packed matrix dense f32 (a dense one stays as it is).
    pub(super) fn make_dense(&mut self) -> Result<(), Exception> {
        if let Matrix::Packed(p) = self {
            *self = Matrix::DenseT(p.dense()?.t());
        }
        Ok(())
    }

    /// The matrix's floats in `dtype` (a packed matrix's scales and
    /// biases; its packed values stay as they are).
    pub(super) fn cast(&mut self, dtype: mlx_rs::Dtype) -> Result<(), Exception> {
        match self {
            // Cast in `W`'s own layout, then viewed transposed again.
            Matrix::DenseT(w_t) => *w_t = w_t.t().as_dtype(dtype)?.t(),
            Matrix::Packed(p) => {
                p.scales = p.scales.as_dtype(dtype)?;
                p.biases = p.biases.as_dtype(dtype)?;
            }
        }
        Ok(())
    }

    /// The arrays it holds.
    pub(super) fn arrays(&self) -> Vec<&Array> {
        match self {
            Matrix::DenseT(w_t) => vec![w_t],
            Matrix::Packed(p) => vec![&p.w, &p.scales, &p.biases],
        }
    }

    /// How a packed matrix is stored; `None` for a dense one.
    pub(super) fn packing(&self) -> Option<String> {
        match self {
            Matrix::DenseT(_) => None,
            Matrix::Packed(p) => Some(p.describe()),
        }
    }
}

/// A linear map `y = x·Wᵀ (+ b)`.
pub(super) struct Linear {
    pub(super) weight: Matrix,
    pub(super) bias: Option<Array>,
}

impl Linear {
    pub(super) fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let y = self.weight.matmul_t(x)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

/// The tensors of an HF folder quantized by MLX, by HF name, as MLX
/// arrays, and what reading them in GGUF's layout needs.
struct PackedFolder {
    arrays: HashMap<String, Array>,
    path: PathBuf,
    /// The model's shape: its heads and RoPE pairing (for llama.cpp's Q/K
    /// row permutation), its family (for the names).
    config: ModelConfig,
}

impl PackedFolder {
    fn bad(&self, tensor: &str, problem: String) -> ModelError {
        ModelError::Tensor {
            path: self.path.clone(),
            tensor: tensor.to_owned(),
            problem,
        }
    }

    /// The HF tensor `hf` as it is stored; `None` when there is none.
    fn raw(&self, hf: &str) -> Option<&Array> {
        self.arrays.get(hf)
    }

    /// `a`'s rows in GGUF's layout for the GGUF tensor `name`: Q and K
    /// rows permuted as llama.cpp does where the model pairs RoPE
    /// dimensions its way (as `HfWeights` does for float folders).
    fn gguf_rows(&self, name: &str, a: Array) -> Result<Array, Exception> {
        let c = &self.config;
        let heads = match (
            c.rope_style == RopeStyle::Interleaved,
            name.contains(".attn_q."),
            name.contains(".attn_k."),
        ) {
            (true, true, _) => c.heads,
            (true, _, true) => c.kv_heads,
            _ => return Ok(a),
        };
        // A matrix `[out, cols]` or a bias `[out]`: its rows move alike.
        let shape = a.shape().to_vec();
        let (out, cols) = (shape[0], shape[1..].iter().product::<i32>());
        let (heads, half) = (heads as i32, out / heads as i32 / 2);
        a.reshape(&[heads, 2, half, cols])?
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&shape)
    }

    /// The float tensor GGUF calls `name`, as f32 with `shape`.
    fn float(&self, name: &str, shape: &[usize]) -> Result<Option<Array>, ModelError> {
        let hf = hf_name(name, &self.config);
        let Some(a) = self.raw(&hf) else {
            return Ok(None);
        };
        if !a.dtype().is_float() {
            return Err(self.bad(
                &hf,
                format!("is stored as {:?} with no `scales` beside it", a.dtype()),
            ));
        }
        let found: Vec<usize> = a.shape().iter().map(|&d| d as usize).collect();
        if found != shape {
            return Err(ModelError::ShapeMismatch {
                tensor: hf,
                found,
                expected: shape.to_vec(),
                path: Some(self.path.clone()),
            });
        }
        let a = a.as_dtype(Dtype::Float32)?;
        // A Gemma's norms as GGUF holds them, `1 + w` (as `HfWeights`).
        if self.config.block.unit_offset_norms && name.ends_with("norm.weight") {
            return Ok(Some(a.add(Array::from_f32(1.0))?));
        }
        Ok(Some(self.gguf_rows(name, a)?))
    }

    /// The matrix GGUF calls `name` (`[out, inp]`), packed when the folder
    /// holds its scales; `None` when there is no such tensor.
    fn matrix(&self, name: &str, (out, inp): (usize, usize)) -> Result<Option<Matrix>, ModelError> {
        let hf = hf_name(name, &self.config);
        let stem = hf.strip_suffix(".weight").unwrap_or(&hf);
        let Some(scales) = self.raw(&format!("{stem}.scales")) else {
            return Ok(self
                .float(name, &[out, inp])?
                .map(|w| w.transpose())
                .transpose()?
                .map(Matrix::DenseT));
        };
        let Some(w) = self.raw(&hf) else {
            return Err(self.bad(&hf, "is missing beside its `scales`".into()));
        };
        let Some(biases) = self.raw(&format!("{stem}.biases")) else {
            return Err(self.bad(
                &format!("{stem}.biases"),
                "is missing: MLX's affine quantization has a bias per group (other modes, such as mxfp4, are not read)".into(),
            ));
        };
        let (ws, ss) = (w.shape(), scales.shape());
        let shape_error = || {
            self.bad(
                &hf,
                format!(
                    "packs {ws:?} with scales {ss:?}, which is no MLX quantization of a [{out}, {inp}] matrix"
                ),
            )
        };
        if w.dtype() != Dtype::Uint32
            || ws.len() != 2
            || ss.len() != 2
            || ws[0] as usize != out
            || ss[0] as usize != out
            || ws[1] == 0
            || ss[1] == 0
            || biases.shape() != ss
        {
            return Err(shape_error());
        }
        let bits = ws[1] as usize * 32 / inp;
        let group = inp / ss[1] as usize;
        if bits * inp != ws[1] as usize * 32 || group * ss[1] as usize != inp {
            return Err(shape_error());
        }
        if !matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) || !matches!(group, 32 | 64 | 128) {
            return Err(self.bad(
                &hf,
                format!(
                    "is quantized to {bits} bits in groups of {group}; MLX runs 2, 3, 4, 5, 6 or 8 bits in groups of 32, 64 or 128"
                ),
            ));
        }
        let f32 = |a: &Array| a.as_dtype(Dtype::Float32);
        Ok(Some(Matrix::Packed(Packed {
            w: self.gguf_rows(name, w.clone())?,
            scales: self.gguf_rows(name, f32(scales)?)?,
            biases: self.gguf_rows(name, f32(biases)?)?,
            group: group as i32,
            bits: bits as i32,
        })))
    }
}

enum Source<'a> {
    /// f32 values on the host (a GGUF file, a float HF folder).
    Host(HostWeights<'a>),
    /// An HF folder quantized by MLX, read by MLX (boxed: it holds the
    /// model's whole description).
    Packed(Box<PackedFolder>),
}

/// Reads the weights a model's config implies, shapes checked, as MLX
/// arrays.
pub(super) struct Reader<'a> {
    source: Source<'a>,
    path: PathBuf,
}

/// Whether an HF folder's safetensors hold MLX-quantized matrices (a
/// tensor named `*.scales`): read from their headers, no tensor loaded.
pub fn is_mlx_quantized(assets: &ModelAssets) -> Result<bool, ModelError> {
    if assets.format != ModelFormat::HfFolder {
        return Ok(false);
    }
    for path in &assets.weight_files {
        // SAFETY: mapped read-only; vauban never writes a model it is reading.
        let st =
            unsafe { candle_core::safetensors::MmapedSafetensors::new(path) }.map_err(|e| {
                ModelError::Tensor {
                    path: path.clone(),
                    tensor: "*".into(),
                    problem: format!("is not a readable safetensors file: {e}"),
                }
            })?;
        if st
            .tensors()
            .iter()
            .any(|(name, _)| name.ends_with(".scales"))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

impl<'a> Reader<'a> {
    pub(super) fn open(assets: &'a ModelAssets) -> Result<Reader<'a>, ModelError> {
        let source = match is_mlx_quantized(assets)? {
            false => Source::Host(HostWeights::open(assets)?),
            true => {
                let mut arrays = HashMap::new();
                let mut owner: HashMap<String, &PathBuf> = HashMap::new();
                for path in &assets.weight_files {
                    let read = Array::load_safetensors(path).map_err(|e| ModelError::Tensor {
                        path: path.clone(),
                        tensor: "*".into(),
                        problem: format!("MLX could not read it: {e}"),
                    })?;
                    for (name, array) in read {
                        if let Some(first) = owner.insert(name.clone(), path) {
                            return Err(ModelError::Tensor {
                                path: path.clone(),
                                tensor: name,
                                problem: format!(
                                    "is also in {}; remove the stale file (or list the shards in model.safetensors.index.json)",
                                    first.display()
                                ),
                            });
                        }
                        arrays.insert(name, array);
                    }
                }
                Source::Packed(Box::new(PackedFolder {
                    arrays,
                    path: assets.path.clone(),
                    config: assets.config.clone(),
                }))
            }
        };
        Ok(Reader {
            source,
            path: assets.path.clone(),
        })
    }

    /// Whether errors should name tensors as HF does (an HF folder).
    pub(super) fn is_hf(&self) -> bool {
        match &self.source {
            Source::Host(h) => h.is_hf(),
            Source::Packed(_) => true,
        }
    }

    /// Whether the folder is quantized by MLX (its matrices packed).
    pub(super) fn is_packed(&self) -> bool {
        matches!(self.source, Source::Packed(_))
    }

    /// How a GGUF file stored the weights read as f32 (`Q4_1/Q8_0`).
    pub(super) fn stored_types(&self) -> Option<String> {
        match &self.source {
            Source::Host(h) => h.stored_types(),
            Source::Packed(_) => None,
        }
    }

    fn missing(&self, name: &str) -> ModelError {
        ModelError::MissingTensor {
            tensor: name.to_owned(),
            path: Some(self.path.clone()),
        }
    }

    /// The float tensor GGUF calls `name`, with `shape`, as f32.
    pub(super) fn float(&mut self, name: &str, shape: &[usize]) -> Result<Array, ModelError> {
        match &mut self.source {
            Source::Host(h) => {
                let dims: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
                Ok(Array::from_slice(&h.need(name, shape)?, &dims))
            }
            Source::Packed(p) => p.float(name, shape)?.ok_or_else(|| self.missing(name)),
        }
    }

    /// The matrix GGUF calls `name`, `[out, inp]`.
    pub(super) fn matrix(
        &mut self,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<Matrix, ModelError> {
        match &mut self.source {
            Source::Host(h) => Ok(Matrix::DenseT(
                Array::from_slice(&h.need(name, &[out, inp])?, &[out as i32, inp as i32]).t(),
            )),
            Source::Packed(p) => p
                .matrix(name, (out, inp))?
                .ok_or_else(|| self.missing(name)),
        }
    }

    /// Block `layer`'s linear map `m`, checked against the shape
    /// [`ModelMatrix::shape`] gives it, with its bias
    /// `[out]` where [`ModelMatrix::has_bias`] says
    /// the model has one (as candle's loader).
    pub(super) fn linear(
        &mut self,
        layer: usize,
        m: ModelMatrix,
        c: &ModelConfig,
    ) -> Result<Linear, ModelError> {
        let stem = format!("blk.{layer}.{}", m.gguf_stem());
        let (out, inp) = m.shape(c);
        Ok(Linear {
            weight: self.matrix(&format!("{stem}.weight"), out, inp)?,
            bias: match m.has_bias(c) {
                true => Some(self.float(&format!("{stem}.bias"), &[out])?),
                false => None,
            },
        })
    }
}

/// What a model's packed matrices hold, for the kernel note
/// (`4-bit, groups of 64`); `None` when none is packed.
pub(super) fn packings<'m>(matrices: impl Iterator<Item = &'m Matrix>) -> Option<String> {
    let kinds: BTreeSet<String> = matrices.filter_map(Matrix::packing).collect();
    (!kinds.is_empty()).then(|| kinds.into_iter().collect::<Vec<_>>().join("; "))
}
