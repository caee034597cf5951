//! The index of a sharded checkpoint (`model.safetensors.index.json`,
//! `pytorch_model.bin.index.json`): its `weight_map` of tensor names to shard files, read within
//! bounds (the file's size before it is read, the tensors it maps, the files it names), keeping
//! only the distinct file names. Each must be a plain file name in the index's folder, and be,
//! or link to, a regular file there (or beside the file the index itself links to, as the hub's
//! cache links both into its `blobs` folder).

use std::collections::BTreeSet;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};

use crate::ConvertError;
use crate::conversion::grouped;

/// The largest index read (as `safetensors` bounds a header). An index takes about 90 bytes a
/// tensor, so this is a million tensors; the largest models have a hundred thousand or two.
pub(crate) const MAX_INDEX_BYTES: u64 = 100_000_000;
/// The most tensors an index may map.
pub(crate) const MAX_TENSORS: usize = 1_000_000;
/// The most shard files an index may name (a model has at most a few hundred).
pub(crate) const MAX_SHARDS: usize = 10_000;

/// What to do with an index refused: said in every refusal.
const ADVICE: &str = "download the model again";

/// `weight_map`'s distinct file names, and how many tensors it maps.
#[derive(Debug, Default)]
struct WeightMap {
    files: BTreeSet<String>,
    tensors: usize,
}

#[derive(Deserialize)]
struct Index {
    weight_map: Option<WeightMap>,
}

impl<'de> Deserialize<'de> for WeightMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(WeightMapVisitor)
    }
}

struct WeightMapVisitor;

impl<'de> Visitor<'de> for WeightMapVisitor {
    type Value = WeightMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of tensor names and the file holding each")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WeightMap, A::Error> {
        let mut out = WeightMap::default();
        while map.next_key::<IgnoredAny>()?.is_some() {
            let file: String = map.next_value()?;
            out.tensors += 1;
            if out.tensors <= MAX_TENSORS && out.files.len() <= MAX_SHARDS {
                out.files.insert(file);
            }
        }
        Ok(out)
    }
}

fn refused(index_file: &str, why: String) -> ConvertError {
    ConvertError::Weights { file: index_file.to_owned(), why: format!("is refused: {why} ({ADVICE})") }
}

/// Whether `name` is a file name in a folder: one plain component, no separators, not `..`.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', ':', '\0'])
        && Path::new(name).components().count() == 1
}

/// The shard files the index text `text` of `index_file` (named in errors) names: distinct,
/// sorted, each a plain file name.
pub(crate) fn shard_names(index_file: &str, text: &str) -> Result<Vec<String>, ConvertError> {
    let index: Index = serde_json::from_str(text)
        .map_err(|e| ConvertError::Weights { file: index_file.to_owned(), why: format!("is not valid JSON ({e})") })?;
    let map = index.weight_map.ok_or_else(|| ConvertError::Weights {
        file: index_file.to_owned(),
        why: "has no `weight_map` object".to_owned(),
    })?;
    if map.tensors > MAX_TENSORS {
        let why = format!("it maps {} tensors, more than {}", grouped(map.tensors as u64), grouped(MAX_TENSORS as u64));
        return Err(refused(index_file, why));
    }
    if map.files.len() > MAX_SHARDS {
        let why = format!(
            "it names more than {} shard files (a model has at most a few hundred)",
            grouped(MAX_SHARDS as u64)
        );
        return Err(refused(index_file, why));
    }
    if map.files.is_empty() {
        return Err(ConvertError::Weights {
            file: index_file.to_owned(),
            why: "names no shard files beside it".to_owned(),
        });
    }
    if let Some(bad) = map.files.iter().find(|n| !plain(n)) {
        let why = format!(
            "it names the shard {bad:?}, which is not a file name: an index's shards are files in its own folder (no /, \\, : or ..)"
        );
        return Err(refused(index_file, why));
    }
    Ok(map.files.into_iter().collect())
}

/// The shard files in `dir` that its index `index_file` names: the index read up to
/// [`MAX_INDEX_BYTES`], and each shard a regular file inside `dir` (or inside the folder the
/// index links into) where it exists.
pub(super) fn shard_files(dir: &Path, index_file: &Path) -> Result<Vec<PathBuf>, ConvertError> {
    let shown = index_file.display().to_string();
    let read_err = |e| ConvertError::Read { file: shown.clone(), source: e };
    let file = std::fs::File::open(index_file).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    let too_big = |len: u64| {
        let why = format!(
            "it is {} bytes, more than the {} read of an index (about 90 bytes a tensor)",
            grouped(len),
            grouped(MAX_INDEX_BYTES)
        );
        refused(&shown, why)
    };
    if len > MAX_INDEX_BYTES {
        return Err(too_big(len));
    }
    let mut text = String::new();
    file.take(MAX_INDEX_BYTES + 1).read_to_string(&mut text).map_err(read_err)?;
    if text.len() as u64 > MAX_INDEX_BYTES {
        return Err(too_big(text.len() as u64));
    }
    let names = shard_names(&shown, &text)?;
    let roots: Vec<PathBuf> =
        [Some(dir.to_path_buf()), index_file.canonicalize().ok().and_then(|p| Some(p.parent()?.to_path_buf()))]
            .into_iter()
            .flatten()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
    let mut files = Vec::with_capacity(names.len());
    for name in names {
        let path = dir.join(&name);
        // A shard that is not there is named when it is opened.
        if let Ok(real) = path.canonicalize() {
            if !roots.iter().any(|r| real.parent() == Some(r.as_path())) {
                let why = format!(
                    "its shard {name:?} links to {}, outside the model's folder: an index's shards are files in its own folder",
                    real.display()
                );
                return Err(refused(&shown, why));
            }
            if !real.is_file() {
                let why = format!("its shard {name:?} is not a regular file");
                return Err(refused(&shown, why));
            }
        }
        files.push(path);
    }
    Ok(files)
}
