//! What `config.json` says about the network: its family, its head and its sizes.

use serde::Deserialize;
use serde_json::Value;

use crate::ConvertError;

/// The encoder's family: where the position ids start and which tensor names it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Family {
    /// BERT and the embedders that share its layout (MiniLM, BGE, e5, GTE v1): positions 0, 1, 2...
    Bert,
    /// XLM-RoBERTa (bge-m3, multilingual-e5, bge-reranker): positions counted from the padding
    /// index + 1, padding tokens at the padding index.
    XlmRoberta,
}

/// What the graph puts on top of the encoder, and so what it outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Head {
    /// None: `last_hidden_state` `[batch, sequence, hidden]`, for an embedder to pool.
    Encoder,
    /// The masked-language-model head: `logits` `[batch, sequence, vocabulary]` (SPLADE).
    MaskedLm,
    /// The classifier on the first token: `logits` `[batch, labels]` (cross-encoders).
    SequenceClassification,
}

impl Head {
    /// The graph's output: `last_hidden_state` for the encoder, `logits` for the heads.
    pub fn output_name(self) -> &'static str {
        match self {
            Head::Encoder => "last_hidden_state",
            Head::MaskedLm | Head::SequenceClassification => "logits",
        }
    }
}

/// The activation of the feed-forward layers (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// `x * 0.5 * (1 + erf(x / sqrt 2))`.
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    Relu,
}

/// The architectures `config.json` may name, with their family and head.
pub const SUPPORTED: [(&str, Family, Head); 6] = [
    ("BertModel", Family::Bert, Head::Encoder),
    ("BertForMaskedLM", Family::Bert, Head::MaskedLm),
    ("BertForSequenceClassification", Family::Bert, Head::SequenceClassification),
    ("XLMRobertaModel", Family::XlmRoberta, Head::Encoder),
    ("XLMRobertaForMaskedLM", Family::XlmRoberta, Head::MaskedLm),
    ("XLMRobertaForSequenceClassification", Family::XlmRoberta, Head::SequenceClassification),
];

/// The sizes and choices the graph is built from.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) architecture: String,
    pub(crate) family: Family,
    pub(crate) head: Head,
    pub(crate) hidden: usize,
    pub(crate) layers: usize,
    pub(crate) heads: usize,
    pub(crate) intermediate: usize,
    pub(crate) vocab: usize,
    pub(crate) max_positions: usize,
    pub(crate) type_vocab: usize,
    pub(crate) eps: f32,
    pub(crate) activation: Activation,
    pub(crate) pad_token_id: i64,
    /// The classifier's outputs (`num_labels`, else the length of `id2label`, else 2 as
    /// transformers defaults); 0 for the other heads.
    pub(crate) labels: usize,
}

#[derive(Deserialize)]
struct Raw {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    intermediate_size: Option<usize>,
    vocab_size: Option<usize>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    hidden_act: Option<String>,
    pad_token_id: Option<i64>,
    position_embedding_type: Option<String>,
    num_labels: Option<usize>,
    id2label: Option<serde_json::Map<String, Value>>,
}

fn supported_names() -> String {
    SUPPORTED.iter().map(|(name, ..)| *name).collect::<Vec<_>>().join(", ")
}

/// What a sentence-transformers folder's `modules.json` says its first module loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StModule {
    /// `models.Transformer`: the base model (transformers' `AutoModel`), whatever head
    /// `architectures` names: sentence-transformers pools the token vectors.
    Transformer,
    /// `MLMTransformer` (a `SparseEncoder`'s): the masked-LM head.
    MlmTransformer,
}

impl StModule {
    /// Reads `modules.json`'s text: the type of its first module, where it is one of the two.
    pub(crate) fn parse(text: &str) -> Option<StModule> {
        let modules: Vec<Value> = serde_json::from_str(text).ok()?;
        let first = modules.iter().min_by_key(|m| m.get("idx").and_then(Value::as_u64).unwrap_or(u64::MAX))?;
        let ty = first.get("type")?.as_str()?;
        if ty.ends_with(".MLMTransformer") {
            Some(StModule::MlmTransformer)
        } else if ty.ends_with("models.Transformer") {
            Some(StModule::Transformer)
        } else {
            None
        }
    }
}

impl Config {
    /// Reads `config.json`'s text (`file` names it in errors). Where `modules.json` names the
    /// first module (`st`), the head is what sentence-transformers loads: the encoder for its
    /// `Transformer` (any BERT or XLM-RoBERTa architecture), the masked-LM head for
    /// `MLMTransformer`; else the head `architectures` names.
    pub(crate) fn parse(text: &str, file: &str, st: Option<StModule>) -> Result<Config, ConvertError> {
        let bad = |why: String| ConvertError::Config { file: file.to_owned(), why };
        let raw: Raw = serde_json::from_str(text).map_err(|e| bad(format!("is not a valid config ({e})")))?;
        let archs = raw.architectures.clone().unwrap_or_default();
        if archs.is_empty() {
            return Err(bad(format!(
                "has no `architectures` (model_type {:?}): add the architecture, one of {}",
                raw.model_type.as_deref().unwrap_or("missing"),
                supported_names()
            )));
        }
        let named = archs.iter().find_map(|a| SUPPORTED.iter().find(|(n, ..)| n == a).copied());
        // sentence-transformers loads the base model of any head of these families.
        let family_of = |a: &String| {
            if a.starts_with("XLMRoberta") {
                Some(Family::XlmRoberta)
            } else if a.starts_with("Bert") {
                Some(Family::Bert)
            } else {
                None
            }
        };
        let found = match (st, named) {
            (Some(StModule::Transformer), _) => archs.iter().find_map(|a| family_of(a).map(|f| (a, f, Head::Encoder))),
            (Some(StModule::MlmTransformer), _) => {
                archs.iter().find_map(|a| family_of(a).map(|f| (a, f, Head::MaskedLm)))
            }
            (None, Some((name, family, head))) => archs.iter().find(|a| *a == name).map(|a| (a, family, head)),
            (None, None) => None,
        };
        let Some((architecture, family, head)) = found else {
            return Err(ConvertError::Unsupported { architecture: archs.join(", "), supported: supported_names() });
        };
        if let Some(kind) = raw.position_embedding_type.as_deref().filter(|k| *k != "absolute") {
            return Err(bad(format!("has position_embedding_type {kind:?}; only \"absolute\" is converted")));
        }
        let need = |v: Option<usize>, key: &str| -> Result<usize, ConvertError> {
            v.filter(|&n| n > 0).ok_or_else(|| bad(format!("has no positive `{key}`")))
        };
        let hidden = need(raw.hidden_size, "hidden_size")?;
        let heads = need(raw.num_attention_heads, "num_attention_heads")?;
        if hidden % heads != 0 {
            return Err(bad(format!("has hidden_size {hidden}, not a multiple of num_attention_heads {heads}")));
        }
        let activation = match raw.hidden_act.as_deref().unwrap_or("gelu") {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => {
                return Err(bad(format!(
                    "has hidden_act {other:?}; converted: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu"
                )));
            }
        };
        let labels = match head {
            Head::SequenceClassification => raw
                .num_labels
                .or_else(|| raw.id2label.as_ref().map(serde_json::Map::len))
                .filter(|&n| n > 0)
                .unwrap_or(2),
            _ => 0,
        };
        Ok(Config {
            architecture: architecture.clone(),
            family,
            head,
            hidden,
            layers: need(raw.num_hidden_layers, "num_hidden_layers")?,
            heads,
            intermediate: need(raw.intermediate_size, "intermediate_size")?,
            vocab: need(raw.vocab_size, "vocab_size")?,
            max_positions: need(raw.max_position_embeddings, "max_position_embeddings")?,
            type_vocab: raw.type_vocab_size.unwrap_or(2),
            eps: raw.layer_norm_eps.unwrap_or(1e-12) as f32,
            activation,
            pad_token_id: raw.pad_token_id.unwrap_or(match family {
                Family::Bert => 0,
                Family::XlmRoberta => 1,
            }),
            labels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_and_family_come_from_the_architecture() {
        let c = Config::parse(
            r#"{"architectures":["XLMRobertaForSequenceClassification"],"hidden_size":8,"num_hidden_layers":1,
            "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20,
            "id2label":{"0":"a","1":"b","2":"c"}}"#,
            "config.json",
            None,
        )
        .expect("parses");
        assert_eq!(
            (c.family, c.head, c.labels, c.pad_token_id),
            (Family::XlmRoberta, Head::SequenceClassification, 3, 1)
        );
    }

    #[test]
    fn an_unknown_or_missing_architecture_is_named() {
        let e = Config::parse(r#"{"architectures":["GPT2LMHeadModel"]}"#, "m/config.json", None).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "cannot convert architecture GPT2LMHeadModel: supported are BertModel, BertForMaskedLM, \
             BertForSequenceClassification, XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification"
        );
        let e = Config::parse(r#"{"model_type":"bert"}"#, "m/config.json", None).expect_err("refused");
        assert!(e.to_string().starts_with("m/config.json has no `architectures` (model_type \"bert\")"), "{e}");
    }

    #[test]
    fn a_sentence_transformers_folder_decides_the_head_as_sentence_transformers_does() {
        let config = |arch: &str| {
            format!(
                r#"{{"architectures":["{arch}"],"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
                "intermediate_size":16,"vocab_size":10,"max_position_embeddings":20}}"#
            )
        };
        let transformer = StModule::parse(
            r#"[{"idx":1,"type":"sentence_transformers.models.Pooling"},{"idx":0,"type":"sentence_transformers.models.Transformer"}]"#,
        );
        assert_eq!(transformer, Some(StModule::Transformer));
        // A fine-tuned embedder whose config still names its pre-training head is an encoder.
        for arch in ["BertForMaskedLM", "BertForPreTraining", "BertModel"] {
            let c = Config::parse(&config(arch), "config.json", transformer).expect("parses");
            assert_eq!((c.head, c.architecture.as_str()), (Head::Encoder, arch));
        }
        let mlm = StModule::parse(r#"[{"idx":0,"type":"sentence_transformers.sparse_encoder.models.MLMTransformer"}]"#);
        let c = Config::parse(&config("BertForMaskedLM"), "config.json", mlm).expect("parses");
        assert_eq!(c.head, Head::MaskedLm);
        let c = Config::parse(&config("BertForPreTraining"), "config.json", None);
        assert!(c.is_err(), "without modules.json only the listed architectures convert");
    }
}
