//! `nornir vector serve --grpc-port`: text-embeddings-inference's gRPC API called by the real
//! grpcio client with stubs that grpcio-tools generates from the proto at test time
//! (scripts/grpc_client_check.py, in the test venv). Every service's answers equal the HTTP
//! routes' on the same server; each refusal has TEI's code; a full queue answers
//! RESOURCE_EXHAUSTED and the server keeps serving.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::server::{KEY, Server};
use nornir_test_support::env_path;
use serde_json::{Value, json};

const TEXTS: [&str; 3] = ["A man is eating food.", "what is a fjord?", "Paris is the capital of France."];

/// The client script's answers for `kind` against `server`'s gRPC port.
fn grpc(server: &Server, kind: &str, texts: &[&str]) -> Value {
    use std::io::Write;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/grpc_client_check.py");
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/proto/tei.proto");
    let addr = server.grpc.as_deref().expect("started with --grpc-port");
    let mut child = std::process::Command::new(env_path("NORNIR_TEST_PYTHON"))
        .arg(script)
        .args([addr, KEY, common::s(&proto), kind])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the gRPC client");
    child.stdin.take().expect("stdin").write_all(json!(texts).to_string().as_bytes()).expect("send texts");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{kind}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("the client's JSON: {e}"))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("numbers").iter().filter_map(Value::as_f64).collect()
}

fn assert_close(got: &Value, want: &Value, what: &str) {
    let (g, w) = (floats(got), floats(want));
    assert_eq!(g.len(), w.len(), "{what}");
    let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-6, "{what}: gRPC and HTTP differ by {worst:e}");
}

fn code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or("OK")
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn every_embedding_and_tokenizer_call_answers_as_the_http_routes() {
    nornir_test_support::needs_assets!();
    let server = Server::start(&["--grpc-port", "0"]);
    let g = grpc(&server, "embedder", &TEXTS);
    let (status, http) = server.post("/embed", &json!({ "inputs": TEXTS, "truncate": true }));
    assert_eq!(status, 200, "{http}");
    for i in 0..TEXTS.len() {
        assert_close(&g["embed"][i]["embeddings"], &http[i], &format!("Embed {i}"));
        assert_close(&g["embed_stream"][i]["embeddings"], &http[i], &format!("EmbedStream {i}"));
    }
    assert!(g["embed"][0]["metadata"]["compute_tokens"].as_u64().is_some_and(|n| n > 2), "{}", g["embed"][0]);
    let (_, cut) = server.post("/embed", &json!({ "inputs": TEXTS[0], "dimensions": 8, "normalize": false }));
    assert_close(&g["embed_dimensions"]["embeddings"], &cut[0], "Embed with dimensions");
    let (_, all) = server.post("/embed_all", &json!({ "inputs": [TEXTS[0], TEXTS[1]], "truncate": true }));
    for (k, answer) in [&g["embed_all"], &g["embed_all_stream"][0], &g["embed_all_stream"][1]].into_iter().enumerate() {
        let text = k.saturating_sub(1);
        let tokens = answer["token_embeddings"].as_array().expect("token vectors");
        assert_eq!(tokens.len(), all[text].as_array().map_or(0, Vec::len), "EmbedAll {k}");
        for (t, want) in tokens.iter().zip(all[text].as_array().expect("tokens")) {
            assert_close(&t["embeddings"], want, "EmbedAll's token vector");
        }
    }
    let (_, tokens) = server.post("/tokenize", &json!({ "inputs": TEXTS[0] }));
    let ids =
        |v: &Value| -> Vec<u64> { v.as_array().expect("tokens").iter().filter_map(|t| t["id"].as_u64()).collect() };
    assert_eq!(ids(&g["tokenize"]["tokens"]), ids(&tokens[0]));
    assert_eq!(
        ids(&g["tokenize_stream"][1]["tokens"]),
        ids(&server.post("/tokenize", &json!({ "inputs": TEXTS[1] })).1[0])
    );
    let (_, decoded) = server.post("/decode", &json!({ "ids": ids(&tokens[0]) }));
    assert_eq!(g["decode"]["text"], decoded[0]);
    assert_eq!(g["decode_stream"].as_array().map(Vec::len), Some(2));
    let info: Value = serde_json::from_str(&server.get("/info").1).expect("/info's JSON");
    assert_eq!(g["info"]["model_id"], info["model_id"]);
    assert_eq!(g["info"]["max_input_length"], info["max_input_length"]);
    // Each refusal with TEI's code, one line; the server still answers after them.
    for (call, want) in [
        ("empty", "INVALID_ARGUMENT"),
        ("too_long_refused", "INVALID_ARGUMENT"),
        ("no_key", "UNAUTHENTICATED"),
        ("wrong_kind", "FAILED_PRECONDITION"),
        // Over --max-body-bytes: tonic's own code for a message too large, as TEI answers it.
        ("too_large", "OUT_OF_RANGE"),
        // A body that is no EmbedRequest: tonic's decoding error, as TEI (also tonic) answers it.
        ("wrong_body", "INTERNAL"),
    ] {
        assert_eq!(code(&g[call]), want, "{call}: {}", g[call]);
        assert!(!g[call]["message"].as_str().unwrap_or_default().contains('\n'), "{call}: one line");
    }
    assert_eq!(code(&grpc(&server, "embed-once", &TEXTS)), "OK", "still serving");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn predict_rerank_and_sparse_calls_answer_as_the_http_routes() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/retrieval_reference.py");
    let o = std::process::Command::new(env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(script)
        .args(["cross", env!("CARGO_BIN_EXE_nornir"), common::s(t.path())])
        .output()
        .expect("run the reference script");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reranker = t.path().join("BertForSequenceClassification-1");
    let server = Server::start_with(&reranker, &["--grpc-port", "0"]);
    let query = "what is a fjord?";
    let docs = ["a fjord is a long narrow inlet of the sea", "paris is the capital of france", "a man is eating food"];
    let mut texts = vec![query];
    texts.extend(docs);
    let g = grpc(&server, "cross-encoder", &texts);
    let score = |v: &Value| v["predictions"][0]["score"].as_f64().expect("a score");
    let (_, alone) = server.post("/predict", &json!({ "inputs": docs[0] }));
    assert!((score(&g["predict"]) - alone[0]["score"].as_f64().expect("score")).abs() <= 1e-6, "{}", g["predict"]);
    let (_, pair) = server.post("/predict", &json!({ "inputs": [query, docs[0]] }));
    assert!((score(&g["predict_pair"]) - pair[0]["score"].as_f64().expect("score")).abs() <= 1e-6);
    assert_eq!(g["predict_stream"].as_array().map(Vec::len), Some(3));
    assert!((score(&g["predict_pair_stream"][0]) - score(&g["predict_pair"])).abs() <= 1e-6);
    let (_, ranked) = server.post("/rerank", &json!({ "query": query, "texts": docs, "return_text": true }));
    for answer in [&g["rerank"], &g["rerank_stream"]] {
        let ranks = answer["ranks"].as_array().expect("ranks");
        assert_eq!(ranks.len(), 3, "{answer}");
        for (r, want) in ranks.iter().zip(ranked.as_array().expect("ranked")) {
            assert_eq!(r["index"].as_u64().unwrap_or(0), want["index"].as_u64().expect("index"), "{answer}");
            assert!((r["score"].as_f64().expect("score") - want["score"].as_f64().expect("score")).abs() <= 1e-6);
            assert_eq!(r["text"], want["text"]);
        }
    }
    assert_eq!(code(&g["pair_of_three"]), "INVALID_ARGUMENT", "{}", g["pair_of_three"]);

    let splade = Server::start_with(&env_path("NORNIR_TEST_SPLADE_MODEL"), &["--grpc-port", "0"]);
    let g = grpc(&splade, "sparse", &TEXTS);
    // Each gRPC call runs its text alone, so each is compared with that text alone over HTTP: a
    // text batched with others sums in another order on CPUs whose kernels block by batch size.
    for (i, answer) in
        [&g["embed_sparse"], &g["embed_sparse_stream"][0], &g["embed_sparse_stream"][2]].into_iter().enumerate()
    {
        let text = [0, 0, 2][i];
        let (_, http) = splade.post("/embed_sparse", &json!({ "inputs": TEXTS[text] }));
        let got = answer["sparse_embeddings"].as_array().expect("terms");
        let want = http[0].as_array().expect("terms");
        assert_eq!(got.len(), want.len(), "EmbedSparse {i}");
        for (a, b) in got.iter().zip(want) {
            assert_eq!(a["index"].as_u64().unwrap_or(0), b["index"].as_u64().expect("index"));
            let (a, b) = (a["value"].as_f64().expect("value"), b["value"].as_f64().expect("value"));
            assert!((a - b).abs() <= 1e-6, "EmbedSparse {i}: gRPC {a}, HTTP {b}");
        }
    }
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_full_queue_answers_resource_exhausted_and_the_server_keeps_serving() {
    nornir_test_support::needs_assets!();
    let flags = ["--grpc-port", "0", "--max-queued-texts", "4", "--workers", "1", "--threads", "1"];
    let server = Server::start(&flags);
    // A call larger than the limit runs when the queue is empty; while its texts wait, the queue
    // is full for everyone else.
    let many: Vec<String> = (0..2000).map(|i| format!("text number {i} of a call that fills the queue")).collect();
    let url = server.url.clone();
    let big = std::thread::spawn(move || {
        ureq::post(&format!("{url}/embed"))
            .set("authorization", &format!("Bearer {KEY}"))
            .send_json(json!({ "inputs": many }))
            .map(|r| r.status())
            .map_err(|e| e.to_string())
    });
    let started = Instant::now();
    while server.metric("nornir_queue_texts") == 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the large call never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let refused = grpc(&server, "embed-once", &TEXTS);
    assert_eq!(code(&refused), "RESOURCE_EXHAUSTED", "{refused}");
    assert_eq!(big.join().expect("join").expect("the large call"), 200);
    assert_eq!(code(&grpc(&server, "embed-once", &TEXTS)), "OK", "served again once the queue has room");
}
