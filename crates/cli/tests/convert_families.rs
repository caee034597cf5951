//! `nornir vector convert` for the five encoder families that are not plain BERT (JinaBERT v2,
//! jina-embeddings-v3, NomicBERT, GTE, ModernBERT) against scripts/families_reference.py's float64
//! NumPy references: the graphs themselves (`synthetic`, `broken`, `batch`), and the converted
//! folders on every surface nornir has (`surfaces`: `embed`, `serve`'s /v1/embeddings, `rerank`,
//! the SPLADE sparse `embed`), on the token ids of a real BERT tokenizer.

mod common;

use std::path::Path;

use common::s;
use serde_json::Value;

/// Runs scripts/families_reference.py `mode` with the nornir binary, a work folder and `extra`.
fn reference(mode: &str, work: &Path, extra: &[&str]) -> Value {
    let args: Vec<&str> = std::iter::once(s(work)).chain(extra.iter().copied()).collect();
    common::reference_script("families_reference.py", mode, &args)
}

fn cases(r: &Value, key: &str) -> Vec<Value> {
    r[key].as_array().unwrap_or_else(|| panic!("no {key} in {r:#}")).clone()
}

fn number(c: &Value, key: &str) -> f64 {
    c[key].as_f64().unwrap_or_else(|| panic!("no {key} in {c:#}"))
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_family_and_variant_equals_its_numpy_reference() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("synthetic", t.path(), &[]);
    let cases = cases(&r, "cases");
    // 17 variants x float32, float16, bfloat16 x fused and plain, plus one pytorch_model.bin per
    // family (fused), each on two batches; jina-embeddings-v3 under each of its 5 adapters. A
    // conversion that fails leaves one case, so the count also says every one converted.
    assert_eq!(cases.len(), 270, "{r:#}");
    for c in &cases {
        assert!(c.get("error").is_none(), "{c:#}");
        assert!(number(c, "max_abs_diff") <= 1e-4, "{c:#}");
    }
    eprintln!("families: {} cases, largest difference {:e}", cases.len(), number(&r, "max_abs_diff"));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_reference_wrong_in_one_way_is_caught_for_every_family() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("broken", t.path(), &[]);
    let cases = cases(&r, "cases");
    assert_eq!(cases.len(), 6, "{r:#}");
    for c in &cases {
        // The graph differs from the wrong reference and equals the right one.
        assert!(number(c, "max_abs_diff") > 1e-4, "{c:#}");
        assert!(number(c, "right_reference_diff") <= 1e-4, "{c:#}");
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_short_text_beside_long_ones_gets_the_vector_it_gets_alone() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("batch", t.path(), &[]);
    let cases = cases(&r, "cases");
    assert_eq!(cases.len(), 9, "{r:#}");
    for c in cases.iter().filter(|c| c.get("note").is_none()) {
        assert_eq!(c["ok"], true, "{c:#}");
    }
}

/// Embeds, serves and scores with the converted folders: only in a build with the embedder.
#[cfg(feature = "embed-ort")]
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn converted_families_embed_serve_rerank_and_weigh_terms_as_their_references() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let tokenizer = nornir_test_support::env_path("NORNIR_TEST_CONVERTED_MODEL").join("tokenizer.json");
    let r = reference("surfaces", t.path(), &[s(&tokenizer)]);

    // `nornir vector embed`: seven encoders (jina-embeddings-v3 under two tasks), mean-pooled
    // and normalised as their sentence-transformers folders say, one text cut at max_seq_length.
    let embed = cases(&r, "embed");
    assert_eq!(embed.len(), 8, "{r:#}");
    let max_seq = r["max_seq_length"].as_u64().expect("max_seq_length");
    for c in &embed {
        assert!(number(c, "min_cosine") >= 0.99999, "{c:#}");
        assert!(c["tokens"].as_array().expect("tokens").iter().any(|n| n.as_u64() == Some(max_seq)), "{c:#}");
    }
    // jina-embeddings-v3: another task is another adapter and instruction, so another vector;
    // without a task the model is refused, naming the tasks.
    let jina: Vec<&Value> = embed.iter().filter(|c| c.get("cosine_to_first_task").is_some()).collect();
    assert_eq!(jina.len(), 1, "{r:#}");
    for cos in jina[0]["cosine_to_first_task"].as_array().expect("cosines") {
        assert!(cos.as_f64().is_some_and(|c| c < 0.999), "{:#}", jina[0]);
    }
    let refused = r["jina_without_task"].as_str().expect("jina_without_task");
    assert!(refused.contains("choose one of") && refused.contains("retrieval.passage"), "{refused}");

    // `nornir vector serve`: /v1/embeddings gives each model the vectors `embed` gave.
    let mut served = cases(&r["serve"], "cases");
    served.extend(cases(&r["jina_serve"], "cases"));
    assert_eq!(served.len(), 7, "{r:#}");
    for c in &served {
        assert_eq!(c["status"], 200, "{c:#}");
        assert!(number(c, "min_cosine") >= 0.99999, "{c:#}");
    }

    // `nornir vector rerank`: GTE's and ModernBERT's (cls and mean) classifiers with one label:
    // sigmoid scores and raw logits as the reference's, documents in its order.
    let rerank = cases(&r, "rerank");
    assert_eq!(rerank.len(), 3, "{r:#}");
    for c in &rerank {
        assert!(number(c, "max_abs_diff") <= 1e-5, "{c:#}");
        assert_eq!(c["same_order"], true, "{c:#}");
    }

    // SPLADE over JinaBERT's and ModernBERT's masked-LM heads: log(1 + relu(logits)), max over
    // the tokens, within 1e-4 for every term.
    let sparse = cases(&r, "sparse");
    assert_eq!(sparse.len(), 2, "{r:#}");
    for c in &sparse {
        assert!(number(c, "max_abs_diff") <= 1e-4, "{c:#}");
    }
    assert_eq!(r["ok"], true, "{r:#}");
    let worst = |cs: &[Value], key: &str| cs.iter().map(|c| number(c, key)).fold(f64::NAN, f64::max);
    eprintln!(
        "surfaces: embed 1 - min cosine {:e}, serve 1 - min cosine {:e}, rerank largest difference {:e}, sparse {:e}",
        1.0 - embed.iter().map(|c| number(c, "min_cosine")).fold(1.0, f64::min),
        1.0 - served.iter().map(|c| number(c, "min_cosine")).fold(1.0, f64::min),
        worst(&rerank, "max_abs_diff"),
        worst(&sparse, "max_abs_diff"),
    );
}
