//! Jina's multi-vector API, `POST /v1/multi-vector`: each input's token vectors (ColBERT, or
//! BGE-M3's `colbert_linear`), as queries or documents, float or bit-packed, answered in Jina's
//! shape (`data[].embeddings`, a list of vectors per input).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use nornir_vector::{CallOptions, MultiVectorOptions, Precision};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{ApiError, App};
use crate::body::JsonBody;

/// An input as Jina takes it: a string, or `{"text": ...}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Text {
    Plain(String),
    Object { text: String },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Inputs {
    One(Text),
    Many(Vec<Text>),
}

/// `embedding_type`: one name, or a list of one.
#[derive(Deserialize)]
#[serde(untagged)]
enum EmbeddingType {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
pub(crate) struct Request {
    input: Inputs,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input_type: Option<String>,
    #[serde(default)]
    embedding_type: Option<EmbeddingType>,
    #[serde(default)]
    dimensions: Option<i64>,
}

/// The precision an `embedding_type` names: float, binary (int8 bytes) or ubinary.
fn precision(kind: Option<EmbeddingType>) -> Result<Precision, ApiError> {
    let name = match kind {
        None => return Ok(Precision::Float32),
        Some(EmbeddingType::One(n)) => n,
        Some(EmbeddingType::Many(mut list)) if list.len() == 1 => list.remove(0),
        Some(EmbeddingType::Many(list)) => {
            return Err(ApiError::bad(format!(
                "embedding_type lists {} types; nornir answers one per request: send one of float, binary, ubinary",
                list.len()
            )));
        }
    };
    match name.as_str() {
        "float" => Ok(Precision::Float32),
        "binary" => Ok(Precision::Binary),
        "ubinary" => Ok(Precision::Ubinary),
        other => Err(ApiError::bad(format!("embedding_type {other:?}: nornir answers float, binary or ubinary"))),
    }
}

/// `POST /v1/multi-vector`.
pub(crate) async fn multi_vector(
    State(app): State<Arc<App>>,
    JsonBody(req): JsonBody<Request>,
) -> Result<Response, ApiError> {
    let (entry, embedder) = app.model(req.model.as_deref())?;
    let texts: Vec<String> = match req.input {
        Inputs::One(t) => vec![t],
        Inputs::Many(list) => list,
    }
    .into_iter()
    .map(|t| match t {
        Text::Plain(s) | Text::Object { text: s } => s,
    })
    .collect();
    if texts.is_empty() {
        return Err(ApiError::bad("input is empty: send a text or a list of texts"));
    }
    app.check_inputs(texts.len())?;
    let is_query = match req.input_type.as_deref() {
        None | Some("document") => false,
        Some("query") => true,
        Some(other) => return Err(ApiError::bad(format!("input_type {other:?}: send \"query\" or \"document\""))),
    };
    let precision = precision(req.embedding_type)?;
    let mut call = CallOptions::new().with_max_wait(app.max_wait());
    if let Some(d) = req.dimensions {
        let d = usize::try_from(d).map_err(|_| ApiError::bad(format!("dimensions {d} must be positive")))?;
        call = call.with_dimensions(d);
    }
    let options = MultiVectorOptions::new().with_query(is_query).with_call(call);
    let vectors = app.in_time(embedder.embed_multi_vector_async(&texts, &options)).await?;
    let usage = vectors.usage();
    app.metrics.count_texts(entry, texts.len(), usage.tokens, usage.truncated);
    let mut data = Vec::with_capacity(vectors.len());
    for (index, rows) in vectors.iter().enumerate() {
        let embeddings: Value = if precision == Precision::Float32 {
            json!(rows.chunks_exact(vectors.dim().max(1)).collect::<Vec<_>>())
        } else {
            json!(vectors.text_to_precision(index, precision, None)?.rows_values())
        };
        data.push(json!({ "object": "embeddings", "index": index, "embeddings": embeddings }));
    }
    Ok(axum::Json(json!({
        "model": entry.name,
        "object": "list",
        "usage": { "total_tokens": usage.tokens },
        "data": data,
    }))
    .into_response())
}
