//! `identify` against the registry and the conversion: every family named, each architecture
//! claimed as `parse` claims it, decoders and dual encoders as `parse` reads them, and hostile or
//! foreign text answered with `None`.

use super::hostile_tests::{BERT, GTE, JINA_V2, JINA_V3, LLAMA, MISTRAL, MODERNBERT, NOMIC, QWEN2, QWEN3, XLMR};
use super::{FAMILIES, Identity, identify, parse};

#[test]
fn every_family_has_a_name_and_claims_its_own_architectures_and_model_types() {
    for family in FAMILIES {
        let name = family.identity.name;
        assert!(!name.is_empty() && name.trim() == name, "{name:?}");
        for &(architecture, _) in family.architectures {
            let config = format!(r#"{{"architectures":["{architecture}"]}}"#);
            assert_eq!(identify(&config), Some(family.identity), "{architecture}");
        }
        for model_type in family.model_types {
            let config = format!(r#"{{"model_type":"{model_type}"}}"#);
            assert_eq!(identify(&config), Some(family.identity), "{model_type}");
        }
    }
}

#[test]
fn identify_agrees_with_the_conversion_on_the_family_decoders_and_text_towers() {
    let dual = [
        r#"{"architectures":["CLIPModel"],"text_config":{},"vision_config":{}}"#.to_owned(),
        r#"{"architectures":["SiglipModel"],"text_config":{},"vision_config":{}}"#.to_owned(),
        super::dual_tests::JINA_CLIP_V2.to_owned(),
    ];
    let single = [BERT, XLMR, JINA_V2, JINA_V3, NOMIC, GTE, MODERNBERT, QWEN3, QWEN2, LLAMA, MISTRAL];
    let configs = single.iter().map(|keys| format!("{{{keys}}}")).chain(dual);
    let mut named = Vec::new();
    for text in configs {
        let config = parse(&text, "config.json", None).unwrap_or_else(|e| panic!("{text}: {e}"));
        let identity = identify(&text).unwrap_or_else(|| panic!("{text}: not identified"));
        assert_eq!(identity.decoder, config.decoder.is_some(), "{text}");
        let text_positions = config.dual.is_some().then_some(config.max_positions);
        assert_eq!(identity.text_positions, text_positions, "{text}");
        named.push((config.family, identity.name));
    }
    named.sort_unstable();
    named.dedup();
    // Llama and Mistral share a graph ("llama") and are named apart; every other graph one name.
    assert_eq!(named.len(), 14, "{named:?}");
}

/// The names the embedder's doctor printed before the registry held them, by `model_type` (a
/// config without `architectures`) and with the keys that refine a family.
#[test]
fn the_names_are_the_doctors() {
    let name = |text: &str| identify(text).map(|i| i.name);
    for (model_type, expected) in [
        ("bert", "BERT"),
        ("xlm-roberta", "XLM-RoBERTa"),
        ("nomic_bert", "NomicBERT (rotary, SwiGLU)"),
        ("new", "GTE (NewModel: rotary, GeGLU)"),
        ("modernbert", "ModernBERT (rotary, local and global attention)"),
        ("qwen3", "Qwen3 (decoder: causal, grouped-query, rotary)"),
        ("qwen2", "Qwen2 (decoder: causal, grouped-query, rotary)"),
        ("llama", "Llama (decoder: causal, grouped-query, rotary)"),
        ("mistral", "Mistral (decoder: causal, grouped-query, rotary)"),
        ("clip", "clip"),
        ("siglip", "siglip"),
        ("jina_clip", "jina_clip"),
    ] {
        assert_eq!(name(&format!(r#"{{"model_type":"{model_type}"}}"#)), Some(expected), "{model_type}");
    }
    let jina_v2 = "JinaBERT v2 (ALiBi)";
    assert_eq!(name(r#"{"model_type":"bert","position_embedding_type":"alibi"}"#), Some(jina_v2));
    assert_eq!(name(r#"{"architectures":["BertModel"],"position_embedding_type":"alibi"}"#), Some(jina_v2));
    assert_eq!(name(r#"{"architectures":["JinaBertForMaskedLM"],"model_type":"bert"}"#), Some(jina_v2));
    let jina_v3 = "jina-embeddings-v3 (XLM-RoBERTa, rotary, task LoRA)";
    assert_eq!(name(r#"{"model_type":"xlm-roberta","position_embedding_type":"rotary"}"#), Some(jina_v3));
    assert_eq!(name(r#"{"architectures":["XLMRobertaLoRA"],"model_type":"xlm-roberta"}"#), Some(jina_v3));
    assert_eq!(name(r#"{"architectures":["HF_ColBERT"],"model_type":"bert"}"#), Some("BERT"));
    let decoder = |text: &str| identify(text).map(|i| i.decoder);
    assert_eq!(decoder(r#"{"architectures":["Qwen3ForCausalLM"]}"#), Some(true));
    assert_eq!(decoder(r#"{"architectures":["ModernBertModel"]}"#), Some(false));
    // An architecture no family claims leaves it to model_type; one nornir does not convert is no family.
    assert_eq!(
        name(r#"{"architectures":["Qwen2VLForConditionalGeneration"],"model_type":"qwen2"}"#),
        name(r#"{"model_type":"qwen2"}"#)
    );
    for foreign in [r#"{"model_type":"mpnet"}"#, r#"{"architectures":["RobertaModel"],"model_type":"roberta"}"#, "{}"] {
        assert_eq!(identify(foreign), None, "{foreign}");
    }
}

#[test]
fn hostile_or_foreign_text_is_no_family_and_never_a_panic() {
    let huge_array = format!(r#"{{"architectures":[{}"BertModel"]}}"#, "1,".repeat(200_000));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let many_names = format!(r#"{{"architectures":[{}]}}"#, vec![r#""GPT2Model""#; 100_000].join(","));
    let hostile = [
        "",
        "null",
        "[]",
        r#""BertModel""#,
        r#"{"architectures":["BertModel""#,
        r#"{"architectures":"BertModel"}"#,
        r#"{"architectures":{"0":"BertModel"}}"#,
        r#"{"architectures":[1,null,{},[]]}"#,
        r#"{"model_type":["bert"]}"#,
        r#"{"model_type":7}"#,
        r#"{"model_type":"bert\u0000"}"#,
        &deep,
        &many_names,
    ];
    for text in hostile {
        assert_eq!(identify(text), None, "{}", &text[..text.len().min(80)]);
    }
    // A key of the wrong type is as good as absent; the others still name the family.
    let bert = Some(Identity::encoder("BERT"));
    assert_eq!(identify(r#"{"architectures":"BertModel","model_type":"bert"}"#), bert);
    assert_eq!(identify(r#"{"architectures":["BertModel"],"position_embedding_type":["alibi"]}"#), bert);
    assert_eq!(identify(&huge_array), bert, "the strings among other values");
}
