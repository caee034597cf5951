//! `nornir vector convert` for decoders (Qwen3, Qwen2, Llama, Mistral) against
//! scripts/decoders_reference.py, a float64 NumPy forward written from transformers' modeling
//! code without reading the converter: embedder graphs' `last_hidden_state` and the yes/no
//! reranker's `logits`, left and right padded batches; and the same reference wrong in one way at
//! a time (causal mask off, rotary base, q/k norms skipped, kv heads interleaved, padding mask
//! off, yes/no swapped), each of which must differ; and a converted Qwen3 reranker on `rerank`,
//! scoring each pair in its model card's prompt.

mod common;

use std::path::Path;

use common::s;
use serde_json::Value;

fn reference(mode: &str, work: &Path) -> Value {
    common::reference_script("decoders_reference.py", mode, &[s(work)])
}

/// Qwen3-Reranker's scores as its model card computes them, on the converted graph: the
/// folder's pair_template.json filled in, its three parts tokenized without special tokens,
/// sigmoid(logit_yes - logit_no) at the last token.
#[cfg(feature = "embed-ort")]
const CARD_SCORES: &str = r#"
import json, sys
import numpy as np, onnxruntime as ort
from tokenizers import Tokenizer
folder, query, docs = sys.argv[1], sys.argv[2], sys.argv[3:]
t = json.load(open(folder + "/pair_template.json"))
tok = Tokenizer.from_file(folder + "/tokenizer.json")
ids = lambda s: tok.encode(s, add_special_tokens=False).ids
session = ort.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
scores = []
for d in docs:
    # the card's f-string: one pass, so a query or document is never read as template
    body = t["body"].format(instruction=t["instruction"], query=query, document=d)
    x = np.array([ids(t["prefix"]) + ids(body) + ids(t["suffix"])], dtype=np.int64)
    logit = session.run(["logits"], {"input_ids": x, "attention_mask": np.ones_like(x)})[0][0, 0]
    scores.append(float(1 / (1 + np.exp(-logit))))
print(json.dumps(scores))
"#;

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_decoder_family_equals_its_numpy_reference() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("synthetic", t.path());
    assert_eq!(r["ok"], true, "{r:#}");
}

/// The converted folders on the embedder: only in a build with it.
#[cfg(feature = "embed-ort")]
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_reranker_scores_in_its_prompt_and_a_cached_export_runs_with_its_cache_empty() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("synthetic", t.path());
    assert_eq!(r["ok"], true, "{r:#}");
    reranker_scores_as_its_card(t.path());
    cached_export_runs(t.path());
    quantizes_from_external_data(t.path());
}

/// A decoder whose weights are in external data (every decoder over 1.8 GB is converted so)
/// quantizes: the source's `model.onnx_data` is read, and the int8 graph is written whole, or
/// with its own external data where `--external-data` asks (as it is where int8 weights pass
/// 1.8 GB); both give the same vectors, close to float32's.
#[cfg(feature = "embed-ort")]
fn quantizes_from_external_data(work: &Path) {
    let external = work.join("qwen3-external-onnx");
    let o = common::Run::new(&[
        "vector",
        "convert",
        "--model",
        s(&work.join("qwen3-embedding")),
        "--output",
        s(&external),
        "--external-data",
    ])
    .output();
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert!(external.join("model.onnx_data").is_file());
    let embed = |folder: &Path| {
        let o =
            common::Run::new(&["vector", "embed", "-q", "--model", s(folder), "--pooling", "last", "yes no", "hello"])
                .output();
        assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
        String::from_utf8_lossy(&o.stdout).lines().map(common::embedding_of_line).collect::<Vec<_>>()
    };
    let float32 = embed(&external);
    let mut int8 = Vec::new();
    for (name, extra) in [("int8", &[][..]), ("int8-external", &["--external-data"][..])] {
        let out = work.join(name);
        let mut args = vec!["vector", "quantize", "--model", s(&external), "--pooling", "last", "--output", s(&out)];
        args.extend(["--json"].iter().chain(extra));
        let o = common::Run::new(&args).output();
        assert!(o.status.success(), "{name}: {}", common::stderr(&o));
        let record: Value = serde_json::from_slice(&o.stdout).expect("quantization.json");
        assert!(!record["rewritten"].as_array().expect("rewritten").is_empty(), "{record:#}");
        assert_eq!(out.join("model.onnx_data").is_file(), !extra.is_empty(), "{name}");
        int8.push(embed(&out));
    }
    assert_eq!(int8[0], int8[1], "the same int8 graph, in one file or two");
    let close = |a: &[Vec<f32>], b: &[Vec<f32>], what: &str| {
        for (a, b) in a.iter().zip(b) {
            let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
            let cosine = dot(a, b) / (dot(a, a) * dot(b, b)).sqrt();
            assert!(cosine > 0.95, "{what}: cosine {cosine}");
        }
    };
    close(&float32, &int8[0], "int8 against float32");
    // Half-precision weights (`convert --dtype`) are quantized from their values widened.
    for dtype in ["float16", "bfloat16"] {
        let (half, out) = (work.join(format!("qwen3-causal-lm-{dtype}-onnx")), work.join(format!("int8-{dtype}")));
        let o = common::Run::new(&[
            "vector",
            "quantize",
            "--model",
            s(&half),
            "--pooling",
            "last",
            "--output",
            s(&out),
            "--json",
        ])
        .output();
        assert!(o.status.success(), "{dtype}: {}", common::stderr(&o));
        let record: Value = serde_json::from_slice(&o.stdout).expect("quantization.json");
        let sources: Vec<&str> =
            record["rewritten"].as_array().expect("rewritten").iter().filter_map(|r| r["source"].as_str()).collect();
        assert!(
            !sources.is_empty() && sources.iter().all(|s| s.starts_with(&format!("{dtype} initializer through Cast"))),
            "{dtype}: {sources:?}"
        );
        close(&embed(&half), &embed(&out), dtype);
    }
}

/// The converted Qwen3 reranker on `rerank`: its prompt, one score per document, best first;
/// a query and documents that hold the template's placeholders and stray braces are read as
/// text, as the card's f-string reads them.
#[cfg(feature = "embed-ort")]
fn reranker_scores_as_its_card(work: &Path) {
    reranker_scores_as_its_card_for(work, "what is yes", ["no yes", "yes yes yes", "hello"]);
    reranker_scores_as_its_card_for(
        work,
        "what is {document}? {instruction}",
        ["{query} yes", "yes {document} }{ {", "what is {document}? {instruction}"],
    );
}

#[cfg(feature = "embed-ort")]
fn reranker_scores_as_its_card_for(work: &Path, query: &str, docs: [&str; 3]) {
    let folder = work.join("qwen3-reranker-onnx");
    let mut args = vec!["vector", "rerank", "--model", s(&folder), "--query", query, "--no-text"];
    args.extend(docs);
    let o = common::Run::new(&args).output();
    assert!(o.status.success(), "{}", common::stderr(&o));
    let o2 = std::process::Command::new(nornir_test_support::env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .args(["-c", CARD_SCORES, s(&folder), query])
        .args(docs)
        .output()
        .expect("run the card's scoring");
    assert!(o2.status.success(), "{}", String::from_utf8_lossy(&o2.stderr));
    let want: Vec<f64> = serde_json::from_slice(&o2.stdout).expect("scores");
    let lines = String::from_utf8_lossy(&o.stdout).into_owned();
    let got: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).expect("a line")).collect();
    assert_eq!(got.len(), 3, "{lines}");
    for g in &got {
        let i = g["index"].as_u64().expect("index") as usize;
        let score = g["score"].as_f64().expect("score");
        assert!((score - want[i]).abs() <= 1e-5, "document {i}: nornir {score}, the card's {}", want[i]);
    }
    assert!(got.windows(2).all(|w| w[0]["score"].as_f64() >= w[1]["score"].as_f64()), "{lines}");
}

/// Stands in for onnx-community's decoder exports: the converted graph given a KV cache's inputs
/// (`past_key_values.N.key`/`.value` `[batch, 2, past, 16]`, `position_ids`) that its output
/// really reads (plus the sum of the past keys: 0 when fed empty), written to `out`; with
/// `symbolic`, the cache's head count is left symbolic, which cannot be fed empty.
#[cfg(feature = "embed-ort")]
const CACHED_EXPORT: &str = r#"
import sys, onnx
from onnx import TensorProto, helper
src, out, symbolic = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
m = onnx.load(src + "/model.onnx")
g = m.graph
g.output[0].name = "hidden_raw"
rename = {"last_hidden_state": "hidden_raw", "position_ids": "positions_from_mask"}
for n in g.node:
    n.output[:] = [rename.get(o, o) for o in n.output]
    n.input[:] = [rename.get(i, i) if i != "last_hidden_state" else i for i in n.input]
heads = "heads" if symbolic else 2
total = []
for i in range(2):
    for part in ("key", "value"):
        name = f"past_key_values.{i}.{part}"
        g.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", heads, "past", 16]))
        g.node.append(helper.make_node("ReduceSum", [name], [name + ".sum"], keepdims=0))
        total.append(name + ".sum")
g.input.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "sequence"]))
g.node.append(helper.make_node("Sum", total, ["past_total"]))
g.node.append(helper.make_node("Add", ["hidden_raw", "past_total"], ["last_hidden_state"]))
del g.output[:]
g.output.append(helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, None))
onnx.save(m, out + "/model.onnx")
"#;

/// A KV-cache export of the converted Qwen3 embedder runs with its cache fed empty.
#[cfg(feature = "embed-ort")]
fn cached_export_runs(work: &Path) {
    let plain = work.join("qwen3-embedding-onnx");
    let embed = |folder: &Path| {
        let o =
            common::Run::new(&["vector", "embed", "-q", "--model", s(folder), "--pooling", "last", "yes no", "hello"])
                .output();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), common::stderr(&o))
    };
    let (code, want, e) = embed(&plain);
    assert_eq!(code, Some(0), "{e}");
    // Without a pooling rule a decoder's embedder is refused: mean pooling would read tokens that
    // never saw the text's end.
    let o = common::Run::new(&["vector", "embed", "-q", "--model", s(&plain), "hello"]).output();
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("needs a pooling rule"), "{}", common::stderr(&o));
    for symbolic in ["0", "1"] {
        let cached = work.join(format!("cached-{symbolic}"));
        std::fs::create_dir(&cached).expect("dir");
        for f in ["config.json", "tokenizer.json"] {
            std::fs::copy(plain.join(f), cached.join(f)).expect("copy");
        }
        let o = std::process::Command::new(nornir_test_support::env_path("NORNIR_TEST_REFERENCE_PYTHON"))
            .args(["-c", CACHED_EXPORT, s(&plain), s(&cached), symbolic])
            .output()
            .expect("write the cached export");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (code, got, e) = embed(&cached);
        if symbolic == "0" {
            assert_eq!(code, Some(0), "{e}");
            assert_eq!(got, want, "the cache fed empty changes nothing");
        } else {
            assert_eq!(code, Some(2), "{e}");
            assert!(e.contains("cannot be fed empty"), "{e}");
            assert_eq!(e.trim().lines().count(), 1, "{e}");
        }
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_decoder_reference_wrong_in_one_way_is_caught() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("broken", t.path());
    assert_eq!(r["ok"], true, "{r:#}");
}
