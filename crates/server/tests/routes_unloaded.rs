//! The router in-process with its model still loading, so no ONNX Runtime or model is needed:
//! what every route does before it reaches a model (the API key, the body's limits, the JSON, the
//! request's own fields), the shape of each API family's errors, and the endpoint `/metrics`
//! counts each route under.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use nornir_server::{Models, ServerConfig, router};
use serde_json::{Value, json};
use tower::ServiceExt;

/// A router over one model, "m", that never finishes loading.
fn loading(config: ServerConfig) -> Router {
    router(Arc::new(Models::new(["m".to_owned()]).expect("names")), config).expect("a valid config")
}

async fn send(app: &Router, method: &str, path: &str, body: &str, key: Option<&str>) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path).header("content-type", "application/json");
    if let Some(k) = key {
        request = request.header("authorization", format!("Bearer {k}"));
    }
    let response =
        app.clone().oneshot(request.body(Body::from(body.to_owned())).expect("request")).await.expect("answer");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn post(app: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    send(app, "POST", path, &body.to_string(), None).await
}

async fn metrics(app: &Router, key: Option<&str>) -> String {
    let (status, text) = send(app, "GET", "/metrics", "", key).await;
    assert_eq!(status, StatusCode::OK);
    text.as_str().expect("text").to_owned()
}

/// The message of an error in any of the shapes, and which shape it came in.
fn message(answer: &Value) -> (&'static str, &str) {
    if let Some(m) = answer["error"]["message"].as_str() {
        ("openai", m)
    } else if let (Some(m), Some(_)) = (answer["error"].as_str(), answer["error_type"].as_str()) {
        ("tei", m)
    } else if let Some(m) = answer["message"].as_str() {
        ("cohere", m)
    } else if let Some(m) = answer["error"].as_str() {
        ("plain", m)
    } else {
        panic!("not an error in any API's shape: {answer}")
    }
}

#[tokio::test]
async fn each_route_is_counted_under_its_own_endpoint_and_answers_errors_in_its_apis_shape() {
    let app = loading(ServerConfig::default());
    let embed = json!({ "texts": ["a"] });
    let rerank = json!({ "query": "q", "documents": ["d"] });
    for (path, body, shape) in [
        ("/v1/embed", &embed, "cohere"),
        ("/v2/embed", &embed, "cohere"),
        ("/v1/rerank", &rerank, "cohere"),
        ("/v2/rerank", &rerank, "cohere"),
        ("/v1/embeddings", &json!({ "input": "a" }), "openai"),
        ("/embeddings", &json!({ "input": "a" }), "openai"),
        ("/embed", &json!({ "inputs": "a" }), "tei"),
        ("/models/m/embed", &json!({ "inputs": "a" }), "tei"),
        ("/rerank", &json!({ "query": "q", "texts": ["d"] }), "tei"),
        // TEI's /rerank asked in Cohere's shape answers in it, errors included.
        ("/rerank", &rerank, "cohere"),
    ] {
        let (status, answer) = post(&app, path, body.clone()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {answer}");
        let (got, m) = message(&answer);
        assert_eq!(got, shape, "{path}: {answer}");
        assert!(m.contains("still loading"), "{path}: {m}");
    }
    let (status, answer) = send(&app, "GET", "/info", "", None).await;
    assert_eq!((status, message(&answer).0), (StatusCode::SERVICE_UNAVAILABLE, "plain"), "{answer}");
    let text = metrics(&app, None).await;
    for (endpoint, count) in [
        ("/v1/embed", 1),
        ("/v2/embed", 1),
        ("/v1/rerank", 1),
        ("/v2/rerank", 1),
        ("/v1/embeddings", 2),
        ("/embed", 2),
        ("/rerank", 2),
        ("/info", 1),
    ] {
        let line = format!("nornir_requests_total{{endpoint=\"{endpoint}\",status=\"503\"}} {count}");
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}

#[tokio::test]
async fn a_body_the_server_cannot_take_and_a_wrong_key_are_answered_in_the_routes_shape() {
    let app = loading(ServerConfig::default().with_api_key("k").with_max_body_bytes(64));
    for (path, shape) in [("/v2/embed", "cohere"), ("/v1/embeddings", "openai"), ("/embed", "tei"), ("/info", "plain")]
    {
        let method = if path == "/info" { "GET" } else { "POST" };
        let (status, answer) = send(&app, method, path, "{}", Some("wrong")).await;
        assert_eq!((status, message(&answer).0), (StatusCode::UNAUTHORIZED, shape), "{path}: {answer}");
        if path == "/info" {
            continue;
        }
        let (status, answer) = send(&app, "POST", path, "{not json", Some("k")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        let (got, m) = message(&answer);
        assert_eq!(got, shape, "{path}: {answer}");
        assert!(m.starts_with("invalid JSON request"), "{path}: {m}");
        let large = json!({ "texts": ["x".repeat(100)] }).to_string();
        let (status, answer) = send(&app, "POST", path, &large, Some("k")).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {answer}");
        let (got, m) = message(&answer);
        assert_eq!(got, shape, "{path}: {answer}");
        assert!(m.contains("--max-body-bytes"), "{path}: {m}");
    }
    let text = metrics(&app, Some("k")).await;
    assert!(text.contains("nornir_requests_total{endpoint=\"/v2/embed\",status=\"413\"} 1"), "{text}");
    let (status, _) = send(&app, "GET", "/health", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "/health needs no key");
}

#[tokio::test]
async fn cohere_bodies_no_model_could_answer_are_400_saying_what_to_give() {
    let app = loading(ServerConfig::default());
    for path in ["/v1/embed", "/v2/embed"] {
        for (body, needle) in [
            (
                json!({ "texts": ["a"], "embedding_types": [] }),
                "\"float\", \"int8\", \"uint8\", \"binary\" or \"ubinary\"",
            ),
            (json!({ "texts": ["a"], "embedding_types": ["float", "int4"] }), "\"int4\" is not a type"),
            (json!({ "texts": ["a"], "embedding_types": ["base64"] }), "\"binary\" or \"ubinary\""),
            (json!({ "texts": [] }), "texts is empty"),
            (json!({ "embedding_types": ["float"] }), "no `texts`"),
            (json!({ "texts": ["a"], "input_type": "query" }), "\"search_document\", \"search_query\""),
            (json!({ "texts": ["a"], "input_type": "image" }), "is for `images`"),
            (json!({ "texts": ["a"], "truncate": "MIDDLE" }), "NONE, START or END"),
        ] {
            let (status, answer) = post(&app, path, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {answer}");
            let (shape, m) = message(&answer);
            assert_eq!(shape, "cohere", "{path} {body}: {answer}");
            assert!(m.contains(needle) && !m.contains('\n'), "{path} {body}: {m}");
        }
        // What Cohere's clients send gets past the body's checks (to the model, still loading).
        let body = json!({
            "model": "m", "texts": ["a"], "input_type": "search_query",
            "embedding_types": ["float", "int8", "uint8", "binary", "ubinary"], "truncate": "END",
        });
        let (status, answer) = post(&app, path, body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {answer}");
    }
    for path in ["/v1/rerank", "/v2/rerank"] {
        for (body, needle) in [
            (json!({ "query": "q", "documents": ["d"], "top_n": 0 }), "top_n is 0"),
            (json!({ "query": "q", "documents": [] }), "at least one document"),
            (json!({ "documents": ["d"] }), "no `query`"),
        ] {
            let (status, answer) = post(&app, path, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {answer}");
            let (shape, m) = message(&answer);
            assert_eq!(shape, "cohere", "{path} {body}: {answer}");
            assert!(m.contains(needle), "{path} {body}: {m}");
        }
    }
}
