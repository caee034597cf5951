//! The model contract on fixture graphs built at test time (see nornir-test-support's
//! `fixtures`): which output is read, float16/bfloat16 outputs, every sentence-transformers pooling
//! mode and `include_prompt`, `modules.json` and normalisation, prompts, jina-v3 tasks,
//! position_ids with left padding, Matryoshka `--dim`, and an 8,192-position model with real
//! attention. Expected vectors are computed here from the fixture's tables, not by the embedder.

mod common;

use std::path::Path;

use nornir_embed::{CallOptions, Chunking, EmbedError, Embedder, EmbedderOptions, Pooling};
use nornir_ep_select::Device;
use nornir_test_support::fixtures::{self, DIM, Kind, POSITION_DIRECTION, TASKS, position_row, table_row, task_row};
use serde_json::{Value, json};

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)
}

fn default_tokenizer() -> Value {
    let text = std::fs::read_to_string(common::model_dir().join("tokenizer.json")).expect("tokenizer");
    serde_json::from_str(&text).expect("tokenizer json")
}

/// A model folder: the fixture graph, the default model's tokenizer (changed by `tokenizer`),
/// and config files given as (path, JSON).
fn folder(dir: &Path, kind: Kind, tokenizer: impl FnOnce(&mut Value), files: &[(&str, Value)]) {
    fixtures::write_model(dir, kind, 30522);
    let mut t = default_tokenizer();
    tokenizer(&mut t);
    std::fs::write(dir.join("tokenizer.json"), t.to_string()).expect("tokenizer");
    for (name, value) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, value.to_string()).expect("config");
    }
}

fn pooling_config(mode: &str) -> (&'static str, Value) {
    ("1_Pooling/config.json", json!({ "word_embedding_dimension": DIM, format!("pooling_mode_{mode}"): true }))
}

/// Token ids as the embedder makes them: the tokenizer's own, with its fixed padding off.
fn ids(text: &str) -> Vec<usize> {
    let mut t = tokenizers::Tokenizer::from_file(common::model_dir().join("tokenizer.json")).expect("tokenizer");
    t.with_padding(None);
    t.with_truncation(None).expect("no truncation");
    t.encode(text, true).expect("encode").get_ids().iter().map(|&i| i as usize).collect()
}

fn rows(text: &str) -> Vec<[f32; DIM]> {
    ids(text).into_iter().map(table_row).collect()
}

fn mean(rows: &[[f32; DIM]]) -> Vec<f32> {
    (0..DIM).map(|k| rows.iter().map(|r| r[k]).sum::<f32>() / rows.len() as f32).collect()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn assert_close(got: &[f32], want: &[f32], tolerance: f32) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() <= tolerance), "got {got:?}, want {want:?}");
}

const TEXTS: [&str; 3] = ["hello world", "a longer sentence that pads the others in its batch", "x"];

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn integer_outputs_are_passed_over_and_the_output_can_be_named() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::IntegerOutputsFirst, |_| {}, &[]);
    let e = Embedder::new(t.path(), &options()).expect("load");
    let info = e.model_info();
    assert_eq!((info.output.as_str(), info.output_is_pooled), ("onnx::Shape_422", false));
    assert!(info.output_reason.contains("passed over") && info.output_reason.contains("\"output\""), "{info:?}");
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &unit(mean(&rows(text))), 1e-5);
    }

    let pooled = Embedder::new(t.path(), &options().with_output_name("461")).expect("named output");
    assert!(pooled.model_info().output_is_pooled && pooled.model_info().output_reason.contains("chosen by the caller"));
    // The graph's own mean counts padding: one text per call.
    assert_close(pooled.embed(&["hello world"]).expect("embed").row(0), &unit(mean(&rows("hello world"))), 1e-5);

    let e = Embedder::new(t.path(), &options().with_output_name("output")).expect_err("an integer output");
    assert!(e.to_string().contains("floating-point"), "{e}");
    let e = Embedder::new(t.path(), &options().with_output_name("pooled")).expect_err("no such output");
    assert!(matches!(e, EmbedError::InvalidOption { option: "output_name", .. }), "{e}");
    assert!(e.to_string().contains("no output \"pooled\"") && e.to_string().contains("\"461\""), "{e}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn float16_and_bfloat16_outputs_are_pooled_in_f32() {
    nornir_test_support::needs_assets!();
    for (kind, tolerance) in [(Kind::Float16Output, 2e-3), (Kind::Bfloat16Output, 2e-2)] {
        let t = tempfile::tempdir().expect("tempdir");
        folder(t.path(), kind, |_| {}, &[pooling_config("mean_tokens")]);
        let e = Embedder::new(t.path(), &options()).expect("load");
        let got = e.embed(&TEXTS).expect("embed");
        for (i, text) in TEXTS.iter().enumerate() {
            assert_close(got.row(i), &unit(mean(&rows(text))), tolerance);
        }
    }
}

/// sentence-transformers' pooling, written out again from its definitions.
fn pooled(rows: &[[f32; DIM]], mode: Pooling, skip: usize) -> Vec<f32> {
    let kept = &rows[skip..];
    match mode {
        Pooling::Mean => mean(kept),
        Pooling::Max => (0..DIM).map(|k| kept.iter().map(|r| r[k]).fold(f32::MIN, f32::max)).collect(),
        Pooling::MeanSqrtLen => {
            (0..DIM).map(|k| kept.iter().map(|r| r[k]).sum::<f32>() / (kept.len() as f32).sqrt()).collect()
        }
        Pooling::WeightedMean => {
            let w = |i: usize| (skip + i + 1) as f32;
            let total: f32 = (0..kept.len()).map(w).sum();
            (0..DIM).map(|k| kept.iter().enumerate().map(|(i, r)| w(i) * r[k]).sum::<f32>() / total).collect()
        }
        Pooling::Last => rows[rows.len() - 1].to_vec(),
        Pooling::Cls => rows[0].to_vec(),
        other => panic!("{other} is not in this test"),
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_pooling_mode_of_the_pooling_config() {
    nornir_test_support::needs_assets!();
    for (key, mode) in [
        ("max_tokens", Pooling::Max),
        ("mean_sqrt_len_tokens", Pooling::MeanSqrtLen),
        ("weightedmean_tokens", Pooling::WeightedMean),
        ("lasttoken", Pooling::Last),
        ("cls_token", Pooling::Cls),
    ] {
        let t = tempfile::tempdir().expect("tempdir");
        folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &[pooling_config(key)]);
        let e = Embedder::new(t.path(), &options()).expect("load");
        assert_eq!(e.model_info().pooling, mode);
        let got = e.embed(&TEXTS).expect("embed");
        for (i, text) in TEXTS.iter().enumerate() {
            assert_close(got.row(i), &unit(pooled(&rows(text), mode, 0)), 1e-5);
        }
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn prompts_and_include_prompt_false() {
    nornir_test_support::needs_assets!();
    let prompts = json!({ "prompts": { "query": "query: ", "passage": "passage: " }, "default_prompt_name": "query" });
    let pooling = json!({ "pooling_mode_mean_tokens": true, "include_prompt": false });
    let t = tempfile::tempdir().expect("tempdir");
    let files = [("config_sentence_transformers.json", prompts.clone()), ("1_Pooling/config.json", pooling)];
    folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &files);
    let e = Embedder::new(t.path(), &options()).expect("load");
    // The prompt's tokens as sentence-transformers counts them: with [CLS], without its [SEP].
    let skip = ids("query: ").len() - 1;
    assert_eq!(e.model_info().pooling_skips_prompt_tokens, skip);
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &unit(pooled(&rows(&format!("query: {text}")), Pooling::Mean, skip)), 1e-5);
    }

    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &[("config_sentence_transformers.json", prompts)]);
    let default = Embedder::new(t.path(), &options()).expect("default prompt");
    let passage = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_prompt_name("passage")))
        .expect("named prompt");
    let own = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_prompt("e5 query: ")))
        .expect("own prompt");
    for text in TEXTS {
        let one = |e: &Embedder| e.embed(&[text]).expect("embed").row(0).to_vec();
        assert_close(&one(&default), &unit(mean(&rows(&format!("query: {text}")))), 1e-5);
        assert_close(&one(&passage), &unit(mean(&rows(&format!("passage: {text}")))), 1e-5);
        assert_close(&one(&own), &unit(mean(&rows(&format!("e5 query: {text}")))), 1e-5);
    }
    let e = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_prompt_name("search")))
        .expect_err("unknown prompt");
    assert!(e.to_string().contains("\"passage\", \"query\""), "{e}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn modules_json_decides_normalisation_and_unknown_modules_are_refused() {
    nornir_test_support::needs_assets!();
    let transformer = json!({ "idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer" });
    let pooling = json!({ "idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling" });
    let normalize =
        json!({ "idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize" });
    let dense = json!({ "idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense" });
    let raw = mean(&rows("hello world"));
    for (modules, want) in [
        (Some(json!([transformer, pooling])), raw.clone()),
        (Some(json!([transformer, pooling, normalize])), unit(raw.clone())),
        (None, unit(raw.clone())),
    ] {
        let t = tempfile::tempdir().expect("tempdir");
        let mut files = vec![pooling_config("mean_tokens")];
        files.extend(modules.clone().map(|m| ("modules.json", m)));
        folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &files);
        let e = Embedder::new(t.path(), &options()).expect("load");
        assert_close(e.embed(&["hello world"]).expect("embed").row(0), &want, 1e-5);
        let forced = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_normalize(true)))
            .expect("--normalize");
        assert_close(forced.embed(&["hello world"]).expect("embed").row(0), &unit(raw.clone()), 1e-5);
        let off = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_normalize(false)))
            .expect("--no-normalize");
        assert_close(off.embed(&["hello world"]).expect("embed").row(0), &raw, 1e-5);
    }
    // A module nornir does not apply is refused by name; a Dense module is applied, so one
    // without its folder is refused for that (crates/embed/tests/dense.rs applies real ones).
    let layer_norm =
        json!({ "idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm" });
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &[("modules.json", json!([transformer, pooling, layer_norm]))]);
    let e = Embedder::new(t.path(), &options()).expect_err("a LayerNorm module").to_string();
    assert!(e.contains("sentence_transformers.models.LayerNorm") && e.contains("refused"), "{e}");
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &[("modules.json", json!([transformer, pooling, dense]))]);
    let e = Embedder::new(t.path(), &options()).expect_err("a Dense module without its folder").to_string();
    assert!(e.contains("2_Dense/config.json is missing"), "{e}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn jina_v3_tasks_feed_task_id_and_their_instruction() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let config = json!({
        "hidden_size": DIM,
        "lora_adaptations": TASKS,
        "task_instructions": { "retrieval.query": "Represent the query for retrieving evidence documents: " }
    });
    folder(t.path(), Kind::TaskInput, |_| {}, &[("config.json", config), pooling_config("mean_tokens")]);
    let e = Embedder::new(t.path(), &options()).expect_err("no task").to_string();
    assert!(e.contains("invalid `task`") && e.contains("\"text-matching\""), "{e}");
    let with_task = |text: &str, task: usize| -> Vec<f32> {
        let r: Vec<[f32; DIM]> = rows(text).iter().map(|r| std::array::from_fn(|k| r[k] + task_row(task)[k])).collect();
        unit(mean(&r))
    };
    let passage = Embedder::new(t.path(), &options().with_task("retrieval.passage")).expect("load");
    assert_eq!(passage.model_info().output, "text_embeds");
    assert_eq!(passage.model_info().output_reason, "named text_embeds");
    let query = Embedder::new(t.path(), &options().with_task("retrieval.query")).expect("load");
    let (p, q) = (passage.embed(&TEXTS).expect("embed"), query.embed(&TEXTS).expect("embed"));
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(p.row(i), &with_task(text, 1), 1e-5);
        let instructed = format!("Represent the query for retrieving evidence documents: {text}");
        assert_close(q.row(i), &with_task(&instructed, 0), 1e-5);
    }
    let e = Embedder::new(t.path(), &options().with_task("summarize")).expect_err("unknown task").to_string();
    assert!(e.contains("unknown task"), "{e}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn position_ids_and_left_padding_with_last_token_pooling() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let left = |t: &mut Value| t["padding"]["direction"] = json!("Left");
    folder(t.path(), Kind::PositionIds, left, &[pooling_config("lasttoken")]);
    let e = Embedder::new(t.path(), &options()).expect("load");
    assert!(e.model_info().left_padding);
    assert_eq!(e.model_info().inputs, ["input_ids", "attention_mask", "position_ids"]);
    // Token i is table[id] + (i + 1) x POSITION_DIRECTION: the last of n real tokens gets n,
    // wherever the padding is (the padding's own id has the same table row as [SEP]).
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        let r = rows(text);
        let n = r.len() as f32;
        let last: Vec<f32> = r[r.len() - 1].iter().zip(POSITION_DIRECTION).map(|(x, d)| x + n * d).collect();
        assert_close(got.row(i), &unit(last), 1e-5);
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn matryoshka_dim_keeps_the_first_dimensions_then_normalises() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, |_| {}, &[pooling_config("mean_tokens")]);
    let e = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_dimensions(2))).expect("load");
    assert_eq!((e.dimension(), e.model_info().model_dimension), (2, DIM));
    let got = e.embed(&TEXTS).expect("embed");
    assert_eq!(got.dim(), 2);
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &unit(mean(&rows(text))[..2].to_vec()), 1e-5);
    }
    let e = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_dimensions(DIM + 1)))
        .expect_err("too wide")
        .to_string();
    assert!(e.contains("wider than the model's 4-dimensional"), "{e}");
    let e = Embedder::new(t.path(), &options().with_call(CallOptions::new().with_dimensions(0)))
        .expect_err("zero")
        .to_string();
    assert!(e.contains("at least 1"), "{e}");
}

/// The jina-v2-like graph by hand: positions, then one head of attention over real tokens.
fn attended(text: &str) -> Vec<f32> {
    unit(mean(&attention(&ids(text))))
}

/// The jina-v2-like graph's token vectors for `ids` run alone.
fn attention(ids: &[usize]) -> Vec<[f32; DIM]> {
    let h: Vec<[f32; DIM]> = ids
        .iter()
        .copied()
        .enumerate()
        .map(|(p, id)| std::array::from_fn(|k| table_row(id)[k] + position_row(p)[k]))
        .collect();
    let dot = |a: &[f32; DIM], b: &[f32; DIM]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let out: Vec<[f32; DIM]> = h
        .iter()
        .map(|hi| {
            let scores: Vec<f32> = h.iter().map(|hj| dot(hi, hj)).collect();
            let top = scores.iter().copied().fold(f32::MIN, f32::max);
            let w: Vec<f32> = scores.iter().map(|s| (s - top).exp()).collect();
            let total: f32 = w.iter().sum();
            std::array::from_fn(|k| h.iter().zip(&w).map(|(hj, wj)| wj * hj[k]).sum::<f32>() / total)
        })
        .collect();
    out
}

/// Late chunking on the jina-v2-like graph: one run over the whole document, and each chunk's
/// vector the mean of that run's token vectors over the chunk's tokens, computed here by hand;
/// the tokens are found from each chunk's span, so the spans are checked too.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn late_chunks_pool_one_run_of_token_vectors_over_their_spans() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let no_truncation = |t: &mut Value| t["truncation"] = Value::Null;
    let config = json!({ "max_position_embeddings": fixtures::POSITIONS, "hidden_size": DIM });
    folder(t.path(), Kind::LongContext, no_truncation, &[("config.json", config), pooling_config("mean_tokens")]);
    let e = Embedder::new(t.path(), &options()).expect("load");
    let text: String = (0..300).map(|i| ["fjord ", "glacier ", "valley ", "ålesund ", "naïve "][i % 5]).collect();
    let late = CallOptions::new()
        .with_normalize(false)
        .with_chunking(Chunking::new().with_window(40).with_overlap(6).with_late(true));
    e.reset_stats();
    let got = e.embed_with(&[text.as_str()], &late).expect("late chunks");
    assert_eq!(e.stats().batches, 1, "a document that fits the model is one run");
    let all = ids(&text);
    let run = attention(&all);
    let mut t = tokenizers::Tokenizer::from_file(common::model_dir().join("tokenizer.json")).expect("tokenizer");
    t.with_truncation(None).expect("no truncation");
    let offsets: Vec<(usize, usize)> = t.encode(text.as_str(), true).expect("encode").get_offsets().to_vec();
    let chunks: Vec<_> = got.chunks(0).collect();
    assert!(chunks.len() > 5, "{} chunks", chunks.len());
    for (chunk, vector) in &chunks {
        // The content tokens inside the span (position 0 is [CLS], the last [SEP]).
        let inside: Vec<usize> =
            (1..all.len() - 1).filter(|&p| offsets[p].0 >= chunk.start && offsets[p].1 <= chunk.end).collect();
        assert_eq!(inside.len(), chunk.tokens, "{chunk:?}");
        assert!(chunk.tokens <= 38, "40 tokens less [CLS] and [SEP]: {chunk:?}");
        let want = mean(&inside.iter().map(|&p| run[p]).collect::<Vec<_>>());
        assert_close(vector, &want, 1e-4);
    }
    // The document: the chunks' token-weighted mean.
    let total: usize = chunks.iter().map(|(c, _)| c.tokens).sum();
    let doc: Vec<f32> =
        (0..DIM).map(|k| chunks.iter().map(|(c, v)| v[k] * c.tokens as f32).sum::<f32>() / total as f32).collect();
    assert_close(got.row(0), &doc, 1e-4);
    // Not late: each chunk runs alone, so its vector is its own text's.
    let plain = CallOptions::new().with_chunking(Chunking::new().with_window(40).with_overlap(6));
    let separate = e.embed_with(&[text.as_str()], &plain).expect("chunks");
    for (chunk, vector) in separate.chunks(0) {
        assert_close(vector, &attended(&text[chunk.start..chunk.end]), 1e-4);
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn long_context_uses_all_8192_positions() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let no_truncation = |t: &mut Value| t["truncation"] = Value::Null;
    let config = json!({ "max_position_embeddings": fixtures::POSITIONS, "hidden_size": DIM });
    folder(t.path(), Kind::LongContext, no_truncation, &[("config.json", config), pooling_config("mean_tokens")]);
    let e = Embedder::new(t.path(), &options()).expect("load");
    assert_eq!(e.model_info().max_length, 8192);
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &attended(text), 1e-4);
    }
    // 9,000 words: truncated to [CLS] + 8,190 words + [SEP], every position of the table used.
    let long = "word ".repeat(9000);
    let cut = "word ".repeat(8190);
    e.reset_stats();
    let both = e.embed(&[long.as_str(), cut.as_str()]).expect("embed long texts");
    assert_close(both.row(0), both.row(1), 1e-5);
    assert_eq!(e.stats().batches, 2, "two 8,192-token texts run one at a time");
}
