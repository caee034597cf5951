//! What `config.json` says about the network: its family, its head and its sizes.

use serde::Deserialize;
use serde_json::Value;

use crate::ConvertError;

pub(crate) mod checks;
mod decoder;
mod encoder;
#[cfg(test)]
mod hostile_tests;

use checks::Check;

/// The encoder's family: its layer layout, its positions and the tensor names it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Family {
    /// BERT and the embedders that share its layout (MiniLM, BGE, e5, GTE v1): positions 0, 1, 2...
    Bert,
    /// XLM-RoBERTa (bge-m3, multilingual-e5, bge-reranker): positions counted from the padding
    /// index + 1, padding tokens at the padding index.
    XlmRoberta,
    /// JinaBERT v2 (jina-embeddings-v2-*): BERT with ALiBi instead of a position table and a
    /// gated GELU (or ReLU) feed-forward; the code variant adds query and key norms.
    JinaBert,
    /// jina-embeddings-v3: XLM-RoBERTa with rotary positions, fused QKV and task LoRA adapters
    /// chosen by a `task_id` input.
    JinaXlmRoberta,
    /// NomicBERT (nomic-embed-text v1/v1.5, arctic-embed-m-long): fused QKV, rotary (with its
    /// dynamic NTK scaling), SwiGLU.
    NomicBert,
    /// GTE's `NewModel` (gte-*-v1.5, gte-multilingual): fused QKV, rotary with NTK scaling, GeGLU.
    Gte,
    /// ModernBERT: pre-norm, GeGLU, global and sliding-window local attention with two rotary bases.
    ModernBert,
    /// Qwen3 decoders (Qwen3-Embedding, Qwen3-Reranker): RMSNorm, grouped-query causal attention
    /// with a per-head RMSNorm on queries and keys, rotary positions, SwiGLU.
    Qwen3,
    /// Qwen2 decoders (gte-Qwen2-instruct): as Qwen3 without the query and key norms, with
    /// biases on the query, key and value projections.
    Qwen2,
    /// Llama and Mistral decoders (e5-mistral-7b-instruct): as Qwen2 without the biases
    /// (`attention_bias`, `mlp_bias` where the config sets them), Mistral's sliding window.
    Llama,
}

impl Family {
    /// A causal decoder (Qwen3, Qwen2, Llama, Mistral), written without a KV cache.
    pub fn is_decoder(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Qwen2 | Family::Llama)
    }
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
    /// The classifier on the first token (or the mean, as ModernBERT's config says): `logits`
    /// `[batch, labels]` (cross-encoders).
    SequenceClassification,
    /// A decoder asked "yes or no" (Qwen3-Reranker): `logits` `[batch, 1]`, the difference of the
    /// language-model head's "yes" and "no" logits at each row's last attended token, so its
    /// sigmoid is the softmax of the two logits' "yes" entry.
    YesNo,
}

impl Head {
    /// The graph's output: `last_hidden_state` for the encoder, `logits` for the heads.
    pub fn output_name(self) -> &'static str {
        match self {
            Head::Encoder => "last_hidden_state",
            Head::MaskedLm | Head::SequenceClassification | Head::YesNo => "logits",
        }
    }
}

/// An activation function, as `hidden_act` (and its family's synonyms) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// `x * 0.5 * (1 + erf(x / sqrt 2))`.
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    Relu,
    /// `x * sigmoid(x)` (`silu`, `swish`).
    Silu,
}

impl Activation {
    const NAMES: &str = "gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish";

    fn parse(name: &str) -> Option<Activation> {
        Some(match name {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            _ => return None,
        })
    }
}

/// The feed-forward block: `out(act(in(x)))` with `hidden_act`, or gated:
/// `out(activation(gate(x)) * up(x))` with both projections in one weight, the activated half
/// first or second as the family stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FeedForward {
    Plain,
    Gated { activated_first: bool, activation: Activation },
}

/// How a rotary family's frequencies are scaled for long inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RopeScaling {
    None,
    /// GTE's static NTK: the base times `factor`, every frequency divided by `factor^(2/dim)`.
    Ntk {
        factor: f64,
    },
    /// NomicBERT's dynamic NTK: where the (padded) batch is longer than `trained` tokens, the base
    /// becomes `base * (factor * length / trained - (factor - 1))^(dim / (dim - 2))`.
    DynamicNtk {
        factor: f64,
        trained: usize,
    },
    /// transformers' `linear`: every frequency divided by `factor`.
    Linear {
        factor: f64,
    },
    /// transformers' `llama3` (Llama 3.1): wavelengths longer than `original / low` divided by
    /// `factor`, shorter than `original / high` kept, the ones between interpolated.
    Llama3 {
        factor: f64,
        low: f64,
        high: f64,
        original: f64,
    },
}

/// How the encoder knows where a token is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Positions {
    /// A learned table of `max_position_embeddings` rows (BERT, XLM-RoBERTa).
    Absolute,
    /// ALiBi: attention biased by `-slope * |i - j|`, one slope per head.
    Alibi,
    /// Rotary positions on queries and keys (non-interleaved halves).
    Rotary { base: f64, scaling: RopeScaling },
}

/// ModernBERT's local layers: attention within `window / 2` tokens each side, their own base.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LocalAttention {
    /// Per layer: whether it attends locally.
    pub(crate) layers: Vec<bool>,
    pub(crate) window: usize,
    pub(crate) base: f64,
}

/// Which linear layers and norms carry a bias (ModernBERT and NomicBERT leave some out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Biases {
    pub(crate) qkv: bool,
    pub(crate) attention_out: bool,
    pub(crate) mlp_in: bool,
    pub(crate) mlp_out: bool,
    pub(crate) norm: bool,
    pub(crate) classifier_dense: bool,
}

/// jina-embeddings-v3's task adapters: `lora_adaptations` in `task_id` order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lora {
    pub(crate) tasks: Vec<String>,
    pub(crate) rank: usize,
    pub(crate) alpha: f64,
}

/// How ModernBERT's classifier reduces the tokens: the first one or the mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassifierPooling {
    First,
    Mean,
}

/// The architectures `config.json` may name, with their family and head (a decoder's head is the
/// encoder's output unless the conversion asks for the yes/no reranker).
pub const SUPPORTED: [(&str, Family, Head); 24] = [
    ("BertModel", Family::Bert, Head::Encoder),
    ("BertForMaskedLM", Family::Bert, Head::MaskedLm),
    ("BertForSequenceClassification", Family::Bert, Head::SequenceClassification),
    ("XLMRobertaModel", Family::XlmRoberta, Head::Encoder),
    ("XLMRobertaForMaskedLM", Family::XlmRoberta, Head::MaskedLm),
    ("XLMRobertaForSequenceClassification", Family::XlmRoberta, Head::SequenceClassification),
    ("JinaBertModel", Family::JinaBert, Head::Encoder),
    ("JinaBertForMaskedLM", Family::JinaBert, Head::MaskedLm),
    ("XLMRobertaLoRA", Family::JinaXlmRoberta, Head::Encoder),
    ("NomicBertModel", Family::NomicBert, Head::Encoder),
    ("NewModel", Family::Gte, Head::Encoder),
    ("NewForSequenceClassification", Family::Gte, Head::SequenceClassification),
    ("ModernBertModel", Family::ModernBert, Head::Encoder),
    ("ModernBertForMaskedLM", Family::ModernBert, Head::MaskedLm),
    ("ModernBertForSequenceClassification", Family::ModernBert, Head::SequenceClassification),
    // Stanford ColBERT's checkpoints: BERT under `bert.`, the projection beside it (colbert.rs).
    ("HF_ColBERT", Family::Bert, Head::Encoder),
    ("Qwen3Model", Family::Qwen3, Head::Encoder),
    ("Qwen3ForCausalLM", Family::Qwen3, Head::Encoder),
    ("Qwen2Model", Family::Qwen2, Head::Encoder),
    ("Qwen2ForCausalLM", Family::Qwen2, Head::Encoder),
    ("LlamaModel", Family::Llama, Head::Encoder),
    ("LlamaForCausalLM", Family::Llama, Head::Encoder),
    ("MistralModel", Family::Llama, Head::Encoder),
    ("MistralForCausalLM", Family::Llama, Head::Encoder),
];

/// What a decoder adds to the shared sizes: its attention's heads and widths, norms, biases and
/// positions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decoder {
    /// Key and value heads (`num_key_value_heads`), each shared by `heads / kv_heads` query heads.
    pub(crate) kv_heads: usize,
    /// One head's width (`head_dim`, else `hidden_size / num_attention_heads`).
    pub(crate) head_dim: usize,
    /// Qwen3's RMSNorm over each query and key head.
    pub(crate) qk_norm: bool,
    /// Mistral's window: a query attends to the `window` tokens up to itself.
    pub(crate) sliding_window: Option<usize>,
    /// The language-model head is the embedding table (`tie_word_embeddings`).
    pub(crate) tied: bool,
    /// The reranker's "yes" and "no" token ids (with [`Head::YesNo`]).
    pub(crate) yes_no: Option<(usize, usize)>,
}

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
    /// The position table's rows (absolute positions), else the longest input the model takes.
    pub(crate) max_positions: usize,
    pub(crate) type_vocab: usize,
    pub(crate) eps: f32,
    pub(crate) activation: Activation,
    pub(crate) feed_forward: FeedForward,
    pub(crate) positions: Positions,
    pub(crate) biases: Biases,
    pub(crate) local: Option<LocalAttention>,
    pub(crate) lora: Option<Lora>,
    pub(crate) pad_token_id: i64,
    /// The classifier's outputs (`num_labels`, else the length of `id2label`, else 2 as
    /// transformers defaults); 0 for the other heads.
    pub(crate) labels: usize,
    /// ModernBERT's head: its pooling, activation (`classifier_activation`), and whether the
    /// masked-LM decoder has a bias.
    pub(crate) classifier_pooling: ClassifierPooling,
    pub(crate) classifier_activation: Activation,
    pub(crate) decoder_bias: bool,
    /// The decoder families' own choices.
    pub(crate) decoder: Option<Decoder>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
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
    // JinaBERT v2.
    feed_forward_type: Option<String>,
    // jina-embeddings-v3.
    rotary_emb_base: Option<f64>,
    lora_adaptations: Option<Vec<String>>,
    lora_rank: Option<usize>,
    lora_alpha: Option<f64>,
    // NomicBERT's names (GPT-2's).
    n_embd: Option<usize>,
    n_head: Option<usize>,
    n_layer: Option<usize>,
    n_inner: Option<usize>,
    n_positions: Option<usize>,
    layer_norm_epsilon: Option<f64>,
    activation_function: Option<String>,
    rotary_emb_fraction: Option<f64>,
    rotary_emb_interleaved: Option<bool>,
    rotary_scaling_factor: Option<f64>,
    max_trained_positions: Option<usize>,
    qkv_proj_bias: Option<bool>,
    mlp_fc1_bias: Option<bool>,
    mlp_fc2_bias: Option<bool>,
    prenorm: Option<bool>,
    num_experts: Option<usize>,
    moe_every_n_layers: Option<usize>,
    // GTE.
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    logn_attention_scale: Option<bool>,
    layer_norm_type: Option<String>,
    // ModernBERT.
    norm_eps: Option<f64>,
    norm_bias: Option<bool>,
    hidden_activation: Option<String>,
    global_rope_theta: Option<f64>,
    local_rope_theta: Option<f64>,
    global_attn_every_n_layers: Option<usize>,
    local_attention: Option<usize>,
    layer_types: Option<Vec<String>>,
    rope_parameters: Option<Value>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    classifier_pooling: Option<String>,
    classifier_activation: Option<String>,
    classifier_bias: Option<bool>,
    decoder_bias: Option<bool>,
    // Decoders (Qwen3, Qwen2, Llama, Mistral).
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    use_sliding_window: Option<bool>,
    sliding_window: Option<usize>,
    tie_word_embeddings: Option<bool>,
}

fn supported_names() -> String {
    SUPPORTED.iter().map(|(name, ..)| *name).collect::<Vec<_>>().join(", ")
}

/// The activation `name` (read under `key`).
fn activation(check: Check<'_>, name: &str, key: &str) -> Result<Activation, ConvertError> {
    Activation::parse(name).ok_or_else(|| check.bad(format!("has {key} {name:?}; converted: {}", Activation::NAMES)))
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

/// The family an architecture's name belongs to, whatever its head (sentence-transformers loads
/// the base model of any of them); `raw` tells rotary XLM-RoBERTa and ALiBi BERT apart.
fn family_of(architecture: &str, raw: &Raw) -> Option<Family> {
    let positions = raw.position_embedding_type.as_deref();
    Some(
        if architecture.starts_with("XLMRobertaLoRA")
            || architecture.starts_with("XLMRoberta") && positions == Some("rotary")
        {
            Family::JinaXlmRoberta
        } else if architecture.starts_with("XLMRoberta") {
            Family::XlmRoberta
        } else if architecture.starts_with("JinaBert") || architecture.starts_with("Bert") && positions == Some("alibi")
        {
            Family::JinaBert
        } else if architecture.starts_with("Bert") || architecture == "HF_ColBERT" {
            Family::Bert
        } else if architecture.starts_with("NomicBert") {
            Family::NomicBert
        } else if architecture.starts_with("New") {
            Family::Gte
        } else if architecture.starts_with("ModernBert") {
            Family::ModernBert
        } else if architecture.starts_with("Qwen3") && !architecture.starts_with("Qwen3Moe") {
            Family::Qwen3
        } else if architecture.starts_with("Qwen2")
            && !["Qwen2Moe", "Qwen2VL", "Qwen2Audio", "Qwen2_5"].iter().any(|p| architecture.starts_with(p))
        {
            Family::Qwen2
        } else if architecture.starts_with("Llama") || architecture.starts_with("Mistral") {
            Family::Llama
        } else {
            return None;
        },
    )
}

/// The head an architecture's name asks for, in a family that has it.
fn head_of(architecture: &str) -> Option<Head> {
    SUPPORTED.iter().find(|(n, ..)| *n == architecture).map(|&(_, _, head)| head)
}

impl Config {
    /// Where `architectures` (not `modules.json`) asked for the masked-LM head and the checkpoint
    /// holds none of it, the encoder: embedders often keep `*ForMaskedLM` in `architectures` and
    /// ship only the encoder's weights (jina-embeddings-v2), which is what transformers' `AutoModel`
    /// and sentence-transformers load from such a folder.
    pub(crate) fn encoder_where_no_head_weights(mut self, st: Option<StModule>, has: impl Fn(&str) -> bool) -> Config {
        let head_weight = match self.family {
            Family::XlmRoberta => "lm_head.dense.weight",
            Family::ModernBert => "head.dense.weight",
            _ => "cls.predictions.transform.dense.weight",
        };
        if st.is_none() && self.head == Head::MaskedLm && !has(head_weight) {
            self.head = Head::Encoder;
        }
        self
    }

    /// Reads `config.json`'s text (`file` names it in errors). Where `modules.json` names the
    /// first module (`st`), the head is what sentence-transformers loads: the encoder for its
    /// `Transformer` (any architecture of a supported family), the masked-LM head for
    /// `MLMTransformer`; else the head `architectures` names.
    pub(crate) fn parse(text: &str, file: &str, st: Option<StModule>) -> Result<Config, ConvertError> {
        let bad = |why: String| ConvertError::Config { file: file.to_owned(), why };
        let raw: Raw = serde_json::from_str(text).map_err(|e| Check { file }.not_valid::<Raw>(text, &e))?;
        let archs = raw.architectures.clone().unwrap_or_default();
        if archs.is_empty() {
            return Err(bad(format!(
                "has no `architectures` (model_type {:?}): add the architecture, one of {}",
                raw.model_type.as_deref().unwrap_or("missing"),
                supported_names()
            )));
        }
        let found = archs.iter().find_map(|a| {
            let family = family_of(a, &raw)?;
            let head = match st {
                Some(StModule::Transformer) => Head::Encoder,
                Some(StModule::MlmTransformer) => Head::MaskedLm,
                // XLM-RoBERTa's and BERT's names with another family's positions keep their head.
                None => head_of(a)?,
            };
            Some((a, family, head))
        });
        let Some((architecture, family, head)) = found else {
            return Err(ConvertError::Unsupported { architecture: archs.join(", "), supported: supported_names() });
        };
        let check = Check { file };
        if family.is_decoder() {
            return decoder::decoder(&raw, architecture, family, check);
        }
        encoder::encoder(&raw, architecture, family, head, check)
    }

    /// A decoder's config with the yes/no head for the tokens `yes` and `no`: what a reranker
    /// converts to.
    pub(crate) fn into_reranker(mut self, yes: usize, no: usize) -> Config {
        if let Some(d) = &mut self.decoder {
            d.yes_no = Some((yes, no));
            self.head = Head::YesNo;
            self.labels = 1;
        }
        self
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
             BertForSequenceClassification, XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, \
             JinaBertModel, JinaBertForMaskedLM, XLMRobertaLoRA, NomicBertModel, NewModel, NewForSequenceClassification, \
             ModernBertModel, ModernBertForMaskedLM, ModernBertForSequenceClassification, HF_ColBERT, Qwen3Model, \
             Qwen3ForCausalLM, Qwen2Model, Qwen2ForCausalLM, LlamaModel, LlamaForCausalLM, MistralModel, MistralForCausalLM"
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

#[cfg(test)]
mod decoder_tests {
    use super::*;

    fn parse(arch: &str, extra: &str) -> Result<Config, ConvertError> {
        let text = format!(
            r#"{{"architectures":["{arch}"],"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
            "intermediate_size":96,"vocab_size":300,"rms_norm_eps":1e-6{extra}}}"#
        );
        Config::parse(&text, "m/config.json", None)
    }

    #[test]
    fn decoder_families_read_their_heads_norms_and_biases() {
        let c = parse("Qwen3ForCausalLM", r#","num_key_value_heads":2,"head_dim":32"#).expect("qwen3");
        let d = c.decoder.clone().expect("decoder");
        assert_eq!((c.family, c.head, d.kv_heads, d.head_dim, d.qk_norm), (Family::Qwen3, Head::Encoder, 2, 32, true));
        assert!(!c.biases.qkv && !c.biases.attention_out);
        // Qwen3Config's head_dim default is 128, not hidden / heads.
        assert_eq!(parse("Qwen3Model", "").expect("qwen3").decoder.expect("decoder").head_dim, 128);
        let c = parse("Qwen2ForCausalLM", "").expect("qwen2");
        let d = c.decoder.clone().expect("decoder");
        assert_eq!((c.family, d.kv_heads, d.head_dim, d.qk_norm), (Family::Qwen2, 4, 16, false));
        assert!(c.biases.qkv && !c.biases.attention_out, "Qwen2: q, k, v biases, none on o_proj");
        let c = parse("MistralModel", r#","sliding_window":4096"#).expect("mistral");
        assert_eq!((c.family, c.decoder.expect("decoder").sliding_window), (Family::Llama, Some(4096)));
        let c = parse("LlamaForCausalLM", r#","sliding_window":4096,"attention_bias":true"#).expect("llama");
        assert_eq!(c.decoder.expect("decoder").sliding_window, None, "Llama has no window");
        assert!(c.biases.qkv && c.biases.attention_out);
        let c = parse("LlamaModel", r#","rope_theta":500000.0,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}"#).expect("llama3");
        assert_eq!(
            c.positions,
            Positions::Rotary {
                base: 500_000.0,
                scaling: RopeScaling::Llama3 { factor: 8.0, low: 1.0, high: 4.0, original: 8192.0 }
            }
        );
    }

    #[test]
    fn what_a_decoder_conversion_does_not_implement_is_refused_in_one_line() {
        let refused = |arch: &str, extra: &str| parse(arch, extra).expect_err("refused").to_string();
        let e = refused("Qwen3ForCausalLM", r#","num_key_value_heads":3"#);
        assert!(
            e.starts_with("m/config.json has num_attention_heads 4, not a multiple of num_key_value_heads 3"),
            "{e}"
        );
        let e = refused("Qwen2Model", r#","use_sliding_window":true"#);
        assert!(e.contains("use_sliding_window true"), "{e}");
        let e = refused("LlamaModel", r#","rope_scaling":{"rope_type":"yarn","factor":4.0}"#);
        assert!(e.contains("rope_scaling type \"yarn\" (converted: default, linear, llama3)"), "{e}");
        let e = refused("Qwen3MoeForCausalLM", "");
        assert!(e.starts_with("cannot convert architecture Qwen3MoeForCausalLM"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(parse("Qwen3ForCausalLM", r#","rope_scaling":null,"use_sliding_window":false"#).is_ok());
    }
}
