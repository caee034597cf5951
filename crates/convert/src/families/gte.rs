//! GTE's `NewModel` (gte-*-v1.5, gte-multilingual): fused QKV (`attention.qkv_proj`), rotary
//! positions with static NTK scaling, GeGLU, a classifier whose pooler is optional.

use serde_json::Value;

use super::{Family, Identity, bert};
use crate::ConvertError;
use crate::config::checks::Real;
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::{Attention, Classifier, Gated, Mlp, Names, Qkv};
use crate::config::{FeedForward, Head, Positions, RopeScaling};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("GTE (NewModel: rotary, GeGLU)"),
    model_types: &["new"],
    display: Some("GTE (NewModel)"),
    architectures: &[("NewModel", Head::Encoder), ("NewForSequenceClassification", Head::SequenceClassification)],
    claims: |architecture, _| architecture.starts_with("New"),
    read: |claim| encoder(claim, &ENCODER),
};

const ENCODER: Encoder = Encoder {
    family: "gte",
    names: &Names {
        attention: Attention { qkv: Qkv::Fused("attention.qkv_proj"), out: "attention.o_proj", norm: "attn_ln" },
        mlp: Mlp {
            plain: "mlp.fc1",
            gated: Gated::Fused { weight: "mlp.up_gate_proj", activated_first: None },
            down: "mlp.down_proj",
            norm: "mlp_ln",
        },
        classifier: Classifier::Pooler { pooler: "pooler.dense", out: "classifier", optional: true },
        ..bert::NAMES
    },
    gated_activations: &[],
    pad_token_id: 0,
    type_vocab: 2,
    eps: 1e-12,
    layout,
};

/// Rotary positions with static NTK scaling, GeGLU.
fn layout(sizes: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let (raw, check) = (sizes.raw(), sizes.check());
    if raw.logn_attention_scale == Some(true) {
        return Err(sizes.unsupported("logn_attention_scale true".to_owned()));
    }
    if let Some(kind) = raw.layer_norm_type.as_deref().filter(|k| *k != "layer_norm") {
        return Err(sizes.unsupported(format!("layer_norm_type {kind:?}")));
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
                    return Err(sizes
                        .unsupported(format!("rope_scaling {s} (converted: {{\"type\": \"ntk\", \"factor\": ...}})")));
                }
            }
        }
    };
    let base = sizes.rotary_base("rope_theta", raw.rope_theta)?;
    let activation = sizes.activation;
    let mut layout =
        Layout::new(Positions::Rotary { base, scaling }, FeedForward::Gated { activated_first: false, activation });
    layout.biases.mlp_in = false;
    Ok(layout)
}
