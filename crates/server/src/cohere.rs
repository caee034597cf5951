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
    /// Images as data URIs, or URLs where the server fetches them (`input_type` "image"), for an
    /// image-and-text model.
    #[serde(default)]
    images: Option<Vec<String>>,
}

/// Cohere's embedding types this server gives, as a message lists them.
const EMBEDDING_TYPES: &str = "\"float\", \"int8\", \"uint8\", \"binary\" or \"ubinary\"";

/// Cohere's text input types, as a message lists them.
const INPUT_TYPES: &str = "\"search_document\", \"search_query\", \"classification\" or \"clustering\"";

/// `embedding_types` as precisions, each with the name it was asked by (`float` without it): at
/// least one, each one this server gives.
fn embedding_types(names: Option<Vec<String>>) -> Result<Vec<(String, Precision)>, ApiError> {
    let Some(names) = names else { return Ok(vec![("float".to_owned(), Precision::Float32)]) };
    if names.is_empty() {
        return Err(ApiError::bad(format!(
            "embedding_types is empty: give one or more of {EMBEDDING_TYPES}, or leave it out for float"
        )));
    }
    names
        .into_iter()
        .map(|name| match name.parse::<Precision>() {
            Ok(p) => Ok((name, p)),
            Err(_) => Err(ApiError::bad(format!(
                "embedding_types: {name:?} is not a type this server gives: give one or more of {EMBEDDING_TYPES}"
            ))),
        })
        .collect()
}

/// The names of the model folder's prompts that Cohere's `input_type` may ask for, in order of
/// preference: none without an `input_type`; an input type Cohere does not have, or one for
/// images, is refused.
fn prompt_names(input_type: Option<&str>) -> Result<&'static [&'static str], ApiError> {
    Ok(match input_type {
        None => &[],
        Some("search_query") => &["query", "search_query"],
        Some("search_document") => &["document", "passage", "search_document", "corpus"],
        Some("classification") => &["classification"],
        Some("clustering") => &["clustering"],
        Some("image") => {
            return Err(ApiError::bad(format!(
                "input_type \"image\" is for `images`: send the images as data URIs in `images`, or give a text input type ({INPUT_TYPES})"
            )));
        }
        Some(other) => {
            return Err(ApiError::bad(format!("input_type {other:?} is not one of Cohere's: give {INPUT_TYPES}")));
        }
    })
}

/// Cohere's `truncate`: `NONE` refuses a text longer than the model, `START` cuts its start, `END`
/// (the default) its end.
fn truncation(truncate: Option<&str>) -> Result<Truncation, ApiError> {
    match truncate {
        None | Some("END" | "end") => Ok(Truncation::Right),
        Some("START" | "start") => Ok(Truncation::Left),
        Some("NONE" | "none") => Ok(Truncation::Refuse),
        Some(other) => {
            Err(ApiError::bad(format!("truncate {other:?} is not one of Cohere's: give NONE, START or END")))
        }
    }
}

/// The first of `names` that the model folder has as a prompt.
fn prompt_for(embedder: &Embedder, names: &[&str]) -> Option<String> {
    let prompts = &embedder.model_info().folder.prompts.prompts;
    names.iter().find(|n| prompts.contains_key(**n)).map(|n| (*n).to_owned())
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
    JsonBody(mut req): JsonBody<EmbedRequest>,
) -> Result<Response, ApiError> {
    // The request's own fields first: a body no model could answer is 400 whatever the model.
    if let Some(images) = req.images.take() {
        return embed_images(&app, req, images).await;
    }
    let texts = req.texts.ok_or_else(|| ApiError::bad("no `texts`: send the texts to embed"))?;
    if texts.is_empty() {
        return Err(ApiError::bad("texts is empty: send one or more texts to embed"));
    }
    app.check_inputs(texts.len())?;
    let types = embedding_types(req.embedding_types)?;
    let prompts = prompt_names(req.input_type.as_deref())?;
    let mut options = CallOptions::new().with_truncation(truncation(req.truncate.as_deref())?);
    let (entry, embedder) = app.model(req.model.as_deref())?;
    if let Some(d) = req.output_dimension {
        options = options.with_dimensions(d);
    }
    if let Some(name) = prompt_for(embedder, prompts) {
        options = options.with_prompt_name(name);
    }
    // The kind is checked by the call itself; a width binary cannot pack, by to_precision.
    let ranges = match types.iter().any(|(_, p)| p.needs_ranges()) {
        // The library's one rule: the model's given ranges, else calibrated once per width.
        true => Some(app.in_time(embedder.ranges_for_async(&options)).await?),
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
        answer["ranges"] = json!(r.source());
    }
    Ok(axum::Json(answer).into_response())
}

/// Cohere's `images` (data URIs, or URLs where allowed; `input_type` "image" or none): the same
/// answer, without `texts`.
async fn embed_images(app: &App, req: EmbedRequest, images: Vec<String>) -> Result<Response, ApiError> {
    if req.texts.is_some() {
        return Err(ApiError::bad("send `texts` or `images`, not both (as Cohere takes them)"));
    }
    if !matches!(req.input_type.as_deref(), None | Some("image")) {
        return Err(ApiError::bad("`images` go with input_type \"image\""));
    }
    if images.is_empty() {
        return Err(ApiError::bad("images is empty: send one or more images as data URIs"));
    }
    app.check_inputs(images.len())?;
    let types = embedding_types(req.embedding_types)?;
    // Read (and fetched, where URLs are allowed) before the model is asked.
    let inputs = app.images(images.iter().enumerate().map(|(i, v)| (v.as_str(), format!("images[{i}]")))).await?;
    let (entry, embedder) = app.model(req.model.as_deref())?;
    let mut options = CallOptions::new();
    if let Some(d) = req.output_dimension {
        options = options.with_dimensions(d);
    }
    let ranges = match types.iter().any(|(_, p)| p.needs_ranges()) {
        true => Some(app.in_time(embedder.ranges_for_async(&options)).await?),
        false => None,
    };
    let rows = app.embed_images(entry, embedder, inputs, options, |i| format!("images[{i}]")).await?;
    let mut embeddings = BTreeMap::new();
    for (name, p) in &types {
        let key = if *p == Precision::Float32 { "float".to_owned() } else { name.clone() };
        embeddings.insert(key, typed(&rows, *p, ranges.as_deref())?);
    }
    let mut answer = json!({
        "id": response_id("embed"),
        "response_type": "embeddings_by_type",
        "embeddings": embeddings,
        "meta": { "api_version": { "version": "2" }, "billed_units": { "images": images.len() } },
    });
    if let Some(r) = &ranges {
        answer["ranges"] = json!(r.source());
    }
    Ok(axum::Json(answer).into_response())
}
