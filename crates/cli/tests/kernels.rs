//! nornir's own CPU kernels (crates/kernels): a session on ONNX Runtime's CPU provider runs them
//! in place of the portable function bodies a converted graph carries, and a runtime without them
//! runs the bodies (scripts/kernel_check.py, whose model's body is deliberately not attention).

#![cfg(feature = "embed-ort")]

mod common;

use common::s;

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_cpu_session_runs_nornirs_alibi_kernel_and_other_runtimes_the_function_body() {
    nornir_test_support::needs_assets!();
    // ALiBi attention as NumPy computes it from the definition, on texts of 3 to 700 tokens.
    kernel_runs_in_place_of_the_body("alibi");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_cpu_session_runs_nornirs_attention_kernel_and_other_runtimes_the_function_body() {
    nornir_test_support::needs_assets!();
    // Attention without a positional bias (every other encoder family's global layers).
    kernel_runs_in_place_of_the_body("attention");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_cpu_session_runs_nornirs_window_kernel_and_other_runtimes_the_function_body() {
    nornir_test_support::needs_assets!();
    // Attention within a sliding window (ModernBERT's local layers), texts longer than it.
    kernel_runs_in_place_of_the_body("window");
}

fn kernel_runs_in_place_of_the_body(op: &str) {
    let t = tempfile::tempdir().expect("tempdir");
    let r = common::reference_script("kernel_check.py", op, &[s(t.path())]);
    let number = |key: &str| r[key].as_f64().unwrap_or_else(|| panic!("no {key} in {r:#}"));
    assert!(number("max_abs_diff_to_attention") < 1e-5, "{r:#}");
    // Not the body, which another runtime runs (and Python's onnxruntime does).
    assert!(number("min_abs_diff_to_the_body") > 1e-2, "{r:#}");
    assert!(number("python_onnxruntime_runs_the_body") < 1e-5, "{r:#}");
    // A padded batch gives each text what it gives alone.
    assert!(number("batched_vs_alone_max_abs_diff") < 1e-6, "{r:#}");
    // The quantizer's calibration sees the shapes after the node (the kernel infers them).
    assert!(number("int8_min_cosine_to_float32") > 0.99, "{r:#}");
    if op == "attention" {
        // A num_heads the width does not divide: one line, exit 2, nothing written.
        assert_eq!(r["wrong_num_heads"]["refused"], true, "{r:#}");
    }
    if op == "window" {
        // A negative window: one line, exit 2, nothing written.
        assert_eq!(r["negative_window"]["refused"], true, "{r:#}");
    }
    assert_eq!(r["ok"], true, "{r:#}");
}
