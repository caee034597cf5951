//! The tokenizer's tests: texts cut at whitespace, and the folder's length rule.

use super::*;

#[test]
fn cuts_at_whitespace_on_the_side_that_is_kept() {
    let long = format!("{} tail end", "word ".repeat(2000));
    let p = prefix_for_tokens(&long, 10);
    assert!(long.starts_with(p) && p.len() < long.len() && p.len() <= 4096 && !p.ends_with(' '), "{p:?}");
    let s = suffix_for_tokens(&long, 10);
    assert!(long.ends_with(s) && s.len() < long.len() && s.len() <= 4096 && !s.starts_with(' '), "{s:?}");
    assert!(s.ends_with("tail end"));
    let solid = "x".repeat(10_000);
    assert_eq!(suffix_for_tokens(&solid, 10), solid, "no whitespace: no safe cut");
    assert_eq!(suffix_for_tokens("short", 10), "short");
}

/// A tokenizer.json that truncates at 1e15 tokens is held to the model's positions, or to
/// MAX_TOKENS where config.json states none; a length the caller asks for stands.
#[test]
fn the_folders_length_never_passes_its_positions() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path();
    std::fs::write(dir.join("model.onnx"), b"").expect("model");
    let tokenizer = r#"{"version": "1.0", "truncation": {"direction": "Right", "max_length": 1000000000000000,
        "strategy": "LongestFirst", "stride": 0}, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"}}"#;
    std::fs::write(dir.join("tokenizer.json"), tokenizer).expect("tokenizer");
    let length = |asked: Option<usize>| {
        let folder = crate::values::ModelFolder::open(dir, None).expect("folder");
        ModelTokenizer::load(&folder, asked).expect("tokenizer").max_length()
    };
    assert_eq!(length(None), MAX_TOKENS);
    std::fs::write(dir.join("config.json"), r#"{"max_position_embeddings": 64}"#).expect("config");
    assert_eq!(length(None), 64);
    assert_eq!(length(Some(32)), 32);
    std::fs::write(dir.join("sentence_bert_config.json"), r#"{"max_seq_length": 128}"#).expect("st");
    assert_eq!(length(None), 64);
    // Asked for past the positions: refused by name, not failed inside ONNX Runtime.
    let folder = crate::values::ModelFolder::open(dir, None).expect("folder");
    let Err(e) = ModelTokenizer::load(&folder, Some(128)) else { panic!("128 tokens past 64 positions loaded") };
    let e = e.to_string();
    assert!(e.contains("positions end at 64"), "{e}");
}

#[test]
fn the_length_is_sentence_transformers_then_the_tokenizers_within_the_positions_and_says_which() {
    // all-MiniLM-L6-v2: max_seq_length 256, tokenizer.json 128, 512 positions: 256, as
    // sentence-transformers reads it.
    let (n, why) = length_rule(None, Some(256), Some(128), Some(512));
    assert_eq!(n, 256);
    assert!(
        why.starts_with("sentence-transformers' max_seq_length") && why.contains("tokenizer.json's truncation 128"),
        "{why}"
    );
    assert_eq!(length_rule(None, None, Some(128), Some(64)).0, 64, "the positions cap the tokenizer's");
    assert_eq!(length_rule(None, Some(512), None, Some(64)).0, 64, "and sentence-transformers'");
    assert_eq!(length_rule(None, None, Some(128), None).0, 128);
    assert_eq!(length_rule(None, None, None, Some(8192)).0, 8192);
    assert_eq!(length_rule(None, None, None, None).0, 512);
    assert!(length_rule(Some(100), Some(256), None, Some(512)).1.starts_with("asked for"));
}
