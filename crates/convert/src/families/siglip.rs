//! SigLIP (`SiglipModel`; SigLIP 2's fixed-resolution checkpoints share its layout), an
//! image-and-text dual encoder: CLIP's pre-norm layers and names with the tanh GELU, no causal
//! mask, the text padded to `max_position_embeddings` and pooled at the last position through a
//! linear head (`text_model.head`, with a bias); the vision tower without a class token (its patch
//! embedding has a bias), pooled by a learned probe attending over the patches
//! (`vision_model.head`). The keys a tower leaves out take `SiglipTextConfig`'s and
//! `SiglipVisionConfig`'s defaults.

use super::clip::{NAMES, TEXT_NAMES, TOWER, VISION_NAMES};
use super::{Family, Identity};
use crate::config::Head;
use crate::config::dual::{DualFamily, Linear, TextPool, VisionHead, read};
use crate::config::encoder::Encoder;

pub(super) const FAMILY: Family = Family {
    identity: Identity::dual("siglip", 64),
    model_types: &["siglip"],
    display: None,
    architectures: &[("SiglipModel", Head::TextTower)],
    claims: |architecture, _| architecture == "SiglipModel",
    read: |claim| read(claim, &SIGLIP),
};

const SIGLIP: DualFamily = DualFamily {
    text: &Encoder { family: "siglip", names: &TEXT_NAMES, eps: 1e-6, pad_token_id: 1, ..TOWER },
    vision: &Encoder { family: "siglip", names: &VISION_NAMES, eps: 1e-6, pad_token_id: 0, ..TOWER },
    text_defaults: r#"{"vocab_size": 32000, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "max_position_embeddings": 64, "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6, "pad_token_id": 1}"#,
    vision_defaults: r#"{"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16,
        "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}"#,
    names: &NAMES,
    text_pool: |_, text| TextPool::LastOfPadded { length: text.max_positions, pad: text.pad_token_id },
    text_projection: Linear { name: "text_model.head", bias: true },
    vision_head: VisionHead::AttentionPool,
    class_token: false,
    dim: |_, text_raw, _| text_raw.projection_size,
};
