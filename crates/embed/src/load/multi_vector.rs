//! A late-interaction model's token rules, resolved against its tokenizer when it loads: the
//! marker tokens' ids, the mask token that expands queries, the skiplist's ids and the lengths
//! (PyLate's reading of `config_sentence_transformers.json`); and BGE-M3's two heads.

use std::path::Path;

use crate::error::{EmbedError, Result};
use crate::load::checks::MAX_TOKENS;
use crate::load::dense::load_linear;
use crate::load::files::{CONFIG_MAX_BYTES, read_bounded};
use crate::load::tokenize::ModelTokenizer;
use crate::math::dense::{Activation, DenseLayer};
use crate::values::{ModelFolder, MultiVectorSpec, TokenVectorSource};

/// How one model turns a text into token vectors.
#[derive(Debug, Clone)]
pub(crate) struct TokenRules {
    /// The marker put after the first token of a query, and of a document.
    pub(crate) query_prefix: Option<u32>,
    pub(crate) document_prefix: Option<u32>,
    /// The most tokens of a query and of a document, markers included.
    pub(crate) query_length: usize,
    pub(crate) document_length: usize,
    /// The mask token a query is expanded with to `query_length` (`None`: no expansion).
    pub(crate) expansion: Option<u32>,
    /// Whether the other tokens attend to the expansion tokens.
    pub(crate) attend_expansion: bool,
    /// Token ids whose vectors a document leaves out, ascending.
    pub(crate) skiplist: Vec<u32>,
    /// BGE-M3's `colbert_linear`, applied by the call to every token after the first; `None`:
    /// the Dense modules, which the workers apply to every token (PyLate).
    pub(crate) colbert: Option<DenseLayer>,
    /// MaxSim as the mean over the query's tokens (BGE-M3), not their sum (PyLate).
    pub(crate) mean_score: bool,
}

/// What a model that makes token vectors adds to an embedder: how its texts become token rows,
/// and BGE-M3's sparse head. The kinds' calls read it; the engine, queue and workers never do.
#[derive(Debug, Default)]
pub(crate) struct TokenModel {
    pub(crate) rules: Option<std::sync::Arc<TokenRules>>,
    pub(crate) sparse_head: Option<SparseHead>,
}

/// BGE-M3's `sparse_linear`: a term weight per token, `relu(w · h + b)`, the largest per token id,
/// the special tokens' left out.
#[derive(Debug, Clone)]
pub(crate) struct SparseHead {
    pub(crate) layer: DenseLayer,
    /// The ids of the tokenizer's cls, eos, pad and unk tokens (FlagEmbedding's `unused_tokens`).
    pub(crate) unused: Vec<u32>,
}

/// A special token of the tokenizer (`mask_token`, `cls_token`, ...), as transformers finds it:
/// in `special_tokens_map.json`, else `tokenizer_config.json` (a string, or `{"content": ...}`).
fn special_token(dir: &Path, key: &str) -> Option<String> {
    ["special_tokens_map.json", "tokenizer_config.json"].iter().find_map(|name| {
        let text = read_bounded(&dir.join(name), CONFIG_MAX_BYTES).ok()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        match value.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            v => v.get("content")?.as_str().map(str::to_owned),
        }
    })
}

/// The id of special token `key` in the vocabulary, if the folder names one the vocabulary has.
fn special_id(folder: &ModelFolder, tokenizer: &ModelTokenizer, key: &str) -> Option<u32> {
    special_token(&folder.dir, key).and_then(|t| tokenizer.truncating().token_to_id(&t))
}

/// The special tokens every text gets (`[CLS]` and `[SEP]`: 2 for BERT).
fn special_count(tokenizer: &ModelTokenizer) -> usize {
    tokenizer.truncating().encode("", true).map_or(2, |e| e.len())
}

impl TokenRules {
    /// `spec` resolved against the folder's tokenizer and the model's length `max_length`.
    pub(crate) fn resolve(
        folder: &ModelFolder,
        spec: &MultiVectorSpec,
        tokenizer: &ModelTokenizer,
        hidden: Option<usize>,
    ) -> Result<Self> {
        let err = |reason: String| EmbedError::model(&folder.dir, reason);
        let vocab = tokenizer.truncating();
        let marker = |text: &str, key: &str| -> Result<Option<u32>> {
            if text.is_empty() {
                return Ok(None);
            }
            vocab.token_to_id(text).map(Some).ok_or_else(|| {
                err(format!(
                    "config_sentence_transformers.json's {key} {text:?} is not a token of tokenizer.json; \
                     a ColBERT marker must be one token (PyLate adds it to the tokenizer when it saves the model)"
                ))
            })
        };
        let query_prefix = marker(&spec.query_prefix, "query_prefix")?;
        let document_prefix = marker(&spec.document_prefix, "document_prefix")?;
        // PyLate cuts at its own lengths, whatever sentence_bert_config.json's max_seq_length says;
        // only the positions the model has bound them (else nornir's MAX_TOKENS). Without a
        // length (BGE-M3): the model's.
        let max = folder.max_position_embeddings.unwrap_or(MAX_TOKENS);
        let specials = special_count(tokenizer);
        let length = |asked: Option<usize>, prefix: Option<u32>, key: &str| -> Result<usize> {
            // The model reads no more than its length, whatever the config asks.
            let n = asked.unwrap_or(tokenizer.max_length()).min(max);
            let needed = specials + usize::from(prefix.is_some()) + 1;
            if n < needed {
                return Err(err(format!(
                    "config_sentence_transformers.json's {key} is {n}, shorter than the {needed} tokens a text needs \
                     (its {specials} special tokens, the marker and one of its own): give at least {needed}"
                )));
            }
            Ok(n)
        };
        let query_length = length(spec.query_length, query_prefix, "query_length")?;
        let document_length = length(spec.document_length, document_prefix, "document_length")?;
        let expansion = if spec.do_query_expansion {
            let id = special_id(folder, tokenizer, "mask_token")
                .or_else(|| ["[MASK]", "<mask>"].iter().find_map(|t| vocab.token_to_id(t)))
                .or_else(|| special_id(folder, tokenizer, "eos_token"))
                .ok_or_else(|| {
                    err("do_query_expansion is true but the tokenizer has no mask or eos token to expand queries with; \
                         set do_query_expansion to false in config_sentence_transformers.json"
                        .to_owned())
                })?;
            Some(id)
        } else {
            None
        };
        // PyLate looks each word up as a token; a word the vocabulary lacks becomes the unk id.
        let unk = special_id(folder, tokenizer, "unk_token");
        let mut skiplist: Vec<u32> = spec.skiplist_words.iter().filter_map(|w| vocab.token_to_id(w).or(unk)).collect();
        skiplist.sort_unstable();
        skiplist.dedup();
        let colbert = match &spec.source {
            TokenVectorSource::DenseModules => None,
            TokenVectorSource::ColbertLinear(file) => {
                let hidden = hidden.ok_or_else(|| err(format!("{file} needs config.json's hidden_size")))?;
                Some(load_linear(&folder.dir, file, hidden, Activation::Identity)?)
            }
        };
        let mean_score = colbert.is_some();
        Ok(Self {
            query_prefix,
            document_prefix,
            query_length,
            document_length,
            expansion,
            attend_expansion: spec.attend_to_expansion_tokens,
            skiplist,
            colbert,
            mean_score,
        })
    }
}

impl SparseHead {
    /// BGE-M3's `file` (`sparse_linear.safetensors`), taking vectors `hidden` wide.
    pub(crate) fn load(folder: &ModelFolder, file: &str, tokenizer: &ModelTokenizer, hidden: usize) -> Result<Self> {
        let layer = load_linear(&folder.dir, file, hidden, Activation::Relu)?;
        if layer.out_features != 1 {
            return Err(EmbedError::model(
                &folder.dir,
                format!("{file} gives {} weights per token; a sparse head gives one", layer.out_features),
            ));
        }
        let mut unused: Vec<u32> = ["cls_token", "eos_token", "pad_token", "unk_token"]
            .iter()
            .filter_map(|k| special_id(folder, tokenizer, k))
            .collect();
        unused.sort_unstable();
        unused.dedup();
        Ok(Self { layer, unused })
    }
}
