//! Images on the routes that take them, for an image-and-text model (CLIP, SigLIP): Cohere's
//! `images` and Jina's `input` items (`{"text": ...}`, `{"image": ...}`), answered in order. An
//! image comes in the request, as base64 or a data URI; or, where the operator allows it
//! (`--allow-image-urls`), as an `http://` URL that the server fetches itself: with ureq, off the
//! async threads, at most [`AT_ONCE`](crate::image_urls::AT_ONCE) at a time per request, each within its byte and time limits
//! and all within the request timeout, each redirect checked as the URL was. Nothing else is
//! fetched: no `https://` (this build has no TLS), no other scheme, no host off the allow-list.

use std::sync::Arc;

use base64::Engine as _;
use nornir_vector::{CallOptions, EmbedError, Embedder, Embeddings, ImageInput};
use url::Url;

use crate::api::{ApiError, App, Item};
use crate::image_urls::{Fetcher, host_of};
use crate::models::Entry;

/// An image of the request: its bytes, or the URL to fetch them from.
enum Source {
    Bytes(Vec<u8>),
    Url(Url),
}

/// The image sent as a data URI (`data:image/png;base64,...`), as base64 alone, or as an `http://`
/// URL where `fetch` allows them; `at` names it in errors (`images[2]`, `input[0].image`).
fn source(value: &str, at: &str, fetch: Option<&Fetcher>) -> Result<Source, ApiError> {
    let payload = if let Some(uri) = value.strip_prefix("data:") {
        let (header, data) = uri.split_once(',').ok_or_else(|| {
            ApiError::bad(format!("{at} is a data URI without a comma: send data:image/...;base64,<the image's bytes>"))
        })?;
        if !header.ends_with(";base64") {
            return Err(ApiError::bad(format!("{at} is a data URI that is not base64: send data:{header};base64,...")));
        }
        data
    } else if ["http://", "https://"].iter().any(|p| value.get(..p.len()).is_some_and(|v| v.eq_ignore_ascii_case(p))) {
        let Some(fetch) = fetch else {
            return Err(ApiError::bad(format!(
                "{at} is a URL, and this server fetches no URLs unless its operator allows them (--allow-image-urls): send the image's bytes as base64 or a data URI"
            )));
        };
        let url = Url::parse(value.trim()).map_err(|e| {
            ApiError::bad(format!("{at} is not a URL ({e}): send an http:// URL, or the image's bytes"))
        })?;
        fetch.check(&url).map_err(|f| ApiError::bad(f.message(at, &host_of(&url), fetch)))?;
        return Ok(Source::Url(url));
    } else {
        value
    };
    let payload = payload.trim();
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(payload))
        .map(Source::Bytes)
        .map_err(|e| ApiError::bad(format!("{at} is not base64 ({e}): send the image as base64 or a data URI")))
}

impl App {
    /// The request's images, in order, from `values` (each with its place in the request):
    /// every one checked first (a bad one answers before anything is fetched), then the URLs
    /// fetched.
    pub(crate) async fn images<'a>(
        &self,
        values: impl IntoIterator<Item = (&'a str, String)>,
    ) -> Result<Vec<ImageInput>, ApiError> {
        let mut bytes = Vec::new();
        let mut urls = Vec::new();
        for (i, (value, at)) in values.into_iter().enumerate() {
            match source(value, &at, self.image_urls.as_deref())? {
                Source::Bytes(b) => bytes.push(b),
                Source::Url(url) => {
                    bytes.push(Vec::new());
                    urls.push((i, url, at));
                }
            }
        }
        if let (Some(fetch), false) = (&self.image_urls, urls.is_empty()) {
            for (i, b) in fetch.fetch_all(urls, self.request_timeout).await? {
                bytes[i] = b;
            }
        }
        Ok(bytes.into_iter().map(ImageInput::bytes).collect())
    }

    /// `images` embedded by `embedder` through its queue, within the request timeout; a
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
        // Queued as texts are: a request that times out or is dropped takes its images out of
        // the queue. A bad image is the request's fault, named by its place in the request.
        let call = async move {
            match embedder.embed_images_with_async(images, &options).await {
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
                    images.push(image);
                }
            }
        }
        let images =
            self.images(images.iter().zip(&image_at).map(|(v, i)| (v.as_str(), format!("input[{i}].image")))).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerConfig;
    use crate::image_urls::tests::{PNG, far, fetcher, small};
    use nornir_test_support::http::ImageHost;

    fn refused(at: &str, value: &str, f: Option<&Fetcher>) -> String {
        match source(value, at, f) {
            Err(e) => e.message,
            Ok(_) => panic!("{value} was taken"),
        }
    }

    #[test]
    fn without_the_flag_a_url_is_refused_naming_the_flag_and_nothing_is_fetched() {
        let host = ImageHost::start(PNG.to_vec());
        let m = refused("images[2]", &host.url("/image.png"), None);
        assert!(m.starts_with("images[2] is a URL") && m.contains("--allow-image-urls"), "{m}");
        assert!(m.contains("fetches no URLs"), "{m}");
        assert_eq!(host.requests(), 0);
        // Base64 and data URIs are read as before.
        assert!(matches!(source("data:image/png;base64,aGk=", "a", None), Ok(Source::Bytes(b)) if b == b"hi"));
        assert!(matches!(source("aGk=", "a", None), Ok(Source::Bytes(b)) if b == b"hi"));
        assert!(refused("a", "HTTPS://a.example/x.png", None).contains("--allow-image-urls"));
    }

    #[test]
    fn https_other_hosts_and_bad_urls_are_refused_before_any_fetch() {
        let host = ImageHost::start(PNG.to_vec());
        let f = small();
        let m = refused("images[1]", "https://127.0.0.1:9/cat.png", Some(&f));
        assert!(m.starts_with("images[1]: https URLs are not fetched") && m.contains("without TLS"), "{m}");
        let m = refused("images[0]", "http://[nonsense/cat.png", Some(&f));
        assert!(m.starts_with("images[0] is not a URL"), "{m}");
        let only = fetcher(ServerConfig::default().with_image_url_hosts(["Images.Example.com"]));
        let m = refused("input[0].image", &host.url("/image.png"), Some(&only));
        assert!(m.contains("127.0.0.1 is not a host this server fetches images from (--image-url-host)"), "{m}");
        assert!(matches!(source("http://IMAGES.example.com/a.png", "a", Some(&only)), Ok(Source::Url(_))));
        // The allow-list holds at every redirect too.
        let local = fetcher(ServerConfig::default().with_image_url_hosts(["127.0.0.1"]));
        let redirect = Url::parse(&host.url("/redirect")).expect("a URL");
        assert_eq!(local.fetch(redirect, far()).expect("same host"), PNG);
        assert_eq!(host.requests(), 2, "nothing fetched for the refused ones");
    }
}
