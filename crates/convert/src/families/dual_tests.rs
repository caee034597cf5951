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
