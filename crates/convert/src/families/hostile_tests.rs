//! Hostile numbers in `config.json`, for every family: each refused in one line that names the
//! key and the value, never a graph that computes NaN, a division by zero or a huge allocation.

use serde_json::Value;

use super::parse;
use crate::config::*;

pub(super) const BERT: &str = r#""architectures":["BertModel"],"hidden_size":8,"num_hidden_layers":1,
    "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20"#;
pub(super) const XLMR: &str = r#""architectures":["XLMRobertaModel"],"hidden_size":8,"num_hidden_layers":1,
    "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20"#;
pub(super) const JINA_V2: &str = r#""architectures":["JinaBertModel"],"position_embedding_type":"alibi","hidden_size":8,
    "num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20"#;
pub(super) const JINA_V3: &str = r#""architectures":["XLMRobertaLoRA"],"position_embedding_type":"rotary",
    "hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"vocab_size":10,
    "max_position_embeddings":20,"lora_adaptations":["retrieval.query"],"lora_rank":4"#;
pub(super) const NOMIC: &str = r#""architectures":["NomicBertModel"],"n_embd":8,"n_layer":1,"n_head":2,"n_inner":16,
    "vocab_size":10,"n_positions":20,"activation_function":"swiglu""#;
pub(super) const GTE: &str = r#""architectures":["NewModel"],"hidden_size":8,"num_hidden_layers":1,
    "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20"#;
pub(super) const MODERNBERT: &str = r#""architectures":["ModernBertModel"],"hidden_size":8,"num_hidden_layers":3,
    "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20,
    "global_attn_every_n_layers":3,"local_attention":4"#;
pub(super) const QWEN3: &str = r#""architectures":["Qwen3ForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":96,"vocab_size":300"#;
pub(super) const QWEN2: &str = r#""architectures":["Qwen2Model"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":96,"vocab_size":300"#;
pub(super) const LLAMA: &str = r#""architectures":["LlamaModel"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":96,"vocab_size":300"#;
pub(super) const MISTRAL: &str = r#""architectures":["MistralModel"],"hidden_size":64,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":96,"vocab_size":300,"max_position_embeddings":64"#;

/// `base` with `extra` keys (which replace the base's, serde reading the last of a repeated key
/// as the value: a Raw field set twice is refused, so the base's key is dropped first).
fn config(base: &str, extra: &str) -> String {
    let mut keys: serde_json::Map<String, Value> = serde_json::from_str(&format!("{{{base}}}")).expect("base");
    if !extra.is_empty() {
        let extra: serde_json::Map<String, Value> = serde_json::from_str(&format!("{{{extra}}}")).expect("extra");
        keys.extend(extra);
    }
    Value::Object(keys).to_string()
}

fn parses(base: &str, extra: &str) -> Config {
    parse(&config(base, extra), "m/config.json", None).unwrap_or_else(|e| panic!("{extra}: {e}"))
}

/// The refusal of `base` with `extra` (raw text, for values JSON's Value would not carry).
fn refused_text(text: &str) -> String {
    let e = parse(text, "m/config.json", None).expect_err("refused").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(e.starts_with("m/config.json "), "names the file: {e}");
    e
}

/// Asserts `base` with `extra` is refused naming `key` and `value`, and saying what to do.
fn refused(base: &str, extra: &str, key: &str, value: &str) -> String {
    let e = refused_text(&config(base, extra));
    assert!(e.contains(&format!("{key} {value}")), "names {key} {value}: {e}");
    assert!(e.contains("fix the config"), "says what to do: {e}");
    e
}

#[test]
fn the_valid_bases_parse() {
    for base in [BERT, XLMR, JINA_V2, JINA_V3, NOMIC, GTE, MODERNBERT, QWEN3, QWEN2, LLAMA, MISTRAL] {
        parses(base, "");
    }
}

#[test]
fn a_width_of_zero_or_past_the_bound_is_refused_in_every_family() {
    for base in [BERT, XLMR, JINA_V2, JINA_V3, GTE, MODERNBERT, QWEN3, QWEN2, LLAMA] {
        for key in ["hidden_size", "intermediate_size", "vocab_size"] {
            let e = refused(base, &format!(r#""{key}":0"#), key, "0");
            assert!(e.contains("a whole number from 1 to"), "the range: {e}");
        }
        refused(base, r#""vocab_size":1000000000000000"#, "vocab_size", "1000000000000000");
    }
    // NomicBERT's own names are named.
    refused(NOMIC, r#""n_embd":0"#, "n_embd", "0");
    refused(NOMIC, r#""n_inner":0"#, "n_inner", "0");
    let e = refused(BERT, r#""hidden_size":1000000000000000"#, "hidden_size", "1000000000000000");
    assert!(e.contains("from 1 to 1048576 (the width of the token vectors"), "{e}");
    refused(QWEN3, r#""head_dim":0"#, "head_dim", "0");
    refused(BERT, r#""type_vocab_size":1000000000000000"#, "type_vocab_size", "1000000000000000");
}

#[test]
fn head_and_layer_counts_are_refused_out_of_range() {
    for base in [BERT, XLMR, JINA_V3, GTE, MODERNBERT, QWEN3, QWEN2, LLAMA] {
        refused(base, r#""num_attention_heads":0"#, "num_attention_heads", "0");
        refused(base, r#""num_hidden_layers":0"#, "num_hidden_layers", "0");
        let e = refused(base, r#""num_hidden_layers":1000000000000000"#, "num_hidden_layers", "1000000000000000");
        assert!(e.contains("from 1 to 1000"), "{e}");
    }
    refused(NOMIC, r#""n_layer":5000"#, "n_layer", "5000");
    refused(NOMIC, r#""n_head":0"#, "n_head", "0");
    // Key and value heads: at least one, at most the query heads, dividing them.
    refused(QWEN3, r#""num_key_value_heads":0"#, "num_key_value_heads", "0");
    let e = refused(LLAMA, r#""num_key_value_heads":8"#, "num_key_value_heads", "8");
    assert!(e.contains("from 1 to 4"), "{e}");
    // A missing count is named as missing.
    let e = refused_text(&config(BERT, "").replace(r#""num_hidden_layers":1,"#, ""));
    assert!(e.contains("has no `num_hidden_layers` (the layers; BERT-base has 12): add it"), "{e}");
}

#[test]
fn a_decoders_rotary_base_scaling_and_epsilon_that_would_compute_nan_are_refused() {
    for base in [QWEN3, QWEN2, LLAMA, MISTRAL] {
        let e = refused(base, r#""rope_theta":0"#, "rope_theta", "0");
        assert!(e.contains("a finite number above 1 (the rotary base; Qwen3 uses 1000000): fix the config"), "{e}");
        refused(base, r#""rope_theta":-10000.0"#, "rope_theta", "-10000");
        refused(base, r#""rms_norm_eps":-1e-6"#, "rms_norm_eps", "-1e-6");
        refused(base, r#""rms_norm_eps":0"#, "rms_norm_eps", "0");
        // Positive in float64, 0 in the float32 the graph computes in.
        refused(base, r#""rms_norm_eps":1e-300"#, "rms_norm_eps", "1e-300");
        let e = refused(base, r#""rope_scaling":{"rope_type":"linear","factor":0}"#, "rope_scaling.factor", "0");
        assert!(e.contains("a positive, finite number"), "{e}");
        refused(base, r#""rope_scaling":{"type":"linear","factor":-2.0}"#, "rope_scaling.factor", "-2");
        refused(base, r#""rope_scaling":{"rope_type":"linear","factor":"4"}"#, "rope_scaling.factor", "\"4\"");
        refused(base, r#""rope_parameters":{"rope_theta":0,"rope_type":"default"}"#, "rope_parameters.rope_theta", "0");
    }
    let llama3 = |low: &str, high: &str, original: &str| {
        format!(
            r#""rope_scaling":{{"rope_type":"llama3","factor":8.0,"low_freq_factor":{low},"high_freq_factor":{high},"original_max_position_embeddings":{original}}}"#
        )
    };
    parses(LLAMA, &llama3("1.0", "4.0", "8192"));
    refused(LLAMA, &llama3("0", "4.0", "8192"), "rope_scaling.low_freq_factor", "0");
    refused(LLAMA, &llama3("1.0", "1.0", "8192"), "rope_scaling.high_freq_factor", "1");
    refused(LLAMA, &llama3("1.0", "4.0", "0"), "rope_scaling.original_max_position_embeddings", "0");
    refused(LLAMA, &llama3("1.0", "4.0", "1e15"), "rope_scaling.original_max_position_embeddings", "1000000000000000");
    refused(LLAMA, &llama3("1.0", "4.0", "8192.5"), "rope_scaling.original_max_position_embeddings", "8192.5");
}

#[test]
fn an_encoders_rotary_bases_scalings_and_epsilons_are_refused_out_of_range() {
    for base in [BERT, XLMR, JINA_V2, JINA_V3, GTE] {
        refused(base, r#""layer_norm_eps":0"#, "layer_norm_eps", "0");
        refused(base, r#""layer_norm_eps":-1e-12"#, "layer_norm_eps", "-1e-12");
        refused(base, r#""layer_norm_eps":1e30"#, "layer_norm_eps", "1e30");
    }
    refused(NOMIC, r#""layer_norm_epsilon":0"#, "layer_norm_epsilon", "0");
    refused(MODERNBERT, r#""norm_eps":-1"#, "norm_eps", "-1");
    refused(JINA_V3, r#""rotary_emb_base":0"#, "rotary_emb_base", "0");
    refused(JINA_V3, r#""lora_rank":0"#, "lora_rank", "0");
    refused(JINA_V3, r#""lora_alpha":-1"#, "lora_alpha", "-1");
    refused(NOMIC, r#""rotary_emb_base":1"#, "rotary_emb_base", "1");
    refused(NOMIC, r#""rotary_scaling_factor":-2"#, "rotary_scaling_factor", "-2");
    refused(NOMIC, r#""rotary_scaling_factor":2,"max_trained_positions":0"#, "max_trained_positions", "0");
    // The dynamic scaling raises its base to dim / (dim - 2): heads 2 wide would divide by zero.
    refused(
        &NOMIC.replace(r#""n_head":2"#, r#""n_head":4"#),
        r#""rotary_scaling_factor":2"#,
        "rotary_scaling_factor",
        "2",
    );
    // NomicBERT's code scales where the factor is truthy: 0 is no scaling, as before.
    assert_eq!(
        parses(NOMIC, r#""rotary_scaling_factor":0"#).positions,
        Positions::Rotary { base: 10_000.0, scaling: RopeScaling::None }
    );
    refused(GTE, r#""rope_theta":0.5"#, "rope_theta", "0.5");
    refused(GTE, r#""rope_scaling":{"type":"ntk","factor":0}"#, "rope_scaling.factor", "0");
    refused(MODERNBERT, r#""global_rope_theta":0"#, "global_rope_theta", "0");
    refused(MODERNBERT, r#""local_rope_theta":-1"#, "local_rope_theta", "-1");
    refused(
        MODERNBERT,
        r#""rope_parameters":{"full_attention":{"rope_theta":0}}"#,
        "rope_parameters.full_attention.rope_theta",
        "0",
    );
}

#[test]
fn lengths_and_windows_are_refused_at_zero_and_past_the_models_positions() {
    for base in [BERT, XLMR, JINA_V2, JINA_V3, GTE, MODERNBERT] {
        refused(base, r#""max_position_embeddings":0"#, "max_position_embeddings", "0");
        let e = refused(
            base,
            r#""max_position_embeddings":1000000000000000"#,
            "max_position_embeddings",
            "1000000000000000",
        );
        assert!(e.contains("from 1 to 1048576"), "{e}");
    }
    refused(NOMIC, r#""n_positions":1000000000000000"#, "n_positions", "1000000000000000");
    refused(QWEN3, r#""max_position_embeddings":0"#, "max_position_embeddings", "0");
    refused(MODERNBERT, r#""local_attention":0"#, "local_attention", "0");
    let e = refused(MODERNBERT, r#""local_attention":1000000000000000"#, "local_attention", "1000000000000000");
    assert!(e.contains("from 1 to 20"), "bounded by the model's positions: {e}");
    refused(MODERNBERT, r#""global_attn_every_n_layers":0"#, "global_attn_every_n_layers", "0");
    refused(MISTRAL, r#""sliding_window":0"#, "sliding_window", "0");
    let e = refused(MISTRAL, r#""sliding_window":1000000000000000"#, "sliding_window", "1000000000000000");
    assert!(e.contains("from 1 to 64"), "bounded by the model's positions: {e}");
    assert_eq!(parses(MISTRAL, r#""sliding_window":32"#).decoder.expect("decoder").sliding_window, Some(32));
    // XLM-RoBERTa counts positions from the padding index + 1: the table must hold that row.
    refused(XLMR, r#""pad_token_id":-1"#, "pad_token_id", "-1");
    refused(XLMR, r#""pad_token_id":19"#, "pad_token_id", "19");
    assert_eq!(parses(XLMR, r#""pad_token_id":1"#).pad_token_id, 1);
    let e = refused(
        &BERT.replace("BertModel", "BertForSequenceClassification"),
        r#""num_labels":1000000000000000"#,
        "num_labels",
        "1000000000000000",
    );
    assert!(e.contains("from 0 to"), "{e}");
}

#[test]
fn a_value_of_the_wrong_kind_is_named_with_its_key() {
    for (extra, key, value) in [
        (r#""num_hidden_layers":-1"#, "num_hidden_layers", "-1"),
        (r#""hidden_size":8.5"#, "hidden_size", "8.5"),
        (r#""vocab_size":"10""#, "vocab_size", "\"10\""),
        (r#""layer_norm_eps":"1e-12""#, "layer_norm_eps", "\"1e-12\""),
        (r#""num_attention_heads":true"#, "num_attention_heads", "true"),
    ] {
        refused(BERT, extra, key, value);
    }
    refused(QWEN3, r#""rope_theta":"1000000""#, "rope_theta", "\"1000000\"");
    // serde_json refuses a number past float64 (it does not read 1e400 as infinity): the key is
    // named from where it stopped.
    let text = config(QWEN3, "").replace(r#""hidden_size":64"#, r#""rope_theta":1e400,"hidden_size":64"#);
    let e = refused_text(&text);
    assert!(e.contains("rope_theta 1e400"), "{e}");
    let text = config(BERT, "").replace(r#""hidden_size":8"#, r#""hidden_size":8,"layer_norm_eps":-1e999"#);
    let e = refused_text(&text);
    assert!(e.contains("layer_norm_eps -1e999"), "{e}");
    // Text that is not JSON at all says so, as before.
    assert!(refused_text("{not json").contains("is not a valid config"));
}

#[test]
fn valid_configs_read_as_before() {
    let c = parses(LLAMA, r#""rope_theta":500000.0,"rms_norm_eps":1e-5"#);
    assert_eq!((c.eps, c.positions), (1e-5, Positions::Rotary { base: 500_000.0, scaling: RopeScaling::None }));
    let c = parses(MODERNBERT, "");
    let local = c.local.expect("local layers");
    assert_eq!((local.layers, local.window, local.base), (vec![false, true, true], 4, 160_000.0));
    assert_eq!(c.eps, 1e-5);
    let c = parses(BERT, "");
    assert_eq!((c.eps, c.type_vocab, c.max_positions), (1e-12, 2, 20));
}
