//! A route's error: [`ApiError`] is what a handler or an extractor returns; its
//! [`IntoResponse`] carries it to `api::guard`, which writes it in the shape of the API the
//! matched route belongs to (OpenAI, TEI, Cohere) and logs a server error under the route's label.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use nornir_vector::{EmbedError, InferenceKind, error_chain};
use serde_json::{Value, json};

/// An error as the API it answers writes them.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// OpenAI's `code` (`model_not_found`).
    pub(crate) code: Option<&'static str>,
    /// The shape this one request's errors take when it is not its route's (TEI's `/rerank`
    /// asked in Cohere's shape, with `documents`).
    pub(crate) shape: Option<Flavour>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), code: None, shape: None }
    }
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    /// This error in `flavour`'s shape, whatever the route's.
    pub(crate) fn in_shape(self, flavour: Flavour) -> Self {
        Self { shape: Some(flavour), ..self }
    }

    /// The answer: the error in `flavour`'s shape (or its own), with `Retry-After` on a 503 and
    /// `Connection: close` on a 408.
    pub(crate) fn render(&self, flavour: Flavour) -> Response {
        let body = match self.shape.unwrap_or(flavour) {
            Flavour::OpenAi => json!({ "error": {
                "message": self.message,
                "type": match self.status.as_u16() { 401 => "authentication_error", 408 => "timeout", 503 | 429 => "server_overloaded", 500 | 504 => "server_error", _ => "invalid_request_error" },
                "param": Value::Null,
                "code": self.code,
            }}),
            Flavour::Tei => json!({
                "error": self.message,
                "error_type": match self.status.as_u16() { 401 => "Unauthorized", 503 | 429 => "Overloaded", 500 | 504 => "Backend", _ => "Validation" },
            }),
            Flavour::Cohere => json!({ "message": self.message }),
            Flavour::Plain => json!({ "error": self.message }),
        };
        let mut r = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of its body may still come: the connection cannot carry another request.
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}

/// The error in the plain shape, carrying itself in the response's extensions: `api::guard`,
/// around every route, takes it out and writes it again in the matched route's shape.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = self.render(Flavour::Plain);
        r.extensions_mut().insert(self);
        r
    }
}

/// Which API shape to answer errors in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    OpenAi,
    Tei,
    /// Cohere's and Jina's: `{"message": ...}`.
    Cohere,
    Plain,
}

/// The status for an embedder error: the caller's input (400; a text too long, 413; a text the
/// tokenizer rejects, 422 as TEI answers it), a full queue or an embedder going away (503,
/// retry), or the server's own failure (500).
fn status_of(e: &EmbedError) -> StatusCode {
    match e {
        EmbedError::Overloaded { .. } | EmbedError::WaitTooLong { .. } => StatusCode::SERVICE_UNAVAILABLE,
        EmbedError::InvalidOption { .. } | EmbedError::WrongKind { .. } | EmbedError::BadImage { .. } => {
            StatusCode::BAD_REQUEST
        }
        EmbedError::TooLong { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        EmbedError::Inference { kind: InferenceKind::Tokenizer, .. } => StatusCode::UNPROCESSABLE_ENTITY,
        EmbedError::Inference { kind: InferenceKind::EmbedderDropped, .. } => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<EmbedError> for ApiError {
    fn from(e: EmbedError) -> Self {
        let message = match &e {
            EmbedError::TooLong { index, tokens, exact, max_length, .. } => format!(
                "inputs[{index}] has {}{tokens} tokens, more than the {max_length} the model reads: shorten it, or send \"truncate\": true (TEI's routes; the server's --long sets what a request that does not say gets)",
                if *exact { "" } else { "more than " }
            ),
            EmbedError::WrongKind { kind, .. } => {
                format!("this model is {}: ask {}", kind.with_article(), kind.calls().routes)
            }
            _ => error_chain(&e),
        };
        Self::new(status_of(&e), message)
    }
}
