//! Cohere's embed API: `POST /v2/embed` and `/v1/embed`, with `embedding_types` (float, int8,
//! uint8, binary, ubinary) made from one float32 embedding of the texts, as
//! sentence-transformers' `quantize_embeddings` makes them. int8's and uint8's ranges are
//! calibrated on nornir's built-in sample at the first request that needs them (per model and
//! width), and the answer says so.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use nornir_vector::{CallOptions, Embedder, Embeddings, Precision, Ranges, Truncation, to_precision};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{ApiError, App, response_id};
use crate::body::JsonBody;
use crate::models::Entry;

#[derive(Deserialize)]
pub(crate) struct EmbedRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    texts: Option<Vec<String>>,
    #[serde(default)]
    input_type: Option<String>,
    #[serde(default)]
    embedding_types: Option<Vec<String>>,
    /// `NONE` (refuse), `START` or `END` (cut that end; Cohere's default).
    #[serde(default)]
    truncate: Option<String>,
    #[serde(default)]
    output_dimension: Option<usize>,
}

/// The prompt of the model folder that Cohere's `input_type` asks for, if the folder has one.
fn prompt_for(embedder: &Embedder, input_type: Option<&str>) -> Option<String> {
    let names: &[&str] = match input_type? {
        "search_query" => &["query", "search_query"],
        "search_document" => &["document", "passage", "search_document", "corpus"],
        "classification" => &["classification"],
        "clustering" => &["clustering"],
        _ => &[],
    };
    let prompts = &embedder.model_info().folder.prompts.prompts;
    names.iter().find(|n| prompts.contains_key(**n)).map(|n| (*n).to_owned())
}

/// The model's ranges at `width`, calibrated on the built-in sample the first time.
async fn ranges_for(
    app: &App,
    entry: &Entry,
    embedder: &Embedder,
    options: &CallOptions,
) -> Result<Arc<Ranges>, ApiError> {
    let width = options.dimensions.unwrap_or(embedder.dimension());
    if let Some(r) = entry.ranges.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&width) {
        return Ok(Arc::clone(r));
    }
    let ranges = Arc::new(app.in_time(embedder.calibrate_on_sample_async(&options.clone().with_prompt(""))).await?);
    entry.ranges.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(width, Arc::clone(&ranges));
    Ok(ranges)
}

/// The rows in one of Cohere's embedding types, as JSON arrays of numbers.
fn typed(rows: &Embeddings, precision: Precision, ranges: Option<&Ranges>) -> Result<Value, ApiError> {
    if precision == Precision::Float32 {
        return Ok(json!(rows.rows().collect::<Vec<_>>()));
    }
    let v = to_precision(rows, precision, ranges)?;
    Ok(json!((0..v.len()).map(|i| v.row_values(i)).collect::<Vec<_>>()))
}

/// Cohere's `POST /v2/embed` and `/v1/embed`.
pub(crate) async fn embed(
    State(app): State<Arc<App>>,
    JsonBody(req): JsonBody<EmbedRequest>,
) -> Result<Response, ApiError> {
    let (entry, embedder) = app.model(req.model.as_deref())?;
    let texts = req.texts.ok_or_else(|| ApiError::bad("no `texts`: send the texts to embed"))?;
    app.check_inputs(texts.len())?;
    let mut types: Vec<(String, Precision)> = Vec::new();
    for name in req.embedding_types.clone().unwrap_or_else(|| vec!["float".to_owned()]) {
        let p: Precision = name.parse().map_err(|e: String| ApiError::bad(format!("embedding_types: {e}")))?;
        types.push((name, p));
    }
    let mut options = CallOptions::new().with_truncation(match req.truncate.as_deref() {
        Some("NONE" | "none") => Truncation::Refuse,
        Some("START" | "start") => Truncation::Left,
        _ => Truncation::Right,
    });
    if let Some(d) = req.output_dimension {
        options = options.with_dimensions(d);
    }
    if let Some(name) = prompt_for(embedder, req.input_type.as_deref()) {
        options = options.with_prompt_name(name);
    }
    // The kind is checked by the call itself; a width binary cannot pack, by to_precision.
    let ranges = match types.iter().any(|(_, p)| p.needs_ranges()) {
        true => Some(ranges_for(&app, entry, embedder, &options).await?),
        false => None,
    };
    let rows = app.embed(entry, embedder, &texts, options).await?;
    let mut embeddings = BTreeMap::new();
    for (name, p) in &types {
        let key = if *p == Precision::Float32 { "float".to_owned() } else { name.clone() };
        embeddings.insert(key, typed(&rows, *p, ranges.as_deref())?);
    }
    let mut answer = json!({
        "id": response_id("embed"),
        "response_type": "embeddings_by_type",
        "embeddings": embeddings,
        "texts": texts,
        "meta": { "api_version": { "version": "2" }, "billed_units": { "input_tokens": rows.total_tokens() } },
    });
    if let Some(r) = &ranges {
        answer["ranges"] = json!(r.source);
    }
    Ok(axum::Json(answer).into_response())
}
