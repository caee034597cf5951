//! text-embeddings-inference's routes, with its field names and answer shapes: `POST /` and
//! `/embed` (a bare `[[f32]]`), `/embed_all`, `/tokenize`, `/decode`, `/similarity`; each also
//! under `/models/{name}/`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use nornir_vector::{CallOptions, CharChunk, Chunking, DocumentVector, Embedder, Embeddings, Truncation};
use serde::Deserialize;

use crate::api::{ApiError, App, Input, dimensions, truncated_header};
use crate::body::JsonBody;
use crate::models::Entry;
use nornir_vector::LongInputs;

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) enum Direction {
    #[serde(alias = "left", alias = "LEFT")]
    Left,
    #[serde(alias = "right", alias = "RIGHT")]
    Right,
}

/// The options TEI takes at the root of the body, or, from huggingface_hub 0.28 to 0.33, under
/// `"parameters"`.
#[derive(Debug, Default, Deserialize)]
struct Params {
    #[serde(default)]
    normalize: Option<bool>,
    #[serde(default)]
    prompt_name: Option<String>,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Option<Direction>,
    #[serde(default)]
    dimensions: Option<i64>,
    /// huggingface_hub 1.x sends it when asked: only "float" is an answer its client can read.
    #[serde(default)]
    encoding_format: Option<String>,
    /// nornir's extension: chunk texts longer than the window instead of truncating or refusing.
    #[serde(default)]
    chunking: Option<ChunkingParams>,
}

/// `"chunking": {"window", "overlap", "late", "document"}`, each optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChunkingParams {
    #[serde(default)]
    window: Option<usize>,
    #[serde(default)]
    overlap: Option<usize>,
    #[serde(default)]
    late: Option<bool>,
    /// "mean" (default) or "max".
    #[serde(default)]
    document: Option<String>,
}

impl ChunkingParams {
    fn chunking(&self) -> Result<Chunking, ApiError> {
        let mut c = Chunking::new().with_late(self.late.unwrap_or(false));
        if let Some(w) = self.window {
            c = c.with_window(w);
        }
        if let Some(o) = self.overlap {
            c = c.with_overlap(o);
        }
        match self.document.as_deref() {
            None | Some("mean") => {}
            Some("max") => c = c.with_document(DocumentVector::Max),
            Some(other) => {
                return Err(ApiError::bad(format!("chunking.document must be \"mean\" or \"max\", not {other:?}")));
            }
        }
        Ok(c)
    }
}

impl Params {
    /// Root fields first, then the nested ones.
    fn or(self, nested: Option<Params>) -> Params {
        let n = nested.unwrap_or_default();
        Params {
            normalize: self.normalize.or(n.normalize),
            prompt_name: self.prompt_name.or(n.prompt_name),
            truncate: self.truncate.or(n.truncate),
            truncation_direction: self.truncation_direction.or(n.truncation_direction),
            dimensions: self.dimensions.or(n.dimensions),
            encoding_format: self.encoding_format.or(n.encoding_format),
            chunking: self.chunking.or(n.chunking),
        }
    }

    /// A text longer than the model: `"chunking"` chunks it; `truncate: true` cuts it on
    /// `truncation_direction`'s side (right by default) and `false` refuses it (413), as TEI
    /// reads them; a request that says neither gets the server's `long` (for token vectors,
    /// `per_token`, a chunking default truncates: chunks have no token vectors of the whole).
    fn call_options(self, width: usize, long: &LongInputs, per_token: bool) -> Result<CallOptions, ApiError> {
        if let Some(f) = self.encoding_format.as_deref().filter(|f| *f != "float") {
            return Err(ApiError::bad(format!(
                "encoding_format {f:?}: TEI's routes answer float vectors only; ask /v1/embeddings for base64"
            )));
        }
        let cut = match self.truncation_direction {
            Some(Direction::Left) => Truncation::Left,
            _ => Truncation::Right,
        };
        let chunking = self.chunking.as_ref().map(ChunkingParams::chunking).transpose()?;
        let mut o = long.for_call(chunking, self.truncate, cut, !per_token);
        if let Some(n) = self.normalize {
            o = o.with_normalize(n);
        }
        if let Some(name) = self.prompt_name {
            o = o.with_prompt_name(name);
        }
        if let Some(d) = self.dimensions {
            o = o.with_dimensions(dimensions(d, width)?);
        }
        Ok(o)
    }
}

/// TEI's `inputs`: a string or a list of strings (TEI's own token-id inputs are refused).
fn tei_texts(inputs: Input) -> Result<Vec<String>, ApiError> {
    match inputs {
        Input::One(s) => Ok(vec![s]),
        Input::Many(v) => Ok(v),
        Input::Ids(_) | Input::ManyIds(_) | Input::Items(_) => Err(ApiError::bad(
            "inputs must be a string or a list of strings (token ids and images are not taken here; images go to /v1/embeddings or /v2/embed)",
        )),
    }
}

/// `/embed`'s request, which `/embed_chunks`, `/embed_all` and `/embed_sparse` take too.
#[derive(Deserialize)]
pub(crate) struct EmbedRequest {
    inputs: Input,
    #[serde(flatten)]
    root: Params,
    #[serde(default)]
    parameters: Option<Params>,
}

/// The model a TEI route names in its path, if any.
pub(crate) type ModelPath = Option<Path<String>>;

fn name(model: &ModelPath) -> Option<&str> {
    model.as_ref().map(|p| p.0.as_str())
}

/// A TEI embedding request made ready: its model, its texts and the call's options.
pub(crate) type Prepared<'a> = (&'a Entry, &'a Arc<Embedder>, Vec<String>, CallOptions);

/// What `/embed`, `/embed_chunks` and `/embed_all` do first with their request: find the model,
/// check the texts, and turn the fields into the call's options (`chunked`: chunk long texts
/// even without `"chunking"`).
pub(crate) fn embed_request<'a>(
    app: &'a App,
    model: &ModelPath,
    req: EmbedRequest,
    chunked: bool,
    per_token: bool,
) -> Result<Prepared<'a>, ApiError> {
    let (entry, embedder) = app.model(name(model))?;
    let texts = tei_texts(req.inputs)?;
    app.check_inputs(texts.len())?;
    let mut params = req.root.or(req.parameters);
    if chunked {
        params.chunking.get_or_insert_with(ChunkingParams::default);
    }
    let options = params.call_options(embedder.model_info().model_dimension, &app.long, per_token)?;
    Ok((entry, embedder, texts, options))
}

/// TEI's `/embed`: a bare `[[f32]]`.
pub(crate) async fn embed(
    State(app): State<Arc<App>>,
    model: ModelPath,
    JsonBody(req): JsonBody<EmbedRequest>,
) -> Result<Response, ApiError> {
    let (entry, embedder, texts, options) = embed_request(&app, &model, req, false, false)?;
    let rows = app.embed(entry, embedder, &texts, options).await?;
    let vectors: Vec<&[f32]> = rows.rows().collect();
    Ok(truncated_header(axum::Json(vectors).into_response(), &rows))
}

#[derive(serde::Serialize)]
struct DocumentAnswer<'a> {
    embedding: &'a [f32],
    chunks: Vec<CharChunk<'a>>,
}

/// nornir's `/embed_chunks`: `/embed`'s request, chunked (by `chunking`, else windows of the
/// model's length overlapping by 32 tokens); per input, the document's vector and each chunk's
/// span (in characters), tokens and vector.
pub(crate) async fn embed_chunks(
    State(app): State<Arc<App>>,
    model: ModelPath,
    JsonBody(req): JsonBody<EmbedRequest>,
) -> Result<Response, ApiError> {
    let (entry, embedder, texts, options) = embed_request(&app, &model, req, true, false)?;
    let rows = app.embed(entry, embedder, &texts, options).await?;
    let answers: Vec<DocumentAnswer<'_>> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| DocumentAnswer { embedding: rows.row(i), chunks: rows.char_chunks(i, text) })
        .collect();
    Ok(axum::Json(answers).into_response())
}

/// Every token's vector of each text, raw (TEI's `/embed_all`): `[[[f32]]]`, text by token.
pub(crate) async fn embed_all(
    State(app): State<Arc<App>>,
    model: ModelPath,
    JsonBody(req): JsonBody<EmbedRequest>,
) -> Result<Response, ApiError> {
    let (entry, embedder, texts, options) = embed_request(&app, &model, req, false, true)?;
    let answer = all_token_vectors(&app, entry, embedder, &texts, options).await?;
    Ok(axum::Json(answer).into_response())
}

/// Each text's token vectors (`/embed_all`, gRPC's `EmbedAll`), counted in the metrics: a
/// late-interaction model's are its documents' (projected, normalised), any other model's the
/// graph's raw token output.
pub(crate) async fn all_token_vectors(
    app: &App,
    entry: &Entry,
    embedder: &Embedder,
    texts: &[String],
    options: CallOptions,
) -> Result<Vec<Vec<Vec<f32>>>, ApiError> {
    let options = options.with_max_wait(app.max_wait());
    if embedder.model_info().folder.multi_vector.is_some() {
        let options = nornir_vector::MultiVectorOptions::new().with_call(options);
        let vectors = app.in_time(embedder.embed_multi_vector_async(texts, &options)).await?;
        let usage = vectors.usage();
        app.metrics.count_texts(entry, texts.len(), usage.tokens, usage.truncated);
        return Ok(vectors
            .iter()
            .map(|rows| rows.chunks_exact(vectors.dim().max(1)).map(<[f32]>::to_vec).collect())
            .collect());
    }
    // Each text's call queues as every route's texts do: refused when the queue is full or too
    // slow, cut off past the request timeout, cancelled when the client goes away.
    let vectors = app
        .in_time(async {
            let mut vectors = Vec::with_capacity(texts.len());
            for text in texts {
                vectors.push(embedder.token_vectors_async(text, &options).await?);
            }
            Ok(vectors)
        })
        .await?;
    let tokens = vectors.iter().map(Embeddings::total_tokens).sum();
    let truncated = vectors.iter().map(Embeddings::truncated_count).sum();
    app.metrics.count_texts(entry, texts.len(), tokens, truncated);
    Ok(vectors.iter().map(|rows| rows.rows().map(<[f32]>::to_vec).collect()).collect())
}

#[derive(Deserialize)]
pub(crate) struct TokenizeRequest {
    inputs: Input,
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    prompt_name: Option<String>,
}

/// Every token of each text (not cut to the model's length), with the prompt when one is named.
pub(crate) async fn tokenize(
    State(app): State<Arc<App>>,
    model: ModelPath,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Result<Response, ApiError> {
    let (_, embedder) = app.model(name(&model))?;
    let texts = tei_texts(req.inputs)?;
    app.check_inputs(texts.len())?;
    let mut options = CallOptions::new();
    if let Some(p) = req.prompt_name {
        options = options.with_prompt_name(p);
    }
    let special = req.add_special_tokens.unwrap_or(true);
    let embedder = Arc::clone(embedder);
    let tokens = tokio::task::spawn_blocking(move || {
        texts.iter().map(|t| embedder.tokenize(t, &options, special)).collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("tokenizing failed: {e}")))??;
    Ok(axum::Json(tokens).into_response())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Ids {
    One(Vec<u32>),
    Many(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
pub(crate) struct DecodeRequest {
    ids: Ids,
    #[serde(default)]
    skip_special_tokens: Option<bool>,
}

/// The text of each list of the model's token ids.
pub(crate) async fn decode(
    State(app): State<Arc<App>>,
    model: ModelPath,
    JsonBody(req): JsonBody<DecodeRequest>,
) -> Result<Response, ApiError> {
    let (_, embedder) = app.model(name(&model))?;
    let lists = match req.ids {
        Ids::One(ids) => vec![ids],
        Ids::Many(lists) => lists,
    };
    app.check_inputs(lists.len())?;
    let skip = req.skip_special_tokens.unwrap_or(true);
    let texts = lists.iter().map(|ids| embedder.decode(ids, skip)).collect::<Result<Vec<_>, _>>()?;
    Ok(axum::Json(texts).into_response())
}

#[derive(Deserialize)]
struct SimilarityInputs {
    source_sentence: String,
    sentences: Vec<String>,
}

#[derive(Deserialize)]
pub(crate) struct SimilarityRequest {
    inputs: SimilarityInputs,
    #[serde(default)]
    parameters: Option<Params>,
}

/// The cosine similarity of the source sentence with each sentence, in order.
pub(crate) async fn similarity(
    State(app): State<Arc<App>>,
    model: ModelPath,
    JsonBody(req): JsonBody<SimilarityRequest>,
) -> Result<Response, ApiError> {
    let (entry, embedder) = app.model(name(&model))?;
    let SimilarityInputs { source_sentence, sentences } = req.inputs;
    app.check_inputs(sentences.len())?;
    let mut texts = Vec::with_capacity(sentences.len() + 1);
    texts.push(source_sentence);
    texts.extend(sentences);
    let options = req
        .parameters
        .unwrap_or_default()
        .call_options(embedder.model_info().model_dimension, &app.long, false)?
        .with_normalize(true);
    let rows = app.embed(entry, embedder, &texts, options).await?;
    let source = rows.row(0);
    let scores: Vec<f32> = (1..rows.len()).map(|i| rows.row(i).iter().zip(source).map(|(a, b)| a * b).sum()).collect();
    Ok(truncated_header(axum::Json(scores).into_response(), &rows))
}
