//! The checkpoint's tensors: `model.safetensors`, or the shards a `model.safetensors.index.json`
//! names, their headers checked as the `safetensors` crate checks them and each tensor read from
//! its file when asked for (a checkpoint larger than memory converts); where there are none, the
//! PyTorch checkpoint `pytorch_model.bin` or the shards of `pytorch_model.bin.index.json`, read
//! whole by [`crate::torch`]. Each tensor is widened to float32.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, Metadata, SafeTensorError};

use crate::ConvertError;
use crate::torch::Checkpoint;

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
                let (data_start, metadata) = read_header(&mut file).map_err(read_err)?.map_err(|(e, header)| {
                    ConvertError::Weights { file: display(&path), why: header_problem(&header, &e) }
                })?;
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
        let row_elements: usize = shape.iter().skip(1).product();
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
                t.data.get(rows.start * width..rows.end * width).unwrap_or_default()
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
fn widen(data: &[u8], dtype: Dtype) -> Option<Vec<f32>> {
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

/// The header of a safetensors file, checked as `SafeTensors::read_metadata` checks a whole file
/// in memory (the same errors), reading only the header: the offset of the first tensor byte and
/// the metadata. On a header error, also the bytes read (for [`header_problem`]).
#[allow(clippy::type_complexity)]
fn read_header(file: &mut File) -> std::io::Result<Result<(u64, Metadata), (SafeTensorError, Vec<u8>)>> {
    /// `safetensors`' own limit on a header's length.
    const MAX_HEADER: usize = 100_000_000;
    let file_len = file.metadata()?.len();
    let mut prefix = [0u8; 8];
    if file_len < 8 {
        return Ok(Err((SafeTensorError::HeaderTooSmall, Vec::new())));
    }
    file.read_exact(&mut prefix)?;
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER as u64 {
        return Ok(Err((SafeTensorError::HeaderTooLarge, prefix.to_vec())));
    }
    if 8 + n > file_len {
        return Ok(Err((SafeTensorError::InvalidHeaderLength, prefix.to_vec())));
    }
    let mut bytes = prefix.to_vec();
    bytes.resize(8 + n as usize, 0);
    file.read_exact(&mut bytes[8..])?;
    let text = match std::str::from_utf8(&bytes[8..]) {
        Ok(t) => t,
        Err(e) => return Ok(Err((SafeTensorError::InvalidHeader(e), bytes))),
    };
    let metadata: Metadata = match serde_json::from_str(text) {
        Ok(m) => m,
        Err(e) => return Ok(Err((SafeTensorError::InvalidHeaderDeserialization(e), bytes))),
    };
    if metadata.data_len() as u64 + 8 + n != file_len {
        return Ok(Err((SafeTensorError::MetadataIncompleteBuffer, bytes)));
    }
    Ok(Ok((8 + n, metadata)))
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
