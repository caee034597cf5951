//! What every route shares: the models and limits, the API key, the one layer that labels,
//! counts and shapes the errors of every request (`guard`), and `/health` and `/info`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use nornir_vector::{CallOptions, EmbedError, Embedder, EmbedderReport, Embeddings};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub(crate) use crate::error::{ApiError, Flavour};
use crate::metrics::Metrics;
use crate::models::{Entry, Models};
use crate::{ServerConfig, TokenIds};
use nornir_vector::LongInputs;

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) models: Arc<Models>,
    /// SHA-256 of the API key: compared in constant time, whatever the length sent.
    api_key: Option<[u8; 32]>,
    pub(crate) max_inputs: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) token_ids: TokenIds,
    pub(crate) long: LongInputs,
    strict_model_names: bool,
    default_model: Option<String>,
    /// Fetches image URLs, where the operator allows them (`--allow-image-urls`).
    pub(crate) image_urls: Option<Arc<crate::image_urls::Fetcher>>,
    pub(crate) metrics: Metrics,
    /// When the router was made, in Unix seconds: OpenAI's `created` of each model.
    pub(crate) created: u64,
}

/// A request's `dimensions` as the call takes it: JSON allows a negative number, the library
/// checks the rest (1 to the model's width).
pub(crate) fn dimensions(d: i64, width: usize) -> Result<usize, ApiError> {
    usize::try_from(d)
        .map_err(|_| ApiError::bad(format!("dimensions must be between 1 and {width} for this model, not {d}")))
}

/// An answer's `id` as Cohere's API carries one: `PREFIX-` and the time in nanoseconds, in hex.
pub(crate) fn response_id(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}-{nanos:x}")
}

/// `response` with `x-truncated-inputs`: how many of the request's texts were cut to the
/// model's length.
pub(crate) fn truncated_header(mut response: Response, rows: &Embeddings) -> Response {
    response.headers_mut().insert("x-truncated-inputs", HeaderValue::from(rows.truncated_count()));
    response
}

/// A string or a list of strings, or (OpenAI only) token ids, or (Jina's) texts and images.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Input {
    One(String),
    Many(Vec<String>),
    Ids(Vec<u32>),
    ManyIds(Vec<Vec<u32>>),
    Items(Vec<Item>),
}

/// One of Jina's `input` items: a text (alone or as `{"text": ...}`) or an image.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Item {
    Text(String),
    TextObject { text: String },
    Image { image: String },
}

impl App {
    pub(crate) fn new(models: Arc<Models>, config: ServerConfig) -> Self {
        let metrics = Metrics::new(models.clone());
        Self {
            models,
            api_key: config.api_key.as_deref().map(|k| Sha256::digest(k.as_bytes()).into()),
            max_inputs: config.max_inputs,
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout,
            read_timeout: config.read_timeout,
            token_ids: config.token_ids,
            long: config.long,
            strict_model_names: config.strict_model_names,
            image_urls: crate::image_urls::Fetcher::new(&config).map(Arc::new),
            default_model: config.default_model,
            metrics,
            created: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        }
    }

    /// Embeds `texts` with `options`, or answers 504 past the request timeout; the future is then
    /// dropped, which takes the request's texts that have not started out of the queue. Under
    /// overload a request is admitted only while the texts queued ahead are expected to finish
    /// within half the timeout, so an admitted request gets its answer, and the others a quick
    /// 503 with Retry-After rather than a 504 after queueing in vain.
    pub(crate) async fn embed(
        &self,
        entry: &Entry,
        embedder: &Embedder,
        texts: &[String],
        options: CallOptions,
    ) -> Result<Embeddings, ApiError> {
        let options = options.with_max_wait(self.max_wait());
        let rows = self.in_time(embedder.embed_with_async(texts, &options)).await?;
        self.metrics.count_texts(entry, texts.len(), rows.total_tokens(), rows.truncated_count());
        Ok(rows)
    }

    /// A call's future, within the request timeout: past it, 504 (and dropping the future takes
    /// its texts that have not started out of the queue).
    pub(crate) async fn in_time<T>(&self, call: impl Future<Output = Result<T, EmbedError>>) -> Result<T, ApiError> {
        match tokio::time::timeout(self.request_timeout, call).await {
            Ok(done) => Ok(done?),
            Err(_) => Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "the request took longer than {} s (--request-timeout), so its texts that had not started were dropped; send fewer texts per request, or retry",
                    self.request_timeout.as_secs_f64()
                ),
            )),
        }
    }

    /// The longest a call may wait in the queue before it is refused (503).
    pub(crate) fn max_wait(&self) -> Duration {
        self.request_timeout / 2
    }

    pub(crate) fn model(&self, name: Option<&str>) -> Result<(&Entry, &Arc<Embedder>), ApiError> {
        let entry = match name {
            None => self.models.first(),
            Some(n) => match self.models.entry(n) {
                Ok(e) => e,
                Err(_) if self.models.entries.len() == 1 && !self.strict_model_names => self.models.first(),
                Err(e) => match self.default_model.as_deref().and_then(|d| self.models.entry(d).ok()) {
                    Some(fallback) => fallback,
                    None => {
                        return Err(ApiError {
                            code: Some("model_not_found"),
                            ..ApiError::new(StatusCode::NOT_FOUND, e.to_string())
                        });
                    }
                },
            },
        };
        let embedder = entry.embedder.get().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("model {:?} is still loading; retry shortly", entry.name),
            )
        })?;
        Ok((entry, embedder))
    }

    /// `Authorization: Bearer KEY` when the server has a key. Both sides are hashed first, so the
    /// comparison takes the same time whatever is sent.
    pub(crate) fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
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

    /// At least one text and at most `max_inputs`.
    pub(crate) fn check_inputs(&self, count: usize) -> Result<(), ApiError> {
        if count == 0 {
            return Err(ApiError::bad("input must not be empty: send a string or a list of strings"));
        }
        if count > self.max_inputs {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{count} inputs in one request; the server takes at most {} (--max-inputs): split the request",
                    self.max_inputs
                ),
            ));
        }
        Ok(())
    }
}

/// `/metrics`: the server's and each model's counters in Prometheus' text format.
pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], app.metrics.render()).into_response()
}

/// The endpoint a matched route is counted under (one name for a route's aliases and for its
/// `/models/{model}` form) and the API shape its errors take.
fn endpoint(matched: &str) -> (&'static str, Flavour) {
    let path = matched.strip_prefix("/models/{model}").filter(|p| !p.is_empty()).unwrap_or(matched);
    match path {
        "/v1/embeddings" | "/embeddings" => ("/v1/embeddings", Flavour::OpenAi),
        "/v1/models" | "/models" => ("/v1/models", Flavour::OpenAi),
        "/" | "/embed" => ("/embed", Flavour::Tei),
        "/embed_all" => ("/embed_all", Flavour::Tei),
        "/embed_chunks" => ("/embed_chunks", Flavour::Tei),
        "/tokenize" => ("/tokenize", Flavour::Tei),
        "/decode" => ("/decode", Flavour::Tei),
        "/similarity" => ("/similarity", Flavour::Tei),
        "/embed_sparse" => ("/embed_sparse", Flavour::Tei),
        "/rerank" => ("/rerank", Flavour::Tei),
        "/predict" => ("/predict", Flavour::Tei),
        "/v1/rerank" => ("/v1/rerank", Flavour::Cohere),
        "/v1/multi-vector" => ("/v1/multi-vector", Flavour::OpenAi),
        "/v2/rerank" => ("/v2/rerank", Flavour::Cohere),
        "/v1/embed" => ("/v1/embed", Flavour::Cohere),
        "/v2/embed" => ("/v2/embed", Flavour::Cohere),
        "/info" => ("/info", Flavour::Plain),
        "/metrics" => ("/metrics", Flavour::Plain),
        "/health" => ("/health", Flavour::Plain),
        _ => ("other", Flavour::Plain),
    }
}

/// The one layer around every route, and the one place a request is labelled: its matched
/// route's endpoint names it in `/metrics` and in the log, and the route's API decides the shape
/// of its errors. The API key on all but `/health` (401 in the route's API shape); then an
/// [`ApiError`] a handler or extractor answered is written in the route's shape (a server error
/// logged under the endpoint); then the request's status and time counted under its endpoint
/// (all but `/health` and `/metrics`, which probes and scrapers call). A path no route matches
/// passes through to 404.
pub(crate) async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let Some((name, flavour)) = request.extensions().get::<MatchedPath>().map(|m| endpoint(m.as_str())) else {
        return next.run(request).await;
    };
    let refused = if name == "/health" { None } else { app.authorize(request.headers()).err() };
    let mut response = match refused {
        None => next.run(request).await,
        Some(e) => e.into_response(),
    };
    if let Some(e) = response.extensions_mut().remove::<ApiError>() {
        if e.status.is_server_error() && e.status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!("{name}: {}", e.message);
        }
        response = e.render(flavour);
    }
    if name != "/metrics" && name != "/health" {
        app.metrics.record(name, response.status(), started.elapsed());
    }
    response
}

/// 200 once every model has loaded, else 503 with the ones still loading.
pub(crate) async fn health(State(app): State<Arc<App>>) -> Response {
    let models = &app.models.entries;
    let loading: Vec<&str> = models.iter().filter(|e| e.embedder.get().is_none()).map(|e| e.name.as_str()).collect();
    if !loading.is_empty() {
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "status": "loading", "loading": loading })))
            .into_response();
    }
    let providers: serde_json::Map<String, Value> = models
        .iter()
        .filter_map(|e| Some((e.name.clone(), Value::from(e.embedder.get()?.report().active_provider))))
        .collect();
    let first = providers.values().next().cloned().unwrap_or(Value::Null);
    (StatusCode::OK, axum::Json(json!({ "status": "ok", "provider": first, "providers": providers }))).into_response()
}

/// `/info`'s answer: the embedder's report (the keys of `doctor --json`'s session, Python's
/// `report()` and `bench --json`), with TEI's keys and the server's beside them.
#[derive(Serialize)]
struct Info<'a> {
    #[serde(flatten)]
    report: EmbedderReport,
    version: &'static str,
    model_id: &'a str,
    aliases: &'a [String],
    models: Vec<String>,
    long_inputs: &'static str,
    max_input_length: usize,
    max_client_batch_size: usize,
    max_inputs: usize,
    /// Whether image URLs are fetched, and within which limits.
    image_urls: Value,
}

/// What the doctor says about a model: `/info` for the first, `/models/{name}/info` for any.
pub(crate) async fn info(State(app): State<Arc<App>>, model: Option<Path<String>>) -> Result<Response, ApiError> {
    let (entry, e) = app.model(model.as_ref().map(|p| p.0.as_str()))?;
    Ok(axum::Json(Info {
        report: e.describe(),
        version: env!("CARGO_PKG_VERSION"),
        model_id: &entry.name,
        aliases: &entry.aliases,
        models: app.models.names(),
        long_inputs: app.long.label(),
        max_input_length: e.model_info().max_length,
        max_client_batch_size: app.max_inputs,
        max_inputs: app.max_inputs,
        image_urls: crate::image_urls::Fetcher::info(app.image_urls.as_deref()),
    })
    .into_response())
}
