//! The router in-process (tower's `oneshot`, no socket), on the real default model, the
//! paraphrase-MiniLM-L3 export and CPU ONNX Runtime: every TEI and OpenAI shape the common
//! clients send, checked against the library's vectors; per-request prompts; token ids read as
//! OpenAI's cl100k_base; several models, each answering for itself.

use std::path::{Path, PathBuf};
mod common;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::call;
use nornir_server::{Models, ServerConfig, TokenIds, router};
use nornir_test_support::{cosine, floats};
use nornir_vector::{CallOptions, Device, Embedder, EmbedderOptions, Embeddings, Truncation};
use serde_json::{Value, json};
use tower::ServiceExt;

fn options() -> EmbedderOptions {
    EmbedderOptions::default().with_device(Device::Cpu).with_threads(1)
}

fn default_model() -> PathBuf {
    nornir_test_support::env_path("NORNIR_TEST_MODEL")
}

fn load(dir: &Path, o: &EmbedderOptions) -> Arc<Embedder> {
    Arc::new(Embedder::new(dir, o).unwrap_or_else(|e| panic!("load {}: {e}", dir.display())))
}

/// A router over `models`, all loaded.
fn serve(models: &[(&str, &Arc<Embedder>)], config: ServerConfig) -> Router {
    let set = Arc::new(Models::new(models.iter().map(|(n, _)| (*n).to_owned())).expect("names"));
    for (name, e) in models {
        set.set_loaded(name, Arc::clone(e)).expect("set");
    }
    router(set, config).expect("a valid config")
}

async fn post(app: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    call(app, "POST", path, Some(body)).await
}

/// `post`, with the answer's `x-truncated-inputs` header.
async fn post_counting(app: &Router, path: &str, body: Value) -> (StatusCode, Value, Option<u64>) {
    let request = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("answer");
    let status = response.status();
    let truncated =
        response.headers().get("x-truncated-inputs").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), truncated)
}

/// A router over models with aliases, all loaded.
fn serve_named(models: &[(&str, &[&str], &Arc<Embedder>)], config: ServerConfig) -> Router {
    let set = Models::with_aliases(
        models.iter().map(|(n, a, _)| ((*n).to_owned(), a.iter().map(|x| (*x).to_owned()).collect())),
    )
    .expect("names");
    let set = Arc::new(set);
    for (name, _, e) in models {
        set.set_loaded(name, Arc::clone(e)).expect("set");
    }
    router(set, config).expect("a valid config")
}

/// Each vector of a bare `[[f32]]` answer against the library's rows, in width and direction.
fn assert_vectors(answer: &Value, want: &Embeddings, what: &str) {
    let rows = answer.as_array().unwrap_or_else(|| panic!("{what}: not a list of vectors: {answer}"));
    assert_eq!(rows.len(), want.len(), "{what}: rows");
    for (i, v) in rows.iter().enumerate() {
        let v = floats(v);
        assert_eq!(v.len(), want.dim(), "{what}: row {i} width");
        let c = cosine(&v, want.row(i));
        assert!(c >= 0.9999, "{what}: row {i} cosine {c}");
        let (n, m) = (v.iter().map(|x| x * x).sum::<f32>(), want.row(i).iter().map(|x| x * x).sum::<f32>());
        assert!((n - m).abs() <= 1e-3 * m, "{what}: row {i} length {n} against {m}");
    }
}

/// The OpenAI answer's vectors as a bare list.
fn openai_vectors(answer: &Value) -> Value {
    Value::Array(
        answer["data"]
            .as_array()
            .unwrap_or_else(|| panic!("no data: {answer}"))
            .iter()
            .map(|d| d["embedding"].clone())
            .collect(),
    )
}

/// The default model with BGE-style prompts in its config_sentence_transformers.json.
fn prompted_model(dir: &Path) {
    let model = default_model();
    for f in ["model.onnx", "tokenizer.json", "config.json", "modules.json", "sentence_bert_config.json", "1_Pooling"] {
        std::os::unix::fs::symlink(model.join(f), dir.join(f)).expect("link");
    }
    std::fs::write(
        dir.join("config_sentence_transformers.json"),
        r#"{"prompts":{"query":"Represent this sentence for searching relevant passages: ","document":""}}"#,
    )
    .expect("prompts");
}

const TEXTS: [&str; 3] = ["A man is eating food.", "A plane is taking off.", "what is a fjord?"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn tei_takes_the_root_and_the_nested_parameters_and_every_field() {
    nornir_test_support::needs_assets!();
    let t = tempfile::tempdir().expect("tempdir");
    prompted_model(t.path());
    let lib = load(t.path(), &options());
    let app = serve(&[("bge-like", &lib)], ServerConfig::default());
    let query = CallOptions::new().with_prompt_name("query").with_normalize(false).with_dimensions(128);
    let want = lib.embed_with(&TEXTS, &query).expect("library");
    let fields = json!({ "normalize": false, "prompt_name": "query", "dimensions": 128 });
    // huggingface_hub from 1.0 (and 0.34 on): every field at the root, posted to the base URL.
    let mut root = fields.clone();
    root["inputs"] = json!(TEXTS);
    for path in ["/", "/embed", "/models/bge-like/embed"] {
        let (status, answer) = post(&app, path, root.clone()).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        assert_vectors(&answer, &want, path);
    }
    // huggingface_hub 0.28 to 0.33: the same fields under "parameters".
    let (status, answer) = post(&app, "/", json!({ "inputs": TEXTS, "parameters": fields })).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_vectors(&answer, &want, "nested parameters");
    // A query's prompt by name gives what an embedder built with that prompt gives.
    let built = load(t.path(), &options().with_call(CallOptions::new().with_prompt_name("query")));
    let (_, answer) = post(&app, "/embed", json!({ "inputs": TEXTS, "prompt_name": "query" })).await;
    assert_vectors(&answer, &built.embed(&TEXTS).expect("built"), "prompt_name");
    let (status, e) = post(&app, "/embed", json!({ "inputs": "x", "prompt_name": "search" })).await;
    assert_eq!((status, e["error_type"].as_str()), (StatusCode::BAD_REQUEST, Some("Validation")), "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("\"document\", \"query\"")), "{e}");

    // A text longer than the model: 413 with "truncate": false (TEI's default; here the
    // server's --long refuse), then cut on the side asked for.
    let long = format!("start {} end", "river stone light ".repeat(300));
    let (status, e) = post(&app, "/embed", json!({ "inputs": ["short", long], "truncate": false })).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{e}");
    assert!(
        e["error"].as_str().is_some_and(|m| m.contains("inputs[1] has 904 tokens") && m.contains("truncate")),
        "{e}"
    );
    for (direction, truncation) in
        [("Right", Truncation::Right), ("Left", Truncation::Left), ("left", Truncation::Left)]
    {
        let want = lib.embed_with(&[long.as_str()], &CallOptions::new().with_truncation(truncation)).expect("cut");
        let body = json!({ "inputs": long, "truncate": true, "truncation_direction": direction });
        let (status, answer) = post(&app, "/embed", body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_vectors(&answer, &want, direction);
    }
    // llama-index's TextEmbeddingsInference sends exactly this.
    let (status, answer) = post(&app, "/embed", json!({ "inputs": TEXTS, "truncate": true })).await;
    assert_eq!(status, StatusCode::OK);
    assert_vectors(&answer, &lib.embed(&TEXTS).expect("plain"), "llama-index");
}

/// nornir's chunking extension: `/embed` with `"chunking"` answers the documents' vectors in
/// TEI's shape instead of 413, and `/embed_chunks` adds each chunk's span (in characters) and vector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn long_documents_are_chunked_on_request() {
    nornir_test_support::needs_assets!();
    let lib = load(&default_model(), &options());
    let app = serve(&[("minilm", &lib)], ServerConfig::default());
    let doc = "Ålesund ligger på øyer, og fjordene skjærer inn i landet. ".repeat(40);
    let chunking = nornir_vector::Chunking::new().with_window(64).with_overlap(8);
    let want = lib.embed_with(&[doc.as_str(), "short"], &CallOptions::new().with_chunking(chunking)).expect("library");
    assert_eq!(
        post(&app, "/embed", json!({ "inputs": doc, "truncate": false })).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let body = json!({ "inputs": [doc, "short"], "chunking": { "window": 64, "overlap": 8 } });
    let (status, answer) = post(&app, "/embed", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_vectors(&answer, &want, "documents");
    let (status, answer) = post(&app, "/embed_chunks", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let chunks = answer[0]["chunks"].as_array().expect("chunks");
    assert_eq!(chunks.len(), want.chunks(0).count());
    let chars: Vec<char> = doc.chars().collect();
    for ((got, (span, vector)), k) in chunks.iter().zip(want.chunks(0)).zip(0..) {
        let (start, end) = (got["start"].as_u64().expect("start") as usize, got["end"].as_u64().expect("end") as usize);
        let text: String = chars[start..end].iter().collect();
        assert_eq!(text, doc[span.start..span.end], "chunk {k}: character span");
        assert!(cosine(&floats(&got["embedding"]), vector) >= 0.9999, "chunk {k}");
    }
    assert_eq!(answer[1]["chunks"].as_array().map(Vec::len), Some(1));
    let (status, e) = post(&app, "/embed_chunks", json!({ "inputs": "x", "chunking": { "windw": 9 } })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn tokenize_decode_and_similarity_as_tei_answers_them() {
    nornir_test_support::needs_assets!();
    let lib = load(&default_model(), &options());
    let app = serve(&[("minilm", &lib)], ServerConfig::default());
    let (status, tokens) = post(&app, "/tokenize", json!({ "inputs": ["Hello, fjords!", "a b"] })).await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    let first = tokens[0].as_array().expect("tokens");
    let texts: Vec<&str> = first.iter().map(|t| t["text"].as_str().expect("text")).collect();
    assert_eq!(texts, ["[CLS]", "Hello", ",", "fjord", "s", "!", "[SEP]"], "{tokens}");
    assert_eq!((first[0]["special"].as_bool(), first[1]["special"].as_bool()), (Some(true), Some(false)));
    assert_eq!((first[1]["start"].as_u64(), first[1]["stop"].as_u64()), (Some(0), Some(5)));
    let ids: Vec<u64> = first.iter().map(|t| t["id"].as_u64().expect("id")).collect();
    let (_, bare) = post(&app, "/tokenize", json!({ "inputs": "Hello, fjords!", "add_special_tokens": false })).await;
    assert_eq!(bare[0].as_array().map(Vec::len), Some(5));

    let (status, decoded) = post(&app, "/decode", json!({ "ids": ids })).await;
    assert_eq!((status, decoded), (StatusCode::OK, json!(["hello, fjords!"])));
    let (_, with_special) = post(&app, "/decode", json!({ "ids": [ids], "skip_special_tokens": false })).await;
    assert_eq!(with_special, json!(["[CLS] hello, fjords! [SEP]"]));
    let (status, e) = post(&app, "/decode", json!({ "ids": [1, 999_999] })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");

    let sentences = ["A man is eating a meal.", "A plane is taking off."];
    let body = json!({ "inputs": { "source_sentence": TEXTS[0], "sentences": sentences } });
    let (status, scores) = post(&app, "/similarity", body).await;
    assert_eq!(status, StatusCode::OK, "{scores}");
    let v = lib.embed(&[TEXTS[0], sentences[0], sentences[1]]).expect("library");
    let scores = floats(&scores);
    for (k, s) in scores.iter().enumerate() {
        assert!((s - cosine(v.row(0), v.row(k + 1))).abs() < 1e-4, "sentence {k}: {s}");
    }
    assert!(scores[0] > scores[1], "the paraphrase scores higher: {scores:?}");

    // /embed_all: each token's raw vector; their mean is the text's mean-pooled vector.
    let (status, all) = post(&app, "/embed_all", json!({ "inputs": [TEXTS[0]] })).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let tokens = all[0].as_array().expect("tokens");
    let count = lib.embed(&TEXTS[..1]).expect("one").token_count(0).expect("count");
    assert_eq!(tokens.len(), count);
    let mut mean = vec![0f32; 384];
    for t in tokens {
        for (m, x) in mean.iter_mut().zip(floats(t)) {
            *m += x / count as f32;
        }
    }
    assert!(cosine(&mean, lib.embed(&TEXTS[..1]).expect("one").row(0)) >= 0.9999);
}

/// cl100k_base ids of `text`, as tiktoken (and so LangChain) makes them.
fn cl100k(text: &str) -> Vec<u32> {
    tiktoken_rs::cl100k_base_singleton().encode_ordinary(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn openai_token_ids_are_read_as_cl100k_base() {
    nornir_test_support::needs_assets!();
    let lib = load(&default_model(), &options());
    let app = serve(&[("minilm", &lib)], ServerConfig::default());
    let want = lib.embed(&TEXTS).expect("library");
    let ids: Vec<Vec<u32>> = TEXTS.iter().map(|t| cl100k(t)).collect();
    let (status, answer) = post(&app, "/v1/embeddings", json!({ "model": "minilm", "input": ids })).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_vectors(&openai_vectors(&answer), &want, "[[ids]]");
    assert_eq!(answer["usage"]["prompt_tokens"].as_u64(), Some(want.total_tokens() as u64), "the model's tokens");
    let (_, one) = post(&app, "/embeddings", json!({ "model": "minilm", "input": ids[0], "user": "u-1" })).await;
    assert_vectors(&openai_vectors(&one), &lib.embed(&TEXTS[..1]).expect("one"), "[ids] on /embeddings");
    // Read as the model's own ids, the same numbers are other words.
    let misread = lib.decode(&ids[0], true).expect("decode as the model's ids");
    assert_ne!(misread.to_lowercase(), TEXTS[0].to_lowercase(), "{misread}");

    let (status, e) = post(&app, "/v1/embeddings", json!({ "input": [[1, 4_000_000]] })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("4000000") && m.contains("cl100k_base")), "{e}");
    let strict = serve(&[("minilm", &lib)], ServerConfig::default().with_token_ids(TokenIds::Refuse));
    let (status, e) = post(&strict, "/v1/embeddings", json!({ "input": ids })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("--token-ids refuse")), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn several_models_each_answer_for_the_name_they_are_asked_by() {
    nornir_test_support::needs_assets!();
    let minilm = load(&default_model(), &options());
    let paraphrase = load(&nornir_test_support::env_path("NORNIR_TEST_PARAPHRASE_MODEL"), &options());
    let app = serve(&[("minilm", &minilm), ("paraphrase", &paraphrase)], ServerConfig::default());
    let want_minilm = minilm.embed(&TEXTS).expect("minilm");
    let want_paraphrase = paraphrase.embed(&TEXTS).expect("paraphrase");
    assert!(cosine(want_minilm.row(0), want_paraphrase.row(0)).abs() < 0.99, "the two models differ");

    // Concurrent requests for both models, each checked against its own model.
    let mut tasks = Vec::new();
    for k in 0..16 {
        let app = app.clone();
        let name = if k % 2 == 0 { "minilm" } else { "paraphrase" };
        tasks.push(tokio::spawn(async move {
            let path = format!("/models/{name}/embed");
            let (openai, tei) = tokio::join!(
                post(&app, "/v1/embeddings", json!({ "model": name, "input": TEXTS })),
                post(&app, &path, json!({ "inputs": TEXTS })),
            );
            (name, openai, tei)
        }));
    }
    for task in tasks {
        let (name, (s1, openai), (s2, tei)) = task.await.expect("task");
        assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{openai} {tei}");
        assert_eq!(openai["model"].as_str(), Some(name));
        let want = if name == "minilm" { &want_minilm } else { &want_paraphrase };
        assert_vectors(&openai_vectors(&openai), want, name);
        assert_vectors(&tei, want, name);
    }
    // TEI's bare routes use the first model.
    let (_, first) = post(&app, "/embed", json!({ "inputs": TEXTS })).await;
    assert_vectors(&first, &want_minilm, "the first model");

    let (status, e) = post(&app, "/v1/embeddings", json!({ "model": "text-embedding-3-small", "input": "a" })).await;
    assert_eq!((status, e["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("model_not_found")), "{e}");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("minilm, paraphrase")), "{e}");
    assert_eq!(post(&app, "/models/nope/embed", json!({ "inputs": "a" })).await.0, StatusCode::NOT_FOUND);

    let (status, list) = call(&app, "GET", "/v1/models", None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = list["data"].as_array().expect("data").iter().map(|m| m["id"].as_str().expect("id")).collect();
    assert_eq!((list["object"].as_str(), ids), (Some("list"), vec!["minilm", "paraphrase"]));
    let (_, info) = call(&app, "GET", "/models/paraphrase/info", None).await;
    assert_eq!((info["model_id"].as_str(), info["model"]["dimension"].as_u64()), (Some("paraphrase"), Some(384)));
    let (_, metrics) = call(&app, "GET", "/metrics", None).await;
    let metrics = metrics.as_str().expect("text").to_owned();
    for needle in [
        "nornir_texts_total{model=\"minilm\"} 51",
        "nornir_texts_total{model=\"paraphrase\"} 48",
        "nornir_queue_texts{model=\"paraphrase\"} 0",
        "nornir_active_provider{model=\"minilm\",provider=\"CPUExecutionProvider\",vendor=\"cpu\"} 1",
        "nornir_requests_total{endpoint=\"/v1/embeddings\",status=\"404\"} 1",
    ] {
        assert!(metrics.contains(needle), "{needle} not in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn a_model_still_loading_is_503_and_health_names_it() {
    nornir_test_support::needs_assets!();
    let lib = load(&default_model(), &options());
    let models = Arc::new(Models::new(["ready".to_owned(), "later".to_owned()]).expect("names"));
    models.set_loaded("ready", Arc::clone(&lib)).expect("set");
    let app = router(Arc::clone(&models), ServerConfig::default()).expect("a valid config");
    let (status, health) = call(&app, "GET", "/health", None).await;
    assert_eq!(
        (status, health),
        (StatusCode::SERVICE_UNAVAILABLE, json!({ "status": "loading", "loading": ["later"] }))
    );
    assert_eq!(post(&app, "/v1/embeddings", json!({ "model": "ready", "input": "a" })).await.0, StatusCode::OK);
    let (status, e) = post(&app, "/v1/embeddings", json!({ "model": "later", "input": "a" })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{e}");
    models.set_loaded("later", lib).expect("set");
    assert_eq!(call(&app, "GET", "/health", None).await.0, StatusCode::OK);
}

/// Reads from `tcp` until the server closes the connection (or it resets it), and returns what
/// came and how long that took; a server that never closes fails after 10 s.
async fn read_until_closed(
    tcp: &mut (impl tokio::io::AsyncRead + Unpin),
    started: std::time::Instant,
) -> (String, f64) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the connection for 10 s: {}", String::from_utf8_lossy(&got)),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), started.elapsed().as_secs_f64())
}

/// `nornir_server::serve` on a real socket with a 1 s read timeout, against the slow clients a
/// server on the open network meets: one that trickles its request head a header every 200 ms
/// (slowloris), one that trickles its body, and one that connects and says nothing. Each is cut
/// off about 1 s in (the body with a 408), while `/health` keeps answering, and the shutdown
/// signal ends `serve`. With `axum::serve` (no header deadline) the first and third were never
/// cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_the_server_keeps_serving() {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;
    let models = Arc::new(Models::new(["m".to_owned()]).expect("names"));
    let config = ServerConfig::default().with_read_timeout(std::time::Duration::from_secs(1));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(nornir_server::serve(
        listener,
        router(models, config.clone()).expect("a valid config"),
        config.read_timeout,
        async move {
            let _ = stopped.await;
        },
    ));
    let trickle = |head: &'static str, drip: &'static [u8]| async move {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let started = std::time::Instant::now();
        tcp.write_all(head.as_bytes()).await.expect("head");
        let (mut reader, mut writer) = tcp.into_split();
        let dripping = tokio::spawn(async move {
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                if writer.write_all(drip).await.is_err() {
                    break;
                }
            }
        });
        let answer = read_until_closed(&mut reader, started).await;
        dripping.abort();
        answer
    };
    let head = trickle("POST /embed HTTP/1.1\r\nhost: x\r\n", b"x-slow: y\r\n");
    let body = trickle(
        "POST /embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"inputs\": \"",
        b"a",
    );
    let idle = async {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        read_until_closed(&mut tcp, std::time::Instant::now()).await
    };
    let health = async {
        let mut slowest = 0f64;
        for _ in 0..10 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let mut tcp = TcpStream::connect(addr).await.expect("connect");
            let started = std::time::Instant::now();
            tcp.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.expect("send");
            let (answer, _) = read_until_closed(&mut tcp, started).await;
            assert!(answer.starts_with("HTTP/1.1 503"), "loading, and answering: {answer}");
            slowest = slowest.max(started.elapsed().as_secs_f64());
        }
        slowest
    };
    let ((head, head_s), (body, body_s), (idle, idle_s), health_s) = tokio::join!(head, body, idle, health);
    assert!(head.is_empty() || head.starts_with("HTTP/1.1 408"), "a slow head gets nothing or 408: {head}");
    assert!((0.9..4.0).contains(&head_s), "a trickled head is cut off after the 1 s read timeout: {head_s:.2} s");
    assert!(body.starts_with("HTTP/1.1 408"), "a trickled body gets 408: {body}");
    assert!(body.contains("--read-timeout"), "{body}");
    assert!((0.9..4.0).contains(&body_s), "a trickled body is cut off after 1 s: {body_s:.2} s");
    assert!(idle.is_empty() || idle.starts_with("HTTP/1.1 408"), "{idle}");
    assert!((0.9..4.0).contains(&idle_s), "an idle connection is closed after 1 s: {idle_s:.2} s");
    assert!(health_s < 1.0, "/health answered meanwhile, the slowest in {health_s:.2} s");
    stop.send(()).expect("signal");
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("serve ends on its shutdown signal")
        .expect("join")
        .expect("serve");
}

/// The names clients send: with one model every name is answered by it (as TEI does), unless
/// strict; with several, aliases and a fallback choose, and an unknown name is 404 with the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn any_name_reaches_one_model_and_aliases_and_a_fallback_choose_among_several() {
    nornir_test_support::needs_assets!();
    let minilm = load(&default_model(), &options());
    let paraphrase = load(&nornir_test_support::env_path("NORNIR_TEST_PARAPHRASE_MODEL"), &options());
    let want_minilm = minilm.embed(&TEXTS).expect("minilm");
    let want_paraphrase = paraphrase.embed(&TEXTS).expect("paraphrase");

    let one = serve(&[("minilm", &minilm)], ServerConfig::default());
    for name in ["text-embedding-ada-002", "BAAI/bge-small-en-v1.5", "m"] {
        let (status, answer) = post(&one, "/v1/embeddings", json!({ "model": name, "input": TEXTS })).await;
        assert_eq!(status, StatusCode::OK, "{name}: {answer}");
        assert_eq!(answer["model"], "minilm", "the answer gives the served name");
        assert_vectors(&openai_vectors(&answer), &want_minilm, name);
    }
    let strict = serve(&[("minilm", &minilm)], ServerConfig::default().with_strict_model_names(true));
    let (status, e) = post(&strict, "/v1/embeddings", json!({ "model": "m", "input": "a" })).await;
    assert_eq!((status, e["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("model_not_found")), "{e}");

    let models: [(&str, &[&str], &Arc<Embedder>); 2] =
        [("minilm", &["text-embedding-3-small"], &minilm), ("paraphrase", &["para", "p3"], &paraphrase)];
    let two = serve_named(&models, ServerConfig::default());
    for (name, want) in
        [("text-embedding-3-small", &want_minilm), ("p3", &want_paraphrase), ("paraphrase", &want_paraphrase)]
    {
        let (status, answer) = post(&two, "/v1/embeddings", json!({ "model": name, "input": TEXTS })).await;
        assert_eq!(status, StatusCode::OK, "{name}: {answer}");
        assert_vectors(&openai_vectors(&answer), want, name);
        let (status, tei) = post(&two, &format!("/models/{name}/embed"), json!({ "inputs": TEXTS })).await;
        assert_eq!(status, StatusCode::OK, "{name}: {tei}");
        assert_vectors(&tei, want, name);
    }
    let (status, e) = post(&two, "/v1/embeddings", json!({ "model": "ada", "input": "a" })).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("minilm, text-embedding-3-small, paraphrase, para, p3")),
        "{e}"
    );
    let (_, list) = call(&two, "GET", "/v1/models", None).await;
    let ids: Vec<&str> = list["data"].as_array().expect("data").iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["minilm", "text-embedding-3-small", "paraphrase", "para", "p3"]);
    let (_, info) = call(&two, "GET", "/models/para/info", None).await;
    assert_eq!((info["model_id"].as_str(), info["aliases"].clone()), (Some("paraphrase"), json!(["para", "p3"])));

    let fallback = serve_named(&models, ServerConfig::default().with_default_model("para"));
    let (status, answer) = post(&fallback, "/v1/embeddings", json!({ "model": "ada", "input": TEXTS })).await;
    assert_eq!((status, answer["model"].as_str()), (StatusCode::OK, Some("paraphrase")), "{answer}");
    assert_vectors(&openai_vectors(&answer), &want_paraphrase, "the fallback");
    let set = Arc::new(Models::new(["a".to_owned()]).expect("names"));
    let e = router(set, ServerConfig::default().with_default_model("b")).expect_err("an unknown fallback");
    assert_eq!(e.option, "default_model");
}

/// One policy for long texts: the server's `long` when a request does not say, TEI's
/// `truncate` when it does; the answer counts the texts cut, and so does /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the ONNX Runtime builds and models that `cargo xtask test` fetches"]
async fn long_texts_follow_the_servers_policy_unless_the_request_says() {
    nornir_test_support::needs_assets!();
    let lib = load(&default_model(), &options());
    let long = format!("start {} end", "river stone light ".repeat(140));
    let batch = ["short".to_owned(), long.clone(), "also short".to_owned()];
    let cut = lib.embed(&batch).expect("truncated");
    assert!(cut.truncated(1) && !cut.truncated(0));

    let app = serve(&[("minilm", &lib)], ServerConfig::default());
    let (status, answer, n) = post_counting(&app, "/v1/embeddings", json!({ "model": "x", "input": batch })).await;
    assert_eq!((status, n), (StatusCode::OK, Some(1)), "{answer}");
    assert_vectors(&openai_vectors(&answer), &cut, "OpenAI, truncated");
    // huggingface_hub's feature_extraction sends no "truncate": the server's policy answers.
    let (status, answer, n) = post_counting(&app, "/", json!({ "inputs": batch })).await;
    assert_eq!((status, n), (StatusCode::OK, Some(1)), "{answer}");
    assert_vectors(&answer, &cut, "TEI, truncated");
    let (status, e, _) = post_counting(&app, "/embed", json!({ "inputs": batch, "truncate": false })).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("inputs[1] has") && m.contains("tokens")), "{e}");
    let (_, metrics) = call(&app, "GET", "/metrics", None).await;
    assert!(
        metrics.as_str().is_some_and(|m| m.contains("nornir_truncated_inputs_total{model=\"minilm\"} 2")),
        "{metrics}"
    );

    let refuse = serve(&[("minilm", &lib)], ServerConfig::default().with_long(nornir_vector::LongInputs::Refuse));
    for (path, body) in [("/embed", json!({ "inputs": batch })), ("/v1/embeddings", json!({ "input": batch }))] {
        let (status, e, _) = post_counting(&refuse, path, body).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {e}");
    }
    let (status, answer, n) = post_counting(&refuse, "/embed", json!({ "inputs": batch, "truncate": true })).await;
    assert_eq!((status, n), (StatusCode::OK, Some(1)), "a request's own truncate wins: {answer}");

    let chunking = nornir_vector::Chunking::new().with_window(64).with_overlap(8);
    let documents = lib.embed_with(&batch, &CallOptions::new().with_chunking(chunking)).expect("chunked");
    let chunk =
        serve(&[("minilm", &lib)], ServerConfig::default().with_long(nornir_vector::LongInputs::Chunk(chunking)));
    let (status, answer, n) = post_counting(&chunk, "/embed", json!({ "inputs": batch })).await;
    assert_eq!((status, n), (StatusCode::OK, Some(0)), "{answer}");
    assert_vectors(&answer, &documents, "TEI, chunked");
    let (status, answer, _) = post_counting(&chunk, "/v1/embeddings", json!({ "input": batch })).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_vectors(&openai_vectors(&answer), &documents, "OpenAI, chunked");
}
