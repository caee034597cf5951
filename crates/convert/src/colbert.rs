//! Stanford ColBERT checkpoints (`HF_ColBERT`: BERT under `bert.`, the projection `linear.weight`
//! beside it, the token rules in `artifact.metadata`) written as PyLate folders, as PyLate loads
//! them: the projection as a Dense module (`1_Dense`), the rules in
//! `config_sentence_transformers.json` with PyLate's defaults where the metadata is silent.

use std::path::Path;

use crate::ConvertError;
use crate::weights::Weights;

/// The projection's tensor in a Stanford checkpoint.
const PROJECTION: &str = "linear.weight";

/// Python's `string.punctuation`: PyLate's skiplist.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// The files a Stanford checkpoint in `dir` adds to its converted folder, by relative path.
pub(crate) fn stanford_files(
    dir: &Path,
    hidden: usize,
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
    if takes != hidden {
        return Err(ConvertError::Weights {
            file: dir.display().to_string(),
            why: format!("{PROJECTION} takes {takes} features but the model's hidden size is {hidden}"),
        });
    }
    let metadata: serde_json::Value = match std::fs::read_to_string(dir.join("artifact.metadata")) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| ConvertError::Weights {
            file: dir.join("artifact.metadata").display().to_string(),
            why: format!("is not JSON ({e})"),
        })?,
        Err(_) => serde_json::Value::Null,
    };
    let text = |key: &str, default: &str| metadata.get(key).and_then(|v| v.as_str()).unwrap_or(default).to_owned();
    let mut rules = serde_json::json!({
        "query_prefix": text("query_token_id", "[unused0]"),
        "document_prefix": text("doc_token_id", "[unused1]"),
        "query_length": metadata.get("query_maxlen").and_then(|v| v.as_u64()).unwrap_or(32),
        "document_length": metadata.get("doc_maxlen").and_then(|v| v.as_u64()).unwrap_or(180),
        "do_query_expansion": true,
        "attend_to_expansion_tokens": metadata.get("attend_to_mask_tokens").and_then(|v| v.as_bool()).unwrap_or(false),
        "skiplist_words": PUNCTUATION.chars().map(String::from).collect::<Vec<_>>(),
        "similarity_fn_name": "MaxSim",
    });
    rules["prompts"] = serde_json::json!({});
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
    let json = |v: &serde_json::Value| serde_json::to_vec_pretty(v).unwrap_or_default();
    Ok(vec![
        ("modules.json".to_owned(), json(&modules)),
        ("config_sentence_transformers.json".to_owned(), json(&rules)),
        ("1_Dense/config.json".to_owned(), json(&dense)),
        ("1_Dense/model.safetensors".to_owned(), weights.some_to_safetensors(vec![PROJECTION])?),
    ])
}
