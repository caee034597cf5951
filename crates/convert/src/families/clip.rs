//! CLIP (`CLIPModel`: OpenAI's CLIP and OpenCLIP models in transformers' layout), an
//! image-and-text dual encoder: two pre-norm towers with `quick_gelu`, the text one causal with
//! absolute positions and pooled at its end-of-text token, the vision one with a class token
//! before its patches and a norm before its layers; each projected without a bias into the shared
//! space (`projection_dim`). The keys a tower leaves out take `CLIPTextConfig`'s and
//! `CLIPVisionConfig`'s defaults. Its layer names are SigLIP's too.

use super::{Family, Identity};
use crate::ConvertError;
use crate::config::dual::{DualFamily, Linear, TextPool, TowerNames, VisionHead, read};
use crate::config::encoder::{Encoder, Layout, Sizes};
use crate::config::names::{Attention, Gated, Mlp, Names, Qkv};
use crate::config::{FeedForward, Head, Positions};

pub(super) const FAMILY: Family = Family {
    identity: Identity::dual("clip", 77),
    model_types: &["clip"],
    display: None,
    architectures: &[("CLIPModel", Head::TextTower)],
    claims: |architecture, _| architecture == "CLIPModel",
    read: |claim| read(claim, &CLIP),
};

const CLIP: DualFamily = DualFamily {
    text: &Encoder { family: "clip", names: &TEXT_NAMES, eps: 1e-5, pad_token_id: 1, ..TOWER },
    vision: &Encoder { family: "clip", names: &VISION_NAMES, eps: 1e-5, pad_token_id: 0, ..TOWER },
    text_defaults: r#"{"vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12,
        "num_attention_heads": 8, "max_position_embeddings": 77, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
        "pad_token_id": 1, "eos_token_id": 49407}"#,
    vision_defaults: r#"{"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32, "hidden_act": "quick_gelu",
        "layer_norm_eps": 1e-5}"#,
    names: &NAMES,
    // modeling_clip: the legacy eos_token_id 2 pools at the highest id (the vocabulary's last
    // token is end-of-text), any other at that id's first position.
    text_pool: |raw, _| match raw.eos_token_id {
        Some(2) => TextPool::HighestId,
        Some(id) => TextPool::FirstOf(id),
        None => TextPool::FirstOf(49407),
    },
    text_projection: Linear { name: "text_projection", bias: false },
    vision_head: VisionHead::ClassToken { projection: Linear { name: "visual_projection", bias: false } },
    class_token: true,
    dim: |top, _, _| Some(top.projection_dim.unwrap_or(512)),
};

/// Where CLIP's and SigLIP's towers keep their tensors.
pub(super) const NAMES: TowerNames = TowerNames {
    text: "text_model.",
    vision: "vision_model.",
    token_embedding: "embeddings.token_embedding",
    position_embedding: "embeddings.position_embedding",
    patch_embedding: "embeddings.patch_embedding",
    class_embedding: "embeddings.class_embedding",
    pre_norm: "pre_layrnorm",
    post_norm: "post_layernorm",
    pool_head: "head",
};

/// A tower's encoder description; each family names its own norms' epsilon and padding.
pub(super) const TOWER: Encoder = Encoder {
    family: "clip",
    names: &TEXT_NAMES,
    gated_activations: &[],
    pad_token_id: 0,
    type_vocab: 0,
    eps: 1e-5,
    layout: tower_layout,
};

/// Pre-norm layers (`x + attention(layer_norm1(x))`, `x + mlp(layer_norm2(x))`), absolute
/// positions, every bias.
pub(super) fn tower_layout(_: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let mut layout = Layout::new(Positions::Absolute { from_padding: false }, FeedForward::Plain);
    layout.pre_norm = true;
    Ok(layout)
}

/// The text tower's layers and final norm (after `text_model.`).
pub(super) const TEXT_NAMES: Names = Names {
    word_embeddings: "embeddings.token_embedding",
    embeddings_norm: "",
    layers: "encoder.layers",
    attention: Attention {
        qkv: Qkv::Separate { query: "self_attn.q_proj", key: "self_attn.k_proj", value: "self_attn.v_proj" },
        out: "self_attn.out_proj",
        norm: "layer_norm1",
    },
    mlp: Mlp {
        plain: "mlp.fc1",
        gated: Gated::Fused { weight: "mlp.fc1", activated_first: None },
        down: "mlp.fc2",
        norm: "layer_norm2",
    },
    qk_norms: None,
    final_norm: Some("final_layer_norm"),
    ..super::bert::NAMES
};

/// The vision tower's layers (after `vision_model.`); its post norm is the pooling's.
pub(super) const VISION_NAMES: Names = Names { final_norm: None, ..TEXT_NAMES };
