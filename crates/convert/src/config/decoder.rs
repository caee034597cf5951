//! A decoder's config, family-neutral, read under transformers' keys and checked as it is read;
//! what this converter does not write (sliding windows where the family has none, rope scalings
//! other than linear and llama3) is refused by name. A family file gives a [`DecoderFamily`]: the
//! few choices the decoder families differ in.

use serde_json::Value;

use super::checks::{Check, MAX_LAYERS, MAX_TOKENS, MAX_VOCAB, MAX_WIDTH, Real};
use super::{
    Biases, Claim, ClassifierPooling, Config, Decoder, FeedForward, Head, Positions, Raw, RopeScaling, activation,
};
use crate::ConvertError;

/// What a decoder family decides: its defaults and which optional parts it has.
#[derive(Debug)]
pub(crate) struct DecoderFamily {
    /// As `conversion.json` records it.
    pub(crate) family: &'static str,
    /// The head width where the config has no `head_dim` (else `hidden_size / num_attention_heads`).
    pub(crate) head_dim: Option<usize>,
    /// The query, key and value projections always have biases (else as `attention_bias` says).
    pub(crate) qkv_bias: bool,
    /// RMSNorm over each query and key head.
    pub(crate) qk_norm: bool,
    pub(crate) sliding_window: Window,
}

/// Whether a decoder attends within a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Window {
    /// As `sliding_window` says (Mistral).
    Read,
    /// Never; the config's window keys are not read.
    Ignored,
    /// Never; `use_sliding_window: true` is refused.
    Refused,
}

/// A decoder's config, its sizes checked as they are read.
pub(crate) fn decoder(claim: Claim<'_>, family: &DecoderFamily) -> Result<Config, ConvertError> {
    let (raw, architecture, check) = (claim.raw, claim.architecture, claim.check);
    let unsupported = |what: String| {
        check.bad(format!(
            "has {what}, which nornir does not convert for {architecture}: remove it from config.json if the model \
             was not trained with it, or convert the model with another tool"
        ))
    };
    let hidden = check.need(("hidden_size", raw.hidden_size), 1..=MAX_WIDTH)?;
    let heads = check.need(("num_attention_heads", raw.num_attention_heads), 1..=MAX_WIDTH)?;
    let kv_heads = check.maybe("num_key_value_heads", raw.num_key_value_heads, 1..=heads)?.unwrap_or(heads);
    if heads % kv_heads != 0 {
        return Err(check.bad(format!(
            "has num_attention_heads {heads}, not a multiple of num_key_value_heads {kv_heads}: the config is damaged"
        )));
    }
    let head_dim = match (raw.head_dim, family.head_dim) {
        (Some(d), _) => check.count("head_dim", d, 1..=MAX_WIDTH)?,
        (None, Some(d)) => d,
        (None, None) if hidden % heads == 0 => hidden / heads,
        (None, None) => {
            return Err(check.bad(format!(
                "has hidden_size {hidden}, not a multiple of num_attention_heads {heads}, and no head_dim"
            )));
        }
    };
    if head_dim % 2 != 0 {
        return Err(check.bad(format!("has head_dim {head_dim}: rotary positions need an even, positive one")));
    }
    let activation = activation(check, raw.hidden_act.as_deref().unwrap_or("silu"), "hidden_act")?;
    let max_positions = check.maybe("max_position_embeddings", raw.max_position_embeddings, 1..=MAX_TOKENS)?;
    let sliding_window = match family.sliding_window {
        Window::Read => check.maybe("sliding_window", raw.sliding_window, 1..=max_positions.unwrap_or(MAX_TOKENS))?,
        Window::Ignored => None,
        Window::Refused if raw.use_sliding_window == Some(true) => {
            return Err(unsupported("use_sliding_window true (sliding-window attention on Qwen layers)".to_owned()));
        }
        Window::Refused => None,
    };
    let (base, scaling) = rope(raw, check, unsupported)?;
    let attention_bias = raw.attention_bias.unwrap_or(false);
    let biases = Biases {
        qkv: family.qkv_bias || attention_bias,
        attention_out: attention_bias,
        mlp_in: raw.mlp_bias.unwrap_or(false),
        mlp_out: raw.mlp_bias.unwrap_or(false),
        norm: false,
        classifier_dense: false,
    };
    Ok(Config {
        architecture: architecture.to_owned(),
        family: family.family,
        names: None,
        head: Head::Encoder,
        hidden,
        layers: check.need(("num_hidden_layers", raw.num_hidden_layers), 1..=MAX_LAYERS)?,
        heads,
        intermediate: check.need(("intermediate_size", raw.intermediate_size), 1..=MAX_WIDTH)?,
        vocab: check.need(("vocab_size", raw.vocab_size), 1..=MAX_VOCAB)?,
        max_positions: max_positions.unwrap_or(0),
        type_vocab: 0,
        eps: check.real("rms_norm_eps", raw.rms_norm_eps.unwrap_or(1e-6), Real::Epsilon)? as f32,
        activation,
        feed_forward: FeedForward::Gated { activated_first: true, activation },
        positions: Positions::Rotary { base, scaling },
        pre_norm: true,
        qkv_bias_in_attention: false,
        biases,
        local: None,
        lora: None,
        pad_token_id: raw.pad_token_id.unwrap_or(0),
        labels: 0,
        classifier_pooling: ClassifierPooling::First,
        classifier_activation: activation,
        decoder_bias: false,
        decoder: Some(Decoder {
            kv_heads,
            head_dim,
            qk_norm: family.qk_norm,
            sliding_window,
            tied: raw.tie_word_embeddings.unwrap_or(false),
            yes_no: None,
        }),
        dual: None,
    })
}

/// A decoder's rotary base and scaling: `rope_theta` and `rope_scaling`, or transformers 5's
/// `rope_parameters`, each number checked; what it does not implement, named by `unsupported`.
fn rope(
    raw: &Raw,
    check: Check<'_>,
    unsupported: impl Fn(String) -> ConvertError,
) -> Result<(f64, RopeScaling), ConvertError> {
    let parameters = raw.rope_parameters.as_ref().filter(|p| !p.is_null());
    let base = match (raw.rope_theta, parameters) {
        (Some(base), _) => ("rope_theta", base),
        (None, Some(p)) => {
            ("rope_parameters.rope_theta", check.json_number(p, "rope_parameters", "rope_theta")?.unwrap_or(10_000.0))
        }
        (None, None) => ("rope_theta", 10_000.0),
    };
    let base = check.real(base.0, base.1, Real::AboveOne)?;
    let (path, s) = match (raw.rope_scaling.as_ref().filter(|s| !s.is_null()), parameters) {
        (Some(s), _) => ("rope_scaling", s),
        (None, Some(p)) => ("rope_parameters", p),
        (None, None) => return Ok((base, RopeScaling::None)),
    };
    let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("default");
    let number = |key: &str| -> Result<f64, ConvertError> {
        let value = check.json_number(s, path, key)?.ok_or_else(|| unsupported(format!("{path} {s} without {key}")))?;
        check.real(&format!("{path}.{key}"), value, Real::Positive)
    };
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: number("factor")? },
        "llama3" => {
            let (low, high) = (number("low_freq_factor")?, number("high_freq_factor")?);
            if high <= low {
                return Err(check.bad(format!(
                    "has {path}.high_freq_factor {high} not above its low_freq_factor {low}: Llama 3's scaling \
                     interpolates between them (Llama 3.1 uses 1 and 4): fix the config"
                )));
            }
            let key = "original_max_position_embeddings";
            let original = check
                .json_count(s, path, key, 1..=MAX_TOKENS)?
                .ok_or_else(|| unsupported(format!("{path} {s} without {key}")))?;
            RopeScaling::Llama3 { factor: number("factor")?, low, high, original: original as f64 }
        }
        other => return Err(unsupported(format!("rope_scaling type {other:?} (converted: default, linear, llama3)"))),
    };
    Ok((base, scaling))
}
