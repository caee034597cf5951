//! ModernBERT (transformers' `modeling_modernbert.py`): pre-norm layers and a final norm, GeGLU,
//! global and sliding-window local attention with two rotary bases, biases as the config says, a
//! head (dense, activation, norm) under its masked-LM decoder and its classifier, whose pooling
//! (first token or mean) the config chooses.

use super::{Family, Identity};
use crate::ConvertError;
use crate::config::checks::{MAX_LAYERS, Real};
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::{Attention, Classifier, Gated, HeadActivation, MaskedLm, Mlp, Names, Qkv};
use crate::config::{Biases, FeedForward, Head, LocalAttention, Positions, RopeScaling};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("ModernBERT (rotary, local and global attention)"),
    model_types: &["modernbert"],
    display: Some("ModernBERT"),
    architectures: &[
        ("ModernBertModel", Head::Encoder),
        ("ModernBertForMaskedLM", Head::MaskedLm),
        ("ModernBertForSequenceClassification", Head::SequenceClassification),
    ],
    claims: |architecture, _| architecture.starts_with("ModernBert"),
    read: |claim| encoder(claim, &ENCODER),
};

const ENCODER: Encoder = Encoder {
    family: "modern-bert",
    names: &Names {
        word_embeddings: "embeddings.tok_embeddings",
        embeddings_norm: "embeddings.norm",
        layers: "layers",
        attention: Attention { qkv: Qkv::Fused("attn.Wqkv"), out: "attn.Wo", norm: "attn_norm" },
        mlp: Mlp {
            plain: "mlp.Wi",
            gated: Gated::Fused { weight: "mlp.Wi", activated_first: None },
            down: "mlp.Wo",
            norm: "mlp_norm",
        },
        qk_norms: None,
        final_norm: Some("final_norm"),
        masked_lm: MaskedLm {
            dense: "head.dense",
            activation: HeadActivation::Classifier,
            norm: "head.norm",
            decoder: "decoder",
            biases: &["decoder.bias"],
            tied: "embeddings.tok_embeddings",
        },
        classifier: Classifier::Head { dense: "head.dense", norm: "head.norm", out: "classifier" },
    },
    gated_activations: &[],
    pad_token_id: 50283,
    type_vocab: 0,
    eps: 1e-5,
    layout,
};

/// Pre-norm, GeGLU, global and local layers with their own rotary bases.
fn layout(sizes: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let (raw, check) = (sizes.raw(), sizes.check());
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
    let local_layers = local_layers(sizes)?;
    let mut layout = Layout::new(
        Positions::Rotary { base: global, scaling: RopeScaling::None },
        FeedForward::Gated { activated_first: true, activation: sizes.activation },
    );
    layout.biases = biases;
    layout.pre_norm = true;
    layout.classifier_pooling = true;
    layout.decoder_bias = raw.decoder_bias.unwrap_or(true);
    if local_layers.iter().any(|&l| l) {
        layout.local = Some(LocalAttention {
            layers: local_layers,
            window: check.need(("local_attention", raw.local_attention), 1..=sizes.max_positions)?,
            base: local_base,
        });
    }
    Ok(layout)
}

/// Per layer, whether it attends locally: as `layer_types` says, else every
/// `global_attn_every_n_layers`-th layer is global.
fn local_layers(sizes: &Sizes<'_>) -> Result<Vec<bool>, ConvertError> {
    let (raw, check, layers) = (sizes.raw(), sizes.check(), sizes.layers);
    Ok(match &raw.layer_types {
        Some(types) => {
            if types.len() != layers {
                return Err(check.bad(format!("has {} layer_types for {layers} layers", types.len())));
            }
            let local = |t: &String| match t.as_str() {
                "sliding_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(sizes.unsupported(format!("layer type {other:?}"))),
            };
            types.iter().map(local).collect::<Result<_, _>>()?
        }
        None => {
            let every = check.maybe("global_attn_every_n_layers", raw.global_attn_every_n_layers, 1..=MAX_LAYERS)?;
            let every = every.unwrap_or(1);
            (0..layers).map(|i| i % every != 0).collect()
        }
    })
}
