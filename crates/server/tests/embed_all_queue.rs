//! TEI's `/embed_all` goes through the embedder's queue like every other route: with the queue
//! full it is refused at once with the same 503 as `/embed`, it is counted in `/metrics`, and
//! its answer is the library's token vectors, on the real default model and CPU ONNX Runtime.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::call;
use nornir_server::{Models, ServerConfig, router};
use nornir_test_support::floats;
use nornir_vector::{CallOptions, Device, Embedder, EmbedderOptions, QueueFull};
use serde_json::json;

const TEXT: &str = "A man is eating food.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn embed_all_is_refused_when_the_queue_is_full_and_counted_like_embed() {
    nornir_test_support::needs_assets!();
    let options = EmbedderOptions::default()
        .with_device(Device::Cpu)
        .with_threads(1)
        .with_workers(1)
        .with_max_queued_texts(4)
        .with_queue_full(QueueFull::Refuse);
    let dir = nornir_test_support::env_path("NORNIR_TEST_MODEL");
    let lib = Arc::new(Embedder::new(&dir, &options).expect("load"));
    let models = Arc::new(Models::new(["minilm".to_owned()]).expect("names"));
    models.set_loaded("minilm", Arc::clone(&lib)).expect("set");
    let app = router(models, ServerConfig::default()).expect("a valid config");

    // A call larger than the limit runs when the queue is empty; while its texts wait, the queue
    // is full for everyone else.
    let many: Vec<String> = (0..2000).map(|i| format!("text number {i} of a call that fills the queue")).collect();
    let big = {
        let lib = Arc::clone(&lib);
        std::thread::spawn(move || lib.embed(&many).map(|rows| rows.len()))
    };
    let started = Instant::now();
    while lib.stats().queued_texts == 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the large call never queued");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (status, e) = call(&app, "POST", "/embed_all", Some(json!({ "inputs": [TEXT] }))).await;
    let (embed_status, embed_e) = call(&app, "POST", "/embed", Some(json!({ "inputs": [TEXT] }))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{e}");
    assert_eq!((embed_status, &e["error_type"]), (status, &embed_e["error_type"]), "as /embed answers: {embed_e}");
    assert_eq!(e["error_type"], "Overloaded", "{e}");
    assert_eq!(big.join().expect("join").expect("the large call"), 2000);

    // Served again once the queue has room: each token's vector, as the library gives it.
    let (status, all) = call(&app, "POST", "/embed_all", Some(json!({ "inputs": [TEXT, "what is a fjord?"] }))).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let want = lib.token_vectors(TEXT, &CallOptions::new()).expect("library");
    let tokens = all[0].as_array().expect("tokens");
    assert_eq!(tokens.len(), want.len());
    for (got, want) in tokens.iter().zip(want.rows()) {
        // JSON carries each float in its shortest form, read back here through f64.
        let worst = floats(got).iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst <= 1e-6, "the library's vectors: {worst}");
    }
    let other = lib.token_vectors("what is a fjord?", &CallOptions::new()).expect("the other text");
    assert_eq!(all[1].as_array().map(Vec::len), Some(other.len()));
    let counted = want.total_tokens() + other.total_tokens();
    let (_, metrics) = call(&app, "GET", "/metrics", None).await;
    let metrics = metrics.as_str().expect("text").to_owned();
    for needle in [
        "nornir_requests_total{endpoint=\"/embed_all\",status=\"503\"} 1".to_owned(),
        "nornir_requests_total{endpoint=\"/embed_all\",status=\"200\"} 1".to_owned(),
        // The two texts of the answered /embed_all; the refused requests count none.
        "nornir_texts_total{model=\"minilm\"} 2".to_owned(),
        format!("nornir_tokens_total{{model=\"minilm\"}} {counted}"),
        "nornir_queue_texts{model=\"minilm\"} 0".to_owned(),
    ] {
        assert!(metrics.contains(&needle), "{needle} not in\n{metrics}");
    }
}
