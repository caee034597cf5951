//! Llama and Mistral decoders (e5-mistral-7b-instruct): as Qwen2 without the biases
//! (`attention_bias`, `mlp_bias` where the config sets them); Mistral's sliding window. Two
//! families, each named for itself.

use super::{Family, Identity};
use crate::config::Head;
use crate::config::decoder::{DecoderFamily, Window, decoder};

pub(super) const FAMILY: Family = Family {
    identity: Identity::decoder("Llama (decoder: causal, grouped-query, rotary)"),
    model_types: &["llama"],
    display: None,
    architectures: &[("LlamaModel", Head::Encoder), ("LlamaForCausalLM", Head::Encoder)],
    claims: |architecture, _| architecture.starts_with("Llama"),
    read: |claim| decoder(claim, &LLAMA),
};

/// Mistral: Llama with its window.
pub(super) const MISTRAL: Family = Family {
    identity: Identity::decoder("Mistral (decoder: causal, grouped-query, rotary)"),
    model_types: &["mistral"],
    display: None,
    architectures: &[("MistralModel", Head::Encoder), ("MistralForCausalLM", Head::Encoder)],
    claims: |architecture, _| architecture.starts_with("Mistral"),
    read: |claim| decoder(claim, &MISTRAL_DECODER),
};

const LLAMA: DecoderFamily =
    DecoderFamily { family: "llama", head_dim: None, qkv_bias: false, qk_norm: false, sliding_window: Window::Ignored };

const MISTRAL_DECODER: DecoderFamily = DecoderFamily { sliding_window: Window::Read, ..LLAMA };
