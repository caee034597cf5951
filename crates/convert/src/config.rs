//! What `config.json` says about the network: its family, its head and its sizes.

use serde::Deserialize;
use serde_json::Value;

use crate::ConvertError;

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

/// The architectures `config.json` may name, with their family and head.
pub const SUPPORTED: [(&str, Family, Head); 16] = [
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
        let raw: Raw = serde_json::from_str(text).map_err(|e| bad(format!("is not a valid config ({e})")))?;
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
        let unsupported = |what: String| {
            bad(format!(
                "has {what}, which nornir does not convert: supported are BERT, XLM-RoBERTa, JinaBERT v2, \
                 jina-embeddings-v3, NomicBERT (v1, v1.5), GTE (NewModel) and ModernBERT"
            ))
        };
        let need = |v: Option<usize>, key: &str| -> Result<usize, ConvertError> {
            v.filter(|&n| n > 0).ok_or_else(|| bad(format!("has no positive `{key}`")))
        };
        let hidden = need(raw.hidden_size.or(raw.n_embd), "hidden_size")?;
        let heads = need(raw.num_attention_heads.or(raw.n_head), "num_attention_heads")?;
        if hidden % heads != 0 {
            return Err(bad(format!("has hidden_size {hidden}, not a multiple of num_attention_heads {heads}")));
        }
        let head_dim = hidden / heads;
        let act_name = raw
            .hidden_act
            .as_deref()
            .or(raw.hidden_activation.as_deref())
            .or(raw.activation_function.as_deref())
            .unwrap_or("gelu");
        let parse_act = |name: &str, key: &str| {
            Activation::parse(name).ok_or_else(|| bad(format!("has {key} {name:?}; converted: {}", Activation::NAMES)))
        };
        // NomicBERT names its gated feed-forward as its activation.
        let nomic_glu = match (family, act_name) {
            (Family::NomicBert, "swiglu") => Some(Activation::Silu),
            (Family::NomicBert, "geglu") => Some(Activation::Gelu),
            _ => None,
        };
        let activation = match nomic_glu {
            Some(a) => a,
            None => parse_act(act_name, "hidden_act")?,
        };
        let mut feed_forward = match nomic_glu {
            Some(activation) => FeedForward::Gated { activated_first: false, activation },
            None => FeedForward::Plain,
        };
        let positions_kind = raw.position_embedding_type.as_deref().unwrap_or("absolute");
        let mut biases =
            Biases { qkv: true, attention_out: true, mlp_in: true, mlp_out: true, norm: true, classifier_dense: true };
        let mut local = None;
        let mut lora = None;
        let max_positions = raw.max_position_embeddings.or(raw.n_positions);
        let positions = match family {
            Family::Bert | Family::XlmRoberta => {
                if positions_kind != "absolute" {
                    return Err(bad(format!(
                        "has position_embedding_type {positions_kind:?}; only \"absolute\" is converted for {architecture}"
                    )));
                }
                Positions::Absolute
            }
            Family::JinaBert => {
                if positions_kind != "alibi" {
                    return Err(unsupported(format!(
                        "JinaBERT with position_embedding_type {positions_kind:?} (not \"alibi\")"
                    )));
                }
                biases.mlp_in = false;
                // v2's GLU activates its first half; the code variant's (`up_gated_layer`) its
                // second, which the network reads from the tensor names.
                feed_forward = match raw.feed_forward_type.as_deref().unwrap_or("geglu") {
                    "geglu" => FeedForward::Gated { activated_first: true, activation: Activation::Gelu },
                    "reglu" => FeedForward::Gated { activated_first: true, activation: Activation::Relu },
                    other => {
                        return Err(unsupported(format!(
                            "JinaBERT feed_forward_type {other:?} (converted: geglu, reglu)"
                        )));
                    }
                };
                Positions::Alibi
            }
            Family::JinaXlmRoberta => {
                if positions_kind != "rotary" {
                    return Err(unsupported(format!(
                        "{architecture} with position_embedding_type {positions_kind:?} (jina-embeddings-v3 is \"rotary\")"
                    )));
                }
                if let Some(tasks) = raw.lora_adaptations.clone().filter(|t| !t.is_empty()) {
                    lora = Some(Lora {
                        tasks,
                        rank: need(raw.lora_rank, "lora_rank")?,
                        alpha: raw.lora_alpha.unwrap_or(1.0),
                    });
                }
                Positions::Rotary { base: raw.rotary_emb_base.unwrap_or(10_000.0), scaling: RopeScaling::None }
            }
            Family::NomicBert => {
                if raw.num_experts.unwrap_or(0) > 0 || raw.moe_every_n_layers.unwrap_or(0) > 0 {
                    return Err(unsupported("a mixture of experts (nomic-embed-text v2)".to_owned()));
                }
                if raw.rotary_emb_interleaved == Some(true) {
                    return Err(unsupported("interleaved rotary positions (rotary_emb_interleaved)".to_owned()));
                }
                if raw.rotary_emb_fraction.is_some_and(|f| (f - 1.0).abs() > f64::EPSILON) {
                    return Err(unsupported(
                        "rotary positions on part of each head (rotary_emb_fraction < 1)".to_owned(),
                    ));
                }
                if raw.prenorm == Some(true) {
                    return Err(unsupported("pre-norm NomicBERT layers (prenorm true)".to_owned()));
                }
                biases.qkv = raw.qkv_proj_bias.unwrap_or(true);
                biases.attention_out = biases.qkv;
                biases.mlp_in = raw.mlp_fc1_bias.unwrap_or(true);
                biases.mlp_out = raw.mlp_fc2_bias.unwrap_or(true);
                let scaling = match raw.rotary_scaling_factor {
                    Some(factor) if factor > 0.0 => RopeScaling::DynamicNtk {
                        factor,
                        trained: raw.max_trained_positions.or(max_positions).unwrap_or(2048),
                    },
                    _ => RopeScaling::None,
                };
                Positions::Rotary { base: raw.rotary_emb_base.unwrap_or(10_000.0), scaling }
            }
            Family::Gte => {
                if raw.logn_attention_scale == Some(true) {
                    return Err(unsupported("logn_attention_scale true".to_owned()));
                }
                if let Some(kind) = raw.layer_norm_type.as_deref().filter(|k| *k != "layer_norm") {
                    return Err(unsupported(format!("layer_norm_type {kind:?}")));
                }
                biases.mlp_in = false;
                feed_forward = FeedForward::Gated { activated_first: false, activation };
                let scaling = match &raw.rope_scaling {
                    None | Some(Value::Null) => RopeScaling::None,
                    Some(s) => {
                        let kind = s.get("type").or_else(|| s.get("rope_type")).and_then(Value::as_str);
                        let factor = s.get("factor").and_then(Value::as_f64);
                        match (kind, factor) {
                            (Some("ntk"), Some(factor)) if s.get("mixed_b").is_none_or(Value::is_null) => {
                                RopeScaling::Ntk { factor }
                            }
                            _ => {
                                return Err(unsupported(format!(
                                    "rope_scaling {s} (converted: {{\"type\": \"ntk\", \"factor\": ...}})"
                                )));
                            }
                        }
                    }
                };
                Positions::Rotary { base: raw.rope_theta.unwrap_or(10_000.0), scaling }
            }
            Family::ModernBert => {
                feed_forward = FeedForward::Gated { activated_first: true, activation };
                let norm_bias = raw.norm_bias.unwrap_or(false);
                let attention_bias = raw.attention_bias.unwrap_or(false);
                let mlp_bias = raw.mlp_bias.unwrap_or(false);
                biases = Biases {
                    qkv: attention_bias,
                    attention_out: attention_bias,
                    mlp_in: mlp_bias,
                    mlp_out: mlp_bias,
                    norm: norm_bias,
                    classifier_dense: raw.classifier_bias.unwrap_or(false),
                };
                let layers = need(raw.num_hidden_layers, "num_hidden_layers")?;
                let theta = |kind: &str| {
                    raw.rope_parameters
                        .as_ref()
                        .and_then(|p| p.get(kind))
                        .and_then(|p| p.get("rope_theta"))
                        .and_then(Value::as_f64)
                };
                let global = raw.global_rope_theta.or_else(|| theta("full_attention")).unwrap_or(160_000.0);
                let local_base = raw.local_rope_theta.or_else(|| theta("sliding_attention")).unwrap_or(global);
                let local_layers: Vec<bool> = match &raw.layer_types {
                    Some(types) => {
                        if types.len() != layers {
                            return Err(bad(format!("has {} layer_types for {layers} layers", types.len())));
                        }
                        types
                            .iter()
                            .map(|t| match t.as_str() {
                                "sliding_attention" => Ok(true),
                                "full_attention" => Ok(false),
                                other => Err(unsupported(format!("layer type {other:?}"))),
                            })
                            .collect::<Result<_, _>>()?
                    }
                    None => {
                        let every = raw.global_attn_every_n_layers.unwrap_or(1).max(1);
                        (0..layers).map(|i| i % every != 0).collect()
                    }
                };
                if local_layers.iter().any(|&l| l) {
                    local = Some(LocalAttention {
                        layers: local_layers,
                        window: need(raw.local_attention, "local_attention")?,
                        base: local_base,
                    });
                }
                Positions::Rotary { base: global, scaling: RopeScaling::None }
            }
        };
        if matches!(positions, Positions::Rotary { .. }) && head_dim % 2 != 0 {
            return Err(bad(format!(
                "has an odd head width {head_dim} (hidden_size / num_attention_heads): rotary positions need an even one"
            )));
        }
        let labels = match head {
            Head::SequenceClassification => raw
                .num_labels
                .or_else(|| raw.id2label.as_ref().map(serde_json::Map::len))
                .filter(|&n| n > 0)
                .unwrap_or(2),
            _ => 0,
        };
        let eps = raw.layer_norm_eps.or(raw.layer_norm_epsilon).or(raw.norm_eps).unwrap_or(match family {
            Family::ModernBert => 1e-5,
            _ => 1e-12,
        });
        let classifier_pooling = match raw.classifier_pooling.as_deref().unwrap_or("cls") {
            "cls" => ClassifierPooling::First,
            "mean" => ClassifierPooling::Mean,
            other => return Err(unsupported(format!("classifier_pooling {other:?} (converted: cls, mean)"))),
        };
        let classifier_activation = match raw.classifier_activation.as_deref() {
            Some(name) => parse_act(name, "classifier_activation")?,
            None => activation,
        };
        Ok(Config {
            architecture: architecture.clone(),
            family,
            head,
            hidden,
            layers: need(raw.num_hidden_layers.or(raw.n_layer), "num_hidden_layers")?,
            heads,
            intermediate: need(raw.intermediate_size.or(raw.n_inner), "intermediate_size")?,
            vocab: need(raw.vocab_size, "vocab_size")?,
            max_positions: need(max_positions, "max_position_embeddings")?,
            type_vocab: raw.type_vocab_size.unwrap_or(match family {
                Family::ModernBert => 0,
                _ => 2,
            }),
            eps: eps as f32,
            activation,
            feed_forward,
            positions,
            biases,
            local,
            lora,
            pad_token_id: raw.pad_token_id.unwrap_or(match family {
                Family::XlmRoberta | Family::JinaXlmRoberta => 1,
                Family::ModernBert => 50283,
                _ => 0,
            }),
            labels,
            classifier_pooling,
            classifier_activation,
            decoder_bias: raw.decoder_bias.unwrap_or(true),
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
             BertForSequenceClassification, XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, \
             JinaBertModel, JinaBertForMaskedLM, XLMRobertaLoRA, NomicBertModel, NewModel, NewForSequenceClassification, \
             ModernBertModel, ModernBertForMaskedLM, ModernBertForSequenceClassification, HF_ColBERT"
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
