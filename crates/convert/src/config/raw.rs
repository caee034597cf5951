//! `config.json` as the converter reads it: every key of every family it converts, each optional
//! (serde's defaults), before any is checked.

use serde::Deserialize;
use serde_json::Value;

/// The keys of every family: BERT's, XLM-RoBERTa's, JinaBERT v2's, jina-embeddings-v3's,
/// NomicBERT's (GPT-2's names), GTE's, ModernBERT's, the decoders' and the dual encoders'.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Raw {
    pub(crate) architectures: Option<Vec<String>>,
    pub(crate) model_type: Option<String>,
    pub(crate) hidden_size: Option<usize>,
    pub(crate) num_hidden_layers: Option<usize>,
    pub(crate) num_attention_heads: Option<usize>,
    pub(crate) intermediate_size: Option<usize>,
    pub(crate) vocab_size: Option<usize>,
    pub(crate) max_position_embeddings: Option<usize>,
    pub(crate) type_vocab_size: Option<usize>,
    pub(crate) layer_norm_eps: Option<f64>,
    pub(crate) hidden_act: Option<String>,
    pub(crate) pad_token_id: Option<i64>,
    pub(crate) position_embedding_type: Option<String>,
    pub(crate) num_labels: Option<usize>,
    pub(crate) id2label: Option<serde_json::Map<String, Value>>,
    // JinaBERT v2.
    pub(crate) feed_forward_type: Option<String>,
    // jina-embeddings-v3.
    pub(crate) rotary_emb_base: Option<f64>,
    pub(crate) lora_adaptations: Option<Vec<String>>,
    pub(crate) lora_rank: Option<usize>,
    pub(crate) lora_alpha: Option<f64>,
    // NomicBERT's names (GPT-2's).
    pub(crate) n_embd: Option<usize>,
    pub(crate) n_head: Option<usize>,
    pub(crate) n_layer: Option<usize>,
    pub(crate) n_inner: Option<usize>,
    pub(crate) n_positions: Option<usize>,
    pub(crate) layer_norm_epsilon: Option<f64>,
    pub(crate) activation_function: Option<String>,
    pub(crate) rotary_emb_fraction: Option<f64>,
    pub(crate) rotary_emb_interleaved: Option<bool>,
    pub(crate) rotary_scaling_factor: Option<f64>,
    pub(crate) max_trained_positions: Option<usize>,
    pub(crate) qkv_proj_bias: Option<bool>,
    pub(crate) mlp_fc1_bias: Option<bool>,
    pub(crate) mlp_fc2_bias: Option<bool>,
    pub(crate) prenorm: Option<bool>,
    pub(crate) num_experts: Option<usize>,
    pub(crate) moe_every_n_layers: Option<usize>,
    // GTE.
    pub(crate) rope_theta: Option<f64>,
    pub(crate) rope_scaling: Option<Value>,
    pub(crate) logn_attention_scale: Option<bool>,
    pub(crate) layer_norm_type: Option<String>,
    // ModernBERT.
    pub(crate) norm_eps: Option<f64>,
    pub(crate) norm_bias: Option<bool>,
    pub(crate) hidden_activation: Option<String>,
    pub(crate) global_rope_theta: Option<f64>,
    pub(crate) local_rope_theta: Option<f64>,
    pub(crate) global_attn_every_n_layers: Option<usize>,
    pub(crate) local_attention: Option<usize>,
    pub(crate) layer_types: Option<Vec<String>>,
    pub(crate) rope_parameters: Option<Value>,
    pub(crate) attention_bias: Option<bool>,
    pub(crate) mlp_bias: Option<bool>,
    pub(crate) classifier_pooling: Option<String>,
    pub(crate) classifier_activation: Option<String>,
    pub(crate) classifier_bias: Option<bool>,
    pub(crate) decoder_bias: Option<bool>,
    // Decoders (Qwen3, Qwen2, Llama, Mistral).
    pub(crate) num_key_value_heads: Option<usize>,
    pub(crate) head_dim: Option<usize>,
    pub(crate) rms_norm_eps: Option<f64>,
    pub(crate) use_sliding_window: Option<bool>,
    pub(crate) sliding_window: Option<usize>,
    pub(crate) tie_word_embeddings: Option<bool>,
    // Image-and-text dual encoders (CLIP, SigLIP): each tower's keys, read as a `Raw` of its own.
    pub(crate) text_config: Option<Value>,
    pub(crate) vision_config: Option<Value>,
    pub(crate) projection_dim: Option<usize>,
    /// jina-clip: `text_projection` and `visual_projection` into `projection_dim`.
    pub(crate) add_projections: Option<bool>,
    pub(crate) projection_size: Option<usize>,
    pub(crate) image_size: Option<usize>,
    pub(crate) patch_size: Option<usize>,
    pub(crate) num_channels: Option<usize>,
    pub(crate) eos_token_id: Option<i64>,
}
