//! `config.json` as the converter reads it: every key of every family it converts, each optional
//! (serde's defaults), before any is checked.

use serde::Deserialize;
use serde_json::Value;

/// The keys of every family: BERT's, XLM-RoBERTa's, JinaBERT v2's, jina-embeddings-v3's,
/// NomicBERT's (GPT-2's names), GTE's, ModernBERT's and the decoders'.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct Raw {
    pub(super) architectures: Option<Vec<String>>,
    pub(super) model_type: Option<String>,
    pub(super) hidden_size: Option<usize>,
    pub(super) num_hidden_layers: Option<usize>,
    pub(super) num_attention_heads: Option<usize>,
    pub(super) intermediate_size: Option<usize>,
    pub(super) vocab_size: Option<usize>,
    pub(super) max_position_embeddings: Option<usize>,
    pub(super) type_vocab_size: Option<usize>,
    pub(super) layer_norm_eps: Option<f64>,
    pub(super) hidden_act: Option<String>,
    pub(super) pad_token_id: Option<i64>,
    pub(super) position_embedding_type: Option<String>,
    pub(super) num_labels: Option<usize>,
    pub(super) id2label: Option<serde_json::Map<String, Value>>,
    // JinaBERT v2.
    pub(super) feed_forward_type: Option<String>,
    // jina-embeddings-v3.
    pub(super) rotary_emb_base: Option<f64>,
    pub(super) lora_adaptations: Option<Vec<String>>,
    pub(super) lora_rank: Option<usize>,
    pub(super) lora_alpha: Option<f64>,
    // NomicBERT's names (GPT-2's).
    pub(super) n_embd: Option<usize>,
    pub(super) n_head: Option<usize>,
    pub(super) n_layer: Option<usize>,
    pub(super) n_inner: Option<usize>,
    pub(super) n_positions: Option<usize>,
    pub(super) layer_norm_epsilon: Option<f64>,
    pub(super) activation_function: Option<String>,
    pub(super) rotary_emb_fraction: Option<f64>,
    pub(super) rotary_emb_interleaved: Option<bool>,
    pub(super) rotary_scaling_factor: Option<f64>,
    pub(super) max_trained_positions: Option<usize>,
    pub(super) qkv_proj_bias: Option<bool>,
    pub(super) mlp_fc1_bias: Option<bool>,
    pub(super) mlp_fc2_bias: Option<bool>,
    pub(super) prenorm: Option<bool>,
    pub(super) num_experts: Option<usize>,
    pub(super) moe_every_n_layers: Option<usize>,
    // GTE.
    pub(super) rope_theta: Option<f64>,
    pub(super) rope_scaling: Option<Value>,
    pub(super) logn_attention_scale: Option<bool>,
    pub(super) layer_norm_type: Option<String>,
    // ModernBERT.
    pub(super) norm_eps: Option<f64>,
    pub(super) norm_bias: Option<bool>,
    pub(super) hidden_activation: Option<String>,
    pub(super) global_rope_theta: Option<f64>,
    pub(super) local_rope_theta: Option<f64>,
    pub(super) global_attn_every_n_layers: Option<usize>,
    pub(super) local_attention: Option<usize>,
    pub(super) layer_types: Option<Vec<String>>,
    pub(super) rope_parameters: Option<Value>,
    pub(super) attention_bias: Option<bool>,
    pub(super) mlp_bias: Option<bool>,
    pub(super) classifier_pooling: Option<String>,
    pub(super) classifier_activation: Option<String>,
    pub(super) classifier_bias: Option<bool>,
    pub(super) decoder_bias: Option<bool>,
    // Decoders (Qwen3, Qwen2, Llama, Mistral).
    pub(super) num_key_value_heads: Option<usize>,
    pub(super) head_dim: Option<usize>,
    pub(super) rms_norm_eps: Option<f64>,
    pub(super) use_sliding_window: Option<bool>,
    pub(super) sliding_window: Option<usize>,
    pub(super) tie_word_embeddings: Option<bool>,
}
