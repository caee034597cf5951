//! `nornir vector serve` with the three kinds of model side by side (an embedder, the real
//! splade-tiny, cross-encoders with random weights made by scripts/retrieval_reference.py):
//! TEI's `/rerank`, `/predict`, `/embed_sparse` and Cohere's and Jina's `/v1/rerank` and
//! `/v2/rerank` against the library; the real Cohere client and the requests TEI's users send
//! (llama-index's reranker, huggingface_hub's text_classification); each bad request with its
//! status while the server keeps serving.

#![cfg(feature = "embed-ort")]

mod common;

use std::path::{Path, PathBuf};

use common::server::{Server, client};
use nornir_test_support::env_path;
use nornir_vector::{Device, Embedder, EmbedderOptions, PairOptions, SparseOptions};
use serde_json::{Value, json};

const QUERY: &str = "what is a fjord?";
const DOCUMENTS: [&str; 4] = [
    "a fjord is a long narrow inlet of the sea",
    "paris is the capital of france",
    "a man is eating food",
    "ice cut deep valleys in the coast of norway",
];

/// The reference script's cross-encoders in `dir`: (one label BERT, three labels XLM-RoBERTa).
fn cross_encoders(dir: &Path) -> (PathBuf, PathBuf) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/retrieval_reference.py");
    let o = std::process::Command::new(env_path("NORNIR_TEST_REFERENCE_PYTHON"))
        .arg(script)
        .args(["cross", env!("CARGO_BIN_EXE_nornir")])
        .arg(dir)
        .output()
        .expect("run the reference script");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (dir.join("BertForSequenceClassification-1"), dir.join("XLMRobertaForSequenceClassification-3"))
}

fn start(dir: &Path, extra: &[&str]) -> (Server, PathBuf, PathBuf) {
    let (ce, nli) = cross_encoders(dir);
    let splade = env_path("NORNIR_TEST_SPLADE_MODEL");
    let multi = dir.join("BertForSequenceClassification-3-multi-label");
    let models = [
        format!("ce={}", ce.display()),
        format!("nli={}", nli.display()),
        format!("multi={}", multi.display()),
        format!("splade={}", splade.display()),
    ];
    let mut args: Vec<&str> = models.iter().flat_map(|m| ["--model", m.as_str()]).collect();
    args.extend_from_slice(extra);
    (Server::start_with(&common::model(), &args), ce, nli)
}

fn library(dir: &Path) -> Embedder {
    Embedder::new(dir, &EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)).expect("load")
}

fn close(got: &Value, want: f32, what: &str) {
    let g = got.as_f64().unwrap_or_else(|| panic!("{what}: no number: {got}"));
    assert!((g - f64::from(want)).abs() <= 1e-5, "{what}: server {g}, library {want}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn rerank_predict_and_sparse_routes_answer_as_the_library() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let (server, ce, nli) = start(t.path(), &[]);
    let ranked = library(&ce).rerank(QUERY, &DOCUMENTS, None, &PairOptions::new()).expect("library").ranked;

    // TEI's shape, best first, with the texts asked for; and under the model's own path.
    let body = json!({ "query": QUERY, "texts": DOCUMENTS, "return_text": true });
    let (status, got) = server.post("/models/ce/rerank", &body);
    assert_eq!(status, 200, "{got}");
    let got = got.as_array().expect("a list");
    assert_eq!(got.len(), 4);
    for (g, w) in got.iter().zip(&ranked) {
        assert_eq!(g["index"].as_u64(), Some(w.index as u64), "{g}");
        close(&g["score"], w.score, "/rerank");
        assert_eq!(g["text"].as_str(), Some(DOCUMENTS[w.index]));
    }
    // Cohere's and Jina's: the model by name, documents as strings or objects, top_n.
    let documents = json!([DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2], DOCUMENTS[3]]);
    for route in ["/v1/rerank", "/v2/rerank", "/rerank"] {
        let body =
            json!({ "model": "ce", "query": QUERY, "documents": documents, "top_n": 2, "return_documents": true });
        let (status, got) = server.post(route, &body);
        assert_eq!(status, 200, "{route}: {got}");
        let results = got["results"].as_array().expect("results");
        assert_eq!(results.len(), 2, "{route}");
        for (g, w) in results.iter().zip(&ranked) {
            assert_eq!(g["index"].as_u64(), Some(w.index as u64), "{route}: {g}");
            close(&g["relevance_score"], w.score, route);
            assert_eq!(g["document"]["text"].as_str(), Some(DOCUMENTS[w.index]), "{route}");
        }
        assert!(got["usage"]["total_tokens"].as_u64().is_some_and(|n| n > 0), "{route}: {got}");
    }

    // /predict: a pair, a batch of a text and a pair; every label's score, best first.
    let nli_lib = library(&nli);
    let want = nli_lib.predict(&[(DOCUMENTS[0], DOCUMENTS[3])], &PairOptions::new()).expect("predict");
    let (status, got) = server.post("/models/nli/predict", &json!({ "inputs": [DOCUMENTS[0], DOCUMENTS[3]] }));
    assert_eq!(status, 200, "{got}");
    let labels = &nli_lib.model_info().folder.kind.labels;
    let predictions = got.as_array().expect("predictions");
    assert_eq!(predictions.len(), 3);
    assert!(predictions.windows(2).all(|p| p[0]["score"].as_f64() >= p[1]["score"].as_f64()), "{got}");
    for p in predictions {
        let label = labels.iter().position(|l| p["label"] == l.as_str()).expect("a label");
        close(&p["score"], want.row(0)[label], "/predict");
    }
    let (status, got) = server.post("/models/nli/predict", &json!({ "inputs": [[QUERY, DOCUMENTS[0]], DOCUMENTS[1]] }));
    assert_eq!(status, 200, "{got}");
    let alone = nli_lib.classify(&[DOCUMENTS[1]], &PairOptions::new().with_raw_scores(false)).expect("classify");
    let second = got[1].as_array().expect("the text alone's predictions");
    let top = second.iter().map(|p| p["score"].as_f64().unwrap_or(0.0)).fold(0.0, f64::max);
    let want_top = alone.row(0).iter().copied().fold(0.0f32, f32::max);
    assert!((top - f64::from(want_top)).abs() <= 1e-5, "{got}");
    // A multi-label head (problem_type in config.json): a sigmoid per label, as the library's.
    let multi = library(&t.path().join("BertForSequenceClassification-3-multi-label"));
    let want = multi.predict(&[(QUERY, DOCUMENTS[0])], &PairOptions::new()).expect("multi-label predict");
    let (status, got) = server.post("/models/multi/predict", &json!({ "inputs": [QUERY, DOCUMENTS[0]] }));
    assert_eq!(status, 200, "{got}");
    for p in got.as_array().expect("predictions") {
        let label = ["toxic", "insult", "threat"].iter().position(|l| p["label"] == *l).expect("a label");
        close(&p["score"], want.row(0)[label], "/predict, multi-label");
    }

    // /embed_sparse: TEI's [{"index", "value"}] per text, as the library's.
    let splade = library(&env_path("NORNIR_TEST_SPLADE_MODEL"));
    let want = splade.embed_sparse(&DOCUMENTS, &SparseOptions::new()).expect("sparse").vectors;
    let (status, got) = server.post("/models/splade/embed_sparse", &json!({ "inputs": DOCUMENTS }));
    assert_eq!(status, 200, "{got}");
    for (g, w) in got.as_array().expect("a list").iter().zip(&want) {
        let terms = g.as_array().expect("terms");
        assert_eq!(terms.len(), w.indices.len());
        for (term, (&i, &v)) in terms.iter().zip(w.indices.iter().zip(&w.values)) {
            assert_eq!(term["index"].as_u64(), Some(u64::from(i)));
            close(&term["value"], v, "/embed_sparse");
        }
    }
    // /info says each model's kind and why.
    let (_, info) = server.get("/models/splade/info");
    let info: Value = serde_json::from_str(&info).expect("info");
    assert_eq!(info["model"]["folder"]["kind"]["kind"], "sparse-encoder", "{info}");
    assert!(info["model"]["folder"]["kind"]["reason"].as_str().is_some_and(|r| r.contains("BertForMaskedLM")));
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn the_cohere_client_and_tei_requests_get_their_rankings() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let (server, ce, _) = start(t.path(), &[]);
    let ranked = library(&ce).rerank(QUERY, &DOCUMENTS, None, &PairOptions::new()).expect("library").ranked;
    let mut texts = vec![QUERY];
    texts.extend(DOCUMENTS);

    let got = client("cohere", &server, "ce", &texts);
    let v2 = got["v2"].as_array().expect("v2");
    assert_eq!(v2.len(), 3, "top_n=3: {got}");
    let v1 = got["v1"].as_array().expect("v1");
    assert_eq!(v1.len(), 4, "{got}");
    for (k, w) in ranked.iter().enumerate() {
        assert_eq!(v1[k][0].as_u64(), Some(w.index as u64), "{got}");
        close(&v1[k][1], w.score, "cohere v1");
        assert_eq!(v1[k][2].as_str(), Some(DOCUMENTS[w.index]), "cohere v1 return_documents");
        if k < 3 {
            assert_eq!(v2[k][0].as_u64(), Some(w.index as u64), "{got}");
            close(&v2[k][1], w.score, "cohere v2");
        }
    }

    let got = client("tei_retrieval", &server, "ce,splade", &texts);
    let rerank = got["rerank"].as_array().expect("rerank");
    for (g, w) in rerank.iter().zip(&ranked) {
        assert_eq!(g[0].as_u64(), Some(w.index as u64), "{got}");
        close(&g[1], w.score, "llama-index's /rerank request");
    }
    let classification = got["classification"].as_array().expect("classification");
    assert_eq!(classification.len(), 1, "{got}");
    let one = library(&ce).classify(&[QUERY], &PairOptions::new()).expect("classify");
    close(&classification[0][1], one.row(0)[0], "huggingface_hub text_classification");
    assert_eq!(got["sparse"].as_array().map(Vec::len), Some(4), "{got}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn bad_retrieval_requests_get_their_status_and_the_server_keeps_serving() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let (server, _, _) = start(t.path(), &["--max-inputs", "4"]);
    let long = "word ".repeat(100);
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("/models/ce/embed", json!({ "inputs": "x" }), 400, "this model is a cross-encoder: ask /rerank"),
        ("/models/splade/rerank", json!({ "query": "q", "texts": ["d"] }), 400, "this model is a sparse-encoder"),
        ("/v2/rerank", json!({ "model": "splade", "query": "q", "documents": ["d"] }), 400, "sparse-encoder"),
        ("/embed_sparse", json!({ "inputs": "x" }), 400, "this model is an embedder: ask /embed"),
        // Every route checks the kind it serves: token vectors are an embedder's or a late-interaction model's.
        ("/models/ce/embed_all", json!({ "inputs": "x" }), 400, "this model is a cross-encoder: ask /rerank"),
        ("/models/nli/embed_all", json!({ "inputs": "x" }), 400, "this model is a cross-encoder"),
        (
            "/models/splade/embed_all",
            json!({ "inputs": "x" }),
            400,
            "this model is a sparse-encoder: ask /embed_sparse",
        ),
        ("/models/ce/embed_chunks", json!({ "inputs": "x" }), 400, "this model is a cross-encoder"),
        (
            "/models/splade/similarity",
            json!({ "inputs": { "source_sentence": "a", "sentences": ["b"] } }),
            400,
            "sparse-encoder",
        ),
        ("/v1/embeddings", json!({ "model": "ce", "input": "x" }), 400, "cross-encoder"),
        ("/v1/embeddings", json!({ "model": "splade", "input": "x" }), 400, "sparse-encoder"),
        ("/v2/embed", json!({ "model": "ce", "texts": ["x"], "input_type": "search_query" }), 400, "cross-encoder"),
        ("/v1/multi-vector", json!({ "model": "ce", "input": ["x"] }), 400, "cross-encoder"),
        ("/models/splade/predict", json!({ "inputs": ["x"] }), 400, "sparse-encoder"),
        ("/models/ce/rerank", json!({ "query": " ", "texts": ["d"] }), 400, "`query`: is empty"),
        ("/models/ce/rerank", json!({ "texts": ["d"] }), 400, "no `query`"),
        ("/models/ce/rerank", json!({ "query": "q", "texts": [] }), 400, "the documents are empty"),
        ("/v2/rerank", json!({ "model": "ce", "query": "q" }), 400, "no documents"),
        ("/models/ce/rerank", json!({ "query": "q", "texts": ["a", "b", "c", "d", "e"] }), 413, "--max-inputs"),
        ("/models/ce/rerank", json!({ "query": "q", "texts": [long], "truncate": false }), 413, "more than the 32"),
        ("/models/nli/rerank", json!({ "query": "q", "texts": ["d"] }), 400, "call predict"),
        ("/models/nli/predict", json!({ "inputs": [] }), 400, "inputs are empty"),
        ("/v2/rerank", json!({ "model": "nope", "query": "q", "documents": ["d"] }), 404, "nope"),
    ];
    for (route, body, status, needle) in cases {
        let (got, answer) = server.post(route, &body);
        let text = answer.to_string();
        assert_eq!(got, status, "{route} {body}: {text}");
        assert!(text.contains(needle), "{route} {body}: {text}");
        assert!(!text.contains('\n'), "one line: {text}");
    }
    // Cohere's errors in its own shape.
    let (_, answer) = server.post("/v2/rerank", &json!({ "model": "ce", "query": "q" }));
    assert!(answer["message"].is_string(), "{answer}");
    let (status, _) = server.post("/models/ce/rerank", &json!({ "query": QUERY, "texts": DOCUMENTS }));
    assert_eq!(status, 200, "the server still serves");
}

/// Cohere's embed API with every embedding type in one call, as the library makes them from the
/// same float vectors with the server's ranges (nornir's sample, calibrated at first need).
#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn the_cohere_client_gets_every_embedding_type_in_one_call() {
    use nornir_vector::{CallOptions, Precision, to_precision};

    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let (server, _, _) = start(t.path(), &[]);
    let name = common::model().file_name().expect("a folder name").to_string_lossy().into_owned();
    let got = client("cohere_embed", &server, &name, &DOCUMENTS);
    let lib = library(&common::model());
    let floats = lib.embed(&DOCUMENTS).expect("library");
    let ranges = lib.calibrate_on_sample(&CallOptions::new().with_prompt("")).expect("ranges");
    for (name, p) in [
        ("int8", Precision::Int8),
        ("uint8", Precision::Uint8),
        ("binary", Precision::Binary),
        ("ubinary", Precision::Ubinary),
    ] {
        let want = to_precision(&floats, p, Some(&ranges)).expect("library");
        let rows = got[name].as_array().unwrap_or_else(|| panic!("{name}: {got}"));
        assert_eq!(rows.len(), DOCUMENTS.len(), "{name}");
        for (i, row) in rows.iter().enumerate() {
            let values: Vec<i64> = row.as_array().expect("a row").iter().filter_map(Value::as_i64).collect();
            assert_eq!(values.len(), want.bytes_per_vector(), "{name}");
            let off = values.iter().zip(want.row_values(i)).map(|(a, b)| (a - b).abs()).max().unwrap_or(0);
            assert!(off <= 1, "{name}, row {i}: {off} steps from the library's");
        }
    }
    let float = got["float"].as_array().expect("float");
    for (i, row) in float.iter().enumerate() {
        let v: Vec<f32> = row.as_array().expect("row").iter().filter_map(Value::as_f64).map(|x| x as f32).collect();
        assert!(nornir_test_support::cosine(&v, floats.row(i)) > 0.9999);
    }
    assert_eq!(got["v1_float"].as_array().map(Vec::len), Some(DOCUMENTS.len()), "{got}");
    // What the model cannot give is one line of 400.
    let body = json!({ "model": name, "texts": ["x"], "embedding_types": ["binary"], "output_dimension": 100 });
    let (status, answer) = server.post("/v2/embed", &body);
    assert_eq!(status, 400, "{answer}");
    assert!(answer["message"].as_str().is_some_and(|m| m.contains("multiple of 8")), "{answer}");
    let body = json!({ "model": "splade", "texts": ["x"], "embedding_types": ["binary"] });
    let (status, answer) = server.post("/v2/embed", &body);
    assert_eq!(status, 400, "{answer}");
    assert!(answer["message"].as_str().is_some_and(|m| m.contains("sparse-encoder")), "{answer}");
    let (status, answer) =
        server.post("/v2/embed", &json!({ "model": name, "texts": ["x"], "embedding_types": ["int4"] }));
    assert_eq!(status, 400, "{answer}");
}

#[test]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
fn a_server_started_with_long_chunk_ranks_long_documents_by_their_best_chunk() {
    use nornir_vector::{CallOptions, Chunking};
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    let (server, ce, _) = start(t.path(), &["--long", "chunk", "--overlap", "4"]);
    let long = ["a fjord is a long narrow inlet of the sea"; 8].join(" and ");
    let documents = [long.as_str(), DOCUMENTS[1], DOCUMENTS[3]];
    let chunked = PairOptions::new().with_call(CallOptions::new().with_chunking(Chunking::new().with_overlap(4)));
    let want = library(&ce).rerank(QUERY, &documents, None, &chunked).expect("library").ranked;
    let (status, got) = server.post("/models/ce/rerank", &json!({ "query": QUERY, "texts": documents }));
    assert_eq!(status, 200, "{got}");
    for (g, w) in got.as_array().expect("a list").iter().zip(&want) {
        assert_eq!(g["index"].as_u64(), Some(w.index as u64), "{g}");
        close(&g["score"], w.score, "/rerank with --long chunk");
        assert_eq!(g["chunk"], json!(w.chunk.expect("a chunk")), "{g}");
    }
    let whole = |c: nornir_vector::ChunkSpan| (c.start, c.end) == (0, long.len());
    assert!(want.iter().any(|w| w.index == 0 && w.chunk.is_some_and(|c| !whole(c))), "the long one was cut: {want:?}");
    // A request that says how to cut its documents is cut so, as without --long chunk.
    let (status, got) =
        server.post("/v2/rerank", &json!({ "model": "ce", "query": QUERY, "documents": documents, "truncate": true }));
    assert_eq!(status, 200, "{got}");
    assert!(got["results"].as_array().expect("results").iter().all(|r| r.get("chunk").is_none()), "{got}");
}
