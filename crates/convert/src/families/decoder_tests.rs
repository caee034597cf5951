//! `parse` on the decoders' configs: grouped heads, rotary scaling, sliding windows.

use crate::ConvertError;
use crate::config::*;

fn parse(arch: &str, extra: &str) -> Result<Config, ConvertError> {
    let text = format!(
        r#"{{"architectures":["{arch}"],"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
        "intermediate_size":96,"vocab_size":300,"rms_norm_eps":1e-6{extra}}}"#
    );
    super::parse(&text, "m/config.json", None)
}

#[test]
fn decoder_families_read_their_heads_norms_and_biases() {
    let c = parse("Qwen3ForCausalLM", r#","num_key_value_heads":2,"head_dim":32"#).expect("qwen3");
    let d = c.decoder.clone().expect("decoder");
    assert_eq!((c.family, c.head, d.kv_heads, d.head_dim, d.qk_norm), ("qwen3", Head::Encoder, 2, 32, true));
    assert!(!c.biases.qkv && !c.biases.attention_out);
    // Qwen3Config's head_dim default is 128, not hidden / heads.
    assert_eq!(parse("Qwen3Model", "").expect("qwen3").decoder.expect("decoder").head_dim, 128);
    let c = parse("Qwen2ForCausalLM", "").expect("qwen2");
    let d = c.decoder.clone().expect("decoder");
    assert_eq!((c.family, d.kv_heads, d.head_dim, d.qk_norm), ("qwen2", 4, 16, false));
    assert!(c.biases.qkv && !c.biases.attention_out, "Qwen2: q, k, v biases, none on o_proj");
    let c = parse("MistralModel", r#","sliding_window":4096"#).expect("mistral");
    assert_eq!((c.family, c.decoder.expect("decoder").sliding_window), ("llama", Some(4096)));
    let c = parse("LlamaForCausalLM", r#","sliding_window":4096,"attention_bias":true"#).expect("llama");
    assert_eq!(c.decoder.expect("decoder").sliding_window, None, "Llama has no window");
    assert!(c.biases.qkv && c.biases.attention_out);
    let c = parse("LlamaModel", r#","rope_theta":500000.0,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}"#).expect("llama3");
    assert_eq!(
        c.positions,
        Positions::Rotary {
            base: 500_000.0,
            scaling: RopeScaling::Llama3 { factor: 8.0, low: 1.0, high: 4.0, original: 8192.0 }
        }
    );
}

#[test]
fn what_a_decoder_conversion_does_not_implement_is_refused_in_one_line() {
    let refused = |arch: &str, extra: &str| parse(arch, extra).expect_err("refused").to_string();
    let e = refused("Qwen3ForCausalLM", r#","num_key_value_heads":3"#);
    assert!(e.starts_with("m/config.json has num_attention_heads 4, not a multiple of num_key_value_heads 3"), "{e}");
    let e = refused("Qwen2Model", r#","use_sliding_window":true"#);
    assert!(e.contains("use_sliding_window true"), "{e}");
    let e = refused("LlamaModel", r#","rope_scaling":{"rope_type":"yarn","factor":4.0}"#);
    assert!(e.contains("rope_scaling type \"yarn\" (converted: default, linear, llama3)"), "{e}");
    let e = refused("Qwen3MoeForCausalLM", "");
    assert!(e.starts_with("cannot convert architecture Qwen3MoeForCausalLM"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    assert!(parse("Qwen3ForCausalLM", r#","rope_scaling":null,"use_sliding_window":false"#).is_ok());
}
