//! An error caused by another keeps that cause as `source()`, typed, and does not repeat it in its
//! own message, so walking the chain (anyhow's `{:#}`, `error_chain`) prints each cause once:
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

/// Each link of `e`'s chain appears exactly once in anyhow's `{:#}` and in `error_chain`, and
/// no error's own message quotes its cause.
fn assert_each_cause_once(e: EmbedError) {
    let one_line = |t: String| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut links = vec![one_line(e.to_string())];
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = one_line(c.to_string());
        assert!(
            !links.last().is_some_and(|outer| outer.contains(&text)),
            "{:?} repeats its cause {text:?}",
            links.last()
        );
        links.push(text);
        cause = c.source();
    }
    assert!(links.len() >= 2, "a cause: {links:?}");
    let chain = nornir_embed::error_chain(&e);
    assert!(!chain.contains('\n'), "one line: {chain:?}");
    let walked = one_line(format!("{:#}", anyhow::Error::new(e)));
    assert_eq!(walked, chain, "error_chain prints what anyhow's {{:#}} does");
    assert_eq!(walked, links.join(": "));
    for link in &links {
        assert_eq!(walked.matches(link.as_str()).count(), 1, "{link:?} appears once in {walked:?}");
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_damaged_graph_keeps_onnx_runtimes_error() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 30522);
    std::fs::write(t.path().join("model.onnx"), b"not a protobuf at all").expect("write");
    let e = load_error(t.path());
    assert!(matches!(e, EmbedError::Session { .. }), "{e:?}");
    assert!(e.source().and_then(|s| s.downcast_ref::<ort::Error>()).is_some(), "{e:?}");
    assert_each_cause_once(e);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_damaged_tokenizer_keeps_the_tokenizers_error() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 30522);
    std::fs::write(t.path().join("tokenizer.json"), b"{\"version\": ").expect("write");
    let e = load_error(t.path());
    assert!(matches!(e, EmbedError::Tokenizer { source: Some(_), .. }), "{e:?}");
    assert!(nornir_embed::error_chain(&e).contains("EOF while parsing"), "{e}");
    assert_each_cause_once(e);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn an_unreadable_config_keeps_the_io_error() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 30522);
    // A folder where config.json should be: reading it fails with EISDIR, not "not found".
    std::fs::create_dir(t.path().join("config.json")).expect("mkdir");
    let e = load_error(t.path());
    let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("an io::Error source");
    assert_eq!(io.kind(), std::io::ErrorKind::IsADirectory, "{e:?}");
    assert_eq!(e.to_string(), format!("model folder {}: config.json", t.path().display()));
    assert_each_cause_once(e);
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_failing_first_run_keeps_the_run_error() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    folder(t.path(), 100);
    let e = load_error(t.path());
    assert!(matches!(e, EmbedError::Model { .. }), "{e:?}");
    assert!(e.to_string().contains("is tokenizer.json (30522 tokens) the model's own?"), "{e}");
    let run = e.source().and_then(|s| s.downcast_ref::<EmbedError>()).expect("the run's EmbedError");
    assert!(matches!(run, EmbedError::Inference { .. }), "{run:?}");
    assert!(run.source().and_then(|s| s.downcast_ref::<ort::Error>()).is_some(), "{run:?}");
    let ort_text = run.source().expect("ort").to_string();
    assert_each_cause_once(e);
    assert!(!ort_text.is_empty());
}
