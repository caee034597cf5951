//! One ONNX Runtime per process: a second embedder that names another library gets an error, never
//! the first library in silence. Its own process, since the first `Embedder` loads the library.

mod common;

use std::path::PathBuf;

use nornir_embed::{EmbedError, Embedder, EmbedderOptions};
use nornir_ep_select::Device;
use nornir_test_support::env_path;

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_second_embedder_naming_another_library_is_an_error() {
    nornir_test_support::needs_assets!();
    let model = common::model_dir();
    let with = |ort: PathBuf| EmbedderOptions::default().with_device(Device::Cpu).with_ort_library(ort);
    let first = Embedder::new(&model, &with(env_path("NORNIR_TEST_ORT_CPU"))).expect("the first embedder loads");
    assert!(Embedder::new(&model, &with(env_path("NORNIR_TEST_ORT_CPU"))).is_ok(), "the same library again is fine");
    match Embedder::new(&model, &with(env_path("NORNIR_TEST_ORT_GPU"))) {
        Err(e @ EmbedError::OrtAlreadyLoaded { .. }) => {
            let text = e.to_string();
            assert!(text.contains("one ONNX Runtime per process"), "{text}");
            assert!(text.contains(&first.report().ort.path.display().to_string()), "{text}");
        }
        other => panic!("expected OrtAlreadyLoaded, got {:?}", other.map(|_| "an embedder")),
    }
}
