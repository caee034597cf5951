//! An encoder's config, family-neutral: the shared sizes, each checked as it is read, then the
//! family's layout (its positions, feed-forward, biases and norms, read by the family's own
//! function), then its head's choices. A family file gives an [`Encoder`]: its names, its
//! defaults and that function.

use super::checks::{Check, MAX_LAYERS, MAX_TOKENS, MAX_VOCAB, MAX_WIDTH, Real, first_of};
use super::{
    Activation, Biases, Claim, ClassifierPooling, Config, FeedForward, Head, LocalAttention, Lora, Names, Positions,
    Raw, activation,
};
use crate::ConvertError;

/// An encoder family: what it names and defaults, and how it reads its layout.
#[derive(Debug)]
pub(crate) struct Encoder {
    /// As `conversion.json` records it.
    pub(crate) family: &'static str,
    pub(crate) names: &'static Names,
    /// Activation names that stand for a gated feed-forward with that activation (NomicBERT's
    /// `swiglu`, `geglu`).
    pub(crate) gated_activations: &'static [(&'static str, Activation)],
    /// Where the config has no `pad_token_id`, `type_vocab_size`, norm epsilon.
    pub(crate) pad_token_id: i64,
    pub(crate) type_vocab: usize,
    pub(crate) eps: f32,
    /// The family's positions, feed-forward, biases and norms, its refusals.
    pub(crate) layout: fn(&Sizes<'_>) -> Result<Layout, ConvertError>,
}

/// What a family decides beyond the shared sizes.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) feed_forward: FeedForward,
    pub(crate) positions: Positions,
    pub(crate) biases: Biases,
    pub(crate) local: Option<LocalAttention>,
    pub(crate) lora: Option<Lora>,
    /// See [`Config::pre_norm`].
    pub(crate) pre_norm: bool,
    /// See [`Config::qkv_bias_in_attention`].
    pub(crate) qkv_bias_in_attention: bool,
    /// The classifier pools as `classifier_pooling` says (else the first token).
    pub(crate) classifier_pooling: bool,
    /// The masked-LM decoder has a bias (`decoder_bias`).
    pub(crate) decoder_bias: bool,
}

impl Layout {
    /// Post-norm layers with `positions` and `feed_forward`, every bias and nothing else.
    pub(crate) fn new(positions: Positions, feed_forward: FeedForward) -> Layout {
        let biases =
            Biases { qkv: true, attention_out: true, mlp_in: true, mlp_out: true, norm: true, classifier_dense: true };
        Layout {
            feed_forward,
            positions,
            biases,
            local: None,
            lora: None,
            pre_norm: false,
            qkv_bias_in_attention: false,
            classifier_pooling: false,
            decoder_bias: true,
        }
    }
}

/// What a family's layout is read with: the claim, the config's activation (and the feed-forward
/// it implies), layers, positions, head width and `position_embedding_type`.
pub(crate) struct Sizes<'a> {
    pub(crate) claim: Claim<'a>,
    pub(crate) activation: Activation,
    pub(crate) feed_forward: FeedForward,
    pub(crate) layers: usize,
    pub(crate) max_positions: usize,
    pub(crate) head_dim: usize,
    pub(crate) positions_kind: &'a str,
}

impl<'a> Sizes<'a> {
    pub(crate) fn raw(&self) -> &'a Raw {
        self.claim.raw
    }

    pub(crate) fn check(&self) -> Check<'a> {
        self.claim.check
    }

    /// A refusal of what no encoder family converts, naming those that are converted.
    pub(crate) fn unsupported(&self, what: String) -> ConvertError {
        unsupported(self.claim, what)
    }

    /// A rotary base read under `key`, 10000 where the config has none.
    pub(crate) fn rotary_base(&self, key: &str, value: Option<f64>) -> Result<f64, ConvertError> {
        self.check().real(key, value.unwrap_or(10_000.0), Real::AboveOne)
    }
}

fn unsupported(claim: Claim<'_>, what: String) -> ConvertError {
    claim.check.bad(format!("has {what}, which nornir does not convert: supported are {}", claim.encoders))
}

/// An encoder's config, its sizes checked as they are read.
pub(crate) fn encoder(claim: Claim<'_>, family: &Encoder) -> Result<Config, ConvertError> {
    let (raw, check) = (claim.raw, claim.check);
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
    let sizes = Sizes {
        claim,
        activation,
        feed_forward,
        layers: check.need(layers, 1..=MAX_LAYERS)?,
        max_positions: check.need(positions, 1..=MAX_TOKENS)?,
        head_dim: hidden / heads,
        positions_kind: raw.position_embedding_type.as_deref().unwrap_or("absolute"),
    };
    let layout = (family.layout)(&sizes)?;
    if matches!(layout.positions, Positions::Rotary { .. }) && (hidden / heads) % 2 != 0 {
        return Err(check.bad(format!(
            "has an odd head width {} (hidden_size / num_attention_heads): rotary positions need an even one",
            hidden / heads
        )));
    }
    let pad_token_id = raw.pad_token_id.unwrap_or(family.pad_token_id);
    if layout.positions == (Positions::Absolute { from_padding: true }) {
        // Positions are counted from the padding index + 1, so the table must have that row.
        check.count("pad_token_id", pad_token_id, 0..=sizes.max_positions.saturating_sub(2))?;
    }
    let config = Config {
        architecture: claim.architecture.to_owned(),
        family: family.family,
        names: Some(family.names),
        head: claim.head,
        hidden,
        layers: sizes.layers,
        heads,
        intermediate: check
            .need(first_of(&[("intermediate_size", raw.intermediate_size), ("n_inner", raw.n_inner)]), 1..=MAX_WIDTH)?,
        vocab: check.need(("vocab_size", raw.vocab_size), 1..=MAX_VOCAB)?,
        max_positions: sizes.max_positions,
        type_vocab: check.maybe("type_vocab_size", raw.type_vocab_size, 0..=MAX_VOCAB)?.unwrap_or(family.type_vocab),
        eps: 0.0,
        activation,
        feed_forward: layout.feed_forward,
        positions: layout.positions,
        pre_norm: layout.pre_norm,
        qkv_bias_in_attention: layout.qkv_bias_in_attention,
        biases: layout.biases,
        local: layout.local,
        lora: layout.lora,
        pad_token_id,
        labels: 0,
        classifier_pooling: ClassifierPooling::First,
        classifier_activation: activation,
        decoder_bias: layout.decoder_bias,
        decoder: None,
        dual: None,
    };
    with_head_and_norms(config, claim, family.eps, layout.classifier_pooling)
}

/// The encoder's activation (`hidden_act`, ModernBERT's `hidden_activation`, NomicBERT's
/// `activation_function`) and the feed-forward it implies before the family decides.
fn activation_and_feed_forward(
    raw: &Raw,
    family: &Encoder,
    check: Check<'_>,
) -> Result<(Activation, FeedForward), ConvertError> {
    let act_name = raw
        .hidden_act
        .as_deref()
        .or(raw.hidden_activation.as_deref())
        .or(raw.activation_function.as_deref())
        .unwrap_or("gelu");
    let gated = family.gated_activations.iter().find(|(name, _)| *name == act_name).map(|&(_, a)| a);
    let activation = match gated {
        Some(a) => a,
        None => activation(check, act_name, "hidden_act")?,
    };
    let feed_forward = match gated {
        Some(activation) => FeedForward::Gated { activated_first: false, activation },
        None => FeedForward::Plain,
    };
    Ok((activation, feed_forward))
}

/// The config with its norms' epsilon (`eps` where it has none) and its head's labels, pooling
/// (where `pooling` says the family reads it) and activation.
fn with_head_and_norms(mut c: Config, claim: Claim<'_>, eps: f32, pooling: bool) -> Result<Config, ConvertError> {
    let (raw, check) = (claim.raw, claim.check);
    c.labels = match c.head {
        Head::SequenceClassification => check
            .maybe("num_labels", raw.num_labels, 0..=MAX_WIDTH)?
            .or_else(|| raw.id2label.as_ref().map(serde_json::Map::len))
            .filter(|&n| n > 0)
            .unwrap_or(2),
        _ => 0,
    };
    let read_eps = first_of(&[
        ("layer_norm_eps", raw.layer_norm_eps),
        ("layer_norm_epsilon", raw.layer_norm_epsilon),
        ("norm_eps", raw.norm_eps),
    ]);
    c.eps = match read_eps {
        (key, Some(eps)) => check.real(key, eps, Real::Epsilon)? as f32,
        (_, None) => eps,
    };
    let classifier_pooling = match raw.classifier_pooling.as_deref().unwrap_or("cls") {
        "cls" => ClassifierPooling::First,
        "mean" => ClassifierPooling::Mean,
        other => return Err(unsupported(claim, format!("classifier_pooling {other:?} (converted: cls, mean)"))),
    };
    if pooling {
        c.classifier_pooling = classifier_pooling;
    }
    if let Some(name) = raw.classifier_activation.as_deref() {
        c.classifier_activation = activation(check, name, "classifier_activation")?;
    }
    Ok(c)
}
