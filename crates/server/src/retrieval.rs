//! The routes of a cross-encoder and a sparse encoder: text-embeddings-inference's `/rerank`,
//! `/predict` and `/embed_sparse` with its answer shapes, Cohere's and Jina's `/v1/rerank` and
//! `/v2/rerank` (`documents` on `/rerank` answer in their shape too), and `/`, which does what
//! the first model's kind does there in TEI.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use nornir_vector::{CallOptions, Embedder, LongInputs, ModelKind, PairOptions, Ranked, SparseOptions, Truncation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::{ApiError, App, Flavour, response_id};
use crate::body::{JsonBody, RawBody, parse};
use crate::models::Entry;
use crate::tei::{self, Direction, EmbedRequest};

/// A document as Cohere and Jina take it: a string or `{"text": ...}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Document {
    Text(String),
    Object { text: String },
}

/// TEI's (`texts`) and Cohere's or Jina's (`documents`) rerank request, with both's options.
#[derive(Deserialize)]
pub(crate) struct RerankRequest {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    texts: Option<Vec<String>>,
    #[serde(default)]
    documents: Option<Vec<Document>>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: Option<bool>,
    #[serde(default)]
    raw_scores: Option<bool>,
    #[serde(default)]
    return_text: Option<bool>,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Option<Direction>,
}

/// `truncate` and `truncation_direction` as TEI reads them, `raw_scores` as asked.
fn pair_options(app: &App, truncate: Option<bool>, direction: Option<Direction>, raw: bool) -> PairOptions {
    let truncation = match (truncate, direction) {
        (Some(false), _) => Truncation::Refuse,
        (_, Some(Direction::Left)) => Truncation::Left,
        _ => Truncation::Right,
    };
    let call = CallOptions::new().with_truncation(truncation).with_max_wait(app.max_wait());
    PairOptions::new().with_call(call).with_raw_scores(raw)
}

/// Every pair's (or text's) scores, counted in the metrics.
async fn scores(
    app: &App,
    entry: &Entry,
    embedder: &Embedder,
    inputs: &[(String, Option<String>)],
    options: &PairOptions,
) -> Result<nornir_vector::Embeddings, ApiError> {
    let rows = app.in_time(embedder.score_async(inputs, options)).await?;
    app.metrics.count_texts(entry, inputs.len(), rows.total_tokens(), rows.truncated_count());
    Ok(rows)
}

/// The documents of a rerank request, checked against the server's limits, and whether it
/// came in Cohere's or Jina's shape.
fn documents(app: &App, req: &mut RerankRequest) -> Result<(Vec<String>, bool), ApiError> {
    let (docs, cohere) = match (req.texts.take(), req.documents.take()) {
        (Some(texts), _) => (texts, false),
        (None, Some(docs)) => (
            docs.into_iter()
                .map(|d| match d {
                    Document::Text(t) | Document::Object { text: t } => t,
                })
                .collect(),
            true,
        ),
        (None, None) => return Err(ApiError::bad("no documents: send `texts` (TEI) or `documents` (Cohere, Jina)")),
    };
    if docs.is_empty() {
        return Err(ApiError::bad("the documents are empty: send at least one document to rank"));
    }
    app.check_inputs(docs.len())?;
    Ok((docs, cohere))
}

#[derive(Serialize)]
struct TeiRank<'a> {
    index: usize,
    score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    /// Under `--long chunk`, the chunk that scored (its number and bytes in the document).
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk: Option<nornir_vector::ChunkSpan>,
}

/// Ranks a parsed request; `cohere_route`: asked on `/v1/rerank` or `/v2/rerank`.
async fn rerank_parsed(
    app: &App,
    model: Option<&str>,
    mut req: RerankRequest,
    cohere_route: bool,
) -> Result<Response, ApiError> {
    let (docs, cohere_shape) = documents(app, &mut req)?;
    let query =
        req.query.take().ok_or_else(|| ApiError::bad("no `query`: send the text to rank the documents against"))?;
    if req.top_n == Some(0) {
        return Err(ApiError::bad("top_n is 0: give at least 1, or leave it out for every document"));
    }
    let (entry, embedder) = app.model(model.or(req.model.as_deref()))?;
    let mut options = pair_options(app, req.truncate, req.truncation_direction, req.raw_scores.unwrap_or(false));
    // A server started with --long chunk scores a cross-encoder's long documents by their best
    // chunk, unless the request says how to cut them.
    if let LongInputs::Chunk(c) = app.long
        && !c.late
        && req.truncate.is_none()
        && embedder.model_info().folder.kind.kind == ModelKind::CrossEncoder
    {
        options.call.chunking = Some(c);
    }
    let ranking = app.in_time(embedder.rerank_async(&query, &docs, req.top_n, &options)).await?;
    app.metrics.count_texts(entry, docs.len(), ranking.usage.tokens, ranking.usage.truncated);
    let ranked: Vec<Ranked> = ranking.ranked;
    if cohere_route || cohere_shape {
        let with_text = req.return_documents.unwrap_or(false);
        let results: Vec<Value> = ranked
            .iter()
            .map(|r| {
                let mut v = json!({ "index": r.index, "relevance_score": r.score });
                if with_text {
                    v["document"] = json!({ "text": docs[r.index] });
                }
                if let Some(chunk) = r.chunk {
                    v["chunk"] = json!(chunk);
                }
                v
            })
            .collect();
        return Ok(axum::Json(json!({
            "id": response_id("rerank"),
            "model": entry.name,
            "results": results,
            "usage": { "total_tokens": ranking.usage.tokens },
            "meta": { "api_version": { "version": "2" }, "billed_units": { "search_units": 1 } },
        }))
        .into_response());
    }
    let with_text = req.return_text.unwrap_or(false);
    let answer: Vec<TeiRank<'_>> = ranked
        .iter()
        .map(|r| TeiRank {
            index: r.index,
            score: r.score,
            text: with_text.then_some(docs[r.index].as_str()),
            chunk: r.chunk,
        })
        .collect();
    Ok(axum::Json(answer).into_response())
}

/// TEI's `/rerank` (and Cohere's or Jina's shape, errors included, when the request sends
/// `documents`).
pub(crate) async fn rerank(
    State(app): State<Arc<App>>,
    model: Option<Path<String>>,
    JsonBody(req): JsonBody<RerankRequest>,
) -> Result<Response, ApiError> {
    let cohere_shape = req.texts.is_none() && req.documents.is_some();
    let r = rerank_parsed(&app, model.as_ref().map(|p| p.0.as_str()), req, false).await;
    r.map_err(|e| if cohere_shape { e.in_shape(Flavour::Cohere) } else { e })
}

/// Cohere's and Jina's `POST /v1/rerank` and `/v2/rerank`: the model by its `model` field.
pub(crate) async fn cohere_rerank(
    State(app): State<Arc<App>>,
    JsonBody(req): JsonBody<RerankRequest>,
) -> Result<Response, ApiError> {
    rerank_parsed(&app, None, req, true).await
}

/// TEI's sequence: a text alone, or a pair as a two-string list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Sequence {
    Pair(String, String),
    One(String),
}

/// TEI's `inputs`: one sequence, or a list of them (`["a", "b"]` is one pair, as TEI reads it).
#[derive(Deserialize)]
#[serde(untagged)]
enum PredictInput {
    Single(Sequence),
    Batch(Vec<Sequence>),
}

#[derive(Deserialize)]
pub(crate) struct PredictRequest {
    inputs: PredictInput,
    #[serde(default)]
    raw_scores: Option<bool>,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Option<Direction>,
}

#[derive(Serialize)]
struct Prediction<'a> {
    score: f32,
    label: &'a str,
}

async fn predict_parsed(app: &App, model: Option<&str>, req: PredictRequest) -> Result<Response, ApiError> {
    let (entry, embedder) = app.model(model)?;
    let (sequences, single) = match req.inputs {
        PredictInput::Single(s) => (vec![s], true),
        PredictInput::Batch(b) => (b, false),
    };
    if sequences.is_empty() {
        return Err(ApiError::bad("inputs are empty: send a text, a pair, or a list of them"));
    }
    app.check_inputs(sequences.len())?;
    let inputs: Vec<(String, Option<String>)> = sequences
        .into_iter()
        .map(|s| match s {
            Sequence::Pair(a, b) => (a, Some(b)),
            Sequence::One(a) => (a, None),
        })
        .collect();
    let options = pair_options(app, req.truncate, req.truncation_direction, req.raw_scores.unwrap_or(false));
    let rows = scores(app, entry, embedder, &inputs, &options).await?;
    let labels = &embedder.model_info().folder.kind.labels;
    let predictions: Vec<Vec<Prediction<'_>>> = rows
        .rows()
        .map(|row| {
            let mut p: Vec<Prediction<'_>> =
                row.iter().zip(labels).map(|(&score, label)| Prediction { score, label }).collect();
            p.sort_by(|a, b| b.score.total_cmp(&a.score));
            p
        })
        .collect();
    Ok(if single { axum::Json(&predictions[0]).into_response() } else { axum::Json(predictions).into_response() })
}

/// TEI's `/predict`: each sequence's score per label, best first.
pub(crate) async fn predict(
    State(app): State<Arc<App>>,
    model: Option<Path<String>>,
    JsonBody(req): JsonBody<PredictRequest>,
) -> Result<Response, ApiError> {
    predict_parsed(&app, model.as_ref().map(|p| p.0.as_str()), req).await
}

#[derive(Serialize)]
struct SparseValue {
    index: u32,
    value: f32,
}

/// TEI's `/embed_sparse`: per input, its terms as `{"index", "value"}`.
pub(crate) async fn embed_sparse(
    State(app): State<Arc<App>>,
    model: Option<Path<String>>,
    JsonBody(req): JsonBody<EmbedRequest>,
) -> Result<Response, ApiError> {
    // `/embed`'s request: its prompt and truncation apply (a chunking default truncates).
    let (entry, embedder, texts, call) = tei::embed_request(&app, &model, req, false, true)?;
    let options = SparseOptions::new().with_call(call.with_max_wait(app.max_wait()));
    let vectors = app.in_time(embedder.embed_sparse_async(&texts, &options)).await?;
    app.metrics.count_texts(entry, texts.len(), vectors.usage.tokens, vectors.usage.truncated);
    let answer: Vec<Vec<SparseValue>> = vectors
        .vectors
        .iter()
        .map(|v| v.indices.iter().zip(&v.values).map(|(&index, &value)| SparseValue { index, value }).collect())
        .collect();
    let mut response = axum::Json(answer).into_response();
    response.headers_mut().insert("x-truncated-inputs", vectors.usage.truncated.into());
    Ok(response)
}

/// `POST /`: what TEI does there for the first model's kind: embed, embed_sparse, or for a
/// cross-encoder rerank (a request with a `query`) or predict.
pub(crate) async fn root(State(app): State<Arc<App>>, RawBody(body): RawBody) -> Result<Response, ApiError> {
    // A model still loading is its 503 here, not an embedder's route by default.
    let kind = app.model(None)?.1.model_info().folder.kind.kind;
    match kind {
        ModelKind::SparseEncoder => embed_sparse(State(app), None, JsonBody(parse(&body)?)).await,
        ModelKind::CrossEncoder => {
            let v: Value = parse(&body)?;
            if v.get("query").is_some() {
                rerank_parsed(&app, None, parse(&body)?, false).await
            } else {
                predict_parsed(&app, None, parse(&body)?).await
            }
        }
        _ => tei::embed(State(app), None, JsonBody(parse(&body)?)).await,
    }
}
