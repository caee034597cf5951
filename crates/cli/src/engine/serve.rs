//! `nornir vector serve`: an HTTP server over one shared embedder (axum on tokio). Endpoints:
//! OpenAI's `POST /v1/embeddings`, text-embeddings-inference's `POST /embed`, `GET /health`
//! (ready once the model has loaded and passed its first run), `GET /metrics` (Prometheus text),
//! `GET /info` (what the doctor says about the running model). Concurrent requests share batches
//! through the embedder's queue; a full queue answers 503 at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use nornir_vector::{BATCH_SIZE_BOUNDS, EmbedError, Embedder, QueueFull};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{model_dir, options};
use crate::ServeArgs;

/// Most bytes of a too-large body read and dropped before its 413 goes out: a client still
/// writing it then reads the answer, not a reset connection. A larger body, or one announced with
/// `Expect: 100-continue`, is answered at once, unread.
const DRAIN_BYTES: u64 = 64 << 20;

/// Request latency histogram bounds, in seconds.
const LATENCY_BOUNDS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The model, once loaded and checked.
struct Loaded {
    embedder: Embedder,
    /// Normalise OpenAI answers (and TEI's when a request does not say): as the model folder or
    /// --normalize / --no-normalize say.
    normalize: bool,
}

/// What every handler shares.
struct App {
    loaded: OnceLock<Loaded>,
    model_name: String,
    /// SHA-256 of the API key: compared in constant time, whatever the length sent.
    api_key: Option<[u8; 32]>,
    max_inputs: usize,
    /// --max-body-bytes.
    max_body_bytes: usize,
    /// Dimensions when a request does not say (--dim); else the model's.
    default_dim: Option<usize>,
    /// --request-timeout: how long a request's texts may take, queue and run.
    request_timeout: Duration,
    metrics: Metrics,
}

#[derive(Default)]
struct Metrics {
    /// (endpoint, status) -> requests.
    requests: Mutex<std::collections::BTreeMap<(&'static str, u16), u64>>,
    texts: AtomicU64,
    tokens: AtomicU64,
    /// Per bucket of [`LATENCY_BOUNDS`] (not cumulative), then the count and the sum in microseconds.
    latency: [AtomicU64; LATENCY_BOUNDS.len()],
    latency_count: AtomicU64,
    latency_micros: AtomicU64,
}

impl Metrics {
    fn record(&self, endpoint: &'static str, status: StatusCode, elapsed: Duration) {
        *self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((endpoint, status.as_u16()))
            .or_default() += 1;
        let s = elapsed.as_secs_f64();
        if let Some(i) = LATENCY_BOUNDS.iter().position(|&b| s <= b) {
            self.latency[i].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_micros.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }
}

/// An error as the API it answers writes them.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }
    fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

/// The status for an embedder error: the caller's input (400), a full queue (503, retry), or the
/// server's own failure (500).
fn status_of(e: &EmbedError) -> StatusCode {
    match e {
        EmbedError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
        EmbedError::InvalidOption(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<EmbedError> for ApiError {
    fn from(e: EmbedError) -> Self {
        Self::new(status_of(&e), e.to_string())
    }
}

/// Which API shape to answer errors in.
#[derive(Clone, Copy)]
enum Flavour {
    OpenAi,
    Tei,
    Plain,
}

fn error_response(flavour: Flavour, e: ApiError) -> Response {
    let body = match flavour {
        Flavour::OpenAi => json!({ "error": {
            "message": e.message,
            "type": match e.status.as_u16() { 401 => "authentication_error", 503 | 429 => "server_overloaded", 500 | 504 => "server_error", _ => "invalid_request_error" },
            "param": Value::Null,
            "code": Value::Null,
        }}),
        Flavour::Tei => json!({
            "error": e.message,
            "error_type": match e.status.as_u16() { 401 => "Unauthorized", 503 | 429 => "Overloaded", 500 | 504 => "Backend", _ => "Validation" },
        }),
        Flavour::Plain => json!({ "error": e.message }),
    };
    let mut r = (e.status, axum::Json(body)).into_response();
    if e.status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

impl App {
    /// Embeds `texts`, or answers 504 past --request-timeout; the future is then dropped, which
    /// takes the request's texts that have not started out of the queue.
    async fn embed(&self, embedder: &Embedder, texts: &[String]) -> Result<nornir_vector::Embeddings, ApiError> {
        match tokio::time::timeout(self.request_timeout, embedder.embed_async(texts)).await {
            Ok(rows) => Ok(rows?),
            Err(_) => Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "the request took longer than {} s (--request-timeout), so its texts that had not started were dropped; send fewer texts per request, or retry",
                    self.request_timeout.as_secs_f64()
                ),
            )),
        }
    }

    fn ready(&self) -> Result<&Loaded, ApiError> {
        self.loaded
            .get()
            .ok_or_else(|| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the model is still loading; retry shortly"))
    }

    /// `Authorization: Bearer KEY` when the server has a key. Both sides are hashed first, so the
    /// comparison takes the same time whatever is sent.
    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(want) = &self.api_key else { return Ok(()) };
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        let got: [u8; 32] = Sha256::digest(sent.as_bytes()).into();
        if got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0 {
            Ok(())
        } else {
            Err(ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong API key: send `Authorization: Bearer <key>`"))
        }
    }

    /// What both embedding endpoints do first: check the key, read the body, parse the JSON,
    /// and hand back the request with the embedder once it is ready.
    async fn accept<T: for<'de> Deserialize<'de>>(
        &self,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(T, &Loaded), ApiError> {
        self.authorize(headers)?;
        let body = read_body(body, headers, self.max_body_bytes).await?;
        let request: T =
            serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("invalid JSON request: {e}")))?;
        Ok((request, self.ready()?))
    }

    fn check_inputs(&self, inputs: &[String]) -> Result<(), ApiError> {
        if inputs.is_empty() {
            return Err(ApiError::bad("input must not be empty: send a string or a list of strings"));
        }
        if inputs.len() > self.max_inputs {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{} inputs in one request; the server takes at most {} (--max-inputs): split the request",
                    inputs.len(),
                    self.max_inputs
                ),
            ));
        }
        Ok(())
    }
}

/// A string or a list of strings; OpenAI's token arrays are refused by name.
#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    One(String),
    Many(Vec<String>),
    Tokens(serde::de::IgnoredAny),
}

impl Input {
    fn into_texts(self) -> Result<Vec<String>, ApiError> {
        match self {
            Input::One(s) => Ok(vec![s]),
            Input::Many(v) => Ok(v),
            Input::Tokens(_) => {
                Err(ApiError::bad("input must be a string or a list of strings (token arrays are not supported)"))
            }
        }
    }
}

/// The first `dim` values, normalised when `normalize`.
fn finish_row(row: &[f32], dim: usize, normalize: bool) -> Vec<f32> {
    let mut v = row[..dim.min(row.len())].to_vec();
    if normalize {
        nornir_vector::normalize(&mut v);
    }
    v
}

/// The request's `dimensions` (else `default`), checked against the model.
fn dimensions(asked: Option<i64>, default: Option<usize>, model: usize) -> Result<usize, ApiError> {
    match asked {
        None => Ok(default.unwrap_or(model).min(model)),
        Some(d) if d >= 1 && d as usize <= model => Ok(d as usize),
        Some(d) => Err(ApiError::bad(format!("dimensions must be between 1 and {model} for this model, not {d}"))),
    }
}

#[derive(Deserialize)]
struct OpenAiRequest {
    input: Input,
    #[serde(default)]
    dimensions: Option<i64>,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    model: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
}

/// The request body, at most `limit` bytes. A longer one is 413; it is read to its end first
/// (up to [`DRAIN_BYTES`]) unless the client waits for `100 Continue`, which it then never gets.
async fn read_body(mut body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "the request body is larger than the server's --max-body-bytes")
    };
    let announced =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let waits_for_continue =
        headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if announced.is_some_and(|n| n > limit as u64 && (waits_for_continue || n > DRAIN_BYTES)) {
        return Err(too_large());
    }
    let mut data = Vec::with_capacity(announced.map_or(0, |n| n.min(limit as u64) as usize));
    let mut seen = 0u64;
    while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| ApiError::bad(format!("cannot read the request body: {e}")))?;
        let Ok(chunk) = frame.into_data() else { continue };
        seen += chunk.len() as u64;
        if seen <= limit as u64 {
            data.extend_from_slice(&chunk);
        } else if seen > DRAIN_BYTES {
            break;
        }
    }
    if seen > limit as u64 {
        return Err(too_large());
    }
    Ok(data.into())
}

async fn openai(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let r = openai_inner(&app, &headers, body).await;
    respond(&app, "/v1/embeddings", Flavour::OpenAi, started, r)
}

async fn openai_inner(app: &App, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let (req, Loaded { embedder, normalize }): (OpenAiRequest, _) = app.accept(headers, body).await?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad(format!("encoding_format must be \"float\" or \"base64\", not {other:?}")));
        }
    };
    let texts = req.input.into_texts()?;
    app.check_inputs(&texts)?;
    if let Some(i) = texts.iter().position(String::is_empty) {
        return Err(ApiError::bad(format!("input[{i}] is an empty string; send text")));
    }
    let dim = dimensions(req.dimensions, app.default_dim, embedder.dimension())?;
    let rows = app.embed(embedder, &texts).await?;
    let data: Vec<OpenAiEmbedding> = rows
        .rows()
        .enumerate()
        .map(|(index, row)| {
            let v = finish_row(row, dim, *normalize);
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Embedding::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Embedding::Float(v)
            };
            OpenAiEmbedding { object: "embedding", index, embedding }
        })
        .collect();
    let tokens = rows.total_tokens();
    app.metrics.texts.fetch_add(texts.len() as u64, Ordering::Relaxed);
    app.metrics.tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    let usage = Usage { prompt_tokens: tokens, total_tokens: tokens };
    Ok(axum::Json(OpenAiList { object: "list", data, model: &app.model_name, usage }).into_response())
}

/// OpenAI's answer, serialised straight from the rows: a `serde_json::Value` per float cost 55 to
/// 110 MB more at the peak of a 2,048-text request, and wrote each float widened to f64 digits
/// (a 1.7x larger body).
#[derive(serde::Serialize)]
struct OpenAiList<'a> {
    object: &'static str,
    data: Vec<OpenAiEmbedding>,
    model: &'a str,
    usage: Usage,
}

#[derive(serde::Serialize)]
struct OpenAiEmbedding {
    object: &'static str,
    index: usize,
    embedding: Embedding,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Embedding {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(serde::Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Deserialize)]
struct TeiRequest {
    inputs: Input,
    #[serde(default)]
    normalize: Option<bool>,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    dimensions: Option<i64>,
}

async fn tei(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let r = tei_inner(&app, &headers, body).await;
    respond(&app, "/embed", Flavour::Tei, started, r)
}

async fn tei_inner(app: &App, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let (req, Loaded { embedder, normalize }): (TeiRequest, _) = app.accept(headers, body).await?;
    let texts = req.inputs.into_texts()?;
    app.check_inputs(&texts)?;
    let dim = dimensions(req.dimensions, app.default_dim, embedder.dimension())?;
    let rows = app.embed(embedder, &texts).await?;
    // As text-embeddings-inference: a text longer than the model is an error unless truncate is set.
    if !req.truncate.unwrap_or(false)
        && let Some(i) = (0..rows.len()).find(|&i| rows.truncated(i))
    {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "inputs[{i}] is longer than the model's {} tokens: shorten it or send \"truncate\": true",
                embedder.model_info().max_length
            ),
        ));
    }
    let normalize = req.normalize.unwrap_or(*normalize);
    let vectors: Vec<Vec<f32>> = rows.rows().map(|r| finish_row(r, dim, normalize)).collect();
    app.metrics.texts.fetch_add(texts.len() as u64, Ordering::Relaxed);
    app.metrics.tokens.fetch_add(rows.total_tokens() as u64, Ordering::Relaxed);
    Ok(axum::Json(vectors).into_response())
}

fn respond(
    app: &App,
    endpoint: &'static str,
    flavour: Flavour,
    started: Instant,
    r: Result<Response, ApiError>,
) -> Response {
    let response = r.unwrap_or_else(|e| {
        if e.status.is_server_error() && e.status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!("{endpoint}: {}", e.message);
        }
        error_response(flavour, e)
    });
    app.metrics.record(endpoint, response.status(), started.elapsed());
    response
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let r = match app.loaded.get() {
        Some(Loaded { embedder: e, .. }) => {
            (StatusCode::OK, axum::Json(json!({ "status": "ok", "provider": e.report().active_provider })))
        }
        None => (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "status": "loading" }))),
    };
    r.into_response()
}

async fn info(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let started = Instant::now();
    let r = (|| {
        app.authorize(&headers)?;
        let e = &app.ready()?.embedder;
        let report = e.report();
        Ok(axum::Json(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "model": e.model_info(),
            "active_provider": report.active_provider,
            "gpu_vendor": report.gpu_vendor,
            "registrations": report.registrations,
            "fallback": report.fallback,
            "plan": report.plan,
            "ort": report.ort,
            "sessions": e.sessions(),
            "memory": report.memory,
            "max_inputs": app.max_inputs,
        }))
        .into_response())
    })();
    respond(&app, "/info", Flavour::Plain, started, r)
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return error_response(Flavour::Plain, e);
    }
    let mut out = String::new();
    render_metrics(&app, &mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The Prometheus text exposition of the server's and the embedder's counters.
fn render_metrics(app: &App, out: &mut String) {
    use std::fmt::Write;
    let m = &app.metrics;
    let _ = writeln!(
        out,
        "# HELP nornir_requests_total HTTP requests by endpoint and status.\n# TYPE nornir_requests_total counter"
    );
    for ((endpoint, status), n) in m.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
        let _ = writeln!(out, "nornir_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP nornir_texts_total Texts embedded for requests.\n# TYPE nornir_texts_total counter");
    let _ = writeln!(out, "nornir_texts_total {}", m.texts.load(Ordering::Relaxed));
    let _ = writeln!(
        out,
        "# HELP nornir_tokens_total Tokens the model read for requests.\n# TYPE nornir_tokens_total counter"
    );
    let _ = writeln!(out, "nornir_tokens_total {}", m.tokens.load(Ordering::Relaxed));
    let _ = writeln!(
        out,
        "# HELP nornir_request_duration_seconds Request latency.\n# TYPE nornir_request_duration_seconds histogram"
    );
    let mut cumulative = 0;
    for (bound, n) in LATENCY_BOUNDS.iter().zip(&m.latency) {
        cumulative += n.load(Ordering::Relaxed);
        let _ = writeln!(out, "nornir_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let count = m.latency_count.load(Ordering::Relaxed);
    let _ = writeln!(out, "nornir_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}");
    let _ =
        writeln!(out, "nornir_request_duration_seconds_sum {}", m.latency_micros.load(Ordering::Relaxed) as f64 * 1e-6);
    let _ = writeln!(out, "nornir_request_duration_seconds_count {count}");
    let Some(Loaded { embedder: e, .. }) = app.loaded.get() else { return };
    let r = e.report();
    let memory = &r.memory;
    if let Some(rss) = memory.resident_bytes {
        let _ = writeln!(
            out,
            "# HELP nornir_resident_memory_bytes The process's resident memory.\n# TYPE nornir_resident_memory_bytes gauge\nnornir_resident_memory_bytes {rss}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP nornir_shared_weight_bytes Model weights held once for all CPU sessions.\n# TYPE nornir_shared_weight_bytes gauge\nnornir_shared_weight_bytes {}",
        memory.shared_weight_bytes
    );
    let _ = writeln!(
        out,
        "# HELP nornir_session_memory_bytes Resident memory each session added when it was built.\n# TYPE nornir_session_memory_bytes gauge"
    );
    for (k, grew) in memory.session_growth_bytes.iter().enumerate() {
        let _ = writeln!(out, "nornir_session_memory_bytes{{session=\"{k}\"}} {grew}");
    }
    let s = e.stats();
    let _ =
        writeln!(out, "# HELP nornir_batch_size Texts per batch run by the model.\n# TYPE nornir_batch_size histogram");
    for (bound, n) in BATCH_SIZE_BOUNDS.iter().zip(s.batch_sizes) {
        let _ = writeln!(out, "nornir_batch_size_bucket{{le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "nornir_batch_size_bucket{{le=\"+Inf\"}} {}", s.batches);
    let _ = writeln!(out, "nornir_batch_size_sum {}\nnornir_batch_size_count {}", s.batched_texts, s.batches);
    for (name, kind, help, value) in [
        ("nornir_queue_texts", "gauge", "Texts waiting for a batch.", s.queued_texts.to_string()),
        ("nornir_running_texts", "gauge", "Texts in the batches running now.", s.running_texts.to_string()),
        (
            "nornir_cancelled_texts_total",
            "counter",
            "Texts dropped before they ran: their client went away or their request timed out.",
            s.cancelled_texts.to_string(),
        ),
        (
            "nornir_model_tokens_total",
            "counter",
            "Tokens fed to the model, padding included.",
            s.padded_tokens.to_string(),
        ),
        (
            "nornir_ort_seconds_total",
            "counter",
            "Seconds inside ONNX Runtime, all sessions.",
            s.ort_seconds.to_string(),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    let _ = writeln!(
        out,
        "# HELP nornir_active_provider The execution provider really running the model.\n# TYPE nornir_active_provider gauge"
    );
    let _ = writeln!(out, "nornir_active_provider{{provider=\"{}\",vendor=\"{}\"}} 1", r.active_provider, r.gpu_vendor);
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
    eprintln!("nornir: shutting down: finishing the requests in flight");
}

pub fn serve(a: &ServeArgs) -> Result<()> {
    let dir = model_dir(&a.model)?;
    let mut opts = options(&a.model)?;
    // A folder that is not a model is one line and exit 2 before anything listens.
    nornir_vector::ModelFolder::open(&dir, opts.model_file.as_deref())?;
    // The server normalises and cuts per request; the embedder hands it the model's raw vectors.
    let normalize_flag = opts.normalize.take();
    let dim = opts.dim.take();
    opts.normalize = Some(false);
    opts.queue_full = QueueFull::Refuse;
    opts.max_queued_texts = a.max_queued_texts as usize;
    let api_key = a.api_key.as_deref().filter(|k| !k.is_empty()).map(|k| Sha256::digest(k.as_bytes()).into());
    let model_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "nornir".to_owned());
    let app = Arc::new(App {
        loaded: OnceLock::new(),
        model_name,
        api_key,
        max_inputs: a.max_inputs as usize,
        max_body_bytes: a.max_body_bytes as usize,
        default_dim: dim,
        request_timeout: Duration::from_secs_f64(a.request_timeout),
        metrics: Metrics::default(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.http_threads as usize)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    runtime.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", a.host, a.port)
            .parse()
            .with_context(|| format!("--host {:?} is not an IP address", a.host))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}: choose another --port or --host"))?;
        let bound = listener.local_addr()?;
        eprintln!("nornir: listening on http://{bound} (loading the model; /health answers 503 until it is ready)");
        // Load beside the server: /health says "loading" meanwhile, and a failure ends the process.
        let loader = Arc::clone(&app);
        let load = tokio::task::spawn_blocking(move || -> Result<()> {
            let embedder = Embedder::new(&dir, &opts)?;
            // Every session before /health says ready: no request waits for one, and /info and
            // /metrics count the memory of each.
            embedder.warm_up();
            if let Some(d) = dim
                && d > embedder.dimension()
            {
                anyhow::bail!("--dim {d} is wider than the model's {}-dimensional vectors", embedder.dimension());
            }
            let normalize = normalize_flag.unwrap_or_else(|| embedder.model_info().folder.normalize_default().0);
            eprintln!("nornir: ready: {} on {}", loader.model_name, embedder.report().active_provider);
            let _ = loader.loaded.set(Loaded { embedder, normalize });
            Ok(())
        });
        let router = Router::new()
            .route("/v1/embeddings", post(openai))
            .route("/embed", post(tei))
            .route("/health", get(health))
            .route("/metrics", get(metrics))
            .route("/info", get(info))
            .with_state(Arc::clone(&app));
        let server = axum::serve(listener, router).with_graceful_shutdown(shutdown_signal());
        let server = tokio::spawn(async move { server.await });
        match load.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.context("cannot load the model")),
            Err(e) => anyhow::bail!("the model loader failed: {e}"),
        }
        server.await.context("the server task failed")?.context("the server failed")?;
        Ok(())
    })
}
