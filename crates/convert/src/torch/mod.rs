//! PyTorch checkpoints (`pytorch_model.bin`, as `torch.save` writes a state dict since torch
//! 1.6) read without Python: the zip archive's `data.pkl` is run on a pickle machine that knows
//! only the opcodes of a state dict and an allow-list of names (`_rebuild_tensor_v2`,
//! `_rebuild_parameter`, `OrderedDict` and the storage classes), and each tensor's bytes are
//! found in the archive's `data/<key>` entry its persistent id names.
//!
//! It is not an unpickler: it never imports or calls anything the pickle names. A name outside
//! the allow-list (`os.system`, `builtins.eval`, any class) is refused where the pickle names it,
//! before any storage is read, and the names it allows become tags, so the only things it builds
//! are dicts, lists, tuples, numbers, strings and tensor records. It reads little-endian,
//! contiguous tensors; the older, non-zip `torch.save` format and tensors laid out otherwise are
//! refused by name.
//!
//! A downloaded checkpoint may be hostile: every bound is checked before what it bounds is read
//! or allocated, and the work is linear in the file. The zip directory is found on a budget of
//! reads, an entry is read only up to its declared size (itself bounded) and refused where it
//! inflates past it, and the pickle machine bounds nesting, values and dimensions
//! ([`values::MAX_DEPTH`], [`pickle::MAX_VALUES`], [`values::MAX_RANK`]). Each refusal names its
//! limit.

mod archive;
mod pickle;
#[cfg(test)]
mod tests;
mod values;

use std::collections::HashMap;
use std::ops::Range;

use safetensors::tensor::Dtype;

use crate::ConvertError;
use crate::conversion::grouped;
use archive::archive_err;
use pickle::PickleError;
use values::{MAX_DEPTH, MAX_RANK, TensorRecord, Value};

/// A storage's bytes: where they lie in the file, or read out of a compressed entry.
#[derive(Debug)]
enum Storage {
    InFile(Range<usize>),
    Owned(Vec<u8>),
}

/// The tensors of one `torch.save` archive and its storages.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    tensors: HashMap<String, TensorRecord>,
    /// By the [`values::string_id`] of their keys.
    storages: HashMap<usize, Storage>,
    /// The archive's top folder, as in `<root>/data.pkl`.
    root: String,
}

/// One tensor of a checkpoint: its dtype, shape and the bytes of its elements.
pub(crate) struct TensorBytes<'a> {
    pub(crate) dtype: Dtype,
    pub(crate) shape: &'a [usize],
    pub(crate) data: &'a [u8],
}

impl Checkpoint {
    /// Reads the archive `bytes` of `file` (named in errors): its pickle, its storages' places,
    /// and checks that every tensor's storage is there.
    pub(crate) fn read(file: &str, bytes: &[u8]) -> Result<Checkpoint, ConvertError> {
        if !bytes.starts_with(b"PK") {
            return Err(if bytes.starts_with(&[0x80, 0x02, 0x8a, 0x0a]) {
                archive_err(
                    file,
                    "is a torch.save file of the format before torch 1.6, not a zip archive: save it again with a newer torch, or convert it to safetensors",
                )
            } else {
                archive_err(file, "is not a torch.save zip archive (it does not begin as a zip file does)")
            });
        }
        let mut zip = archive::open(file, bytes)?;
        let pkl = zip
            .file_names()
            .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
            .map(str::to_owned)
            .ok_or_else(|| {
                archive_err(file, "has no <folder>/data.pkl: it is a zip archive, but not one torch.save wrote")
            })?;
        let root = pkl.trim_end_matches("data.pkl").to_owned();
        let byteorder = format!("{root}byteorder");
        if zip.index_for_name(&byteorder).is_some() {
            let limit = "more than a byte order takes";
            let order = archive::read_entry(file, &mut zip, &byteorder, archive::MAX_BYTEORDER, limit)?;
            if order.trim_ascii() != b"little" {
                return Err(archive_err(
                    file,
                    format!(
                        "was written on a {} machine: nornir reads little-endian checkpoints (convert it to safetensors)",
                        String::from_utf8_lossy(order.trim_ascii())
                    ),
                ));
            }
        }
        let limit = "the most read of a pickle (a state dict's takes about 130 bytes a tensor)";
        let pickled = archive::read_entry(file, &mut zip, &pkl, archive::MAX_PICKLE_BYTES, limit)?;
        let top = pickle::load(&pickled).map_err(|e| pickle_err(file, e))?;
        let Value::Dict(items) = top else {
            return Err(archive_err(file, "holds a pickle that is not a dict of tensors (a state dict)"));
        };
        let mut tensors = HashMap::new();
        for (k, v) in &items.borrow().items {
            if let (Value::Str(name), Value::Tensor(t)) = (k, v) {
                tensors.insert(name.to_string(), TensorRecord::clone(t));
            }
        }
        if tensors.is_empty() {
            return Err(archive_err(file, "holds a dict without tensors: it is not a state dict"));
        }
        let storages = storages(file, bytes, &mut zip, &root, &tensors)?;
        Ok(Checkpoint { tensors, storages, root })
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Tensor `name` of the checkpoint read from `bytes`: refused if it is not contiguous or
    /// its elements run past its storage.
    pub(crate) fn tensor<'a>(
        &'a self,
        file: &str,
        bytes: &'a [u8],
        name: &str,
    ) -> Result<Option<TensorBytes<'a>>, ConvertError> {
        let Some(t) = self.tensors.get(name) else { return Ok(None) };
        if !contiguous(&t.shape, &t.stride) {
            return Err(ConvertError::NonContiguous {
                file: file.to_owned(),
                tensor: name.to_owned(),
                shape: t.shape.clone(),
                stride: t.stride.clone(),
            });
        }
        let storage: &[u8] = match self.storages.get(&values::string_id(&t.key)) {
            Some(Storage::InFile(r)) => bytes.get(r.clone()).ok_or_else(|| ConvertError::TorchArchive {
                file: file.to_owned(),
                why: format!(
                    "stores {}data/{} past its end ({} bytes): the file is truncated",
                    self.root,
                    t.key,
                    bytes.len()
                ),
            })?,
            Some(Storage::Owned(v)) => v,
            None => {
                return Err(ConvertError::StorageMissing {
                    file: file.to_owned(),
                    entry: format!("{}data/{}", self.root, t.key),
                    tensor: name.to_owned(),
                });
            }
        };
        let size = t.dtype.bitsize() / 8;
        let numel = t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let range = numel.and_then(|n| {
            let start = t.offset.checked_mul(size)?;
            Some(start..start.checked_add(n.checked_mul(size)?)?)
        });
        match range.filter(|r| r.end <= storage.len()) {
            Some(r) => Ok(Some(TensorBytes { dtype: t.dtype, shape: &t.shape, data: &storage[r] })),
            None => Err(ConvertError::StorageOverrun {
                file: file.to_owned(),
                tensor: name.to_owned(),
                entry: format!("{}data/{}", self.root, t.key),
                storage_bytes: storage.len(),
            }),
        }
    }
}

/// The storages of `tensors` in the archive `zip` of `bytes`: where a stored one lies, or a
/// compressed one inflated (at most [`archive::MAX_INFLATED`] bytes of them in all).
fn storages(
    file: &str,
    bytes: &[u8],
    zip: &mut archive::Zip<'_>,
    root: &str,
    tensors: &HashMap<String, TensorRecord>,
) -> Result<HashMap<usize, Storage>, ConvertError> {
    let mut storages = HashMap::new();
    let mut inflated = 0u64;
    let mut sorted: Vec<_> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in sorted {
        let id = values::string_id(&t.key);
        if storages.contains_key(&id) {
            continue;
        }
        let entry_name = format!("{root}data/{}", t.key);
        let Some(index) = zip.index_for_name(&entry_name) else {
            return Err(ConvertError::StorageMissing {
                file: file.to_owned(),
                entry: entry_name,
                tensor: name.clone(),
            });
        };
        let entry = zip.by_index(index).map_err(|e| archive_err(file, format!("cannot open {entry_name} ({e})")))?;
        let storage = if entry.compression() == zip::CompressionMethod::Stored {
            let start = usize::try_from(entry.data_start()).unwrap_or(usize::MAX);
            let end = usize::try_from(entry.size()).ok().and_then(|n| start.checked_add(n));
            match end.filter(|&e| e <= bytes.len()) {
                Some(end) => Storage::InFile(start..end),
                None => return Err(archive_err(file, format!("is truncated: {entry_name} runs past its end"))),
            }
        } else {
            drop(entry);
            let left = archive::MAX_INFLATED - inflated;
            let limit = format!(
                "the most left of the {} bytes its compressed storages may inflate to in all (torch.save stores them uncompressed)",
                grouped(archive::MAX_INFLATED)
            );
            let data = archive::read_entry(file, zip, &entry_name, left, &limit)?;
            inflated += data.len() as u64;
            Storage::Owned(data)
        };
        storages.insert(id, storage);
    }
    Ok(storages)
}

/// Whether `stride` is the row-major stride of `shape` (dimensions of one element, and empty
/// tensors, lie any way).
fn contiguous(shape: &[usize], stride: &[usize]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1usize;
    for (&d, &s) in shape.iter().zip(stride).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// Runs the pickle `bytes` (a `data.pkl`) as [`Checkpoint::read`] does; `file` is named in errors.
pub(crate) fn load_pickle(file: &str, bytes: &[u8]) -> Result<(), ConvertError> {
    pickle::load(bytes).map(drop).map_err(|e| pickle_err(file, e))
}

fn pickle_err(file: &str, e: PickleError) -> ConvertError {
    let file = file.to_owned();
    match e {
        PickleError::EndsEarly { at } => ConvertError::Pickle { file, at, why: "ends early".to_owned() },
        PickleError::UnknownOpcode { opcode, at } => ConvertError::UnknownOpcode { file, opcode, at },
        PickleError::Global { name } => ConvertError::PickleGlobal { file, global: name },
        PickleError::Malformed { at, why } => ConvertError::Pickle { file, at, why },
        PickleError::TooDeep { at } => {
            let why = format!(
                "its pickle nests deeper than {} levels at byte {at} (a state dict nests 3)",
                grouped(MAX_DEPTH as u64)
            );
            archive::refused(&file, &why)
        }
        PickleError::TooMany { at } => {
            let why = format!(
                "its pickle builds more than {} values at byte {at} (a state dict builds about 30 a tensor)",
                grouped(pickle::MAX_VALUES as u64)
            );
            archive::refused(&file, &why)
        }
        PickleError::Changed { at } => archive::refused(
            &file,
            &format!(
                "its pickle changes a list or dict at byte {at} after putting it inside another or itself (torch.save never does)"
            ),
        ),
        PickleError::TooManyDims { at, dims } => archive::refused(
            &file,
            &format!(
                "its pickle has a tensor of {dims} dimensions at byte {at}, more than {MAX_RANK} (weights have 1 to 4)"
            ),
        ),
    }
}
