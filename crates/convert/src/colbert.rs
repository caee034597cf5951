//! Stanford ColBERT checkpoints (`HF_ColBERT`: BERT under `bert.`, the projection `linear.weight`
//! beside it, the token rules in `artifact.metadata`) written as PyLate folders, as PyLate loads
//! them: the projection as a Dense module (`1_Dense`), the rules in
//! `config_sentence_transformers.json` with PyLate's defaults where the metadata is silent.

use std::path::Path;

use crate::ConvertError;
use crate::config::checks::{Check, MAX_WIDTH};
use crate::text_file::read_text;
use crate::weights::Weights;

/// The projection's tensor in a Stanford checkpoint.
const PROJECTION: &str = "linear.weight";

/// Python's `string.punctuation`: PyLate's skiplist.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// The files a Stanford checkpoint in `dir` adds to its converted folder, by relative path; its
/// lengths within the model's `positions`.
pub(crate) fn stanford_files(
    dir: &Path,
    hidden: usize,
    positions: usize,
    weights: &Weights,
) -> Result<Vec<(String, Vec<u8>)>, ConvertError> {
    let shape = weights.shape(PROJECTION).ok_or_else(|| ConvertError::Weights {
        file: dir.display().to_string(),
        why: format!("an HF_ColBERT checkpoint needs its projection {PROJECTION:?} [dim, hidden], and it has none"),
    })?;
    let [dim, takes] = shape[..] else {
        return Err(ConvertError::Weights {
            file: dir.display().to_string(),
            why: format!("{PROJECTION} has shape {shape:?}, not [dim, hidden]"),
        });
    };
    if dim == 0 || dim > MAX_WIDTH {
        return Err(ConvertError::Weights {
            file: dir.display().to_string(),
            why: format!("{PROJECTION} gives {dim} values per token; a projection gives from 1 to {MAX_WIDTH}"),
        });
    }
    if takes != hidden {
        return Err(ConvertError::Weights {
            file: dir.display().to_string(),
            why: format!("{PROJECTION} takes {takes} features but the model's hidden size is {hidden}"),
        });
    }
    let file = dir.join("artifact.metadata");
    let rules = token_rules(&file.display().to_string(), read_text(&file).ok().as_deref(), positions)?;
    let dense = serde_json::json!({
        "in_features": hidden,
        "out_features": dim,
        "bias": false,
        "activation_function": "torch.nn.modules.linear.Identity",
    });
    let modules = serde_json::json!([
        { "idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer" },
        { "idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense" },
    ]);
    let json = |v: &serde_json::Value, name: &str| {
        crate::text_file::pretty_json(v, std::path::Path::new(name)).map(String::into_bytes)
    };
    Ok(vec![
        ("modules.json".to_owned(), json(&modules, "modules.json")?),
        ("config_sentence_transformers.json".to_owned(), json(&rules, "config_sentence_transformers.json")?),
        ("1_Dense/config.json".to_owned(), json(&dense, "1_Dense/config.json")?),
        ("1_Dense/model.safetensors".to_owned(), weights.some_to_safetensors(vec![PROJECTION])?),
    ])
}

/// PyLate's token rules from Stanford's `artifact.metadata` (`text`; `None`: absent, PyLate's
/// defaults), its lengths within the model's `positions`; `file` names it in errors.
pub(crate) fn token_rules(file: &str, text: Option<&str>, positions: usize) -> Result<serde_json::Value, ConvertError> {
    let metadata: serde_json::Value = match text {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| ConvertError::Weights { file: file.to_owned(), why: format!("is not JSON ({e})") })?,
        None => serde_json::Value::Null,
    };
    let text = |key: &str, default: &str| metadata.get(key).and_then(|v| v.as_str()).unwrap_or(default).to_owned();
    let check = Check { file };
    let length = |key: &str, default: usize| -> Result<usize, ConvertError> {
        Ok(check.json_count(&metadata, "", key, 1..=positions)?.unwrap_or(default))
    };
    let (query_length, document_length) = (length("query_maxlen", 32)?, length("doc_maxlen", 180)?);
    let mut rules = serde_json::json!({
        "query_prefix": text("query_token_id", "[unused0]"),
        "document_prefix": text("doc_token_id", "[unused1]"),
        "query_length": query_length,
        "document_length": document_length,
        "do_query_expansion": true,
        "attend_to_expansion_tokens": metadata.get("attend_to_mask_tokens").and_then(|v| v.as_bool()).unwrap_or(false),
        "skiplist_words": PUNCTUATION.chars().map(String::from).collect::<Vec<_>>(),
        "similarity_fn_name": "MaxSim",
    });
    rules["prompts"] = serde_json::json!({});
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::{Dtype, TensorView};

    /// A checkpoint folder holding only the projection `[dim, hidden]` and `metadata`.
    fn checkpoint(dim: usize, hidden: usize, metadata: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        let data = vec![0u8; dim * hidden * 4];
        let view = TensorView::new(Dtype::F32, vec![dim, hidden], &data).expect("view");
        let bytes = safetensors::serialize(vec![(PROJECTION, view)], None).expect("safetensors");
        std::fs::write(t.path().join("model.safetensors"), bytes).expect("write");
        std::fs::write(t.path().join("artifact.metadata"), metadata).expect("write");
        t
    }

    fn files(t: &tempfile::TempDir, positions: usize) -> Result<Vec<(String, Vec<u8>)>, ConvertError> {
        stanford_files(t.path(), 4, positions, &Weights::open(t.path()).expect("weights"))
    }

    #[test]
    fn the_lengths_are_the_metadatas_within_the_models_positions() {
        let t = checkpoint(2, 4, r#"{"query_maxlen":64,"doc_maxlen":300}"#);
        let written = files(&t, 512).expect("written");
        let (_, rules) = written.iter().find(|(f, _)| f == "config_sentence_transformers.json").expect("rules");
        let rules: serde_json::Value = serde_json::from_slice(rules).expect("JSON");
        assert_eq!((rules["query_length"].as_u64(), rules["document_length"].as_u64()), (Some(64), Some(300)));
        for (metadata, needle) in [
            (r#"{"query_maxlen":1e15}"#, "query_maxlen 1000000000000000, which must be a whole number from 1 to 512"),
            (r#"{"query_maxlen":0}"#, "query_maxlen 0, which must be a whole number from 1 to 512"),
            (r#"{"doc_maxlen":513}"#, "doc_maxlen 513, which must be a whole number from 1 to 512"),
            (r#"{"doc_maxlen":-1}"#, "doc_maxlen -1, which must be a whole number from 1 to 512"),
            (r#"{"doc_maxlen":"180"}"#, "doc_maxlen \"180\", which must be a number"),
        ] {
            let e = files(&checkpoint(2, 4, metadata), 512).expect_err(metadata).to_string();
            assert!(e.contains("artifact.metadata has ") && e.contains(needle) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_projection_zero_values_wide_is_refused() {
        let e = files(&checkpoint(0, 4, "{}"), 512).expect_err("refused").to_string();
        assert!(e.contains("linear.weight gives 0 values per token"), "{e}");
    }
}
