//! Images on the routes that take them, for an image-and-text model (CLIP, SigLIP): Cohere's
//! `images` (data URIs) and Jina's `input` items (`{"text": ...}`, `{"image": ...}` as base64 or
//! a data URI), answered in order. The server fetches no URL: an image is sent in the request.

use std::sync::Arc;

use base64::Engine as _;
use nornir_vector::{CallOptions, EmbedError, Embedder, Embeddings, ImageInput};

use crate::api::{ApiError, App, Item};
use crate::models::Entry;

/// The bytes of an image sent as a data URI (`data:image/png;base64,...`) or as base64 alone;
/// `at` names it in errors (`images[2]`, `input[0].image`).
pub(crate) fn image_bytes(value: &str, at: &str) -> Result<Vec<u8>, ApiError> {
    let payload = if let Some(uri) = value.strip_prefix("data:") {
        let (header, data) = uri.split_once(',').ok_or_else(|| {
            ApiError::bad(format!("{at} is a data URI without a comma: send data:image/...;base64,<the image's bytes>"))
        })?;
        if !header.ends_with(";base64") {
            return Err(ApiError::bad(format!("{at} is a data URI that is not base64: send data:{header};base64,...")));
        }
        data
    } else if value.starts_with("http://") || value.starts_with("https://") {
        return Err(ApiError::bad(format!(
            "{at} is a URL, and this server fetches no URLs: send the image's bytes as base64 or a data URI"
        )));
    } else {
        value
    };
    let payload = payload.trim();
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(payload))
        .map_err(|e| ApiError::bad(format!("{at} is not base64 ({e}): send the image as base64 or a data URI")))
}

impl App {
    /// `images` embedded by `embedder` off the async threads, within the request timeout; a
    /// text-only model answers 400 in the library's words, a bad image names its place in the
    /// request (`at` of its index).
    pub(crate) async fn embed_images(
        &self,
        entry: &Entry,
        embedder: &Arc<Embedder>,
        images: Vec<ImageInput>,
        options: CallOptions,
        at: impl Fn(usize) -> String,
    ) -> Result<Embeddings, ApiError> {
        let count = images.len();
        let embedder = Arc::clone(embedder);
        // A bad image is the request's fault, named by its place in the request.
        let call = async move {
            let out = tokio::task::spawn_blocking(move || embedder.embed_images_with(&images, &options))
                .await
                .unwrap_or_else(|e| Err(EmbedError::from_panic(&format!("an image call stopped: {e}"))));
            match out {
                Err(EmbedError::BadImage { index, reason, .. }) => Ok(Err((index, reason))),
                other => other.map(Ok),
            }
        };
        let rows =
            self.in_time(call).await?.map_err(|(index, reason)| ApiError::bad(format!("{}: {reason}", at(index))))?;
        self.metrics.count_texts(entry, count, 0, 0);
        Ok(rows)
    }

    /// Jina's mixed `input`: the texts and the images each embedded in one call, the rows put
    /// back in the input's order; the texts' tokens and how many were cut.
    pub(crate) async fn embed_items(
        &self,
        entry: &Entry,
        embedder: &Arc<Embedder>,
        items: Vec<Item>,
        options: CallOptions,
    ) -> Result<(Vec<Vec<f32>>, usize, usize), ApiError> {
        let (mut texts, mut images, mut order, mut image_at) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, item) in items.into_iter().enumerate() {
            match item {
                Item::Text(text) | Item::TextObject { text } if text.is_empty() => {
                    return Err(ApiError::bad(format!("input[{i}] is an empty string; send text")));
                }
                Item::Text(text) | Item::TextObject { text } => {
                    order.push((false, texts.len()));
                    texts.push(text);
                }
                Item::Image { image } => {
                    order.push((true, images.len()));
                    image_at.push(i);
                    images.push(ImageInput::bytes(image_bytes(&image, &format!("input[{i}].image"))?));
                }
            }
        }
        let at = |k: usize| format!("input[{}].image", image_at.get(k).copied().unwrap_or(k));
        let image_rows = self.embed_images(entry, embedder, images, options.clone(), at).await?;
        let text_rows = match texts.is_empty() {
            true => None,
            false => Some(self.embed(entry, embedder, &texts, options).await?),
        };
        let rows = order
            .into_iter()
            .map(|(image, at)| match (image, &text_rows) {
                (false, Some(t)) => t.row(at).to_vec(),
                _ => image_rows.row(at).to_vec(),
            })
            .collect();
        let (tokens, cut) = text_rows.as_ref().map_or((0, 0), |t| (t.total_tokens(), t.truncated_count()));
        Ok((rows, tokens, cut))
    }
}
