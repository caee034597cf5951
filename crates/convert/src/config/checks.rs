//! Every number of `config.json` checked where it is read: a count in its range, a real number
//! finite and in its range, a key of the wrong kind named. A refusal is one line naming the
//! file, the key, the value, the range and what the key is.

use std::fmt::Display;
use std::ops::RangeInclusive;

use serde_json::Value;

use crate::ConvertError;

/// The most layers a config may ask for (the largest published models have under 200).
pub(crate) const MAX_LAYERS: usize = 1_000;
/// The most tokens a length may name (positions, windows): nornir's bound on a model's positions.
pub(crate) const MAX_TOKENS: usize = 1_048_576;
/// The widest a width or a count of heads or labels may be (the widest published models are
/// under 60,000).
pub(crate) const MAX_WIDTH: usize = 1 << 20;
/// The largest vocabulary (the largest published ones are near 260,000 tokens).
pub(crate) const MAX_VOCAB: usize = 1 << 24;

/// What a real number must be.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Real {
    /// Above 0 and finite (scaling factors, LoRA's alpha).
    Positive,
    /// Above 1 and finite: a rotary base (at 1 or below, the frequencies do not fall with the
    /// dimension and positions are no longer told apart).
    AboveOne,
    /// A norm's epsilon: from 1e-38 (float32's smallest normal number; the graph computes in
    /// float32) to 1.
    Epsilon,
}

impl Real {
    fn holds(self, v: f64) -> bool {
        match self {
            Real::Positive => v.is_finite() && v > 0.0,
            Real::AboveOne => v.is_finite() && v > 1.0,
            Real::Epsilon => (1e-38..=1.0).contains(&v),
        }
    }

    fn words(self) -> &'static str {
        match self {
            Real::Positive => "a positive, finite number",
            Real::AboveOne => "a finite number above 1",
            Real::Epsilon => "a number from 1e-38 to 1",
        }
    }
}

/// What a key is, in words, with a usual value.
fn about(key: &str) -> &'static str {
    match key.rsplit('.').next().unwrap_or(key) {
        "hidden_size" | "n_embd" => "the width of the token vectors; BERT-base has 768",
        "intermediate_size" | "n_inner" => "the feed-forward width; BERT-base has 3072",
        "vocab_size" => "the embedding table's rows; BERT has 30522",
        "num_hidden_layers" | "n_layer" => "the layers; BERT-base has 12",
        "num_attention_heads" | "n_head" => "the attention heads, which divide hidden_size; BERT-base has 12",
        "num_key_value_heads" => "the key and value heads, which divide num_attention_heads; Qwen3-0.6B has 8",
        "head_dim" => "one attention head's width; Qwen3 uses 128",
        "max_position_embeddings" | "n_positions" => "the positions the model places; BERT has 512",
        "original_max_position_embeddings" => "the positions the model was trained on; Llama 3.1 has 8192",
        "max_trained_positions" => "the positions NomicBERT was trained on; it has 2048",
        "type_vocab_size" => "the token types; BERT has 2",
        "num_labels" => "the classifier's outputs",
        "pad_token_id" => "the padding token, where XLM-RoBERTa counts its positions from; it has 1",
        "lora_rank" => "the rank of the task adapters; jina-embeddings-v3 has 4",
        "lora_alpha" => "the adapters' scale; jina-embeddings-v3 has 1",
        "query_maxlen" => "the most tokens of a query; ColBERT v2 uses 32",
        "doc_maxlen" => "the most tokens of a document; ColBERT v2 uses 180",
        "local_attention" => "the local layers' window; ModernBERT has 128",
        "sliding_window" => "the attention window; Mistral-7B v0.1 has 4096",
        "global_attn_every_n_layers" => "every how many layers one is global; ModernBERT has 3",
        "rope_theta" | "rotary_emb_base" | "global_rope_theta" | "local_rope_theta" => {
            "the rotary base; Qwen3 uses 1000000"
        }
        "factor" | "rotary_scaling_factor" => "how much the rotary positions are stretched; Llama 3.1 uses 8",
        "low_freq_factor" => "Llama 3's low-frequency factor; Llama 3.1 uses 1",
        "high_freq_factor" => "Llama 3's high-frequency factor, above low_freq_factor; Llama 3.1 uses 4",
        "layer_norm_eps" | "layer_norm_epsilon" | "norm_eps" | "rms_norm_eps" => {
            "the norms' epsilon; 1e-12 to 1e-5 are usual"
        }
        _ => "",
    }
}

/// `(what the key is)`, or nothing for a key without words.
fn about_in_parentheses(key: &str) -> String {
    match about(key) {
        "" => String::new(),
        words => format!(" ({words})"),
    }
}

/// The first of `keys` that is set, else the first key unset: a value and the name it was read
/// under (NomicBERT's `n_embd` for BERT's `hidden_size`).
pub(crate) fn first_of<'k, T: Copy>(keys: &[(&'k str, Option<T>)]) -> (&'k str, Option<T>) {
    keys.iter().find(|(_, v)| v.is_some()).or(keys.first()).copied().unwrap_or(("", None))
}

/// The refusals of one `config.json` (`file`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check<'f> {
    pub(crate) file: &'f str,
}

impl Check<'_> {
    /// A refusal: `file` then `why`, as every config error reads.
    pub(crate) fn bad(&self, why: String) -> ConvertError {
        ConvertError::Config { file: self.file.to_owned(), why }
    }

    fn out_of_range(&self, key: &str, value: impl Display, range: impl Display) -> ConvertError {
        self.bad(format!("has {key} {value}, which must be {range}{}: fix the config", about_in_parentheses(key)))
    }

    /// `value` of `key`, in `range`.
    pub(crate) fn count<T>(&self, key: &str, value: T, range: RangeInclusive<usize>) -> Result<usize, ConvertError>
    where
        T: TryInto<usize> + Display + Copy,
    {
        match value.try_into() {
            Ok(v) if range.contains(&v) => return Ok(v),
            _ => {}
        }
        Err(self.out_of_range(key, value, format!("a whole number from {} to {}", range.start(), range.end())))
    }

    /// `value` of `key`, which the config must set, in `range`.
    pub(crate) fn need(
        &self,
        (key, value): (&str, Option<usize>),
        range: RangeInclusive<usize>,
    ) -> Result<usize, ConvertError> {
        match value {
            Some(v) => self.count(key, v, range),
            None => Err(self.bad(format!("has no `{key}`{}: add it to the config", about_in_parentheses(key)))),
        }
    }

    /// `value` of `key`, where the config sets it, in `range`.
    pub(crate) fn maybe(
        &self,
        key: &str,
        value: Option<usize>,
        range: RangeInclusive<usize>,
    ) -> Result<Option<usize>, ConvertError> {
        value.map(|v| self.count(key, v, range)).transpose()
    }

    /// `value` of `key`, a real number as `rule` says.
    pub(crate) fn real(&self, key: &str, value: f64, rule: Real) -> Result<f64, ConvertError> {
        if rule.holds(value) { Ok(value) } else { Err(self.out_of_range(key, shown(value), rule.words())) }
    }

    /// The number at `key` of the JSON object `object` (named `path` in the config, e.g.
    /// `rope_scaling`; empty for the top), `None` where absent or null; anything but a number is
    /// refused.
    pub(crate) fn json_number(&self, object: &Value, path: &str, key: &str) -> Result<Option<f64>, ConvertError> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                self.bad(format!(
                    "has {} {v}, which must be a number{}: fix the config",
                    joined(path, key),
                    about_in_parentheses(key)
                ))
            }),
        }
    }

    /// A whole number at `key` of `object` (named `path`), in `range`; absent or null: `None`.
    pub(crate) fn json_count(
        &self,
        object: &Value,
        path: &str,
        key: &str,
        range: RangeInclusive<usize>,
    ) -> Result<Option<usize>, ConvertError> {
        let full = joined(path, key);
        match self.json_number(object, path, key)? {
            None => Ok(None),
            Some(v) if v.fract() == 0.0 && v >= 0.0 && v <= *range.end() as f64 => {
                self.count(&full, v as usize, range).map(Some)
            }
            Some(v) => Err(self.out_of_range(
                &full,
                shown(v),
                format!("a whole number from {} to {}", range.start(), range.end()),
            )),
        }
    }

    /// Why `text` did not read as a config (`e`, serde's error): the key holding a value of the
    /// wrong kind (a negative or fractional count, a string for a number) or a number JSON cannot
    /// hold (1e400), named with its value where it can be found.
    pub(crate) fn not_valid<T: serde::de::DeserializeOwned>(&self, text: &str, e: &serde_json::Error) -> ConvertError {
        if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) {
            let wrong = map.into_iter().find_map(|(key, value)| {
                let alone = Value::Object(std::iter::once((key.clone(), value.clone())).collect());
                serde_json::from_value::<T>(alone).err().map(|e| (key, value, e))
            });
            if let Some((key, value, why)) = wrong {
                let about = match about(&key) {
                    "" => String::new(),
                    words => format!("; {key} is {words}"),
                };
                let why = why.to_string().replace("expected usize", "expected a whole number").replace("f64", "number");
                return self.bad(format!("has {key} {value}, not a value of its kind ({why}{about}): fix the config"));
            }
        }
        if let Some((key, value)) = key_at(text, e.line(), e.column()) {
            return self.bad(format!("has {key} {value}, which does not read as a number ({e}): fix the config"));
        }
        self.bad(format!("is not a valid config ({e})"))
    }
}

/// `key` inside `path` (`rope_scaling.factor`), or `key` alone at the top (`path` empty).
fn joined(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// `v` as a person reads it: 0, 10000, 0.5, and 1e-6 or 1e300 rather than their digits.
fn shown(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e16).contains(&v.abs()) { format!("{v:e}") } else { format!("{v}") }
}

/// The key and the value text before `line`:`column` of `text` (where serde stopped): the last
/// `"key":` and what follows it, when only a number's characters do.
fn key_at(text: &str, line: usize, column: usize) -> Option<(String, String)> {
    let start: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    let end = text.get(start..)?.char_indices().nth(column).map_or(text.len(), |(i, _)| start + i);
    let before = text.get(..end)?;
    let colon = before.rfind(':')?;
    let value = before[colon + 1..].trim();
    let numeric = |c: char| c.is_ascii_digit() || "+-.eE".contains(c);
    if value.is_empty() || !value.chars().all(numeric) {
        return None;
    }
    let quoted = before[..colon].trim_end().strip_suffix('"')?;
    let key = &quoted[quoted.rfind('"')? + 1..];
    Some((key.to_owned(), value.to_owned()))
}
