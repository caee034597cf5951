//! NomicBERT (nomic-embed-text v1/v1.5, arctic-embed-m-long): GPT-2's config names, fused QKV
//! (`attn.Wqkv`), rotary positions with its dynamic NTK scaling, SwiGLU (`swiglu` as its
//! activation) or a plain GELU feed-forward, optional biases.

use super::{Family, Identity, bert};
use crate::ConvertError;
use crate::config::checks::{MAX_TOKENS, Real};
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::{Attention, Gated, Mlp, Names, Qkv};
use crate::config::{Activation, Head, Positions, RopeScaling};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("NomicBERT (rotary, SwiGLU)"),
    model_types: &["nomic_bert"],
    display: Some("NomicBERT (v1, v1.5)"),
    architectures: &[("NomicBertModel", Head::Encoder)],
    claims: |architecture, _| architecture.starts_with("NomicBert"),
    read: |claim| encoder(claim, &ENCODER),
};

const ENCODER: Encoder = Encoder {
    family: "nomic-bert",
    names: &Names {
        embeddings_norm: "emb_ln",
        layers: "encoder.layers",
        attention: Attention { qkv: Qkv::Fused("attn.Wqkv"), out: "attn.out_proj", norm: "norm1" },
        mlp: Mlp {
            plain: "mlp.fc1",
            gated: Gated::Split { activated: "mlp.fc12", linear: "mlp.fc11" },
            down: "mlp.fc2",
            norm: "norm2",
        },
        ..bert::NAMES
    },
    // NomicBERT names its gated feed-forward as its activation.
    gated_activations: &[("swiglu", Activation::Silu), ("geglu", Activation::Gelu)],
    pad_token_id: 0,
    type_vocab: 2,
    eps: 1e-12,
    layout,
};

/// Rotary positions with its dynamic NTK scaling, optional biases.
fn layout(sizes: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let (raw, check) = (sizes.raw(), sizes.check());
    let refuse = |what: &str| Err(sizes.unsupported(what.to_owned()));
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
        Some(factor) if sizes.head_dim <= 2 => {
            return Err(check.bad(format!(
                "has rotary_scaling_factor {factor} with heads {} wide (n_embd / n_head): NomicBERT's dynamic \
                 scaling needs heads over 2 wide: fix the config",
                sizes.head_dim
            )));
        }
        Some(factor) => RopeScaling::DynamicNtk {
            factor: check.real("rotary_scaling_factor", factor, Real::Positive)?,
            trained: match raw.max_trained_positions {
                Some(n) => check.count("max_trained_positions", n, 1..=MAX_TOKENS)?,
                None => sizes.max_positions,
            },
        },
        None => RopeScaling::None,
    };
    let base = sizes.rotary_base("rotary_emb_base", raw.rotary_emb_base)?;
    let mut layout = Layout::new(Positions::Rotary { base, scaling }, sizes.feed_forward);
    layout.biases.qkv = raw.qkv_proj_bias.unwrap_or(true);
    layout.biases.attention_out = layout.biases.qkv;
    layout.biases.mlp_in = raw.mlp_fc1_bias.unwrap_or(true);
    layout.biases.mlp_out = raw.mlp_fc2_bias.unwrap_or(true);
    Ok(layout)
}
