//! OpenAI's routes: `POST /v1/embeddings` (and `/embeddings`), `GET /v1/models` (and `/models`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::TokenIds;
use crate::api::Item as InputItem;
use crate::api::{ApiError, App, Input, dimensions, truncated_header};
use crate::body::JsonBody;

#[derive(Deserialize)]
pub(crate) struct Request {
    input: Input,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    dimensions: Option<i64>,
    #[serde(default)]
    encoding_format: Option<String>,
    /// nornir's own: a prompt of the model folder by name (`query`), as TEI's `prompt_name`.
    #[serde(default)]
    prompt_name: Option<String>,
    // `user` is accepted and ignored, as every other field OpenAI may add.
}

/// OpenAI's answer, serialised straight from the rows: a `serde_json::Value` per float cost 55 to
/// 110 MB more at the peak of a 2,048-text request, and wrote each float widened to f64 digits
/// (a 1.7x larger body).
#[derive(Serialize)]
struct List<'a> {
    object: &'static str,
    data: Vec<Item>,
    model: &'a str,
    usage: Usage,
}

#[derive(Serialize)]
struct Item {
    object: &'static str,
    index: usize,
    embedding: Embedding,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Embedding {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// `cl100k_base` token ids back to text, off the async threads (the encoding loads once, and a
/// request can hold millions of ids).
async fn decode_cl100k(lists: Vec<Vec<u32>>) -> Result<Vec<String>, ApiError> {
    tokio::task::spawn_blocking(move || {
        let bpe = tiktoken_rs::cl100k_base_singleton();
        lists
            .iter()
            .enumerate()
            .map(|(i, ids)| {
                if ids.is_empty() {
                    return Err(ApiError::bad(format!("input[{i}] is an empty list of token ids; send tokens")));
                }
                let bytes = bpe.decode_bytes(ids).map_err(|e| {
                    ApiError::bad(format!(
                        "input[{i}] holds token id {}, which is not in OpenAI's cl100k_base encoding; token ids are read as cl100k_base, so send text instead",
                        e.token
                    ))
                })?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            })
            .collect()
    })
    .await
    .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("decoding token ids failed: {e}")))?
}

impl App {
    /// The texts of an OpenAI `input`: strings as they are; token ids decoded from cl100k_base,
    /// or refused, as the server was configured.
    async fn openai_texts(&self, input: Input) -> Result<Vec<String>, ApiError> {
        let ids = match input {
            Input::One(s) => return Ok(vec![s]),
            Input::Many(v) => return Ok(v),
            Input::Ids(ids) => vec![ids],
            Input::ManyIds(lists) => lists,
            // Texts alone: an item with an image goes to `embed_items` first.
            Input::Items(items) => {
                return Ok(items
                    .into_iter()
                    .map(|item| match item {
                        InputItem::Text(text) | InputItem::TextObject { text } => text,
                        InputItem::Image { image } => image,
                    })
                    .collect());
            }
        };
        self.check_inputs(ids.len())?;
        match self.token_ids {
            TokenIds::Refuse => Err(ApiError::bad(
                "input is token ids, which this server refuses (--token-ids refuse): send a string or a list of strings",
            )),
            TokenIds::Cl100k => decode_cl100k(ids).await,
        }
    }
}

/// OpenAI's `POST /v1/embeddings`.
pub(crate) async fn embeddings(
    State(app): State<Arc<App>>,
    JsonBody(req): JsonBody<Request>,
) -> Result<Response, ApiError> {
    let (entry, embedder) = app.model(req.model.as_deref())?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad(format!("encoding_format must be \"float\" or \"base64\", not {other:?}")));
        }
    };
    // OpenAI's requests never say what to do with a long text: the server's --long does.
    let mut options = app.long.call_options();
    if let Some(d) = req.dimensions {
        options = options.with_dimensions(dimensions(d, embedder.model_info().model_dimension)?);
    }
    if let Some(name) = req.prompt_name {
        options = options.with_prompt_name(name);
    }
    let input = match req.input {
        Input::Items(items) if items.iter().any(|i| matches!(i, InputItem::Image { .. })) => {
            app.check_inputs(items.len())?;
            let (rows, tokens, cut) = app.embed_items(entry, embedder, items, options).await?;
            let list = List {
                object: "list",
                data: items_of(rows.iter().map(Vec::as_slice), base64),
                model: &entry.name,
                usage: Usage { prompt_tokens: tokens, total_tokens: tokens },
            };
            let mut response = axum::Json(list).into_response();
            response.headers_mut().insert("x-truncated-inputs", axum::http::HeaderValue::from(cut));
            return Ok(response);
        }
        input => input,
    };
    let texts = app.openai_texts(input).await?;
    app.check_inputs(texts.len())?;
    if let Some(i) = texts.iter().position(String::is_empty) {
        return Err(ApiError::bad(format!("input[{i}] is an empty string; send text")));
    }
    let rows = app.embed(entry, embedder, &texts, options).await?;
    let data = items_of(rows.rows(), base64);
    let tokens = rows.total_tokens();
    let usage = Usage { prompt_tokens: tokens, total_tokens: tokens };
    Ok(truncated_header(axum::Json(List { object: "list", data, model: &entry.name, usage }).into_response(), &rows))
}

/// Each row as OpenAI's `data` item, floats or little-endian float32 bytes in base64.
fn items_of<'a>(rows: impl Iterator<Item = &'a [f32]>, base64: bool) -> Vec<Item> {
    rows.enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Embedding::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Embedding::Float(v.to_vec())
            };
            Item { object: "embedding", index, embedding }
        })
        .collect()
}

#[derive(Serialize)]
struct Model<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
}

/// Every model the server answers for, loaded or not, as OpenAI lists them.
pub(crate) async fn models(State(app): State<Arc<App>>) -> Response {
    // Each name a request may give, once: every model's name, then its aliases.
    let names = app.models.all_names();
    let data: Vec<Model<'_>> =
        names.iter().map(|id| Model { id, object: "model", created: app.created, owned_by: "nornir" }).collect();
    axum::Json(serde_json::json!({ "object": "list", "data": data })).into_response()
}
