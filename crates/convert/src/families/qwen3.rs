//! Qwen3 decoders (Qwen3-Embedding, Qwen3-Reranker): RMSNorm, grouped-query causal attention with
//! a per-head RMSNorm on queries and keys, rotary positions, SwiGLU; heads 128 wide unless the
//! config says otherwise.

use super::{Family, Identity};
use crate::config::Head;
use crate::config::decoder::{DecoderFamily, Window, decoder};

pub(super) const FAMILY: Family = Family {
    identity: Identity::decoder("Qwen3 (decoder: causal, grouped-query, rotary)"),
    model_types: &["qwen3"],
    display: None,
    architectures: &[("Qwen3Model", Head::Encoder), ("Qwen3ForCausalLM", Head::Encoder)],
    claims: |architecture, _| architecture.starts_with("Qwen3") && !architecture.starts_with("Qwen3Moe"),
    read: |claim| decoder(claim, &DECODER),
};

const DECODER: DecoderFamily = DecoderFamily {
    family: "qwen3",
    // Qwen3Config's default, whatever the hidden size.
    head_dim: Some(128),
    qkv_bias: false,
    qk_norm: true,
    sliding_window: Window::Refused,
};
