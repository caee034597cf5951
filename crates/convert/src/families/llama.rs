//! Llama and Mistral decoders (e5-mistral-7b-instruct): as Qwen2 without the biases
//! (`attention_bias`, `mlp_bias` where the config sets them); Mistral's sliding window.

use super::Family;
use crate::config::Head;
use crate::config::decoder::{DecoderFamily, Window, decoder};

pub(super) const FAMILY: Family = Family {
    display: None,
    architectures: &[
        ("LlamaModel", Head::Encoder),
        ("LlamaForCausalLM", Head::Encoder),
        ("MistralModel", Head::Encoder),
        ("MistralForCausalLM", Head::Encoder),
    ],
    claims: |architecture, _| architecture.starts_with("Llama") || architecture.starts_with("Mistral"),
    read: |claim| {
        let window = if claim.architecture.starts_with("Mistral") { &MISTRAL } else { &LLAMA };
        decoder(claim, window)
    },
};

const LLAMA: DecoderFamily =
    DecoderFamily { family: "llama", head_dim: None, qkv_bias: false, qk_norm: false, sliding_window: Window::Ignored };

/// Mistral: Llama with its window.
const MISTRAL: DecoderFamily = DecoderFamily { sliding_window: Window::Read, ..LLAMA };
