//! An error caused by another keeps that cause as `source()`, typed, and quotes it on one line:
//! ONNX Runtime's error for a damaged graph, the tokenizer's for a damaged tokenizer.json, the
//! system's for an unreadable config, and the first test run's for a tokenizer larger than the
//! model's table (a fixture graph of 100 rows with the default model's 30,522-token tokenizer).

mod common;

use std::error::Error as _;
use std::path::Path;

use nornir_embed::{EmbedError, Embedder, EmbedderOptions};
use nornir_ep_select::Device;
use nornir_test_support::fixtures::{self, Kind};

fn load_error(dir: &Path) -> EmbedError {
    let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(1);
    Embedder::new(dir, &options).expect_err("a load error")
}

/// A fixture model folder with the default model's tokenizer.
fn folder(dir: &Path, vocab: usize) {
    fixtures::write_model(dir, Kind::NoTokenTypeIds, vocab);
    std::fs::copy(common::model_dir().join("tokenizer.json"), dir.join("tokenizer.json")).expect("tokenizer");
}

fn assert_quoted_once(e: &EmbedError) {
    let text = e.to_string();
    let cause = e.source().expect("a source").to_string();
    let cause_line = cause.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains(&cause_line), "{text:?} quotes {cause_line:?}");
    assert!(!text.contains('\n'), "one line: {text:?}");
}

#[test]
fn a_damaged_graph_keeps_onnx_runtimes_error() {
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 30522);
    std::fs::write(t.path().join("model.onnx"), b"not a protobuf at all").expect("write");
    let e = load_error(t.path());
    assert!(matches!(e, EmbedError::Session { .. }), "{e:?}");
    assert!(e.source().and_then(|s| s.downcast_ref::<ort::Error>()).is_some(), "{e:?}");
    assert_quoted_once(&e);
}

#[test]
fn a_damaged_tokenizer_keeps_the_tokenizers_error() {
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 30522);
    std::fs::write(t.path().join("tokenizer.json"), b"{\"version\": ").expect("write");
    let e = load_error(t.path());
    assert!(matches!(e, EmbedError::Tokenizer { source: Some(_), .. }), "{e:?}");
    assert!(e.to_string().contains("EOF while parsing"), "{e}");
    assert_quoted_once(&e);
}

#[test]
fn an_unreadable_config_keeps_the_io_error() {
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 30522);
    // A folder where config.json should be: reading it fails with EISDIR, not "not found".
    std::fs::create_dir(t.path().join("config.json")).expect("mkdir");
    let e = load_error(t.path());
    let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("an io::Error source");
    assert_eq!(io.kind(), std::io::ErrorKind::IsADirectory, "{e:?}");
    assert!(e.to_string().starts_with(&format!("model folder {}: config.json: ", t.path().display())), "{e}");
    assert_quoted_once(&e);
}

#[test]
fn a_failing_first_run_keeps_the_run_error() {
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 100);
    let e = load_error(t.path());
    assert!(matches!(e, EmbedError::Model { .. }), "{e:?}");
    assert!(e.to_string().contains("is tokenizer.json (30522 tokens) the model's own?"), "{e}");
    let run = e.source().and_then(|s| s.downcast_ref::<EmbedError>()).expect("the run's EmbedError");
    assert!(matches!(run, EmbedError::Inference { .. }), "{run:?}");
    assert!(run.source().and_then(|s| s.downcast_ref::<ort::Error>()).is_some(), "{run:?}");
}
