//! jina-embeddings-v3 (`XLMRobertaLoRA`, or XLM-RoBERTa with `position_embedding_type: rotary`):
//! XLM-RoBERTa with rotary positions, fused QKV (`mixer.Wqkv`) and task LoRA adapters chosen by a
//! `task_id` input.

use super::{Family, Identity, bert};
use crate::ConvertError;
use crate::config::checks::{MAX_WIDTH, Real};
use crate::config::encoder::{Encoder, Layout, Sizes, encoder};
use crate::config::names::{Attention, Gated, Mlp, Names, Qkv};
use crate::config::{Head, Lora, Positions, RopeScaling};

pub(super) const FAMILY: Family = Family {
    identity: Identity::encoder("jina-embeddings-v3 (XLM-RoBERTa, rotary, task LoRA)"),
    model_types: &[],
    display: Some("jina-embeddings-v3"),
    architectures: &[("XLMRobertaLoRA", Head::Encoder)],
    claims: |architecture, raw| {
        architecture.starts_with("XLMRobertaLoRA")
            || architecture.starts_with("XLMRoberta") && raw.position_embedding_type.as_deref() == Some("rotary")
    },
    read: |claim| encoder(claim, &ENCODER),
};

pub(super) const ENCODER: Encoder = Encoder {
    family: "jina-xlm-roberta",
    names: &Names {
        embeddings_norm: "emb_ln",
        layers: "encoder.layers",
        attention: Attention { qkv: Qkv::Fused("mixer.Wqkv"), out: "mixer.out_proj", norm: "norm1" },
        mlp: Mlp {
            plain: "mlp.fc1",
            gated: Gated::Fused { weight: "mlp.fc1", activated_first: None },
            down: "mlp.fc2",
            norm: "norm2",
        },
        ..bert::NAMES
    },
    gated_activations: &[],
    pad_token_id: 1,
    type_vocab: 2,
    eps: 1e-12,
    layout,
};

/// Rotary positions, the task adapters.
fn layout(sizes: &Sizes<'_>) -> Result<Layout, ConvertError> {
    let (raw, check, kind) = (sizes.raw(), sizes.check(), sizes.positions_kind);
    if kind != "rotary" {
        return Err(sizes.unsupported(format!(
            "{} with position_embedding_type {kind:?} (jina-embeddings-v3 is \"rotary\")",
            sizes.claim.architecture
        )));
    }
    let base = sizes.rotary_base("rotary_emb_base", raw.rotary_emb_base)?;
    let mut layout = Layout::new(Positions::Rotary { base, scaling: RopeScaling::None }, sizes.feed_forward);
    if let Some(tasks) = raw.lora_adaptations.clone().filter(|t| !t.is_empty()) {
        layout.lora = Some(Lora {
            tasks,
            rank: check.need(("lora_rank", raw.lora_rank), 1..=MAX_WIDTH)?,
            alpha: check.real("lora_alpha", raw.lora_alpha.unwrap_or(1.0), Real::Positive)?,
            fixed_task: None,
        });
    }
    Ok(layout)
}
