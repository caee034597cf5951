//! What `config.json` says about the network, family-neutral: its head, its sizes and the
//! description of its blocks the graph builders read. The families (`families/`) fill it in.

use serde_json::Value;

use crate::ConvertError;

pub(crate) mod checks;
pub(crate) mod decoder;
pub(crate) mod dual;
pub(crate) mod encoder;
pub(crate) mod names;
mod raw;

use checks::Check;
pub(crate) use names::Names;
pub(crate) use raw::Raw;

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
    /// An image-and-text dual encoder's text tower (CLIP, SigLIP): `text_embeds` `[batch, dim]`,
    /// pooled and projected into the space the vision tower's `image_embeds` share.
    TextTower,
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
            Head::TextTower => "text_embeds",
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
    /// `x * sigmoid(1.702 x)` (CLIP's `quick_gelu`).
    QuickGelu,
}

impl Activation {
    const NAMES: &str = "gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu, relu, silu, swish";

    fn parse(name: &str) -> Option<Activation> {
        Some(match name {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "quick_gelu" => Activation::QuickGelu,
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
    /// A learned table of `max_position_embeddings` rows (BERT, XLM-RoBERTa): positions 0, 1,
    /// 2..., or where `from_padding`, counted from the padding index + 1 with padding tokens at the
    /// padding index (XLM-RoBERTa).
    Absolute { from_padding: bool },
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
    /// The task every input takes, written into the graph (jina-clip's text tower and its
    /// `default_lora_task`); `None`: the graph's `task_id` input chooses.
    pub(crate) fixed_task: Option<usize>,
}

/// How ModernBERT's classifier reduces the tokens: the first one or the mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassifierPooling {
    First,
    Mean,
}

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
    /// The family's name, as `conversion.json` records it (`bert`, `xlm-roberta`, ...).
    pub(crate) family: &'static str,
    /// An encoder's tensor names (`None` for a decoder, whose names are its builder's).
    pub(crate) names: Option<&'static Names>,
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
    /// Pre-norm layers (`x + block(norm(x))`, a final norm) rather than post-norm ones
    /// (`norm(x + block(x))`).
    pub(crate) pre_norm: bool,
    /// Separate query, key and value projections whose biases the fused attention operator adds
    /// (BERT, XLM-RoBERTa), rather than each projection adding its own.
    pub(crate) qkv_bias_in_attention: bool,
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
    /// An image-and-text dual encoder's pooling, projections and vision tower (this config is
    /// its text tower's).
    pub(crate) dual: Option<Box<dual::Dual>>,
}

/// The activation `name` (read under `key`).
pub(crate) fn activation(check: Check<'_>, name: &str, key: &str) -> Result<Activation, ConvertError> {
    Activation::parse(name).ok_or_else(|| check.bad(format!("has {key} {name:?}; converted: {}", Activation::NAMES)))
}

/// What a family's reader is given: the config's keys, the architecture it claimed, the head
/// asked for, the file's refusals, and the encoder families' names (for refusals that list them).
#[derive(Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) raw: &'a Raw,
    pub(crate) architecture: &'a str,
    pub(crate) head: Head,
    pub(crate) check: Check<'a>,
    pub(crate) encoders: &'a str,
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
    /// Where `architectures` (not `modules.json`) asked for the masked-LM head and the checkpoint
    /// holds none of it, the encoder: embedders often keep `*ForMaskedLM` in `architectures` and
    /// ship only the encoder's weights (jina-embeddings-v2), which is what transformers' `AutoModel`
    /// and sentence-transformers load from such a folder.
    pub(crate) fn encoder_where_no_head_weights(mut self, st: Option<StModule>, has: impl Fn(&str) -> bool) -> Config {
        let dense = self.names.map_or("cls.predictions.transform.dense", |n| n.masked_lm.dense);
        if st.is_none() && self.head == Head::MaskedLm && !has(&format!("{dense}.weight")) {
            self.head = Head::Encoder;
        }
        self
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
