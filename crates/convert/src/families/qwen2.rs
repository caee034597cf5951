//! Qwen2 decoders (gte-Qwen2-instruct): as Qwen3 without the query and key norms, with biases on
//! the query, key and value projections.

use super::{Family, Identity};
use crate::config::Head;
use crate::config::decoder::{DecoderFamily, Window, decoder};

pub(super) const FAMILY: Family = Family {
    identity: Identity::decoder("Qwen2 (decoder: causal, grouped-query, rotary)"),
    model_types: &["qwen2"],
    display: None,
    architectures: &[("Qwen2Model", Head::Encoder), ("Qwen2ForCausalLM", Head::Encoder)],
    claims: |architecture, _| {
        architecture.starts_with("Qwen2")
            && !["Qwen2Moe", "Qwen2VL", "Qwen2Audio", "Qwen2_5"].iter().any(|p| architecture.starts_with(p))
    },
    read: |claim| decoder(claim, &DECODER),
};

const DECODER: DecoderFamily =
    DecoderFamily { family: "qwen2", head_dim: None, qkv_bias: true, qk_norm: false, sliding_window: Window::Refused };
