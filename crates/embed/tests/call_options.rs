//! Per-call options on the real default model and CPU ONNX Runtime: a call's prompt, width,
//! normalisation and truncation give what an embedder built with them gives, and calls with
//! different options still share batches.

mod common;

use std::path::Path;

use common::{cosine, join_all, model_dir, parity_sample};
use nornir_embed::{CallOptions, EmbedError, Embedder, EmbedderOptions, Truncation};
use nornir_ep_select::Device;

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(2)
}

/// The default model with BGE/E5-style prompts, and a pooling that leaves the prompt out
/// (`include_prompt: false`, as instructor-style models have it), so a prompt's token count
/// matters too.
fn prompted_model(dir: &Path) {
    let model = model_dir();
    for f in ["model.onnx", "tokenizer.json", "config.json", "modules.json", "sentence_bert_config.json"] {
        std::os::unix::fs::symlink(model.join(f), dir.join(f)).expect("link");
    }
    std::fs::create_dir(dir.join("1_Pooling")).expect("pooling dir");
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        r#"{"word_embedding_dimension":384,"pooling_mode_mean_tokens":true,"include_prompt":false}"#,
    )
    .expect("pooling");
    std::fs::write(
        dir.join("config_sentence_transformers.json"),
        r#"{"prompts":{"query":"Represent this sentence for searching relevant passages: ","passage":""},"default_prompt_name":null}"#,
    )
    .expect("prompts");
}

fn assert_rows_match(a: &nornir_embed::Embeddings, b: &nornir_embed::Embeddings, what: &str) {
    assert_eq!((a.len(), a.dim()), (b.len(), b.dim()), "{what}: shape");
    for i in 0..a.len() {
        let c = cosine(a.row(i), b.row(i));
        assert!(c >= 0.9999, "{what}: row {i} cosine {c}");
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_call_prompt_gives_the_vectors_of_an_embedder_built_with_it() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    prompted_model(t.path());
    let texts = ["what is a fjord?", "how do glaciers carve valleys", "what is a fjord?"];
    let plain = Embedder::new(t.path(), &options()).expect("load");
    let built = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_prompt_name("query")))
        .expect("load with prompt");
    assert!(built.model_info().pooling_skips_prompt_tokens > 0, "the fixture leaves the prompt out of the pooling");
    let by_name = plain.embed_with(&texts, &CallOptions::new().with_prompt_name("query")).expect("by name");
    assert_rows_match(&by_name, &built.embed(&texts).expect("built"), "prompt by name");
    let text = "Represent this sentence for searching relevant passages: ";
    let by_text = plain.embed_with(&texts, &CallOptions::new().with_prompt(text)).expect("by text");
    assert_rows_match(&by_text, &by_name, "prompt by text");
    assert!(by_text.token_count(0) > plain.embed(&texts).expect("plain").token_count(0), "the prompt was read");
    // The embedder's own prompt is turned off for one call by an empty one.
    let none = built.embed_with(&texts, &CallOptions::new().with_prompt("")).expect("no prompt");
    assert_rows_match(&none, &plain.embed(&texts).expect("plain"), "empty prompt");
    let e = plain.embed_with(&texts, &CallOptions::new().with_prompt_name("search")).unwrap_err();
    assert!(
        matches!(e, EmbedError::InvalidOption { option: "prompt_name", .. })
            && e.to_string().contains("\"passage\", \"query\""),
        "{e}"
    );
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_call_chooses_its_width_and_normalisation() {
    nornir_test_support::needs_assets!();
    let (texts, _) = parity_sample();
    let raw =
        Embedder::new(&model_dir(), &options().with_call(CallOptions::new().with_normalize(false))).expect("load raw");
    let unit = Embedder::new(&model_dir(), &options()).expect("load");
    let full = raw.embed(&texts).expect("raw");
    let cut = unit.embed_with(&texts, &CallOptions::new().with_dimensions(128)).expect("128, normalised");
    let cut_raw = unit.embed_with(&texts, &CallOptions::new().with_dimensions(128).with_normalize(false)).expect("raw");
    assert_eq!((cut.dim(), cut_raw.dim(), unit.dimension()), (128, 128, 384));
    for i in 0..texts.len() {
        let head = &full.row(i)[..128];
        assert!(cosine(cut.row(i), head) >= 0.9999 && cosine(cut_raw.row(i), head) >= 0.9999, "row {i}");
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm(cut.row(i)) - 1.0).abs() < 1e-4, "row {i} is normalised");
        assert!((norm(cut_raw.row(i)) - norm(head)).abs() < 1e-3 * norm(head), "row {i} is raw");
    }
    for bad in [0, 385] {
        let e = unit.embed_with(&texts, &CallOptions::new().with_dimensions(bad)).unwrap_err();
        assert!(e.to_string().contains("between 1 and 384"), "{e}");
    }
    // The embedder kind's handle makes the same rows; the other kinds' handles are refused once,
    // with the wrong-kind error their calls give.
    let Ok(nornir_embed::KindHandle::Embedder(handle)) = unit.by_kind() else { panic!("an embedder's handle") };
    let options = CallOptions::new().with_dimensions(128);
    assert_eq!(handle.embed_with(&texts, &options).expect("handle").as_slice(), cut.as_slice());
    let refused = unit.sparse_encoder().expect_err("a sparse encoder's handle");
    assert!(matches!(refused, nornir_embed::EmbedError::WrongKind { call: "embed_sparse", .. }), "{refused}");
    assert!(unit.cross_encoder().is_err() && unit.multi_vector_encoder().is_err());
    assert!(unit.image_embedder().expect_err("no vision graph").to_string().contains("embeds text only"));
}

/// A long text of plain lower-case words, whose tokens decode back to the same words.
fn long_text(words: usize) -> String {
    let vocab = ["river", "stone", "north", "green", "light", "house", "water", "field", "bread", "cloud", "winter"];
    (0..words).map(|i| vocab[(i * 7 + i / 3) % vocab.len()]).collect::<Vec<_>>().join(" ")
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn truncation_keeps_the_side_the_call_asks_for_or_refuses() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options()).expect("load");
    let max = e.model_info().max_length;
    let mut tokenizer = tokenizers::Tokenizer::from_file(model_dir().join("tokenizer.json")).expect("tokenizer");
    tokenizer.with_truncation(None).expect("no truncation");
    // Past the 16 KB that is tokenized from the kept side only.
    for words in [600, 4000] {
        let text = format!("start {}", long_text(words));
        let ids = tokenizer.encode(text.as_str(), false).expect("encode").get_ids().to_vec();
        let decode = |ids: &[u32]| tokenizer.decode(ids, true).expect("decode");
        let head = decode(&ids[..max - 2]);
        let tail = decode(&ids[ids.len() - (max - 2)..]);
        let right = e.embed_with(&[text.as_str()], &CallOptions::new().with_truncation(Truncation::Right)).expect("r");
        let left = e.embed_with(&[text.as_str()], &CallOptions::new().with_truncation(Truncation::Left)).expect("l");
        assert!(right.truncated(0) && left.truncated(0) && left.token_count(0) == Some(max), "{words} words");
        let c = cosine(right.row(0), e.embed(&[head.as_str()]).expect("head").row(0));
        assert!(c >= 0.9999, "{words} words: right truncation keeps the start ({c})");
        let c = cosine(left.row(0), e.embed(&[tail.as_str()]).expect("tail").row(0));
        assert!(c >= 0.9999, "{words} words: left truncation keeps the end ({c})");
        assert!(cosine(left.row(0), right.row(0)) < 0.9999, "the two sides differ");

        let refuse = CallOptions::new().with_truncation(Truncation::Refuse);
        let call = ["short", "short", text.as_str(), "short too"];
        match e.embed_with(&call, &refuse) {
            Err(EmbedError::TooLong { index, tokens, exact, max_length, .. }) => {
                assert_eq!((index, tokens, exact, max_length), (2, ids.len() + 2, true, max), "{words} words");
            }
            other => panic!("{words} words: expected TooLong, got {other:?}"),
        }
        assert_eq!(e.embed_with(&["short"], &refuse).expect("a short text passes").len(), 1);
    }
}

/// The embedder's defaults are a `CallOptions`: its long-text choice and its `max_wait` apply to
/// every call that makes none of its own, and a call's own choice replaces the default whole.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn an_embedders_long_text_default_applies_to_calls_that_make_no_choice() {
    nornir_test_support::needs_assets!();
    let text = format!("start {}", long_text(600));
    let refusing = options().with_call(CallOptions::new().with_truncation(Truncation::Refuse));
    let e = Embedder::new(&model_dir(), &refusing).expect("load");
    assert!(matches!(e.embed(&[text.as_str()]), Err(EmbedError::TooLong { index: 0, .. })), "the default refuses");
    let right = e.embed_with(&[text.as_str()], &CallOptions::new().with_truncation(Truncation::Right)).expect("r");
    assert!(right.truncated(0), "a call's own truncation wins");
    let chunked = options().with_call(CallOptions::new().with_chunking(nornir_embed::Chunking::new()));
    let e = Embedder::new(&model_dir(), &chunked).expect("load");
    let rows = e.embed(&[text.as_str()]).expect("chunked by default");
    assert!(rows.is_chunked() && rows.chunks(0).count() > 1, "the default chunks");
    let refused = e.embed_with(&[text.as_str()], &CallOptions::new().with_truncation(Truncation::Refuse));
    assert!(matches!(refused, Err(EmbedError::TooLong { .. })), "a call that refuses is not chunked by the default");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn calls_with_different_options_share_batches() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    prompted_model(t.path());
    let (texts, _) = parity_sample();
    let e = Embedder::new(t.path(), &options().with_workers(1)).expect("load");
    let query = CallOptions::new().with_prompt_name("query");
    let passage = CallOptions::new().with_prompt_name("passage").with_dimensions(256);
    let calls: Vec<(&[String], &CallOptions)> =
        texts.chunks(2).enumerate().map(|(k, c)| (c, if k % 2 == 0 { &query } else { &passage })).collect();
    let alone: Vec<_> = calls.iter().map(|(c, o)| e.embed_with(c, o).expect("alone")).collect();
    e.reset_stats();
    let together = join_all(calls.iter().map(|(c, o)| e.embed_with_async(c, o)).collect());
    let batches = e.stats().batches;
    for (k, (a, b)) in alone.iter().zip(together).enumerate() {
        assert_rows_match(a, &b.expect("together"), &format!("call {k}"));
    }
    assert!(batches < calls.len() as u64, "{} calls ran in {batches} batches: the options split them", calls.len());
}
