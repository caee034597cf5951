//! Image URLs on the routes, against a local HTTP server of misbehaving answers
//! (`nornir_test_support::http`), with the model still loading: Cohere's `images` are read (and
//! fetched) before the model is asked, so a fetch that works reaches the model's 503 and one
//! that fails is 400 naming its item, with no ONNX Runtime or model. Jina's `input` images, read
//! after the model is chosen, are fetched on the text-only default model (an ignored test).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use nornir_server::{Models, ServerConfig, router};
use nornir_test_support::http::ImageHost;
use nornir_vector::{Device, Embedder, EmbedderOptions};
use serde_json::{Value, json};

mod common;
use common::call;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\nnot decoded here";

/// A router over one model, "m", that never finishes loading.
fn loading(config: ServerConfig) -> Router {
    router(Arc::new(Models::new(["m".to_owned()]).expect("names")), config).expect("a valid config")
}

/// URLs allowed, at most 1 KiB in 1 s each.
fn allowed() -> ServerConfig {
    ServerConfig::default()
        .with_image_urls(true)
        .with_image_url_max_bytes(1024)
        .with_image_url_timeout(Duration::from_secs(1))
}

async fn cohere(app: &Router, images: &[String]) -> (StatusCode, String) {
    let (status, answer) = call(app, "POST", "/v2/embed", Some(json!({ "images": images }))).await;
    let message = answer["message"].as_str().unwrap_or_else(|| panic!("not Cohere's error: {answer}")).to_owned();
    assert!(!message.contains('\n'), "{message}");
    (status, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_a_url_is_400_naming_the_flag_and_nothing_is_fetched() {
    let host = ImageHost::start(PNG.to_vec());
    let app = loading(ServerConfig::default());
    let (status, m) = cohere(&app, &["data:image/png;base64,aGk=".to_owned(), host.url("/image.png")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{m}");
    assert!(m.starts_with("images[1] is a URL") && m.contains("--allow-image-urls"), "{m}");
    assert_eq!(host.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_images_reach_the_model_and_failed_fetches_are_400_naming_the_item() {
    let host = ImageHost::start(PNG.to_vec());
    let app = loading(allowed());
    // Fetched (a redirect followed): the request gets as far as the model, still loading.
    let (status, m) = cohere(&app, &[host.url("/image.png"), host.url("/redirect")]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{m}");
    assert!(m.contains("still loading"), "{m}");
    assert_eq!(host.requests(), 3);
    let ok = host.url("/image.png");
    for (url, needle) in [
        (host.url("/endless"), "larger than 1024 bytes (--image-url-max-bytes)"),
        (host.url("/declared-large"), "larger than 1024 bytes (--image-url-max-bytes)"),
        (host.url("/missing"), "answered HTTP 404 Not Found"),
        (host.url("/to-file"), "redirects to a file: URL"),
        (host.url("/to-https"), "https URLs are not fetched"),
        (host.url("/loop"), "more than 5 redirects"),
        ("https://127.0.0.1:9/cat.png".to_owned(), "built without TLS"),
    ] {
        let (status, m) = cohere(&app, &[ok.clone(), url.clone()]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {m}");
        assert!(m.starts_with("images[1]") && m.contains(needle), "{url}: {m}");
    }
    assert!(host.endless_written(Duration::from_secs(10)).is_some_and(|n| n < 64 << 20), "the read stopped early");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_image_is_cut_at_its_time_limit_and_several_are_fetched_at_once() {
    let host = ImageHost::start(PNG.to_vec());
    let app = loading(allowed());
    let started = Instant::now();
    let (status, m) = cohere(&app, &[host.url("/delay/5000/image.png")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{m}");
    assert!(m.starts_with("images[0]: ") && m.contains("longer than 1 s (--image-url-timeout)"), "{m}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    // Four images of 2 s each take 2 s at once, not 8 one after another.
    let app = loading(ServerConfig::default().with_image_urls(true));
    let four: Vec<String> = (0..4).map(|_| host.url("/delay/2000/image.png")).collect();
    let started = Instant::now();
    let (status, m) = cohere(&app, &four).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{m}");
    assert!(started.elapsed() < Duration::from_secs(7), "{:?}", started.elapsed());
    // All of a request's fetches end within --request-timeout: 504 naming it.
    let app = loading(ServerConfig::default().with_image_urls(true).with_request_timeout(Duration::from_secs(1)));
    let started = Instant::now();
    let (status, m) = cohere(&app, &[host.url("/delay/5000/image.png")]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{m}");
    assert!(m.contains("--request-timeout"), "{m}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_allowed_hosts_are_fetched_from() {
    let host = ImageHost::start(PNG.to_vec());
    let app = loading(allowed().with_image_url_hosts(["images.example.com"]));
    let (status, m) = cohere(&app, &[host.url("/image.png")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{m}");
    assert!(m.contains("127.0.0.1 is not a host this server fetches images from (--image-url-host)"), "{m}");
    assert_eq!(host.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn jina_image_items_are_fetched_too_and_info_says_so() {
    nornir_test_support::needs_assets!();
    let host = ImageHost::start(PNG.to_vec());
    let options = EmbedderOptions::default().with_device(Device::Cpu).with_threads(1);
    let dir = nornir_test_support::env_path("NORNIR_TEST_MODEL");
    let embedder = Arc::new(Embedder::new(&dir, &options).expect("load"));
    let serve = |config: ServerConfig| {
        let models = Arc::new(Models::new(["m".to_owned()]).expect("names"));
        models.set_loaded("m", Arc::clone(&embedder)).expect("set");
        router(models, config).expect("a valid config")
    };
    let jina = |url: String| json!({ "input": [{ "text": "a cat" }, { "image": url }] });
    let message = |answer: &Value| answer["error"]["message"].as_str().expect("OpenAI's error").to_owned();
    // Off: refused naming the flag, nothing fetched.
    let app = serve(ServerConfig::default());
    let (status, answer) = call(&app, "POST", "/v1/embeddings", Some(jina(host.url("/image.png")))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(message(&answer).starts_with("input[1].image is a URL") && message(&answer).contains("--allow-image-urls"));
    let (_, info) = call(&app, "GET", "/info", None).await;
    assert_eq!(info["image_urls"], json!({ "fetched": false }), "{info}");
    assert_eq!(host.requests(), 0);
    // On: fetched, then refused by the text-only model; a failed fetch names its item.
    let app = serve(allowed());
    let (status, answer) = call(&app, "POST", "/v1/embeddings", Some(jina(host.url("/image.png")))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(message(&answer).contains("text only"), "{answer}");
    assert_eq!(host.requests(), 1);
    let (status, answer) = call(&app, "POST", "/v1/embeddings", Some(jina(host.url("/missing")))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(message(&answer).starts_with("input[1].image: ") && message(&answer).contains("HTTP 404"), "{answer}");
    let (_, info) = call(&app, "GET", "/info", None).await;
    let want = json!({ "fetched": true, "schemes": ["http"], "max_bytes": 1024, "timeout_s": 1.0, "at_once": 4, "hosts": "any" });
    assert_eq!(info["image_urls"], want, "{info}");
}
