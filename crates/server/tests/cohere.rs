//! Cohere's embed routes on the real default model and CPU ONNX Runtime (the fetched assets):
//! each version answers, and `/metrics` counts each under its own endpoint.

mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use common::call;
use nornir_server::{Models, ServerConfig, router};
use nornir_vector::{Device, Embedder, EmbedderOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn each_cohere_embed_version_answers_and_is_counted_under_its_own_endpoint() {
    nornir_test_support::needs_assets!();
    let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(1);
    let dir = nornir_test_support::env_path("NORNIR_TEST_MODEL");
    let embedder = Arc::new(Embedder::new(&dir, &options).expect("the default model"));
    let models = Arc::new(Models::new(["minilm".to_owned()]).expect("names"));
    models.set_loaded("minilm", embedder).expect("set");
    let app = router(models, ServerConfig::default()).expect("a valid config");
    let body = json!({ "model": "minilm", "texts": ["a fjord", "a plane"], "input_type": "search_document" });
    for (path, times) in [("/v1/embed", 1), ("/v2/embed", 2)] {
        for _ in 0..times {
            let (status, answer) = call(&app, "POST", path, Some(body.clone())).await;
            assert_eq!(status, StatusCode::OK, "{path}: {answer}");
            assert_eq!(answer["embeddings"]["float"].as_array().map(Vec::len), Some(2), "{path}: {answer}");
        }
        // The empty list of types, 200 with no embeddings before, names what to give.
        let mut empty = body.clone();
        empty["embedding_types"] = json!([]);
        let (status, answer) = call(&app, "POST", path, Some(empty)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert!(answer["message"].as_str().is_some_and(|m| m.contains("\"float\", \"int8\"")), "{answer}");
    }
    let (_, text) = call(&app, "GET", "/metrics", None).await;
    let text = text.as_str().expect("text");
    for line in [
        "nornir_requests_total{endpoint=\"/v1/embed\",status=\"200\"} 1",
        "nornir_requests_total{endpoint=\"/v2/embed\",status=\"200\"} 2",
        "nornir_requests_total{endpoint=\"/v1/embed\",status=\"400\"} 1",
        "nornir_requests_total{endpoint=\"/v2/embed\",status=\"400\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}
