//! nornir's embedding server as a library: [`router`] turns one or several loaded
//! [`Embedder`](nornir_vector::Embedder)s into an axum [`Router`] that speaks OpenAI's and text-embeddings-inference's
//! (TEI) APIs, so a crate with its own server can mount these routes, and `nornir vector serve`
//! only parses flags and runs it.
//!
//! Routes (`docs/server.md` documents every field and status):
//! - OpenAI: `POST /v1/embeddings` and `/embeddings`, `GET /v1/models` and `/models`;
//! - TEI: `POST /` and `/embed`, `/embed_all`, `/tokenize`, `/decode`, `/similarity`, and nornir's
//!   `/embed_chunks` (with `"chunking"` on `/embed`, for long documents); a sparse encoder's
//!   `/embed_sparse`; a cross-encoder's `/rerank` and `/predict`; on the first model, and the
//!   same under `/models/{name}/...` for any model;
//! - Cohere's and Jina's rerank: `POST /v1/rerank` and `/v2/rerank`, the model by its `model`;
//!   Cohere's embed, `POST /v1/embed` and `/v2/embed`, with its `embedding_types` (int8, binary...);
//! - `GET /health` (200 once every model is loaded), `/info`, `/metrics` (Prometheus text).
//!
//! Each request's options (prompt, normalisation, dimensions, truncation) go to the embedder as
//! [`CallOptions`](nornir_vector::CallOptions): requests with different options share batches.
//! Error messages name a limit by its `nornir vector serve` flag (`--max-inputs` is
//! [`ServerConfig::max_inputs`]), as the operators who read them know it.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use nornir_server::{Models, ServerConfig, router};
//! use nornir_vector::{Embedder, EmbedderOptions};
//!
//! let embedder = Embedder::new("models/bge-small".as_ref(), &EmbedderOptions::default())?;
//! let models = Arc::new(Models::new(["bge-small".to_owned()])?);
//! models.set_loaded("bge-small", Arc::new(embedder))?;
//! let config = ServerConfig::default();
//! let read_timeout = config.read_timeout;
//! let app = router(models, config)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! nornir_server::serve(listener, app, read_timeout, std::future::pending()).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod api;
mod body;
mod cohere;
mod error;
mod grpc;
mod image_urls;
mod images;
mod metrics;
mod models;
mod multi_vector;
mod openai;
mod retrieval;
mod routes;
mod serve;
mod tei;

use nornir_vector::LongInputs;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;

pub use models::{Models, ModelsError};
pub use routes::{Api, RouteInfo, routes, routes_help};
pub use serve::serve;

/// The request-body parsers, for the fuzz targets: not an API, may change in any release.
#[doc(hidden)]
pub mod fuzzing {
    use crate::body::parse;

    /// `body` parsed as the request of every POST route, as its handler parses it before any
    /// model is asked: each gives a request or a 400, never a panic.
    pub fn parse_request_bodies(body: &[u8]) {
        let _ = parse::<crate::tei::EmbedRequest>(body);
        let _ = parse::<crate::tei::TokenizeRequest>(body);
        let _ = parse::<crate::tei::DecodeRequest>(body);
        let _ = parse::<crate::tei::SimilarityRequest>(body);
        let _ = parse::<crate::openai::Request>(body);
        let _ = parse::<crate::cohere::EmbedRequest>(body);
        let _ = parse::<crate::multi_vector::Request>(body);
        let _ = parse::<crate::retrieval::RerankRequest>(body);
        let _ = parse::<crate::retrieval::PredictRequest>(body);
        let _ = parse::<serde_json::Value>(body);
    }
}

/// How `input` given as token ids is read on the OpenAI routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TokenIds {
    /// As OpenAI defines them: ids of its `cl100k_base` encoding (what LangChain's
    /// `OpenAIEmbeddings` sends by default), decoded to text and tokenized again by the model's
    /// own tokenizer. Reading them as the model's own ids would give other words and wrong
    /// vectors without an error.
    #[default]
    Cl100k,
    /// Answer 400: send text.
    Refuse,
}

impl std::str::FromStr for TokenIds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cl100k" => Ok(Self::Cl100k),
            "refuse" => Ok(Self::Refuse),
            other => Err(format!("{other:?} is not a token-id reading: use cl100k or refuse")),
        }
    }
}

/// The server's limits, access and names, the same for every model. `Default`: no key, 2,048
/// inputs and 4 MiB per request, 60 s per request, 30 s to send a request's head and again its
/// body, token ids read as `cl100k_base`, long texts truncated, any model name answered by the
/// one model when only one is served, and no image URL fetched.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Require `Authorization: Bearer KEY` on every route but `/health`.
    pub api_key: Option<String>,
    /// Most texts in one request (OpenAI takes 2,048); more get 413.
    pub max_inputs: usize,
    /// Largest request body in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// How long a request's texts may queue and run; past it, 504, and its texts that have not
    /// started leave the queue.
    pub request_timeout: Duration,
    /// How long a client may take to send a request's head ([`serve`] closes the connection; an
    /// idle connection is closed after it too), and again its body (408).
    pub read_timeout: Duration,
    pub token_ids: TokenIds,
    /// A text longer than the model, when the request does not say (`--long`).
    pub long: LongInputs,
    /// Answer a model name the server does not know with 404 even when one model is served
    /// (`--strict-model-names`); by default one model answers every name, as TEI does.
    pub strict_model_names: bool,
    /// With several models, the one that answers a name the server does not know
    /// (`--default-model`); without it such a name is 404 with the list.
    pub default_model: Option<String>,
    /// Fetch an image given as an `http://` URL (`--allow-image-urls`); off, such an image is 400
    /// and images come in the request. On, the server fetches whatever its clients name, so a
    /// client can make it reach addresses only the server can reach (server-side request
    /// forgery): [`image_url_hosts`](Self::image_url_hosts) limits where.
    pub allow_image_urls: bool,
    /// The most bytes of one fetched image (`--image-url-max-bytes`): a larger one is 400, and
    /// reading it stops there. 4 MiB, the default largest body: an image fetched costs the
    /// server no more than one sent in a request already may. The image decoder refuses more
    /// than 32 MiB whatever this says.
    pub image_url_max_bytes: usize,
    /// The longest one image's fetch may take, redirects included (`--image-url-timeout`); all
    /// of a request's fetches (4 at once) also end within [`request_timeout`](Self::request_timeout).
    pub image_url_timeout: Duration,
    /// The hosts images may be fetched from, at every redirect, as the URL writes them
    /// (`images.example.com`, `10.0.0.7`, `[::1]`), any case (`--image-url-host`); empty: any.
    pub image_url_hosts: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            max_inputs: 2048,
            max_body_bytes: 4 << 20,
            request_timeout: Duration::from_secs(60),
            read_timeout: Duration::from_secs(30),
            token_ids: TokenIds::Cl100k,
            long: LongInputs::Truncate,
            strict_model_names: false,
            default_model: None,
            allow_image_urls: false,
            image_url_max_bytes: 4 << 20,
            image_url_timeout: Duration::from_secs(10),
            image_url_hosts: Vec::new(),
        }
    }
}

impl ServerConfig {
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into()).filter(|k| !k.is_empty());
        self
    }
    /// Most texts in one request (at least 1; see [`validate`](Self::validate)).
    pub fn with_max_inputs(mut self, inputs: usize) -> Self {
        self.max_inputs = inputs;
        self
    }
    /// Largest request body in bytes (at least 1; see [`validate`](Self::validate)).
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
    pub fn with_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }
    pub fn with_token_ids(mut self, reading: TokenIds) -> Self {
        self.token_ids = reading;
        self
    }
    pub fn with_long(mut self, long: LongInputs) -> Self {
        self.long = long;
        self
    }
    pub fn with_strict_model_names(mut self, strict: bool) -> Self {
        self.strict_model_names = strict;
        self
    }
    pub fn with_default_model(mut self, name: impl Into<String>) -> Self {
        self.default_model = Some(name.into());
        self
    }
    /// Fetch images given as `http://` URLs (see [`allow_image_urls`](Self::allow_image_urls)).
    pub fn with_image_urls(mut self, allow: bool) -> Self {
        self.allow_image_urls = allow;
        self
    }
    /// The most bytes of one fetched image (at least 1; see [`validate`](Self::validate)).
    pub fn with_image_url_max_bytes(mut self, bytes: usize) -> Self {
        self.image_url_max_bytes = bytes;
        self
    }
    pub fn with_image_url_timeout(mut self, timeout: Duration) -> Self {
        self.image_url_timeout = timeout;
        self
    }
    /// The only hosts images are fetched from (see [`image_url_hosts`](Self::image_url_hosts)).
    pub fn with_image_url_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.image_url_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Refuses a value no server can run with, naming the field, as
    /// `EmbedderOptions::validate` does for an embedder: the builders store what they are given
    /// and clamp nothing. [`router`] calls it and refuses to build routes on an invalid config.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let invalid = |option, reason: &str| Err(InvalidConfig { option, reason: reason.to_owned() });
        if self.max_inputs == 0 {
            return invalid("max_inputs", "must be at least 1");
        }
        if self.max_body_bytes == 0 {
            return invalid("max_body_bytes", "must be at least 1");
        }
        if self.request_timeout.is_zero() {
            return invalid("request_timeout", "must be longer than zero");
        }
        if self.read_timeout.is_zero() {
            return invalid("read_timeout", "must be longer than zero");
        }
        if self.image_url_max_bytes == 0 {
            return invalid("image_url_max_bytes", "must be at least 1");
        }
        if self.image_url_timeout.is_zero() {
            return invalid("image_url_timeout", "must be longer than zero");
        }
        if let Some(h) = self.image_url_hosts.iter().find(|h| !image_urls::is_host(h)) {
            return invalid(
                "image_url_hosts",
                &format!(
                    "{h:?} is not a host: give a name or an address as a URL writes it (images.example.com, 10.0.0.7, [::1])"
                ),
            );
        }
        Ok(())
    }
}

/// A [`ServerConfig`] value no server can run with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidConfig {
    /// The field, as [`ServerConfig`] names it (`max_inputs`).
    pub option: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

impl std::fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid `{}`: {}", self.option, self.reason)
    }
}

impl std::error::Error for InvalidConfig {}

/// The routes over `models`, which may still be loading: `/health` answers 503 and the
/// embedding routes 503 "loading" until [`Models::set_loaded`] is called for each. A config that
/// [`ServerConfig::validate`] refuses is refused here.
pub fn router(models: Arc<Models>, config: ServerConfig) -> Result<Router, InvalidConfig> {
    Ok(router_and_grpc(models, config)?.0)
}

/// [`router`], and text-embeddings-inference's gRPC services (`tei.v1`) over the same app: the
/// same models and queues, limits, API key (gRPC's `authorization: Bearer` metadata) and
/// metrics. Serve them with [`serve_grpc`] on a port of their own.
pub fn router_and_grpc(
    models: Arc<Models>,
    config: ServerConfig,
) -> Result<(Router, tonic::service::Routes), InvalidConfig> {
    config.validate()?;
    if let Some(Err(unknown)) = config.default_model.as_deref().map(|n| models.entry(n)) {
        return Err(InvalidConfig { option: "default_model", reason: unknown.to_string() });
    }
    let app = Arc::new(api::App::new(models, config));
    let grpc = grpc::services(Arc::clone(&app));
    let router = routes::table().layer(axum::middleware::from_fn_with_state(app.clone(), api::guard)).with_state(app);
    Ok((router, grpc))
}

/// Serves the gRPC services of [`router_and_grpc`] on `listener` (HTTP/2) until `shutdown`
/// resolves, then finishes the calls in flight.
pub async fn serve_grpc(
    listener: tokio::net::TcpListener,
    services: tonic::service::Routes,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_routes(services)
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_no_server_can_run_with_is_refused_by_name_not_clamped() {
        assert!(ServerConfig::default().validate().is_ok());
        let refused = |c: ServerConfig| c.validate().expect_err("invalid").option;
        assert_eq!(refused(ServerConfig::default().with_max_inputs(0)), "max_inputs");
        assert_eq!(refused(ServerConfig::default().with_max_body_bytes(0)), "max_body_bytes");
        assert_eq!(refused(ServerConfig::default().with_request_timeout(Duration::ZERO)), "request_timeout");
        assert_eq!(refused(ServerConfig::default().with_read_timeout(Duration::ZERO)), "read_timeout");
        assert_eq!(refused(ServerConfig::default().with_image_url_max_bytes(0)), "image_url_max_bytes");
        assert_eq!(refused(ServerConfig::default().with_image_url_timeout(Duration::ZERO)), "image_url_timeout");
        for host in ["", "http://a.example", "a.example/x", "a.example:80", "two words"] {
            assert_eq!(refused(ServerConfig::default().with_image_url_hosts([host])), "image_url_hosts", "{host:?}");
        }
        let hosts = ServerConfig::default().with_image_url_hosts(["Images.Example.com", "10.0.0.7", "[::1]"]);
        assert!(hosts.validate().is_ok());
        assert!(!ServerConfig::default().allow_image_urls, "no URL is fetched unless the operator says so");
        assert_eq!(ServerConfig::default().with_max_inputs(7).max_inputs, 7);
        let models = Arc::new(Models::new(["m".to_owned()]).expect("names"));
        let e = router(models, ServerConfig::default().with_max_inputs(0)).expect_err("refused");
        assert_eq!(e.to_string(), "invalid `max_inputs`: must be at least 1");
    }
}
