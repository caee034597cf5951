//! `parse` on the dual encoders' configs: the towers' defaults, the pooling rules, refusals.

use super::parse;
use crate::config::dual::{TextPool, VisionHead};
use crate::config::*;

#[test]
fn a_clip_config_takes_its_config_classes_defaults_where_it_is_silent() {
    let c = parse(
        r#"{"architectures":["CLIPModel"],"text_config":{},"vision_config":{"patch_size":16}}"#,
        "config.json",
        None,
    )
    .expect("parses");
    let d = c.dual.as_ref().expect("a dual encoder");
    assert_eq!(
        (c.family, c.head, c.hidden, c.layers, c.heads, c.max_positions),
        ("clip", Head::TextTower, 512, 12, 8, 77)
    );
    assert_eq!((d.vision.hidden, d.vision.layers, d.image.size, d.image.patch, d.dim), (768, 12, 224, 16, 512));
    assert_eq!(d.vision.max_positions, 14 * 14 + 1, "patches and the class token");
    assert_eq!(d.text_pool, TextPool::FirstOf(49407));
    assert!(matches!(d.vision_head, VisionHead::ClassToken { .. }));
    assert_eq!(c.activation, Activation::QuickGelu);
}

#[test]
fn clip_pools_as_its_eos_token_id_says_and_siglip_at_the_last_padded_position() {
    let legacy = r#"{"architectures":["CLIPModel"],"text_config":{"eos_token_id":2}}"#;
    let c = parse(legacy, "config.json", None).expect("parses");
    assert_eq!(c.dual.expect("dual").text_pool, TextPool::HighestId);
    let siglip = r#"{"architectures":["SiglipModel"],"text_config":{"max_position_embeddings":64,"pad_token_id":1}}"#;
    let c = parse(siglip, "config.json", None).expect("parses");
    let d = c.dual.expect("dual");
    assert_eq!(d.text_pool, TextPool::LastOfPadded { length: 64, pad: 1 });
    assert!(matches!(d.vision_head, VisionHead::AttentionPool));
    assert_eq!((c.activation, d.dim, d.vision.max_positions), (Activation::GeluTanh, 768, 196));
}

#[test]
fn a_dual_config_that_cannot_be_converted_is_refused_in_one_line() {
    for (config, needle) in [
        (r#"{"architectures":["CLIPModel"],"text_config":"small"}"#, "text_config \"small\", which must be an object"),
        (
            r#"{"architectures":["CLIPModel"],"vision_config":{"image_size":32,"patch_size":64}}"#,
            "vision_config.patch_size 64",
        ),
        (r#"{"architectures":["CLIPModel"],"vision_config":{"image_size":0}}"#, "vision_config.image_size 0"),
        (r#"{"architectures":["CLIPModel"],"vision_config":{"num_channels":4}}"#, "vision_config.num_channels 4"),
        (
            r#"{"architectures":["CLIPModel"],"text_config":{"hidden_size":30,"num_attention_heads":8}}"#,
            "not a multiple",
        ),
        (r#"{"architectures":["CLIPModel"],"text_config":{"hidden_act":"mish"}}"#, "hidden_act \"mish\""),
        (r#"{"architectures":["SiglipModel"],"text_config":{"projection_size":64}}"#, "share one width"),
    ] {
        let e = parse(config, "m/config.json", None).expect_err(config).to_string();
        assert!(e.starts_with("m/config.json ") && e.contains(needle), "{config}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// jina-clip-v2's config.json as published: the text tower's sizes are XLMRobertaFlashConfig's
/// defaults, the vision tower's JinaCLIPVisionConfig keys.
pub(super) const JINA_CLIP_V2: &str = r#"{"architectures":["JinaCLIPModel"],"model_type":"jina_clip","add_projections":false,
    "projection_dim":1024,"matryoshka_dimensions":[32,64,128,256,512,768,1024],
    "text_config":{"embed_dim":1024,"hf_model_name_or_path":"jinaai/jina-embeddings-v3",
        "hf_model_config_kwargs":{"load_trained_adapters":false,"lora_adaptations":["retrieval.query"],"lora_alpha":4,
            "lora_dropout_p":0.0,"lora_main_params_trainable":false,"lora_rank":4,"use_flash_attn":true},
        "default_lora_task":"retrieval.query","pooler_type":"mean_pooler","proj_type":null,"proj_bias":false},
    "vision_config":{"embed_dim":1024,"width":1024,"layers":24,"head_width":64,"mlp_ratio":2.6667,"patch_size":14,
        "image_size":512,"qkv_bias":true,"rope_embeddings":true,"pt_hw_seq_len":16,"intp_freq":true,
        "naive_swiglu":true,"subln":true,"x_attention":true,"post_norm":false,"ls_init_value":null,
        "proj_type":null,"patch_dropout":0.1,"fused_layer_norm":false}}"#;

#[test]
fn jina_clip_v2_reads_its_towers_from_both_config_classes() {
    let c = parse(JINA_CLIP_V2, "config.json", None).expect("parses");
    let d = c.dual.as_ref().expect("a dual encoder");
    assert_eq!(
        (c.family, c.head, c.hidden, c.layers, c.heads, c.vocab, c.max_positions),
        ("jina-clip", Head::TextTower, 1024, 24, 16, 250_002, 8194)
    );
    let lora = c.lora.as_ref().expect("the adapter");
    assert_eq!((lora.tasks.len(), lora.rank, lora.alpha, lora.fixed_task), (1, 4, 4.0, Some(0)));
    assert_eq!(d.text_pool, TextPool::Mean);
    assert!(d.text_projections.is_empty(), "the width is embed_dim and proj_type is null");
    // int(1024 * 2.6667) = 2730, 36 x 36 patches and the class token.
    assert_eq!((d.vision.hidden, d.vision.layers, d.vision.heads, d.vision.intermediate), (1024, 24, 16, 2730));
    assert_eq!((d.image.size, d.image.patch, d.vision.max_positions, d.dim), (512, 14, 36 * 36 + 1, 1024));
    let VisionHead::Eva(eva) = d.vision_head else { panic!("EVA02") };
    assert!(eva.sub_norms && eva.swiglu && eva.qkv_bias && !eva.layer_scale && eva.head.is_none());
    let rotary = eva.rotary.expect("rotary");
    assert_eq!((rotary.trained_side, rotary.interpolate), (16, true));
}

#[test]
fn a_jina_clip_config_that_cannot_be_converted_is_refused_in_one_line() {
    let with = |from: &str, to: &str| {
        assert!(JINA_CLIP_V2.contains(from), "{from}");
        JINA_CLIP_V2.replacen(from, to, 1)
    };
    for (config, needle) in [
        (with("jinaai/jina-embeddings-v3", "jinaai/jina-bert-flash-implementation"), "JinaBERT"),
        (
            with(r#""proj_type":null,"proj_bias""#, r#""proj_type":"conv","proj_bias""#),
            "text_config.proj_type \"conv\"",
        ),
        (with(r#""post_norm":false"#, r#""post_norm":true"#), "post_norm"),
        (with(r#""head_width":64"#, r#""head_width":2"#), "multiple of 4"),
        (with(r#""intp_freq":true"#, r#""intp_freq":false"#), "pt_hw_seq_len 16 without intp_freq"),
        (with(r#""default_lora_task":"retrieval.query""#, r#""default_lora_task":"separation""#), "not one of"),
        (with(r#""mlp_ratio":2.6667"#, r#""mlp_ratio":-1"#), "mlp_ratio -1"),
        (
            with(r#""vision_config":{"embed_dim":1024"#, r#""vision_config":{"embed_dim":768"#)
                .replace(r#""proj_type":null,"patch_dropout""#, r#""proj_type":"linear","patch_dropout""#),
            "share one width",
        ),
        (with(r#""vision_config":{"embed_dim":1024"#, r#""vision_config":{"embed_dim":768"#), "has no head"),
        (with(r#""pooler_type":"mean_pooler""#, r#""pooler_type":"cls_pooler""#), "pooler_type"),
        (with(r#""layers":24,"head"#, r#""layers":"many","head"#), "vision_config keys that do not read"),
    ] {
        let e = parse(&config, "m/config.json", None).expect_err(&config).to_string();
        assert!(e.starts_with("m/config.json ") && e.contains(needle), "{needle}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
