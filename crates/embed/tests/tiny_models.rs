//! The embedder on tiny fixture models built at test time (see `fixtures/mod.rs`), whose vectors
//! are known exactly: inputs as declared, pooled outputs used as they are, CLS and mean pooling,
//! int32 inputs, a dynamic-int8 graph run one text at a time, and a model that is not a text
//! model rejected at load time.

mod common;
use nornir_test_support::fixtures;

use std::path::Path;

use fixtures::{DIM, Kind, table_row, write_model};
use nornir_embed::{Embedder, EmbedderOptions, Pooling};
use nornir_ep_select::Device;

fn folder(dir: &Path, kind: Kind, pooling: &str) {
    let tokenizer = common::model_dir().join("tokenizer.json");
    std::fs::create_dir_all(dir.join("1_Pooling")).expect("mkdir");
    std::fs::copy(tokenizer, dir.join("tokenizer.json")).expect("copy tokenizer");
    let cfg = format!(r#"{{"word_embedding_dimension": {DIM}, "pooling_mode_{pooling}": true}}"#);
    std::fs::write(dir.join("1_Pooling/config.json"), cfg).expect("pooling config");
    write_model(dir, kind, 30522);
}

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)
}

fn token_ids(text: &str) -> Vec<usize> {
    let mut t = tokenizers::Tokenizer::from_file(common::model_dir().join("tokenizer.json")).expect("tokenizer");
    t.with_padding(None); // as the embedder does: the file's fixed padding is ignored
    t.encode(text, true).expect("encode").get_ids().iter().map(|&i| i as usize).collect()
}

fn expected(text: &str, pooling: Pooling) -> Vec<f32> {
    let ids = token_ids(text);
    let mut v = match pooling {
        Pooling::Cls => table_row(ids[0]).to_vec(),
        Pooling::Last => table_row(ids[ids.len() - 1]).to_vec(),
        Pooling::Mean => {
            let mut sum = [0f32; DIM];
            for &i in &ids {
                for (s, x) in sum.iter_mut().zip(table_row(i)) {
                    *s += x;
                }
            }
            sum.iter().map(|s| s / ids.len() as f32).collect()
        }
        other => panic!("no expected vector for {other} pooling in this test"),
    };
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-5), "got {got:?}, want {want:?}");
}

const TEXTS: [&str; 3] = ["hello world", "a longer sentence that pads the others", ""];

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn no_token_type_ids_mean_pooling_with_padding_in_the_batch() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, "mean_tokens");
    let e = Embedder::new(t.path(), &options()).expect("load");
    assert_eq!(e.model_info().inputs, ["input_ids", "attention_mask"]);
    assert_eq!(e.dimension(), DIM);
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &expected(text, Pooling::Mean));
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cls_and_last_token_pooling() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, "cls_token");
    let e = Embedder::new(t.path(), &options()).expect("load");
    assert_eq!(e.model_info().pooling, Pooling::Cls);
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &expected(text, Pooling::Cls));
    }
    let last = Embedder::new(t.path(), &options().with_pooling(Pooling::Last)).expect("override");
    let got = last.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &expected(text, Pooling::Last));
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_pooled_output_is_used_as_is() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::PooledOutput, "mean_tokens");
    let e = Embedder::new(t.path(), &options()).expect("load");
    assert!(e.model_info().output_is_pooled);
    assert_eq!(e.model_info().output, "sentence_embedding");
    // One text per call: the fixture's graph mean includes padding, so batch alone.
    for text in TEXTS {
        assert_close(e.embed(&[text]).expect("embed").row(0), &expected(text, Pooling::Mean));
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn int32_inputs() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::Int32Inputs, "mean_tokens");
    let e = Embedder::new(t.path(), &options()).expect("load");
    let got = e.embed(&TEXTS).expect("embed");
    for (i, text) in TEXTS.iter().enumerate() {
        assert_close(got.row(i), &expected(text, Pooling::Mean));
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn mismatches_are_load_time_errors() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::ImageModel, "mean_tokens");
    let e = Embedder::new(t.path(), &options()).expect_err("an image model").to_string();
    assert!(e.contains("pixel_values") && e.contains("image"), "{e}");

    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, "mean_tokens");
    write_model(t.path(), Kind::NoTokenTypeIds, 100);
    let e = Embedder::new(t.path(), &options()).expect_err("vocabulary mismatch").to_string();
    assert!(e.contains("first test text") && e.contains("30522"), "{e}");

    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::NoTokenTypeIds, "mean_tokens");
    std::fs::write(t.path().join("config.json"), r#"{"hidden_size": 384}"#).expect("config");
    let e = Embedder::new(t.path(), &options()).expect_err("width mismatch").to_string();
    assert!(e.contains("width 4") && e.contains("384"), "{e}");

    std::fs::write(t.path().join("model.onnx"), b"").expect("empty model");
    std::fs::remove_file(t.path().join("config.json")).expect("rm");
    let e = Embedder::new(t.path(), &options()).expect_err("empty model file").to_string();
    assert!(e.contains("could not create a session"), "{e}");
}

/// A graph that quantizes activations with one scale per tensor (as third-party dynamic-int8
/// exports do) gives a text a different vector next to other texts and padding; nornir runs each
/// text alone, says why, and so a text's vector is the same in bulk and alone.
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_dynamic_int8_graph_runs_one_text_at_a_time() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), Kind::DynamicInt8, "mean_tokens");
    let e = Embedder::new(t.path(), &options().with_threads(2).with_workers(2)).expect("load");
    let why = e.model_info().one_text_per_run.clone().expect("one text per run");
    assert!(why.contains("DynamicQuantizeLinear x1"), "{why}");
    let texts: Vec<String> = (0..200)
        .map(|i| match i % 4 {
            0 => "a".to_owned(),
            1 => format!("short text {i}"),
            2 => "a much longer text that pads the short ones and widens the range ".repeat(1 + i % 7),
            _ => format!("{i} {}", "zebra quartz ".repeat(i % 5)),
        })
        .collect();
    let bulk = e.embed(&texts).expect("bulk");
    for (i, text) in texts.iter().enumerate() {
        let alone = e.embed(&[text]).expect("alone");
        assert_eq!(bulk.row(i), alone.row(0), "text {i} {text:?}: bulk and alone differ");
    }
}
