//! ModelFolder and the folder's config readers on folders and texts written in the tests.

use super::*;
use crate::values::{Modules, PoolingSpec};
use nornir_options::Pooling;

#[test]
fn configs() {
    let modules = r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
        {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
        {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#;
    assert_eq!(
        parse_modules(modules),
        Ok(Modules {
            pooling_dir: Some("1_Pooling".to_owned()),
            normalize: true,
            splade_dir: None,
            dense_dirs: Vec::new(),
            dense_per_token: false
        })
    );
    let jina_v3 = r#"[{"idx":0,"name":"transformer","path":"","type":"custom_st.Transformer"},
        {"idx":1,"name":"pooler","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#;
    assert_eq!(
        parse_modules(jina_v3),
        Ok(Modules {
            pooling_dir: Some("1_Pooling".to_owned()),
            normalize: false,
            splade_dir: None,
            dense_dirs: Vec::new(),
            dense_per_token: false
        })
    );
    let m = |types: &[&str]| {
        let list: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| format!(r#"{{"path":"{i}_{t}","type":"sentence_transformers.models.{t}"}}"#))
            .collect();
        parse_modules(&format!("[{}]", list.join(",")))
    };
    let dense = m(&["Transformer", "Pooling", "Dense", "Dense", "Normalize"]).expect("dense");
    assert_eq!(dense.dense_dirs, ["2_Dense", "3_Dense"]);
    assert!(dense.normalize);
    for (order, why) in [
        (&["Transformer", "Dense", "Pooling"][..], "before Pooling"),
        (&["Transformer", "Pooling", "Normalize", "Dense"], "after Normalize"),
    ] {
        let e = m(order).unwrap_err();
        assert!(e.contains("sentence_transformers.models.Dense") && e.contains(why), "{e}");
    }
    let e = m(&["Transformer", "Pooling", "LayerNorm"]).unwrap_err();
    assert!(e.contains("sentence_transformers.models.LayerNorm") && e.contains("2_LayerNorm"), "{e}");
    assert!(parse_modules("{").is_err());

    let spec = parse_dense_config(
        "2_Dense",
        r#"{"in_features":384,"out_features":256,"bias":false,"activation_function":"torch.nn.modules.linear.Identity"}"#,
    )
    .expect("dense config");
    assert_eq!((spec.in_features, spec.out_features, spec.bias), (384, 256, false));
    let tanh = parse_dense_config("d", r#"{"in_features":4,"out_features":2}"#).expect("defaults");
    assert_eq!((tanh.bias, tanh.activation.as_str()), (true, "torch.nn.modules.activation.Tanh"));
    for (config, why) in [
        (
            r#"{"in_features":4,"out_features":2,"activation_function":"torch.nn.modules.activation.Softplus"}"#,
            "Softplus",
        ),
        (r#"{"in_features":4}"#, "out_features"),
        (r#"{"in_features":0,"out_features":2}"#, "positive"),
        (r#"{"in_features":4,"out_features":2,"module_input_name":"token_embeddings"}"#, "token_embeddings"),
    ] {
        let e = parse_dense_config("d", config).unwrap_err();
        assert!(e.contains(why), "{e}");
    }

    let pooling = r#"{"word_embedding_dimension":384,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":true}"#;
    assert_eq!(
        parse_pooling_config(pooling),
        Ok(PoolingSpec { mode: Pooling::Mean, dimension: Some(384), include_prompt: true })
    );
    for (key, mode) in [
        ("pooling_mode_max_tokens", Pooling::Max),
        ("pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen),
        ("pooling_mode_weightedmean_tokens", Pooling::WeightedMean),
        ("pooling_mode_lasttoken", Pooling::Last),
    ] {
        let spec = parse_pooling_config(&format!(r#"{{"{key}":true,"include_prompt":false}}"#)).expect(key);
        assert_eq!((spec.mode, spec.include_prompt), (mode, false), "{key}");
    }
    let both = r#"{"pooling_mode_mean_tokens":true,"pooling_mode_max_tokens":true}"#;
    assert!(parse_pooling_config(both).unwrap_err().contains("mean + max"));
    assert!(parse_pooling_config("{}").is_err());

    assert_eq!(parse_sentence_bert_config(r#"{"max_seq_length":256}"#), Ok(Some(256)));
    assert!(parse_sentence_bert_config(r#"{"max_seq_length":-1}"#).is_err());

    let p = parse_prompts(r#"{"prompts":{"query":"query: ","passage":"passage: "},"default_prompt_name":"query"}"#)
        .expect("prompts");
    assert_eq!((p.prompts["passage"].as_str(), p.default_prompt_name.as_deref()), ("passage: ", Some("query")));
    assert!(parse_prompts(r#"{"prompts":{},"default_prompt_name":"query"}"#).is_err());
    assert_eq!(parse_prompts(r#"{"__version__":{}}"#), Ok(Prompts::default()));

    let hf = parse_hf_config(
        r#"{"hidden_size":8,"lora_adaptations":["retrieval.query","text-matching"],
            "task_instructions":{"retrieval.query":"Represent the query: "}}"#,
    )
    .expect("config");
    assert_eq!(hf.lora_adaptations.as_deref(), Some(&["retrieval.query".to_owned(), "text-matching".to_owned()][..]));
    assert_eq!(hf.task_instructions["retrieval.query"], "Represent the query: ");
    let xlmr = parse_hf_config(r#"{"model_type":"xlm-roberta","max_position_embeddings":514,"pad_token_id":1}"#);
    assert_eq!(xlmr.expect("config").usable_positions(), Some(512));
    let bert = parse_hf_config(r#"{"model_type":"bert","max_position_embeddings":512,"pad_token_id":0}"#);
    assert_eq!(bert.expect("config").usable_positions(), Some(512));
}

#[test]
fn the_family_is_named_from_the_config_and_nomics_keys_are_read() {
    let family = |text: &str| parse_hf_config(text).expect("config").family();
    assert_eq!(
        family(r#"{"architectures":["JinaBertForMaskedLM"],"model_type":"bert","position_embedding_type":"alibi"}"#)
            .as_deref(),
        Some("JinaBERT v2 (ALiBi), JinaBertForMaskedLM")
    );
    assert_eq!(
        family(
            r#"{"architectures":["XLMRobertaModel"],"model_type":"xlm-roberta","position_embedding_type":"rotary"}"#
        )
        .as_deref(),
        Some("jina-embeddings-v3 (XLM-RoBERTa, rotary, task LoRA), XLMRobertaModel")
    );
    assert_eq!(
        family(r#"{"model_type":"modernbert"}"#).as_deref(),
        Some("ModernBERT (rotary, local and global attention)")
    );
    assert_eq!(family(r#"{"architectures":["BertModel"],"model_type":"bert"}"#).as_deref(), Some("BERT, BertModel"));
    assert_eq!(family("{}"), None);
    // Families the converter does not know are named by model_type, else the architecture.
    assert_eq!(
        family(r#"{"architectures":["MPNetModel"],"model_type":"mpnet"}"#).as_deref(),
        Some("mpnet, MPNetModel")
    );
    assert_eq!(family(r#"{"architectures":["MPNetModel"]}"#).as_deref(), Some("MPNetModel, MPNetModel"));
    let hf = |text: &str| parse_hf_config(text).expect("config");
    let qwen3 = hf(r#"{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}"#);
    let named = "Qwen3 (decoder: causal, grouped-query, rotary), Qwen3ForCausalLM";
    assert_eq!((qwen3.family().as_deref(), qwen3.is_decoder()), (Some(named), true));
    assert!(
        hf(r#"{"model_type":"mistral"}"#).is_decoder() && hf(r#"{"architectures":["GemmaForCausalLM"]}"#).is_decoder()
    );
    assert!(!hf(r#"{"architectures":["BertModel"],"model_type":"bert"}"#).is_decoder());
    // A dual encoder's positions are its text tower's, its config class's default where it is silent.
    let clip = hf(r#"{"architectures":["CLIPModel"],"model_type":"clip","text_config":{"vocab_size":99}}"#);
    assert_eq!(
        (clip.family().as_deref(), clip.max_position_embeddings, clip.vocab_size),
        (Some("clip, CLIPModel"), Some(77), Some(99))
    );
    let siglip = hf(r#"{"model_type":"siglip","text_config":{"max_position_embeddings":16}}"#);
    assert_eq!(siglip.max_position_embeddings, Some(16));
    let jina_clip = hf(r#"{"model_type":"jina_clip","text_config":{"hf_model_config_kwargs":{}}}"#);
    assert_eq!(jina_clip.max_position_embeddings, Some(8194));
    let nomic = parse_hf_config(r#"{"model_type":"nomic_bert","n_positions":8192,"n_embd":768}"#).expect("config");
    assert_eq!((nomic.usable_positions(), nomic.hidden_size), (Some(8192), Some(768)));
}

#[test]
fn a_pylate_folder_is_dense_on_every_token_with_its_rules() {
    let pylate = r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                     {"path":"1_Dense","type":"pylate.models.Dense.Dense"}]"#;
    let m = parse_modules(pylate).expect("modules");
    assert!(m.dense_per_token && m.pooling_dir.is_none());
    assert_eq!(m.dense_dirs, ["1_Dense"]);
    let before = r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
                     {"path":"1_Dense","type":"sentence_transformers.models.Dense"},
                     {"path":"2_Pooling","type":"sentence_transformers.models.Pooling"}]"#;
    assert!(parse_modules(before).unwrap_err().contains("before Pooling"));
    let defaults = parse_multi_vector_config(None).expect("defaults");
    assert_eq!((defaults.query_prefix.as_str(), defaults.document_prefix.as_str()), ("[Q] ", "[D] "));
    assert_eq!((defaults.query_length, defaults.document_length), (Some(32), Some(180)));
    assert!(defaults.do_query_expansion && !defaults.attend_to_expansion_tokens);
    assert_eq!(defaults.skiplist_words.len(), 32, "string.punctuation");
    let stanford = parse_multi_vector_config(Some(
        r#"{"query_prefix":"[unused0]","query_length":64,"do_query_expansion":false,"attend_to_expansion_tokens":true}"#,
    ))
    .expect("config");
    assert_eq!((stanford.query_prefix.as_str(), stanford.query_length), ("[unused0]", Some(64)));
    assert!(!stanford.attend_to_expansion_tokens, "no expansion, nothing to attend to");
}

#[test]
fn hostile_numbers_in_the_folders_configs_are_refused_naming_the_key_and_value() {
    let refused = |e: Result<(), String>, needle: &str| {
        let e = e.expect_err(needle);
        assert!(e.contains(needle) && e.ends_with("fix the config") && !e.contains('\n'), "{needle}: {e}");
    };
    for (text, needle) in [
        (r#"{"hidden_size":0}"#, "hidden_size is 0, it must be a positive whole number, at most 16777216"),
        (r#"{"vocab_size":0}"#, "vocab_size is 0"),
        (r#"{"max_position_embeddings":0}"#, "max_position_embeddings is 0"),
        (r#"{"n_positions":1000000000000000}"#, "max_position_embeddings is 1000000000000000"),
        (r#"{"max_position_embeddings":-1}"#, "max_position_embeddings is -1, not a value of its kind"),
        (r#"{"hidden_size":"768"}"#, "hidden_size is \"768\", not a value of its kind"),
        (
            r#"{"model_type":"xlm-roberta","max_position_embeddings":514,"pad_token_id":18446744073709551615}"#,
            "pad_token_id is 18446744073709551615, which leaves none of the 514 positions",
        ),
    ] {
        refused(parse_hf_config(text).map(drop), needle);
    }
    for (text, needle) in [
        (r#"{"max_seq_length":0}"#, "max_seq_length is 0"),
        (r#"{"max_seq_length":1000000000000000}"#, "max_seq_length is 1000000000000000"),
    ] {
        refused(parse_sentence_bert_config(text).map(drop), needle);
    }
    for (text, needle) in [
        (
            r#"{"query_length":1000000000000000}"#,
            "query_length is 1000000000000000, it must be a positive whole number, at most 1048576",
        ),
        (r#"{"query_length":0}"#, "query_length is 0"),
        (r#"{"document_length":0}"#, "document_length is 0"),
        (r#"{"document_length":"180"}"#, "document_length is \"180\", not a value of its kind"),
    ] {
        refused(parse_multi_vector_config(Some(text)).map(drop), needle);
    }
    for (text, needle) in [
        (r#"{"in_features":4,"out_features":0}"#, "out_features is 0"),
        (r#"{"in_features":1000000000000000,"out_features":4}"#, "in_features is 1000000000000000"),
        (r#"{"in_features":-4,"out_features":4}"#, "in_features is -4, not a value of its kind"),
    ] {
        refused(parse_dense_config("2_Dense", text).map(drop), needle);
    }
    let pooling = r#"{"word_embedding_dimension":0,"pooling_mode_mean_tokens":true}"#;
    refused(parse_pooling_config(pooling).map(drop), "word_embedding_dimension is 0");
    // The lengths of a valid folder read as before.
    let hf = parse_hf_config(r#"{"model_type":"xlm-roberta","max_position_embeddings":514}"#).expect("config");
    assert_eq!(hf.usable_positions(), Some(512));
}

#[test]
fn a_colbert_folder_asking_for_a_petabyte_query_is_refused_at_open() {
    let t = tempfile::tempdir().expect("tempdir");
    for (name, text) in [
        ("model.onnx", "x"),
        ("tokenizer.json", "{}"),
        ("config.json", r#"{"architectures":["BertModel"],"hidden_size":8}"#),
        (
            "modules.json",
            r#"[{"path":"","type":"sentence_transformers.models.Transformer"},{"path":"1_Dense","type":"pylate.models.Dense.Dense"}]"#,
        ),
        ("1_Dense/config.json", r#"{"in_features":8,"out_features":4,"bias":false}"#),
        ("config_sentence_transformers.json", r#"{"query_length":1000000000000000}"#),
    ] {
        let path = t.path().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
    assert!(
        e.contains("config_sentence_transformers.json: query_length is 1000000000000000, it must be a positive whole number, at most 1048576"),
        "{e}"
    );
}

#[test]
fn missing_pieces_are_clear_errors() {
    let t = tempfile::tempdir().expect("tempdir");
    let e = ModelFolder::open(&t.path().join("nope"), None).unwrap_err().to_string();
    assert!(e.contains("no such folder"), "{e}");
    let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
    assert!(e.contains("no model.onnx"), "{e}");
    std::fs::write(t.path().join("model.onnx"), b"x").expect("write");
    let e = ModelFolder::open(t.path(), None).unwrap_err().to_string();
    assert!(e.contains("no tokenizer.json"), "{e}");
}
