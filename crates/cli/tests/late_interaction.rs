//! Late interaction against scripts/late_interaction_reference.py, a NumPy reference written from
//! PyLate's and FlagEmbedding's code: ColBERT token vectors (PyLate and Stanford layouts, BERT
//! and ModernBERT) and BGE-M3's three outputs, converted from random checkpoints and from the real
//! all-MiniLM-L6-v2 under a random projection; the same reference wrong in one way at a time; and
//! the converted folders on the server (Jina's `/v1/multi-vector`, TEI's `/embed_all`, `/embed`,
//! `/embed_sparse`, the Cohere client's rerank by MaxSim) against the library.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::Path;

use common::server::{Server, client};
use common::{Run, s};
use nornir_vector::{
    Device, Embedder, EmbedderOptions, MultiVectorOptions, Outputs, PairOptions, SparseOptions, max_sim,
};
use serde_json::{Value, json};

/// Runs the reference's `mode` with the nornir binary, the work folder and `extra`.
fn reference(mode: &str, work: &Path, extra: &[&str]) -> Value {
    let args: Vec<&str> = std::iter::once(s(work)).chain(extra.iter().copied()).collect();
    common::reference_script("late_interaction_reference.py", mode, &args)
}

fn library(dir: &Path) -> Embedder {
    Embedder::new(dir, &EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)).expect("load")
}

fn close(a: &[f32], b: &Value, what: &str) {
    let b: Vec<f32> = b.as_array().unwrap_or_else(|| panic!("{what}: not a list")).iter().flat_map(flat).collect();
    assert_eq!(a.len(), b.len(), "{what}");
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-6, "{what}: differs by {worst}");
}

fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(items) => items.iter().flat_map(flat).collect(),
        n => vec![n.as_f64().expect("a number") as f32],
    }
}

const DOCUMENTS: [&str; 4] = [
    "A fjord is a long, narrow inlet of the sea between high cliffs.",
    "Paris is the capital of France.",
    "A man is eating food.",
    "Glaciers carved deep valleys into the coast of Norway!",
];
const QUERY: &str = "how do fjords form?";

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_layout_equals_its_numpy_reference_and_bge_m3_serves_its_three_outputs() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("synthetic", t.path(), &[]);
    let cases = r["cases"].as_array().expect("cases");
    // PyLate ([unused0]/[unused1]; added [Q]/[D] attended; no expansion; a custom skiplist),
    // PyLate ModernBERT, Stanford (safetensors, pytorch_model.bin), BGE-M3.
    assert_eq!(cases.len(), 8, "{r:#}");
    for c in cases {
        assert_eq!(c["ok"], true, "{c:#}");
    }
    assert_eq!(r["ok"], true);

    // BGE-M3's folder on the server: /embed, /embed_sparse and /v1/multi-vector equal the
    // library's one-pass encode.
    let m3 = t.path().join("bge-m3-onnx");
    let lib = library(&m3);
    let encoded = lib.encode(&DOCUMENTS, Outputs::all(), &MultiVectorOptions::new()).expect("encode");
    let server = Server::start_with(&m3, &[]);
    let (status, dense) = server.post("/embed", &json!({ "inputs": DOCUMENTS }));
    assert_eq!(status, 200, "{dense}");
    close(encoded.dense.as_ref().expect("dense").as_slice(), &dense, "/embed");
    let (status, sparse) = server.post("/embed_sparse", &json!({ "inputs": DOCUMENTS }));
    assert_eq!(status, 200, "{sparse}");
    for (v, got) in encoded.sparse.as_ref().expect("sparse").iter().zip(sparse.as_array().expect("list")) {
        let indices: Vec<u64> =
            got.as_array().expect("terms").iter().map(|t| t["index"].as_u64().expect("index")).collect();
        assert_eq!(indices, v.indices.iter().map(|&i| u64::from(i)).collect::<Vec<_>>());
    }
    let (status, mv) = server.post("/v1/multi-vector", &json!({ "input": DOCUMENTS, "input_type": "document" }));
    assert_eq!(status, 200, "{mv}");
    let vectors = encoded.multi_vector.as_ref().expect("token vectors");
    for (i, item) in mv["data"].as_array().expect("data").iter().enumerate() {
        close(vectors.get(i), &item["embeddings"], "/v1/multi-vector");
    }
    // Its rerank is FlagEmbedding's colbert_score: MaxSim's mean over the query's tokens.
    let q = lib.embed_multi_vector(&[QUERY], &MultiVectorOptions::new().with_query(true)).expect("query");
    let ranking = lib.rerank(QUERY, &DOCUMENTS, None, &PairOptions::new()).expect("rerank");
    for r in &ranking.ranked {
        let want = max_sim(q.get(0), vectors.get(r.index), vectors.dim()) / q.token_count(0) as f32;
        assert!((r.score - want).abs() <= 1e-5, "{} vs {want}", r.score);
    }
    let sparse = lib.embed_sparse(&DOCUMENTS, &SparseOptions::new().with_top_k(2)).expect("top 2");
    assert!(sparse.vectors.iter().all(|v| v.indices.len() <= 2));
    // BGE-M3 is an embedder that also takes the multi-vector and sparse kinds' calls: its
    // handles give what the embedder's own calls give, and it takes no cross-encoder's.
    assert!(matches!(lib.by_kind(), Ok(nornir_vector::KindHandle::Embedder(_))));
    let as_documents = MultiVectorOptions::new();
    let handle = lib.multi_vector_encoder().expect("BGE-M3's token vectors");
    assert_eq!(handle.embed(&DOCUMENTS, &as_documents).expect("documents").as_slice(), vectors.as_slice());
    let handle = lib.sparse_encoder().expect("BGE-M3's term weights");
    assert_eq!(handle.embed(&DOCUMENTS, &SparseOptions::new().with_top_k(2)).expect("top 2"), sparse);
    assert!(lib.cross_encoder().is_err() && lib.image_embedder().is_err());
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_reference_wrong_in_one_way_is_caught() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let r = reference("broken", t.path(), &[]);
    assert_eq!(r["right_reference_ok"], true, "{r:#}");
    let mistakes = r["mistakes"].as_object().expect("mistakes");
    // No marker, marker appended, no expansion, expansion with [PAD], expansion attended,
    // skiplist ignored, no normalisation, BGE-M3's sparse summed and its first token kept.
    assert_eq!(mistakes.len(), 9, "{r:#}");
    for (name, m) in mistakes {
        assert_eq!(m["differs"], true, "{name}: {m:#}");
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_real_encoder_under_a_projection_serves_jina_and_cohere_clients() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let minilm = nornir_test_support::env_path("NORNIR_TEST_MINILM_SAFETENSORS");
    let r = reference("real", t.path(), &[s(&minilm)]);
    assert_eq!(r["ok"], true, "{r:#}");
    let colbert = t.path().join("real-minilm-onnx");
    let lib = library(&colbert);
    let model = format!("colbert={}", colbert.display());
    let server = Server::start_with(&common::model(), &["--model", &model]);

    // Jina's request shape, as jina-colbert's users send it, answered in Jina's shape.
    let body = json!({ "model": "colbert", "input": [QUERY], "input_type": "query", "embedding_type": "float", "dimensions": 128 });
    let (status, got) = server.post("/v1/multi-vector", &body);
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["object"], "list");
    assert_eq!(got["data"][0]["object"], "embeddings");
    let q = lib.embed_multi_vector(&[QUERY], &MultiVectorOptions::new().with_query(true)).expect("query");
    assert_eq!(q.token_count(0), 32, "expanded to query_length");
    close(q.get(0), &got["data"][0]["embeddings"], "/v1/multi-vector query");
    assert_eq!(got["usage"]["total_tokens"], 32);
    let docs = lib.embed_multi_vector(&DOCUMENTS, &MultiVectorOptions::new()).expect("documents");
    let texts: Vec<Value> = DOCUMENTS.iter().map(|d| json!({ "text": d })).collect();
    let (status, got) =
        server.post("/v1/multi-vector", &json!({ "model": "colbert", "input": texts, "embedding_type": ["ubinary"] }));
    assert_eq!(status, 200, "{got}");
    let packed = got["data"][3]["embeddings"].as_array().expect("rows");
    assert_eq!((packed.len(), packed[0].as_array().map(Vec::len)), (docs.token_count(3), Some(16)));
    let (status, all) = server.post("/models/colbert/embed_all", &json!({ "inputs": DOCUMENTS[1] }));
    assert_eq!(status, 200, "{all}");
    close(docs.get(1), &all[0], "/embed_all");

    // The Cohere client reranks through the ColBERT model: MaxSim, as the library ranks.
    let ranked = lib.rerank(QUERY, &DOCUMENTS, None, &PairOptions::new()).expect("rerank").ranked;
    for r in &ranked {
        let want = max_sim(q.get(0), docs.get(r.index), docs.dim());
        assert!((r.score - want).abs() <= 1e-4 * want.abs().max(1.0), "{} vs {want}", r.score);
    }
    let mut texts = vec![QUERY];
    texts.extend(DOCUMENTS);
    let got = client("cohere", &server, "colbert", &texts);
    let v1 = got["v1"].as_array().expect("v1");
    assert_eq!(v1.len(), 4, "{got}");
    for (g, w) in v1.iter().zip(&ranked) {
        assert_eq!(g[0].as_u64(), Some(w.index as u64), "{got}");
        assert!((g[1].as_f64().expect("score") - f64::from(w.score)).abs() <= 1e-4, "{got}");
    }
    assert_eq!(got["v2"].as_array().map(Vec::len), Some(3), "top_n=3: {got}");

    // Bad requests, one line each, and the server keeps serving.
    let embedder = common::model().file_name().expect("name").to_string_lossy().into_owned();
    let bad: [(&str, Value, &str); 5] = [
        ("/v1/multi-vector", json!({ "model": embedder, "input": ["x"] }), "is an embedder"),
        ("/v1/multi-vector", json!({ "model": "colbert", "input": ["x"], "input_type": "passage" }), "input_type"),
        (
            "/v1/multi-vector",
            json!({ "model": "colbert", "input": ["x"], "embedding_type": "int8" }),
            "float, binary or ubinary",
        ),
        ("/v1/multi-vector", json!({ "model": "colbert", "input": [] }), "input is empty"),
        ("/models/colbert/embed", json!({ "inputs": "x" }), "ask /v1/multi-vector"),
    ];
    for (route, body, says) in bad {
        let (status, got) = server.post(route, &body);
        assert_eq!(status, 400, "{route} {body}: {got}");
        assert!(got.to_string().contains(says), "{route} {body}: {got}");
    }
    let (status, _) = server.post("/v1/multi-vector", &json!({ "model": "colbert", "input": "still here" }));
    assert_eq!(status, 200);

    // The CLI: `embed --query` on an embedder, and a query_length shorter than the markers.
    let o = Run::new(&["vector", "embed", "--query", "--model", s(&common::model()), "x"]).output();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        common::stderr(&o).contains("--query and --outputs are for a model that makes token vectors"),
        "{}",
        common::stderr(&o)
    );
    let short = t.path().join("short");
    copy_dir(&colbert, &short);
    let config = short.join("config_sentence_transformers.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("json");
    c["query_length"] = json!(3);
    std::fs::write(&config, c.to_string()).expect("write");
    let o = Run::new(&["vector", "embed", "--query", "--model", s(&short), "x"]).output();
    assert_eq!(o.status.code(), Some(2));
    let e = common::stderr(&o);
    assert!(e.contains("query_length is 3, shorter than the 4 tokens"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");

    // Every kind quantizes and is measured by its own output: a late-interaction model by its
    // token vectors and each sample query's MaxSim order; bench runs its token calls.
    let int8 = t.path().join("colbert-int8");
    let o = Run::new(&["vector", "quantize", "--json", "--model", s(&colbert), "--output", s(&int8)]).output();
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let record: Value = serde_json::from_slice(&o.stdout).expect("quantization.json");
    let cost = &record["cost"];
    eprintln!("int8 ColBERT: {}", record["summary"]);
    assert_eq!(cost["kind"], "multi-vector", "{record:#}");
    assert!(cost["token_cosine_mean"].as_f64().is_some_and(|c| c > 0.95), "{cost:#}");
    assert!(cost["same_top1"].as_f64().is_some_and(|s| s >= 0.5), "{cost:#}");
    assert!(int8.join("quantization.json").is_file() && int8.join("model.onnx").is_file());
    let o = Run::new(&["vector", "bench", "--json", "-q", "--model", s(&int8)]).output();
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("read") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}
