//! `parse` on the encoder families' configs: heads, positions, biases, refusals by name.

use super::parse;
use crate::config::*;

#[test]
fn the_head_and_family_come_from_the_architecture() {
    let c = parse(
        r#"{"architectures":["XLMRobertaForSequenceClassification"],"hidden_size":8,"num_hidden_layers":1,
        "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"max_position_embeddings":20,
        "id2label":{"0":"a","1":"b","2":"c"}}"#,
        "config.json",
        None,
    )
    .expect("parses");
    assert_eq!((c.family, c.head, c.labels, c.pad_token_id), ("xlm-roberta", Head::SequenceClassification, 3, 1));
}

#[test]
fn an_unknown_or_missing_architecture_is_named() {
    let e = parse(r#"{"architectures":["GPT2LMHeadModel"]}"#, "m/config.json", None).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "cannot convert architecture GPT2LMHeadModel: supported are BertModel, BertForMaskedLM, \
         BertForSequenceClassification, XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, \
         JinaBertModel, JinaBertForMaskedLM, XLMRobertaLoRA, NomicBertModel, NewModel, NewForSequenceClassification, \
         ModernBertModel, ModernBertForMaskedLM, ModernBertForSequenceClassification, HF_ColBERT, Qwen3Model, \
         Qwen3ForCausalLM, Qwen2Model, Qwen2ForCausalLM, LlamaModel, LlamaForCausalLM, MistralModel, MistralForCausalLM, \
         CLIPModel, SiglipModel, JinaCLIPModel"
    );
    let e = parse(r#"{"model_type":"bert"}"#, "m/config.json", None).expect_err("refused");
    assert!(e.to_string().starts_with("m/config.json has no `architectures` (model_type \"bert\")"), "{e}");
}

#[test]
fn a_sentence_transformers_folder_decides_the_head_as_sentence_transformers_does() {
    let config = |arch: &str| {
        format!(
            r#"{{"architectures":["{arch}"],"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
            "intermediate_size":16,"vocab_size":10,"max_position_embeddings":20}}"#
        )
    };
    let transformer = StModule::parse(
        r#"[{"idx":1,"type":"sentence_transformers.models.Pooling"},{"idx":0,"type":"sentence_transformers.models.Transformer"}]"#,
    );
    assert_eq!(transformer, Some(StModule::Transformer));
    // A fine-tuned embedder whose config still names its pre-training head is an encoder.
    for arch in ["BertForMaskedLM", "BertForPreTraining", "BertModel"] {
        let c = parse(&config(arch), "config.json", transformer).expect("parses");
        assert_eq!((c.head, c.architecture.as_str()), (Head::Encoder, arch));
    }
    let mlm = StModule::parse(r#"[{"idx":0,"type":"sentence_transformers.sparse_encoder.models.MLMTransformer"}]"#);
    let c = parse(&config("BertForMaskedLM"), "config.json", mlm).expect("parses");
    assert_eq!(c.head, Head::MaskedLm);
    let c = parse(&config("BertForPreTraining"), "config.json", None);
    assert!(c.is_err(), "without modules.json only the listed architectures convert");
}
