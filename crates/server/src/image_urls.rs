//! Image URLs fetched for the routes that take images, where the operator allows it
//! (`--allow-image-urls`): `http://` only (this build has no TLS), with ureq, off the async
//! threads, at most [`AT_ONCE`] at a time per request, each within its byte and time limits and
//! all within the request timeout, each redirect checked as the URL was, no host off the
//! allow-list.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use url::Url;

use crate::ServerConfig;
use crate::error::ApiError;

/// The most fetches one request runs at a time.
pub(crate) const AT_ONCE: usize = 4;

/// The most redirects one fetch follows.
const MAX_REDIRECTS: usize = 5;

/// Whether `host` is a host as a URL writes it, and as [`ServerConfig::image_url_hosts`] takes one.
pub(crate) fn is_host(host: &str) -> bool {
    url::Host::parse(host).is_ok()
}

/// Fetches image URLs within the operator's limits (`--allow-image-urls` and its flags).
#[derive(Debug)]
pub(crate) struct Fetcher {
    agent: ureq::Agent,
    max_bytes: usize,
    timeout: Duration,
    /// Each as [`url::Host`] writes it (lower case, IPv6 in brackets); empty: any host.
    hosts: Vec<String>,
}

/// Why a fetch gave no image; [`Failure::message`] says it with the item's place.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Not a host of `--image-url-host`.
    Host(String),
    /// An `https://` URL, first or redirected to.
    Https,
    /// A redirect to a scheme the server does not fetch.
    Scheme(String),
    /// A 3xx without a Location the server can read.
    BadRedirect(u16),
    TooManyRedirects,
    /// Not 2xx: the status and its reason.
    Status(u16, String),
    TooLarge,
    /// Past the fetch's own time limit, or (`true`) the request's, which came first.
    TimedOut {
        request: bool,
    },
    /// No answer: DNS, the connection, or a reply that is not HTTP.
    Unreachable(String),
}

/// A failed fetch: the host it was fetching from (the last redirect's) and why.
#[derive(Debug)]
pub(crate) struct Failed {
    host: String,
    why: Failure,
}

/// `url`'s host and port as it writes them, for messages.
pub(crate) fn host_of(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => url.as_str().to_owned(),
    }
}

impl Failure {
    /// The one-line answer for the item at `at`, fetched from `host`.
    pub(crate) fn message(&self, at: &str, host: &str, fetch: &Fetcher) -> String {
        const SEND: &str = "the image's bytes as base64 or a data URI";
        match self {
            Failure::Host(h) => {
                format!("{at}: {h} is not a host this server fetches images from (--image-url-host): send {SEND}")
            }
            Failure::Https => format!(
                "{at}: https URLs are not fetched, as this server is built without TLS: send an http URL, or {SEND}"
            ),
            Failure::Scheme(scheme) => {
                format!("{at}: {host} redirects to a {scheme}: URL, which this server does not follow: send {SEND}")
            }
            Failure::BadRedirect(code) => {
                format!(
                    "{at}: {host} answered HTTP {code} without a Location to follow: send the image's own URL, or {SEND}"
                )
            }
            Failure::TooManyRedirects => format!(
                "{at}: more than {MAX_REDIRECTS} redirects, the last from {host}: send the image's own URL, or {SEND}"
            ),
            Failure::Status(code, reason) => {
                format!("{at}: {host} answered HTTP {code} {reason}: send a URL that serves the image, or {SEND}")
            }
            Failure::TooLarge => format!(
                "{at}: the image from {host} is larger than {} bytes (--image-url-max-bytes), so the server stopped reading it: send a smaller image",
                fetch.max_bytes
            ),
            Failure::TimedOut { .. } => format!(
                "{at}: fetching from {host} took longer than {} s (--image-url-timeout): retry, or send {SEND}",
                fetch.timeout.as_secs_f64()
            ),
            Failure::Unreachable(reason) => {
                format!("{at}: cannot fetch from {host} ({reason}): send a URL this server can reach, or {SEND}")
            }
        }
    }
}

impl Failed {
    /// The answer: 504 when the request's time ran out first, else 400 naming the item, the host
    /// and what to do.
    fn into_error(self, at: &str, fetch: &Fetcher, request_timeout: Duration) -> ApiError {
        match self.why {
            Failure::TimedOut { request: true } => request_timed_out(request_timeout),
            why => ApiError::bad(why.message(at, &self.host, fetch)),
        }
    }
}

fn request_timed_out(request_timeout: Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        format!(
            "fetching the request's image URLs took longer than {} s (--request-timeout): send fewer URLs per request, or the images' bytes",
            request_timeout.as_secs_f64()
        ),
    )
}

/// Reads at most `limit + 1` bytes of `reader`, never holding room for more, whatever the body
/// claims; `hint` (its Content-Length) sizes the first allocation.
fn read_bounded(reader: &mut impl Read, limit: usize, hint: Option<usize>) -> std::io::Result<Vec<u8>> {
    let most = limit.saturating_add(1);
    let mut bytes = Vec::with_capacity(hint.unwrap_or(64 << 10).min(most));
    let mut chunk = [0u8; 16 << 10];
    while bytes.len() < most {
        let room = (most - bytes.len()).min(chunk.len());
        let n = match reader.read(&mut chunk[..room]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if bytes.capacity() - bytes.len() < n {
            let grown = (bytes.capacity() * 2).max(bytes.len() + n).min(most);
            bytes.reserve_exact(grown - bytes.len());
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    Ok(bytes)
}

/// Whether a transport error is a timeout: ureq's own word for it, or the time is up.
fn timed_out(error: &(dyn std::error::Error + 'static), deadline: Instant) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
        {
            return true;
        }
        cause = e.source();
    }
    Instant::now() >= deadline
}

impl Fetcher {
    /// The fetcher `config` allows, if any.
    pub(crate) fn new(config: &ServerConfig) -> Option<Self> {
        config.allow_image_urls.then(|| Self {
            agent: ureq::AgentBuilder::new()
                .redirects(0)
                .user_agent(concat!("nornir/", env!("CARGO_PKG_VERSION")))
                .build(),
            max_bytes: config.image_url_max_bytes,
            timeout: config.image_url_timeout,
            hosts: config
                .image_url_hosts
                .iter()
                .filter_map(|h| url::Host::parse(h).ok())
                .map(|h| h.to_string())
                .collect(),
        })
    }

    /// `/info`'s account of the fetching.
    pub(crate) fn info(this: Option<&Self>) -> Value {
        match this {
            None => json!({ "fetched": false }),
            Some(f) => json!({
                "fetched": true,
                "schemes": ["http"],
                "max_bytes": f.max_bytes,
                "timeout_s": f.timeout.as_secs_f64(),
                "at_once": AT_ONCE,
                "hosts": if f.hosts.is_empty() { Value::from("any") } else { json!(f.hosts) },
            }),
        }
    }

    /// Refuses a URL the server does not fetch: not http, or on a host off the allow-list.
    pub(crate) fn check(&self, url: &Url) -> Result<(), Failure> {
        match url.scheme() {
            "http" => {}
            "https" => return Err(Failure::Https),
            other => return Err(Failure::Scheme(other.to_owned())),
        }
        let host = url.host().map(|h| h.to_string()).unwrap_or_default();
        if !self.hosts.is_empty() && !self.hosts.contains(&host) {
            return Err(Failure::Host(host));
        }
        Ok(())
    }

    /// The image at `url` (blocking), following up to [`MAX_REDIRECTS`] redirects, each checked
    /// as `url` was; within the fetch's time limit and `request_deadline`, whichever comes first.
    pub(crate) fn fetch(&self, mut url: Url, request_deadline: Instant) -> Result<Vec<u8>, Failed> {
        let started = Instant::now();
        let by_request = request_deadline < started + self.timeout;
        let deadline = if by_request { request_deadline } else { started + self.timeout };
        self.check(&url).map_err(|why| Failed { host: host_of(&url), why })?;
        for _ in 0..=MAX_REDIRECTS {
            let failed = |why| Failed { host: host_of(&url), why };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(failed(Failure::TimedOut { request: by_request }));
            }
            let response = match self.agent.request_url("GET", &url).timeout(left).call() {
                Ok(r) => r,
                Err(ureq::Error::Status(code, r)) => {
                    return Err(failed(Failure::Status(code, r.status_text().to_owned())));
                }
                Err(ureq::Error::Transport(t)) => {
                    if timed_out(&t, deadline) {
                        return Err(failed(Failure::TimedOut { request: by_request }));
                    }
                    let mut reason = t.kind().to_string();
                    if let Some(m) = t.message() {
                        reason = format!("{reason}: {m}");
                    }
                    if let Some(source) = std::error::Error::source(&t) {
                        reason = format!("{reason}: {source}");
                    }
                    return Err(failed(Failure::Unreachable(reason)));
                }
            };
            let status = response.status();
            if (300..400).contains(&status) {
                let next = response.header("location").and_then(|l| url.join(l).ok());
                let next = next.ok_or_else(|| failed(Failure::BadRedirect(status)))?;
                // Named by the host that redirects.
                self.check(&next).map_err(failed)?;
                url = next;
                continue;
            }
            let declared = response.header("content-length").and_then(|l| l.trim().parse::<u64>().ok());
            if declared.is_some_and(|n| n > self.max_bytes as u64) {
                return Err(failed(Failure::TooLarge));
            }
            let hint = declared.and_then(|n| usize::try_from(n).ok());
            let bytes =
                read_bounded(&mut response.into_reader(), self.max_bytes, hint).map_err(|e| {
                    match timed_out(&e, deadline) {
                        true => failed(Failure::TimedOut { request: by_request }),
                        false => failed(Failure::Unreachable(format!("the body broke off: {e}"))),
                    }
                })?;
            if bytes.len() > self.max_bytes {
                return Err(failed(Failure::TooLarge));
            }
            return Ok(bytes);
        }
        Err(Failed { host: host_of(&url), why: Failure::TooManyRedirects })
    }

    /// Fetches `urls` (each with its index and its place in the request), [`AT_ONCE`] at a
    /// time on the blocking threads, all within `request_timeout`; the first failure answers for the
    /// request, and the fetches not started are dropped with it.
    pub(crate) async fn fetch_all(
        self: &Arc<Self>,
        urls: Vec<(usize, Url, String)>,
        request_timeout: Duration,
    ) -> Result<Vec<(usize, Vec<u8>)>, ApiError> {
        let deadline = Instant::now() + request_timeout;
        let mut waiting = urls.into_iter();
        let mut running = tokio::task::JoinSet::new();
        let start = |running: &mut tokio::task::JoinSet<_>, (i, url, at): (usize, Url, String)| {
            let fetch = Arc::clone(self);
            running.spawn_blocking(move || (i, fetch.fetch(url, deadline), at));
        };
        for job in waiting.by_ref().take(AT_ONCE) {
            start(&mut running, job);
        }
        let mut fetched = Vec::new();
        let all = async {
            while let Some(joined) = running.join_next().await {
                let (i, result, at) = joined.map_err(|e| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("fetching an image stopped: {e}"))
                })?;
                fetched.push((i, result.map_err(|f| f.into_error(&at, self, request_timeout))?));
                if let Some(job) = waiting.next() {
                    start(&mut running, job);
                }
            }
            Ok::<_, ApiError>(())
        };
        // Each fetch ends by the deadline itself; this one also bounds a name lookup, which
        // ureq cannot cut short.
        match tokio::time::timeout_at(deadline.into(), all).await {
            Ok(done) => done?,
            Err(_) => return Err(request_timed_out(request_timeout)),
        }
        Ok(fetched)
    }
}

#[cfg(test)]
#[path = "image_urls_tests.rs"]
pub(crate) mod tests;
