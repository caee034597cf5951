//! The model folder in the Hugging Face / sentence-transformers layout, read and checked up front.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{EmbedError, Result};
use crate::pooling::Pooling;

/// Where a model's files are and what its configs say.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ModelFolder {
    pub dir: PathBuf,
    pub model_file: PathBuf,
    pub tokenizer_file: PathBuf,
    /// `sentence_bert_config.json`'s `max_seq_length`.
    pub max_seq_length: Option<usize>,
    /// `config.json`'s `max_position_embeddings`.
    pub max_position_embeddings: Option<usize>,
    /// `config.json`'s `hidden_size`, or the pooling config's `word_embedding_dimension`.
    pub hidden_size: Option<usize>,
    /// `config.json`'s `vocab_size`: the rows of the model's token embedding table.
    pub vocab_size: Option<usize>,
    /// From the pooling module's config, if the folder has one.
    pub pooling: Option<Pooling>,
    /// Whether `modules.json` lists a Normalize module.
    pub declares_normalize: bool,
    /// `quantization.json`, written by `nornir vector quantize`: the model is int8 for that target.
    pub quantization: Option<Quantization>,
}

/// What `quantization.json` says about how the model was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Quantization {
    /// `"nornir int8"`.
    pub format: String,
    /// The hardware the int8 operators are for: `"cpu"`.
    pub target: String,
    pub operator: Option<String>,
}

impl Quantization {
    /// Why this model runs only on the CPU, if it does.
    pub fn cpu_only(&self) -> Option<String> {
        (self.target == "cpu").then(|| {
            "the model is int8 for the CPU (quantization.json); ONNX Runtime's GPU providers have no kernel for \
             its DynamicQuantizeMatMul, so a GPU would hand every such node back to the CPU"
                .to_owned()
        })
    }
}

/// Parses `quantization.json` (other keys are ignored).
pub fn parse_quantization(text: &str) -> Result<Quantization, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// What nornir reads from a Hugging Face `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub struct HfConfig {
    pub max_position_embeddings: Option<usize>,
    pub hidden_size: Option<usize>,
    pub vocab_size: Option<usize>,
}

/// Parses a Hugging Face `config.json` (other keys are ignored).
pub fn parse_hf_config(text: &str) -> Result<HfConfig, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type", default)]
    kind: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PoolingConfig {
    word_embedding_dimension: Option<usize>,
    pooling_mode_cls_token: bool,
    pooling_mode_mean_tokens: bool,
    pooling_mode_max_tokens: bool,
    pooling_mode_mean_sqrt_len_tokens: bool,
    pooling_mode_lasttoken: bool,
}

/// Parses `modules.json`: the pooling module's folder (if any) and whether a Normalize module is listed.
pub fn parse_modules(text: &str) -> Result<(Option<String>, bool), String> {
    let modules: Vec<Module> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let pooling = modules.iter().find(|m| m.kind.ends_with(".Pooling")).map(|m| m.path.clone());
    let normalize = modules.iter().any(|m| m.kind.ends_with(".Normalize"));
    Ok((pooling, normalize))
}

/// Parses a sentence-transformers pooling config into a mode and the embedding dimension.
pub fn parse_pooling_config(text: &str) -> Result<(Pooling, Option<usize>), String> {
    let c: PoolingConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mode = match (c.pooling_mode_mean_tokens, c.pooling_mode_cls_token, c.pooling_mode_lasttoken) {
        (true, false, false) => Pooling::Mean,
        (false, true, false) => Pooling::Cls,
        (false, false, true) => Pooling::Last,
        _ if c.pooling_mode_max_tokens || c.pooling_mode_mean_sqrt_len_tokens => {
            return Err(
                "max and mean-sqrt-len pooling are not supported; override with --pooling mean|cls|last".to_owned()
            );
        }
        _ => {
            return Err(
                "exactly one of mean, cls or last-token pooling must be set; override with --pooling".to_owned()
            );
        }
    };
    Ok((mode, c.word_embedding_dimension))
}

/// Parses `sentence_bert_config.json`'s `max_seq_length`.
pub fn parse_sentence_bert_config(text: &str) -> Result<Option<usize>, String> {
    let c: SentenceBertConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(c.max_seq_length)
}

impl ModelFolder {
    /// Reads and checks the folder. `model_file` overrides the model's file name (relative to `dir`).
    pub fn open(dir: &Path, model_file: Option<&Path>) -> Result<Self> {
        let err = |reason: String| EmbedError::Model { dir: dir.to_path_buf(), reason };
        if !dir.is_dir() {
            return Err(err("no such folder; pass a model folder with model.onnx and tokenizer.json (`cargo xtask fetch` puts the default model in the nornir cache)".to_owned()));
        }
        let model_file = match model_file {
            Some(f) => {
                let p = if f.is_absolute() { f.to_path_buf() } else { dir.join(f) };
                if !p.is_file() {
                    return Err(err(format!("model file {} does not exist", p.display())));
                }
                p
            }
            None => {
                ["model.onnx", "onnx/model.onnx"].iter().map(|n| dir.join(n)).find(|p| p.is_file()).ok_or_else(
                    || err("no model.onnx or onnx/model.onnx; name the file with --model-file".to_owned()),
                )?
            }
        };
        let tokenizer_file = dir.join("tokenizer.json");
        if !tokenizer_file.is_file() {
            return Err(err(
                "no tokenizer.json (export it with the model's tokenizer: tokenizer.save_pretrained)".to_owned()
            ));
        }
        let read_json = |name: &str| -> Result<Option<String>> {
            let p = dir.join(name);
            match std::fs::read_to_string(&p) {
                Ok(t) => Ok(Some(t)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(err(format!("{name}: {e}"))),
            }
        };
        let max_seq_length = match read_json("sentence_bert_config.json")? {
            Some(t) => parse_sentence_bert_config(&t).map_err(|e| err(format!("sentence_bert_config.json: {e}")))?,
            None => None,
        };
        let hf = match read_json("config.json")? {
            Some(t) => parse_hf_config(&t).map_err(|e| err(format!("config.json: {e}")))?,
            None => HfConfig::default(),
        };
        let mut hidden_size = hf.hidden_size;
        let (pooling_dir, declares_normalize) = match read_json("modules.json")? {
            Some(t) => parse_modules(&t).map_err(|e| err(format!("modules.json: {e}")))?,
            None => (None, false),
        };
        let pooling_config = format!("{}/config.json", pooling_dir.as_deref().unwrap_or("1_Pooling"));
        let pooling = match read_json(&pooling_config)? {
            Some(t) => {
                let (mode, dim) = parse_pooling_config(&t).map_err(|e| err(format!("{pooling_config}: {e}")))?;
                hidden_size = hidden_size.or(dim);
                Some(mode)
            }
            None => None,
        };
        let quantization = match read_json("quantization.json")? {
            Some(t) => Some(parse_quantization(&t).map_err(|e| err(format!("quantization.json: {e}")))?),
            None => None,
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            model_file,
            tokenizer_file,
            max_seq_length,
            max_position_embeddings: hf.max_position_embeddings,
            hidden_size,
            vocab_size: hf.vocab_size,
            pooling,
            declares_normalize,
            quantization,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs() {
        let modules = r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#;
        assert_eq!(parse_modules(modules), Ok((Some("1_Pooling".to_owned()), true)));
        assert!(parse_modules("{").is_err());
        let pooling =
            r#"{"word_embedding_dimension":384,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":true}"#;
        assert_eq!(parse_pooling_config(pooling), Ok((Pooling::Mean, Some(384))));
        assert!(parse_pooling_config(r#"{"pooling_mode_max_tokens":true}"#).unwrap_err().contains("not supported"));
        assert!(parse_pooling_config("{}").is_err());
        assert_eq!(parse_sentence_bert_config(r#"{"max_seq_length":256}"#), Ok(Some(256)));
        assert!(parse_sentence_bert_config(r#"{"max_seq_length":-1}"#).is_err());
    }

    #[test]
    fn missing_pieces_are_clear_errors() {
        let t = tempfile::tempdir().expect("tempdir");
        let e = ModelFolder::open(&t.path().join("nope"), None).unwrap_err().to_string();
        assert!(e.contains("no such folder"), "{e}");
        let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
        assert!(e.contains("no model.onnx"), "{e}");
        std::fs::write(t.path().join("model.onnx"), b"x").expect("write");
        let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
        assert!(e.contains("no tokenizer.json"), "{e}");
    }
}
