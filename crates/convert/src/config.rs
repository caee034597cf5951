//! What `config.json` says about the network: its family, its head and its sizes.

use serde_json::Value;

use crate::ConvertError;

pub(crate) mod checks;
mod decoder;
#[cfg(test)]
mod decoder_tests;
mod encoder;
#[cfg(test)]
mod hostile_tests;
mod raw;
#[cfg(test)]
mod tests;

use checks::Check;
use raw::Raw;

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
