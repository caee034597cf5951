//! Reading a request's body as every POST route does: at most `--max-body-bytes`, within
//! `--read-timeout` (408), then JSON; as axum extractors whose rejection is an [`ApiError`], so
//! a bad body is answered in the route's API shape.

use std::sync::Arc;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::api::App;
use crate::error::ApiError;

/// Most bytes of a too-large body read and dropped before its 413 goes out: a client still
/// writing it then reads the answer, not a reset connection. A larger body, or one announced with
/// `Expect: 100-continue`, is answered at once, unread.
const DRAIN_BYTES: u64 = 128 << 20;

/// The request's body as bytes, read under the server's size limit and read timeout.
#[derive(Debug)]
pub(crate) struct RawBody(pub(crate) Bytes);

/// The request's body read as [`RawBody`] and parsed as JSON into `T` (400 naming what is wrong).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl FromRequest<Arc<App>> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let read = read_body(body, &parts.headers, app.max_body_bytes);
        let bytes = tokio::time::timeout(app.read_timeout, read).await.map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s (--read-timeout); send it at once",
                    app.read_timeout.as_secs_f64()
                ),
            )
        })??;
        Ok(Self(bytes))
    }
}

impl<T: DeserializeOwned> FromRequest<Arc<App>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<Self, ApiError> {
        let RawBody(bytes) = RawBody::from_request(request, app).await?;
        parse(&bytes).map(Self)
    }
}

/// A body's JSON as `T`.
pub(crate) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("invalid JSON request: {e}")))
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
