//! A static model's folder (Model2Vec), read as model2vec's `load_pretrained` reads it: the
//! layout `StaticModel.save_pretrained` writes (`config.json` with `"model_type": "model2vec"`,
//! `model.safetensors` holding `embeddings` and, after vocabulary quantization, `mapping` and
//! `weights`, `tokenizer.json`), or sentence-transformers' `StaticEmbedding` (`embedding.weight`,
//! at the top or under `0_StaticEmbedding/`). Every size is checked against the tokenizer before
//! anything runs.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use serde::Deserialize;

use crate::error::{EmbedError, Result};
use crate::load::checks::{MAX_TOKENS, MAX_WIDTH, from_json};
use crate::load::dense::float_values;
use crate::load::files::{CONFIG_MAX_BYTES, read_bounded};
use crate::math::static_table::StaticTable;
use crate::values::{KindChoice, ModelFolder, Prompts};

/// The largest table file read (a 500,000-token vocabulary of 1,024 float32 values is 2 GB).
const TABLE_MAX_BYTES: u64 = 8 << 30;

/// Why a static model runs where it does, in the plan's words.
pub(crate) const ON_THE_CPU: &str = "a static model (Model2Vec) is a table of token vectors: a text's vector is a \
                                     mean of its rows, computed by nornir on the CPU without ONNX Runtime";

/// model2vec's `DEFAULT_MAX_LENGTH`: the tokens `encode` keeps when the config names none.
const DEFAULT_MAX_LENGTH: usize = 512;

/// Where a static model's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StaticLayout {
    pub(crate) config: PathBuf,
    pub(crate) table: PathBuf,
    pub(crate) tokenizer: PathBuf,
}

/// The table's tensor as model2vec names it, and as sentence-transformers' `StaticEmbedding` does.
const TABLE_TENSORS: [&str; 2] = ["embeddings", "embedding.weight"];

/// What a static model's config says (model2vec's `StaticModelConfig`; other keys ignored).
#[derive(Debug, Default, Deserialize)]
struct StaticConfig {
    /// model2vec's default is false.
    #[serde(default)]
    normalize: bool,
    /// Absent: 512; `null`: no limit.
    #[serde(default = "default_max_length")]
    max_length: Option<usize>,
}

fn default_max_length() -> Option<usize> {
    Some(DEFAULT_MAX_LENGTH)
}

/// What a static model's config asks of `encode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StaticSettings {
    pub(crate) normalize: bool,
    /// The most tokens of a text kept; `None`: all (the config's `"max_length": null`).
    pub(crate) max_length: Option<usize>,
}

/// The settings of the static model of `layout`, checked.
pub(crate) fn settings(dir: &Path, layout: &StaticLayout) -> Result<StaticSettings> {
    let config = read_config(dir, &layout.config)?;
    if let Some(n) = config.max_length.filter(|&n| n == 0 || n > MAX_TOKENS) {
        return Err(EmbedError::model(
            dir,
            format!("max_length is {n}: give a number of tokens from 1 to {MAX_TOKENS}, or null"),
        ));
    }
    Ok(StaticSettings { normalize: config.normalize, max_length: config.max_length })
}

/// The static layout of `dir`, if it is one: a folder whose `config.json` names model2vec, or
/// whose `modules.json` lists a `StaticEmbedding` and which has no `model.onnx`. Its files are
/// looked for as model2vec looks: its own layout first, then sentence-transformers' at the top,
/// then nested; where none is whole, model2vec's (whose missing file the loader then names).
pub(crate) fn find(dir: &Path) -> Result<Option<StaticLayout>> {
    // Only the keys that name a static model are read here: any other config's own errors are
    // the graph's loader's to report.
    let config: serde_json::Value = read_bounded(&dir.join("config.json"), CONFIG_MAX_BYTES)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let model_type = config.get("model_type").and_then(|t| t.as_str());
    let architectures = config.get("architectures").and_then(|a| a.as_array());
    let named = model_type == Some("model2vec")
        || architectures.is_some_and(|a| a.iter().any(|x| x.as_str() == Some("StaticModel")));
    let listed =
        read_bounded(&dir.join("modules.json"), CONFIG_MAX_BYTES).unwrap_or_default().contains("StaticEmbedding");
    if !named && (!listed || dir.join("model.onnx").is_file()) {
        return Ok(None);
    }
    let layouts = [
        layout(dir, "config.json", ""),
        layout(dir, "config_sentence_transformers.json", ""),
        layout(dir, "config_sentence_transformers.json", "0_StaticEmbedding/"),
    ];
    let whole = layouts.iter().find(|l| [&l.config, &l.table, &l.tokenizer].iter().all(|p| p.is_file()));
    Ok(Some(whole.unwrap_or(&layouts[0]).clone()))
}

fn layout(dir: &Path, config: &str, under: &str) -> StaticLayout {
    StaticLayout {
        config: dir.join(config),
        table: dir.join(format!("{under}model.safetensors")),
        tokenizer: dir.join(format!("{under}tokenizer.json")),
    }
}

fn read_config(dir: &Path, path: &Path) -> Result<StaticConfig> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match read_bounded(path, CONFIG_MAX_BYTES) {
        Ok(text) => from_json(&text).map_err(|e| EmbedError::model(dir, format!("{name}: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StaticConfig::default()),
        Err(e) => Err(EmbedError::model_because(dir, &name, e)),
    }
}

/// Reads the table of `layout` for a tokenizer of `vocab` tokens whose unknown token is
/// `unknown`: widened to float32 and checked (every id has a row, every value finite).
pub(crate) fn read(dir: &Path, layout: &StaticLayout, vocab: usize, unknown: Option<u32>) -> Result<StaticTable> {
    let err = |reason: String| EmbedError::model(dir, reason);
    let file = layout.table.strip_prefix(dir).unwrap_or(&layout.table).display().to_string();
    let size = std::fs::metadata(&layout.table)
        .map_err(|_| err(format!("{file} is missing: a static model's table of token vectors")))?
        .len();
    if size > TABLE_MAX_BYTES {
        return Err(err(format!("{file} is {size} bytes, more than the {TABLE_MAX_BYTES} a static table may be")));
    }
    let bytes = std::fs::read(&layout.table).map_err(|e| EmbedError::model_because(dir, &file, e))?;
    parse_table(&bytes, &file, vocab, unknown).map_err(err)
}

/// The table in `bytes` (the safetensors file named `file` in errors) for a tokenizer of `vocab`
/// tokens: every size checked against the tokenizer, every value finite.
pub(crate) fn parse_table(
    bytes: &[u8],
    file: &str,
    vocab: usize,
    unknown: Option<u32>,
) -> std::result::Result<StaticTable, String> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| format!("{file} is not a readable safetensors file ({e})"))?;
    let Some((name, tensor)) = TABLE_TENSORS.iter().find_map(|n| st.tensor(n).ok().map(|t| (*n, t))) else {
        return Err(format!(
            "{file} has no tensor \"embeddings\" (nor \"embedding.weight\"): it is not a static model's table"
        ));
    };
    let [rows, width] = tensor.shape()[..] else {
        return Err(format!("{file}: {name} has shape {:?}, not [tokens, width]", tensor.shape()));
    };
    if width == 0 || width > MAX_WIDTH || rows == 0 {
        return Err(format!("{file}: {name} has shape [{rows}, {width}]: an empty table"));
    }
    let table = floats(&tensor).map_err(|e| format!("{file}: {name}: {e}"))?;
    let mapping = match st.tensor("mapping") {
        Ok(t) => Some(ids(&t, rows).map_err(|e| format!("{file}: mapping: {e}"))?),
        Err(_) => None,
    };
    let weights = match st.tensor("weights") {
        Ok(t) => Some(floats(&t).map_err(|e| format!("{file}: weights: {e}"))?),
        Err(_) => None,
    };
    // As model2vec's StaticModel: one row per token unless a mapping says which.
    let per_token = [("mapping", mapping.as_ref().map(Vec::len)), ("weights", weights.as_ref().map(Vec::len))];
    for (name, len) in per_token {
        if let Some(len) = len.filter(|&n| n != vocab) {
            return Err(format!("{file}: {name} has {len} entries but the tokenizer has {vocab} tokens"));
        }
    }
    if mapping.is_none() && rows != vocab {
        return Err(format!(
            "{file}: the table has {rows} rows but the tokenizer has {vocab} tokens: is tokenizer.json the model's own?"
        ));
    }
    Ok(StaticTable { rows: table, width, mapping, weights, unknown })
}

/// `parse_table` for the fuzz target: the table's width, or why it is refused.
pub fn check_table(bytes: &[u8], vocab: usize) -> std::result::Result<usize, String> {
    parse_table(bytes, "model.safetensors", vocab, None).map(|t| t.width)
}

/// The folder's facts as every surface reports them.
pub(crate) fn folder(dir: &Path, layout: &StaticLayout, max_length: Option<usize>) -> ModelFolder {
    ModelFolder {
        dir: dir.to_path_buf(),
        model_file: layout.table.clone(),
        tokenizer_file: layout.tokenizer.clone(),
        // model2vec's `"max_length": null` keeps every token.
        max_seq_length: Some(max_length.unwrap_or(MAX_TOKENS)),
        max_position_embeddings: None,
        hidden_size: None,
        vocab_size: None,
        pooling: None,
        modules: None,
        prompts: Prompts::default(),
        tasks: None,
        task_instructions: Default::default(),
        quantization: None,
        kind: KindChoice::embedder("a static model (Model2Vec): a vector per text, the mean of its tokens' rows"),
        family: Some("Model2Vec (static embeddings: a table of token vectors, no ONNX Runtime)".to_owned()),
        decoder: false,
        dense: Vec::new(),
        multi_vector: None,
        sparse_head: None,
        pair_template: None,
        is_static: true,
        vision_file: None,
    }
}

/// A tensor's values as float32, each finite: the float types as a Dense module's are read, and
/// model2vec's int8 tables as they are (it saves no scale).
fn floats(t: &TensorView<'_>) -> std::result::Result<Vec<f32>, String> {
    match t.dtype() {
        Dtype::I8 => Ok(t.data().iter().map(|&b| f32::from(b as i8)).collect()),
        Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64 => float_values(t),
        other => Err(format!("is {other:?}, not float32, float16, bfloat16, float64 or int8")),
    }
}

/// A mapping's row numbers, each below `rows`.
fn ids(t: &TensorView<'_>, rows: usize) -> std::result::Result<Vec<u32>, String> {
    let data = t.data();
    let wide: Vec<i64> = match t.dtype() {
        Dtype::I64 => {
            data.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
        }
        Dtype::I32 => data.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        other => return Err(format!("is {other:?}, not int64 or int32")),
    };
    wide.iter()
        .map(|&r| u32::try_from(r).ok().filter(|&r| (r as usize) < rows).ok_or(r))
        .collect::<std::result::Result<Vec<u32>, i64>>()
        .map_err(|r| format!("names row {r}, but the table has rows 0 to {}", rows - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_table(dir: &Path, tensors: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)>) {
        let views: Vec<(&str, TensorView<'_>)> =
            tensors.iter().map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).expect("view"))).collect();
        std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, None).expect("bytes"))
            .expect("write");
        std::fs::write(dir.join("config.json"), r#"{"model_type": "model2vec", "normalize": true}"#).expect("config");
        std::fs::write(dir.join("tokenizer.json"), "{}").expect("tokenizer");
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_model2vec_folder_is_found_and_read() {
        let t = tempfile::tempdir().expect("tempdir");
        write_table(t.path(), vec![("embeddings", Dtype::F32, vec![3, 2], f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))]);
        let layout = find(t.path()).expect("read").expect("a static folder");
        assert_eq!(read(t.path(), &layout, 3, None).expect("read").width, 2);
        assert_eq!(
            settings(t.path(), &layout).expect("settings"),
            StaticSettings { normalize: true, max_length: Some(512) }
        );
        std::fs::write(t.path().join("config.json"), r#"{"model_type": "model2vec", "max_length": 0}"#)
            .expect("config");
        let e = settings(t.path(), &layout).unwrap_err().to_string();
        assert!(e.contains("max_length is 0: give a number of tokens"), "{e}");
    }

    #[test]
    fn tables_that_do_not_fit_the_tokenizer_are_refused_in_one_line() {
        let t = tempfile::tempdir().expect("tempdir");
        write_table(t.path(), vec![("embeddings", Dtype::F32, vec![3, 2], f32s(&[0.0; 6]))]);
        let layout = find(t.path()).expect("read").expect("static");
        let e = read(t.path(), &layout, 4, None).unwrap_err().to_string();
        assert!(e.contains("the table has 3 rows but the tokenizer has 4 tokens"), "{e}");
        let mapping: Vec<u8> = [0i64, 1, 7, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
        write_table(
            t.path(),
            vec![("embeddings", Dtype::F32, vec![3, 2], f32s(&[0.0; 6])), ("mapping", Dtype::I64, vec![4], mapping)],
        );
        let e = read(t.path(), &layout, 4, None).unwrap_err().to_string();
        assert!(e.contains("mapping: names row 7, but the table has rows 0 to 2"), "{e}");
        write_table(t.path(), vec![("embeddings", Dtype::F32, vec![3, 2], f32s(&[0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0]))]);
        let e = read(t.path(), &layout, 3, None).unwrap_err().to_string();
        assert!(e.contains("embeddings: holds a value that is not finite"), "{e}");
        write_table(t.path(), vec![("vectors", Dtype::F32, vec![3, 2], f32s(&[0.0; 6]))]);
        let e = read(t.path(), &layout, 3, None).unwrap_err().to_string();
        assert!(e.contains("has no tensor \"embeddings\" (nor \"embedding.weight\")"), "{e}");
        std::fs::remove_file(t.path().join("model.safetensors")).expect("remove");
        let e = read(t.path(), &layout, 3, None).unwrap_err().to_string();
        assert!(e.contains("model.safetensors is missing"), "{e}");
        std::fs::write(t.path().join("model.safetensors"), b"\x10\0\0\0\0\0\0\0{not json}").expect("write");
        let layout = find(t.path()).expect("read").expect("static");
        assert!(read(t.path(), &layout, 3, None).unwrap_err().to_string().contains("not a readable safetensors file"));
    }
}
