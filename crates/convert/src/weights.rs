//! The checkpoint's tensors: `model.safetensors`, or the shards a `model.safetensors.index.json`
//! names, their headers checked as the `safetensors` crate checks them and each tensor read from
//! its file when asked for (a checkpoint larger than memory converts); where there are none, the
//! PyTorch checkpoint `pytorch_model.bin` or the shards of `pytorch_model.bin.index.json`, read
//! whole by [`crate::torch`]. Each tensor is widened to float32.
//!
//! A downloaded file may be hostile: a header's length is bounded and checked against the file
//! before it is read ([`header`]), an index is bounded in size, tensors and files, and names only
//! files in its folder ([`index`]); each refusal names its limit.

mod header;
mod index;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, Metadata};

use crate::ConvertError;
use crate::torch::Checkpoint;
pub(crate) use header::of_bytes as safetensors_header;
use index::shard_files;
pub(crate) use index::shard_names;

/// One weights file, its header (or pickle) checked.
struct Shard {
    path: PathBuf,
    format: Format,
}

enum Format {
    /// Open, its tensors read where they lie (`data_start` is the byte after the header).
    Safetensors { file: File, data_start: u64, metadata: Metadata },
    /// Read whole: the archive's storages are found through its pickle.
    Torch { bytes: Vec<u8>, checkpoint: Checkpoint },
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
            let read_err = |e| ConvertError::Read { file: display(&path), source: e };
            let format = if torch {
                let bytes = std::fs::read(&path).map_err(read_err)?;
                let checkpoint = Checkpoint::read(&display(&path), &bytes)?;
                for name in checkpoint.names() {
                    index.insert(name.to_owned(), shards.len());
                }
                Format::Torch { bytes, checkpoint }
            } else {
                let mut file = File::open(&path).map_err(read_err)?;
                let (data_start, metadata) = header::read(&mut file)
                    .map_err(read_err)?
                    .map_err(|why| ConvertError::Weights { file: display(&path), why })?;
                for name in metadata.tensors().keys() {
                    index.insert(name.clone(), shards.len());
                }
                Format::Safetensors { file, data_start, metadata }
            };
            shards.push(Shard { path, format });
        }
        Ok(Weights { shards, index })
    }

    /// The files read, in order.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The bytes of the checkpoint's tensors were they all stored with `element_bytes` bytes an
    /// element: what decides, before the graph is written, whether its weights go to a file apart.
    pub(crate) fn size_as(&self, element_bytes: usize) -> usize {
        self.names()
            .filter_map(|n| self.shape(n))
            .map(|shape| shape.iter().product::<usize>().saturating_mul(element_bytes))
            .fold(0, usize::saturating_add)
    }

    /// Tensor `name`'s shape as its file records it.
    pub(crate) fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let shard = &self.shards[*self.index.get(name)?];
        match &shard.format {
            Format::Safetensors { metadata, .. } => metadata.info(name).map(|i| i.shape.clone()),
            Format::Torch { bytes, checkpoint } => {
                checkpoint.tensor(&display(&shard.path), bytes, name).ok().flatten().map(|t| t.shape.to_vec())
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
        let rows = shape.first().copied().unwrap_or(1);
        self.f32_rows(name, shape, 0..rows)
    }

    /// Rows `rows` (along the first axis) of tensor `name`, checked to have `shape`, as float32
    /// values: only their bytes are read from a safetensors file.
    pub(crate) fn f32_rows(
        &self,
        name: &str,
        shape: &[usize],
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, ConvertError> {
        let Some(&s) = self.index.get(name) else {
            return Err(ConvertError::MissingTensor {
                tensor: name.to_owned(),
                files: self.shards.iter().map(|s| display(&s.path)).collect::<Vec<_>>().join(", "),
            });
        };
        let shard = &self.shards[s];
        let missing = || ConvertError::MissingTensor { tensor: name.to_owned(), files: display(&shard.path) };
        let check_shape = |found: &[usize]| {
            if found == shape {
                return Ok(());
            }
            Err(ConvertError::Shape {
                file: display(&shard.path),
                tensor: name.to_owned(),
                found: found.to_vec(),
                expected: shape.to_vec(),
            })
        };
        // Exact once `shape` is checked to be the file's (whose element count fits).
        let row_elements = shape.iter().skip(1).fold(1usize, |n, &d| n.saturating_mul(d));
        let rows = rows.start.min(rows.end)..rows.end.min(shape.first().copied().unwrap_or(1));
        let (dtype, read);
        let data: &[u8] = match &shard.format {
            Format::Safetensors { file, data_start, metadata } => {
                let info = metadata.info(name).ok_or_else(missing)?;
                check_shape(&info.shape)?;
                dtype = info.dtype;
                let width = row_elements * dtype.bitsize() / 8;
                let start = *data_start + (info.data_offsets.0 + rows.start * width) as u64;
                let mut buffer = vec![0u8; rows.len() * width];
                let mut file = file;
                file.seek(SeekFrom::Start(start))
                    .and_then(|_| file.read_exact(&mut buffer))
                    .map_err(|e| ConvertError::Read { file: display(&shard.path), source: e })?;
                read = buffer;
                &read
            }
            Format::Torch { bytes, checkpoint } => {
                let t = checkpoint.tensor(&display(&shard.path), bytes, name)?.ok_or_else(missing)?;
                check_shape(t.shape)?;
                dtype = t.dtype;
                let width = row_elements * dtype.bitsize() / 8;
                // Within the data: `rows` is clipped to the shape `check_shape` found to be the file's.
                t.data.get(rows.start * width..rows.end * width).ok_or_else(|| ConvertError::Weights {
                    file: display(&shard.path),
                    why: format!("holds fewer bytes for tensor {name:?} than its shape {shape:?} needs"),
                })?
            }
        };
        let values = widen(data, dtype).ok_or_else(|| ConvertError::Dtype {
            file: display(&shard.path),
            tensor: name.to_owned(),
            dtype: format!("{dtype:?}"),
        })?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(ConvertError::Weights {
                file: display(&shard.path),
                why: format!(
                    "tensor {name:?} holds a value that is not finite at element {}: the file is damaged",
                    rows.start * row_elements + i
                ),
            });
        }
        Ok(values)
    }
}

/// Little-endian elements of `dtype` as float32; `None` for a dtype that is not converted.
pub(crate) fn widen(data: &[u8], dtype: Dtype) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
        _ => return None,
    })
}
