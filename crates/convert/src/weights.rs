//! The checkpoint's tensors: `model.safetensors`, or the shards a `model.safetensors.index.json`
//! names, read whole and checked by the `safetensors` crate; where there are none, the PyTorch
//! checkpoint `pytorch_model.bin` or the shards of `pytorch_model.bin.index.json`, read by
//! [`crate::torch`]. Each tensor is widened to float32.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, Metadata, SafeTensorError, SafeTensors};

use crate::ConvertError;
use crate::torch::Checkpoint;

/// One weights file, read and its header (or pickle) checked.
struct Shard {
    path: PathBuf,
    bytes: Vec<u8>,
    format: Format,
}

enum Format {
    Safetensors { header_len: usize, metadata: Metadata },
    Torch(Checkpoint),
}

/// Every tensor of the checkpoint, by name, and the files they came from.
pub(crate) struct Weights {
    shards: Vec<Shard>,
    /// Tensor name -> index in `shards`.
    index: HashMap<String, usize>,
}

/// The file name the converter reads, and the index of a sharded checkpoint.
pub(crate) const SINGLE: &str = "model.safetensors";
pub(crate) const SHARD_INDEX: &str = "model.safetensors.index.json";
/// The PyTorch checkpoint read where there is no safetensors file, and its shards' index.
pub(crate) const TORCH_SINGLE: &str = "pytorch_model.bin";
pub(crate) const TORCH_INDEX: &str = "pytorch_model.bin.index.json";

fn display(p: &Path) -> String {
    p.display().to_string()
}

impl Weights {
    /// Reads `model.safetensors` in `dir`, or the shards its `model.safetensors.index.json` names;
    /// failing both, `pytorch_model.bin` or the shards of `pytorch_model.bin.index.json`.
    pub(crate) fn open(dir: &Path) -> Result<Weights, ConvertError> {
        let (files, torch) = if dir.join(SINGLE).is_file() {
            (vec![dir.join(SINGLE)], false)
        } else if dir.join(SHARD_INDEX).is_file() {
            (shard_files(dir, &dir.join(SHARD_INDEX))?, false)
        } else if dir.join(TORCH_SINGLE).is_file() {
            (vec![dir.join(TORCH_SINGLE)], true)
        } else if dir.join(TORCH_INDEX).is_file() {
            (shard_files(dir, &dir.join(TORCH_INDEX))?, true)
        } else {
            return Err(ConvertError::NoWeights { dir: display(dir) });
        };
        Self::read(files, torch)
    }

    /// Reads one `torch.save` file of tensors (a head's `.pt`, such as BGE-M3's
    /// `colbert_linear.pt`).
    pub(crate) fn open_torch_file(path: &Path) -> Result<Weights, ConvertError> {
        Self::read(vec![path.to_path_buf()], true)
    }

    /// Reads `files`: safetensors, or (`torch`) torch.save archives.
    fn read(files: Vec<PathBuf>, torch: bool) -> Result<Weights, ConvertError> {
        let mut shards = Vec::with_capacity(files.len());
        let mut index = HashMap::new();
        for path in files {
            let bytes = std::fs::read(&path).map_err(|e| ConvertError::Read { file: display(&path), source: e })?;
            let format = if torch {
                let checkpoint = Checkpoint::read(&display(&path), &bytes)?;
                for name in checkpoint.names() {
                    index.insert(name.to_owned(), shards.len());
                }
                Format::Torch(checkpoint)
            } else {
                let (header_len, metadata) = SafeTensors::read_metadata(&bytes)
                    .map_err(|e| ConvertError::Weights { file: display(&path), why: header_problem(&bytes, &e) })?;
                for name in metadata.tensors().keys() {
                    index.insert(name.clone(), shards.len());
                }
                Format::Safetensors { header_len, metadata }
            };
            shards.push(Shard { path, bytes, format });
        }
        Ok(Weights { shards, index })
    }

    /// The files read, in order.
    pub(crate) fn files(&self) -> impl Iterator<Item = (&Path, &[u8])> {
        self.shards.iter().map(|s| (s.path.as_path(), s.bytes.as_slice()))
    }

    /// Tensor `name`'s shape as its file records it.
    pub(crate) fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let shard = &self.shards[*self.index.get(name)?];
        match &shard.format {
            Format::Safetensors { metadata, .. } => metadata.info(name).map(|i| i.shape.clone()),
            Format::Torch(checkpoint) => {
                checkpoint.tensor(&display(&shard.path), &shard.bytes, name).ok().flatten().map(|t| t.shape.to_vec())
            }
        }
    }

    /// The checkpoint as one safetensors file of float32 tensors (`pytorch_model.bin` of a
    /// sentence-transformers module folder, written as the `model.safetensors` it reads).
    pub(crate) fn to_safetensors(&self) -> Result<Vec<u8>, ConvertError> {
        self.some_to_safetensors(self.names().collect())
    }

    /// The tensors `names` as one safetensors file of float32 tensors.
    pub(crate) fn some_to_safetensors(&self, mut names: Vec<&str>) -> Result<Vec<u8>, ConvertError> {
        names.sort_unstable();
        let mut tensors = Vec::with_capacity(names.len());
        for name in names {
            let shape = self.shape(name).ok_or_else(|| ConvertError::MissingTensor {
                tensor: name.to_owned(),
                files: self.shards.iter().map(|s| display(&s.path)).collect::<Vec<_>>().join(", "),
            })?;
            let bytes: Vec<u8> = self.f32(name, &shape)?.iter().flat_map(|v| v.to_le_bytes()).collect();
            tensors.push((name.to_owned(), shape, bytes));
        }
        let views = tensors
            .iter()
            .map(|(name, shape, bytes)| {
                safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes).map(|v| (name.clone(), v))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ConvertError::Weights {
                file: "safetensors".to_owned(),
                why: format!("cannot be written ({e})"),
            })?;
        safetensors::tensor::serialize(views, None).map_err(|e| ConvertError::Weights {
            file: "safetensors".to_owned(),
            why: format!("cannot be written ({e})"),
        })
    }

    /// Every tensor's name, in no order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tensor `name` as float32 values, checked to have `shape`.
    pub(crate) fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ConvertError> {
        let Some(&s) = self.index.get(name) else {
            return Err(ConvertError::MissingTensor {
                tensor: name.to_owned(),
                files: self.shards.iter().map(|s| display(&s.path)).collect::<Vec<_>>().join(", "),
            });
        };
        let shard = &self.shards[s];
        let missing = || ConvertError::MissingTensor { tensor: name.to_owned(), files: display(&shard.path) };
        let (dtype, found, data): (Dtype, &[usize], &[u8]) = match &shard.format {
            Format::Safetensors { header_len, metadata } => {
                let info = metadata.info(name).ok_or_else(missing)?;
                let start = header_len + 8;
                (info.dtype, &info.shape, &shard.bytes[start + info.data_offsets.0..start + info.data_offsets.1])
            }
            Format::Torch(checkpoint) => {
                let t = checkpoint.tensor(&display(&shard.path), &shard.bytes, name)?.ok_or_else(missing)?;
                (t.dtype, t.shape, t.data)
            }
        };
        if found != shape {
            return Err(ConvertError::Shape {
                file: display(&shard.path),
                tensor: name.to_owned(),
                found: found.to_vec(),
                expected: shape.to_vec(),
            });
        }
        let values: Vec<f32> = match dtype {
            Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::F16 => data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::BF16 => data.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            Dtype::F64 => data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
                .collect(),
            other => {
                return Err(ConvertError::Dtype {
                    file: display(&shard.path),
                    tensor: name.to_owned(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(ConvertError::Weights {
                file: display(&shard.path),
                why: format!("tensor {name:?} holds a value that is not finite at element {i}: the file is damaged"),
            });
        }
        Ok(values)
    }
}

/// The shard files an index (`weight_map`: tensor name -> file) names, beside it in `dir`.
fn shard_files(dir: &Path, index_file: &Path) -> Result<Vec<PathBuf>, ConvertError> {
    let text =
        std::fs::read_to_string(index_file).map_err(|e| ConvertError::Read { file: display(index_file), source: e })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| ConvertError::Weights { file: display(index_file), why: format!("is not valid JSON ({e})") })?;
    let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| ConvertError::Weights {
        file: display(index_file),
        why: "has no `weight_map` object".to_owned(),
    })?;
    let mut names: Vec<String> = map.values().filter_map(|f| f.as_str().map(str::to_owned)).collect();
    names.sort();
    names.dedup();
    if names.is_empty() || names.iter().any(|n| n.contains('/') || n.contains("..")) {
        return Err(ConvertError::Weights {
            file: display(index_file),
            why: "names no shard files beside it".to_owned(),
        });
    }
    Ok(names.iter().map(|n| dir.join(n)).collect())
}

/// What is wrong with a file whose header the `safetensors` crate refused, in words; an unknown
/// dtype names its tensor.
fn header_problem(bytes: &[u8], e: &SafeTensorError) -> String {
    match e {
        SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength => {
            "is not a safetensors file or is cut short (its header is incomplete)".to_owned()
        }
        SafeTensorError::MetadataIncompleteBuffer => {
            "is truncated or has bytes after its tensors (its size does not match its header)".to_owned()
        }
        SafeTensorError::InvalidHeaderDeserialization(inner) => match unknown_dtype(bytes) {
            Some((tensor, dtype)) => {
                format!("tensor {tensor:?} has the dtype {dtype:?}, which is not a safetensors type")
            }
            None => format!("has a header that is not a safetensors header ({inner})"),
        },
        SafeTensorError::InvalidOffset(tensor) => format!("tensor {tensor:?} has offsets outside the file"),
        SafeTensorError::HeaderTooLarge => "is not a safetensors file (its header length is implausible)".to_owned(),
        other => format!("is damaged ({other})"),
    }
}

/// The first tensor whose `dtype` the header spells in a way the `safetensors` crate does not know.
fn unknown_dtype(bytes: &[u8]) -> Option<(String, String)> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let header: serde_json::Value = serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    header.as_object()?.iter().find_map(|(name, t)| {
        let dtype = t.get("dtype")?.as_str()?;
        serde_json::from_value::<Dtype>(serde_json::Value::String(dtype.to_owned()))
            .is_err()
            .then(|| (name.clone(), dtype.to_owned()))
    })
}
