//! An encoder's config (BERT, XLM-RoBERTa, JinaBERT v2, jina-embeddings-v3, NomicBERT, GTE,
//! ModernBERT): the shared sizes, each checked as it is read, then each family's positions,
//! feed-forward and biases, then its head's choices.

use serde_json::Value;

use super::checks::{Check, MAX_LAYERS, MAX_TOKENS, MAX_VOCAB, MAX_WIDTH, Real, first_of};
use super::{
    Activation, Biases, ClassifierPooling, Config, Family, FeedForward, Head, LocalAttention, Lora, Positions, Raw,
    RopeScaling, activation,
};
use crate::ConvertError;

/// What a family decides beyond the shared sizes.
struct Layout {
    feed_forward: FeedForward,
    positions: Positions,
    biases: Biases,
    local: Option<LocalAttention>,
    lora: Option<Lora>,
}

impl Layout {
    /// `positions` with `feed_forward`, every bias and nothing else.
    fn new(positions: Positions, feed_forward: FeedForward) -> Layout {
        let biases =
            Biases { qkv: true, attention_out: true, mlp_in: true, mlp_out: true, norm: true, classifier_dense: true };
        Layout { feed_forward, positions, biases, local: None, lora: None }
    }
}

/// What a family's layout is read with: the config's activation, layers, positions and head width.
struct Shared {
    activation: Activation,
    layers: usize,
    max_positions: usize,
    head_dim: usize,
}

fn unsupported(check: Check<'_>, what: String) -> ConvertError {
    check.bad(format!(
        "has {what}, which nornir does not convert: supported are BERT, XLM-RoBERTa, JinaBERT v2, \
         jina-embeddings-v3, NomicBERT (v1, v1.5), GTE (NewModel) and ModernBERT"
    ))
}

/// An encoder's config, its sizes checked as they are read.
pub(super) fn encoder(
    raw: &Raw,
    architecture: &str,
    family: Family,
    head: Head,
    check: Check<'_>,
) -> Result<Config, ConvertError> {
    let hidden = check.need(first_of(&[("hidden_size", raw.hidden_size), ("n_embd", raw.n_embd)]), 1..=MAX_WIDTH)?;
    let heads = first_of(&[("num_attention_heads", raw.num_attention_heads), ("n_head", raw.n_head)]);
    let heads = check.need(heads, 1..=MAX_WIDTH)?;
    if hidden % heads != 0 {
        return Err(check.bad(format!("has hidden_size {hidden}, not a multiple of num_attention_heads {heads}")));
    }
    let (activation, feed_forward) = activation_and_feed_forward(raw, family, check)?;
    let layers = first_of(&[("num_hidden_layers", raw.num_hidden_layers), ("n_layer", raw.n_layer)]);
    let positions =
        first_of(&[("max_position_embeddings", raw.max_position_embeddings), ("n_positions", raw.n_positions)]);
    let shared = Shared {
        activation,
        layers: check.need(layers, 1..=MAX_LAYERS)?,
        max_positions: check.need(positions, 1..=MAX_TOKENS)?,
        head_dim: hidden / heads,
    };
    let positions_kind = raw.position_embedding_type.as_deref().unwrap_or("absolute");
    let layout = match family {
        Family::Qwen3 | Family::Qwen2 | Family::Llama => {
            return super::decoder::decoder(raw, architecture, family, check);
        }
        Family::Bert | Family::XlmRoberta => {
            if positions_kind != "absolute" {
                return Err(check.bad(format!(
                    "has position_embedding_type {positions_kind:?}; only \"absolute\" is converted for {architecture}"
                )));
            }
            Layout::new(Positions::Absolute, feed_forward)
        }
        Family::JinaBert => jina_bert(raw, check, positions_kind)?,
        Family::JinaXlmRoberta => jina_v3(raw, check, architecture, positions_kind, feed_forward)?,
        Family::NomicBert => nomic(raw, check, &shared, feed_forward)?,
        Family::Gte => gte(raw, check, activation)?,
        Family::ModernBert => modernbert(raw, check, &shared)?,
    };
    if matches!(layout.positions, Positions::Rotary { .. }) && (hidden / heads) % 2 != 0 {
        return Err(check.bad(format!(
            "has an odd head width {} (hidden_size / num_attention_heads): rotary positions need an even one",
            hidden / heads
        )));
    }
    let pad_token_id = raw.pad_token_id.unwrap_or(match family {
        Family::XlmRoberta | Family::JinaXlmRoberta => 1,
        Family::ModernBert => 50283,
        _ => 0,
    });
    if family == Family::XlmRoberta {
        // Positions are counted from the padding index + 1, so the table must have that row.
        check.count("pad_token_id", pad_token_id, 0..=shared.max_positions.saturating_sub(2))?;
    }
    let config = Config {
        architecture: architecture.to_owned(),
        family,
        head,
        hidden,
        layers: shared.layers,
        heads,
        intermediate: check
            .need(first_of(&[("intermediate_size", raw.intermediate_size), ("n_inner", raw.n_inner)]), 1..=MAX_WIDTH)?,
        vocab: check.need(("vocab_size", raw.vocab_size), 1..=MAX_VOCAB)?,
        max_positions: shared.max_positions,
        type_vocab: check.maybe("type_vocab_size", raw.type_vocab_size, 0..=MAX_VOCAB)?.unwrap_or(match family {
            Family::ModernBert => 0,
            _ => 2,
        }),
        eps: 0.0,
        activation,
        feed_forward: layout.feed_forward,
        positions: layout.positions,
        biases: layout.biases,
        local: layout.local,
        lora: layout.lora,
        pad_token_id,
        labels: 0,
        classifier_pooling: ClassifierPooling::First,
        classifier_activation: activation,
        decoder_bias: raw.decoder_bias.unwrap_or(true),
        decoder: None,
    };
    with_head_and_norms(config, raw, check)
}

/// The encoder's activation (`hidden_act`, ModernBERT's `hidden_activation`, NomicBERT's
/// `activation_function`) and the feed-forward it implies before the family decides.
fn activation_and_feed_forward(
    raw: &Raw,
    family: Family,
    check: Check<'_>,
) -> Result<(Activation, FeedForward), ConvertError> {
    let act_name = raw
        .hidden_act
        .as_deref()
        .or(raw.hidden_activation.as_deref())
        .or(raw.activation_function.as_deref())
        .unwrap_or("gelu");
    // NomicBERT names its gated feed-forward as its activation.
    let nomic_glu = match (family, act_name) {
        (Family::NomicBert, "swiglu") => Some(Activation::Silu),
        (Family::NomicBert, "geglu") => Some(Activation::Gelu),
        _ => None,
    };
    let activation = match nomic_glu {
        Some(a) => a,
        None => activation(check, act_name, "hidden_act")?,
    };
    let feed_forward = match nomic_glu {
        Some(activation) => FeedForward::Gated { activated_first: false, activation },
        None => FeedForward::Plain,
    };
    Ok((activation, feed_forward))
}

/// The config with its norms' epsilon and its head's labels, pooling and activation.
fn with_head_and_norms(mut c: Config, raw: &Raw, check: Check<'_>) -> Result<Config, ConvertError> {
    c.labels = match c.head {
        Head::SequenceClassification => check
            .maybe("num_labels", raw.num_labels, 0..=MAX_WIDTH)?
            .or_else(|| raw.id2label.as_ref().map(serde_json::Map::len))
            .filter(|&n| n > 0)
            .unwrap_or(2),
        _ => 0,
    };
    let eps = first_of(&[
        ("layer_norm_eps", raw.layer_norm_eps),
        ("layer_norm_epsilon", raw.layer_norm_epsilon),
        ("norm_eps", raw.norm_eps),
    ]);
    c.eps = match eps {
        (key, Some(eps)) => check.real(key, eps, Real::Epsilon)? as f32,
        (_, None) if c.family == Family::ModernBert => 1e-5,
        (_, None) => 1e-12,
    };
    c.classifier_pooling = match raw.classifier_pooling.as_deref().unwrap_or("cls") {
        "cls" => ClassifierPooling::First,
        "mean" => ClassifierPooling::Mean,
        other => return Err(unsupported(check, format!("classifier_pooling {other:?} (converted: cls, mean)"))),
    };
    if let Some(name) = raw.classifier_activation.as_deref() {
        c.classifier_activation = activation(check, name, "classifier_activation")?;
    }
    Ok(c)
}

/// JinaBERT v2: ALiBi, its gated feed-forward.
fn jina_bert(raw: &Raw, check: Check<'_>, positions_kind: &str) -> Result<Layout, ConvertError> {
    if positions_kind != "alibi" {
        return Err(unsupported(
            check,
            format!("JinaBERT with position_embedding_type {positions_kind:?} (not \"alibi\")"),
        ));
    }
    // v2's GLU activates its first half; the code variant's (`up_gated_layer`) its second, which
    // the network reads from the tensor names.
    let feed_forward = match raw.feed_forward_type.as_deref().unwrap_or("geglu") {
        "geglu" => FeedForward::Gated { activated_first: true, activation: Activation::Gelu },
        "reglu" => FeedForward::Gated { activated_first: true, activation: Activation::Relu },
        other => {
            return Err(unsupported(check, format!("JinaBERT feed_forward_type {other:?} (converted: geglu, reglu)")));
        }
    };
    let mut layout = Layout::new(Positions::Alibi, feed_forward);
    layout.biases.mlp_in = false;
    Ok(layout)
}

/// jina-embeddings-v3: rotary positions, the task adapters.
fn jina_v3(
    raw: &Raw,
    check: Check<'_>,
    architecture: &str,
    positions_kind: &str,
    feed_forward: FeedForward,
) -> Result<Layout, ConvertError> {
    if positions_kind != "rotary" {
        return Err(unsupported(
            check,
            format!(
                "{architecture} with position_embedding_type {positions_kind:?} (jina-embeddings-v3 is \"rotary\")"
            ),
        ));
    }
    let base = rotary_base(check, "rotary_emb_base", raw.rotary_emb_base)?;
    let mut layout = Layout::new(Positions::Rotary { base, scaling: RopeScaling::None }, feed_forward);
    if let Some(tasks) = raw.lora_adaptations.clone().filter(|t| !t.is_empty()) {
        layout.lora = Some(Lora {
            tasks,
            rank: check.need(("lora_rank", raw.lora_rank), 1..=MAX_WIDTH)?,
            alpha: check.real("lora_alpha", raw.lora_alpha.unwrap_or(1.0), Real::Positive)?,
        });
    }
    Ok(layout)
}

/// A rotary base read under `key`, 10000 where the config has none.
fn rotary_base(check: Check<'_>, key: &str, value: Option<f64>) -> Result<f64, ConvertError> {
    check.real(key, value.unwrap_or(10_000.0), Real::AboveOne)
}

/// NomicBERT: rotary positions with its dynamic NTK scaling, optional biases.
fn nomic(raw: &Raw, check: Check<'_>, shared: &Shared, feed_forward: FeedForward) -> Result<Layout, ConvertError> {
    let refuse = |what: &str| Err(unsupported(check, what.to_owned()));
    if raw.num_experts.unwrap_or(0) > 0 || raw.moe_every_n_layers.unwrap_or(0) > 0 {
        return refuse("a mixture of experts (nomic-embed-text v2)");
    }
    if raw.rotary_emb_interleaved == Some(true) {
        return refuse("interleaved rotary positions (rotary_emb_interleaved)");
    }
    if raw.rotary_emb_fraction.is_some_and(|f| (f - 1.0).abs() > f64::EPSILON) {
        return refuse("rotary positions on part of each head (rotary_emb_fraction < 1)");
    }
    if raw.prenorm == Some(true) {
        return refuse("pre-norm NomicBERT layers (prenorm true)");
    }
    // NomicBERT's code scales where the factor is truthy: 0 (or none) is no scaling.
    let scaling = match raw.rotary_scaling_factor.filter(|&f| f != 0.0) {
        // Its base is raised to dim / (dim - 2): a head 2 wide divides by zero.
        Some(factor) if shared.head_dim <= 2 => {
            return Err(check.bad(format!(
                "has rotary_scaling_factor {factor} with heads {} wide (n_embd / n_head): NomicBERT's dynamic \
                 scaling needs heads over 2 wide: fix the config",
                shared.head_dim
            )));
        }
        Some(factor) => RopeScaling::DynamicNtk {
            factor: check.real("rotary_scaling_factor", factor, Real::Positive)?,
            trained: match raw.max_trained_positions {
                Some(n) => check.count("max_trained_positions", n, 1..=MAX_TOKENS)?,
                None => shared.max_positions,
            },
        },
        None => RopeScaling::None,
    };
    let base = rotary_base(check, "rotary_emb_base", raw.rotary_emb_base)?;
    let mut layout = Layout::new(Positions::Rotary { base, scaling }, feed_forward);
    layout.biases.qkv = raw.qkv_proj_bias.unwrap_or(true);
    layout.biases.attention_out = layout.biases.qkv;
    layout.biases.mlp_in = raw.mlp_fc1_bias.unwrap_or(true);
    layout.biases.mlp_out = raw.mlp_fc2_bias.unwrap_or(true);
    Ok(layout)
}

/// GTE's `NewModel`: rotary positions with static NTK scaling, GeGLU.
fn gte(raw: &Raw, check: Check<'_>, activation: Activation) -> Result<Layout, ConvertError> {
    if raw.logn_attention_scale == Some(true) {
        return Err(unsupported(check, "logn_attention_scale true".to_owned()));
    }
    if let Some(kind) = raw.layer_norm_type.as_deref().filter(|k| *k != "layer_norm") {
        return Err(unsupported(check, format!("layer_norm_type {kind:?}")));
    }
    let scaling = match &raw.rope_scaling {
        None | Some(Value::Null) => RopeScaling::None,
        Some(s) => {
            let kind = s.get("type").or_else(|| s.get("rope_type")).and_then(Value::as_str);
            let factor = check.json_number(s, "rope_scaling", "factor")?;
            match (kind, factor) {
                (Some("ntk"), Some(factor)) if s.get("mixed_b").is_none_or(Value::is_null) => {
                    RopeScaling::Ntk { factor: check.real("rope_scaling.factor", factor, Real::Positive)? }
                }
                _ => {
                    return Err(unsupported(
                        check,
                        format!("rope_scaling {s} (converted: {{\"type\": \"ntk\", \"factor\": ...}})"),
                    ));
                }
            }
        }
    };
    let base = rotary_base(check, "rope_theta", raw.rope_theta)?;
    let mut layout =
        Layout::new(Positions::Rotary { base, scaling }, FeedForward::Gated { activated_first: false, activation });
    layout.biases.mlp_in = false;
    Ok(layout)
}

/// ModernBERT: pre-norm, GeGLU, global and local layers with their own rotary bases.
fn modernbert(raw: &Raw, check: Check<'_>, shared: &Shared) -> Result<Layout, ConvertError> {
    let (attention_bias, mlp_bias) = (raw.attention_bias.unwrap_or(false), raw.mlp_bias.unwrap_or(false));
    let biases = Biases {
        qkv: attention_bias,
        attention_out: attention_bias,
        mlp_in: mlp_bias,
        mlp_out: mlp_bias,
        norm: raw.norm_bias.unwrap_or(false),
        classifier_dense: raw.classifier_bias.unwrap_or(false),
    };
    let parameters = raw.rope_parameters.as_ref().filter(|p| !p.is_null());
    let theta = |kind: &str| match parameters.and_then(|p| p.get(kind)) {
        Some(p) => check.json_number(p, &format!("rope_parameters.{kind}"), "rope_theta"),
        None => Ok(None),
    };
    let global = match raw.global_rope_theta {
        Some(base) => ("global_rope_theta", base),
        None => ("rope_parameters.full_attention.rope_theta", theta("full_attention")?.unwrap_or(160_000.0)),
    };
    let global = check.real(global.0, global.1, Real::AboveOne)?;
    let local_base = match raw.local_rope_theta {
        Some(base) => ("local_rope_theta", base),
        None => ("rope_parameters.sliding_attention.rope_theta", theta("sliding_attention")?.unwrap_or(global)),
    };
    let local_base = check.real(local_base.0, local_base.1, Real::AboveOne)?;
    let layers = shared.layers;
    let local_layers: Vec<bool> = match &raw.layer_types {
        Some(types) => {
            if types.len() != layers {
                return Err(check.bad(format!("has {} layer_types for {layers} layers", types.len())));
            }
            let local = |t: &String| match t.as_str() {
                "sliding_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(unsupported(check, format!("layer type {other:?}"))),
            };
            types.iter().map(local).collect::<Result<_, _>>()?
        }
        None => {
            let every = check.maybe("global_attn_every_n_layers", raw.global_attn_every_n_layers, 1..=MAX_LAYERS)?;
            let every = every.unwrap_or(1);
            (0..layers).map(|i| i % every != 0).collect()
        }
    };
    let mut layout = Layout::new(
        Positions::Rotary { base: global, scaling: RopeScaling::None },
        FeedForward::Gated { activated_first: true, activation: shared.activation },
    );
    layout.biases = biases;
    if local_layers.iter().any(|&l| l) {
        layout.local = Some(LocalAttention {
            layers: local_layers,
            window: check.need(("local_attention", raw.local_attention), 1..=shared.max_positions)?,
            base: local_base,
        });
    }
    Ok(layout)
}
