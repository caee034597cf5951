//! ONNX Runtime 1.22.2 (the onnxruntime-rocm wheel), the oldest build this embedder loads and the
//! last with the ROCm provider. ort's `api-22` and higher make this build segfault or fail when no
//! provider registers (ort then sets an EP-selection policy on every session builder, which this
//! build cannot honour); these tests catch anyone raising the API feature. Its own
//! process: one ONNX Runtime per process.

mod common;

use std::path::PathBuf;

use common::{cosine, model_dir, parity_sample};
use nornir_embed::{Embedder, EmbedderOptions};

fn ort_1_22() -> PathBuf {
    let p = std::env::var_os("NORNIR_TEST_ORT_1_22")
        .map(PathBuf::from)
        .expect("NORNIR_TEST_ORT_1_22 unset: run `cargo xtask test`");
    assert!(p.is_file(), "{} missing: run `cargo xtask test`", p.display());
    p
}

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_ort_library(ort_1_22()).with_threads(2)
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn cpu_fallback_on_1_22_embeds_the_parity_sample_correctly() {
    nornir_test_support::needs_assets!();
    let e = Embedder::new(&model_dir(), &options()).expect("load on 1.22.2");
    assert_eq!(e.report().ort.version, "1.22.2");
    assert_eq!(e.report().active_provider, "CPUExecutionProvider");
    let (texts, reference) = parity_sample();
    let got = e.embed(&texts).expect("embed");
    for (i, row) in got.rows().enumerate() {
        let c = cosine(row, &reference[i * 384..(i + 1) * 384]);
        assert!(c >= 0.9999, "row {i}: cosine {c}");
    }
}

/// With the AMD path compiled in, forcing rocm on a machine without ROCm is an error that names
/// what is missing, read from the real provider library's NEEDED list; auto falls back to CPU.
#[cfg(feature = "rocm")]
#[test]
fn forced_rocm_fails_with_the_missing_library_auto_falls_back() {
    use nornir_ep_select::Device;
    let forced = options().with_device(Device::Rocm);
    let e = Embedder::new(&model_dir(), &forced).expect_err("no ROCm here").to_string();
    assert!(e.contains("forced to rocm"), "{e}");
    assert!(e.contains("MIGraphXExecutionProvider: not in this build"), "{e}");
    assert!(e.contains("ROCMExecutionProvider") && e.contains("libhipblas.so.3") && e.contains("are missing"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    let auto = Embedder::new(&model_dir(), &options()).expect("auto falls back");
    assert_eq!(auto.gpu_vendor(), "cpu");
}
