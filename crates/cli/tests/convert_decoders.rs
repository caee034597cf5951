//! `nornir vector convert` for decoders (Qwen3, Qwen2, Llama, Mistral) against
//! scripts/decoders_reference.py, a float64 NumPy forward written from transformers' modeling
//! code without reading the converter: embedder graphs' `last_hidden_state` and the yes/no
//! reranker's `logits`, left and right padded batches; and the same reference wrong in one way at
//! a time (causal mask off, rotary base, q/k norms skipped, kv heads interleaved, padding mask
//! off, yes/no swapped), each of which must differ.

mod common;

use common::s;
use serde_json::Value;

fn reference(mode: &str) -> Value {
    let t = tempfile::tempdir().expect("tempdir");
    common::reference_script("decoders_reference.py", mode, &[s(t.path())])
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_decoder_family_equals_its_numpy_reference() {
    nornir_test_support::needs_assets!();
    let r = reference("synthetic");
    assert_eq!(r["ok"], true, "{r:#}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_decoder_reference_wrong_in_one_way_is_caught() {
    nornir_test_support::needs_assets!();
    let r = reference("broken");
    assert_eq!(r["ok"], true, "{r:#}");
}
