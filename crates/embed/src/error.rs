//! The embedder's errors. Every message is one line that says what went wrong and what to do.
//!
//! A variant caused by another error (ONNX Runtime's, the tokenizer's, a file's) says only what
//! failed at this layer; the cause comes through [`source`](std::error::Error::source), typed,
//! never in the message too, so a printer that walks the chain (anyhow's `{:#}`, eyre, tracing,
//! [`error_chain`]) prints each cause once.

use std::path::{Path, PathBuf};

use nornir_ep_select::Vendor;

use crate::values::{MIN_ORT, Registration};
use nornir_options::ModelKind;

/// Everything the embedder can fail with; match on the variant (and on [`InferenceKind`]), not on
/// the text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// No ONNX Runtime library was found where nornir looks.
    #[error(
        "no ONNX Runtime library found; searched: {}. Set ORT_DYLIB_PATH (or `ort_library`) to a libonnxruntime.so, {}.{} or newer",
        searched_list(.searched, .problems), MIN_ORT.0, MIN_ORT.1
    )]
    #[non_exhaustive]
    NoOrtLibrary {
        /// The folders and files looked at, in order.
        searched: Vec<PathBuf>,
        /// Libraries found but not usable, each with why.
        problems: Vec<String>,
    },

    #[error(
        "{reason}: point ORT_DYLIB_PATH (or `ort_library`) at a libonnxruntime.so file, or unset it to let nornir search"
    )]
    /// The library named by `ORT_DYLIB_PATH` or `ort_library` cannot be used.
    #[non_exhaustive]
    ExplicitOrtUnusable {
        /// Why not.
        reason: String,
    },

    #[error(
        "this process already loaded ONNX Runtime from {loaded}; it cannot load {requested} as well (one ONNX Runtime per process): use the same library for every embedder, or another process"
    )]
    /// Another ONNX Runtime library is already loaded in this process.
    #[non_exhaustive]
    OrtAlreadyLoaded {
        /// The library the process runs.
        loaded: PathBuf,
        /// The one this embedder asked for.
        requested: PathBuf,
    },

    #[error(
        "{path}: cannot be loaded as ONNX Runtime: {reason}; point ORT_DYLIB_PATH or `ort_library` at a libonnxruntime.so ({}.{} or newer)",
        MIN_ORT.0, MIN_ORT.1
    )]
    /// The file is not a usable ONNX Runtime library.
    #[non_exhaustive]
    OrtLoad {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
        /// `ort`'s error loading or initialising the library.
        #[source]
        source: Option<Cause>,
    },

    #[error(
        "{path} is ONNX Runtime {version}, older than {}.{}, the oldest this build supports: use a newer build",
        MIN_ORT.0, MIN_ORT.1
    )]
    /// The ONNX Runtime library is older than this build supports.
    #[non_exhaustive]
    OrtTooOld {
        /// The library.
        path: PathBuf,
        /// Its version.
        version: String,
    },

    /// The device asked for cannot be used here, and it was forced (see `reason`).
    #[error("{reason}")]
    #[non_exhaustive]
    DeviceRefused {
        /// The policy's reason.
        reason: String,
    },

    #[error(
        "the device was forced to {vendor}, but no {vendor} provider could be used: {details}. Set `device` to auto to fall back to the CPU, or fix the cause above"
    )]
    /// A forced GPU could not run the model (an automatic choice falls back to the CPU instead).
    #[non_exhaustive]
    ForcedDeviceFailed {
        /// The vendor the device was forced to.
        vendor: Vendor,
        /// What each provider said.
        details: String,
        /// Each provider's registration and preflight, when the failure came while building a
        /// session (empty for a failure at run time): what `doctor --json` reports.
        registrations: Vec<Registration>,
    },

    #[error("model folder {dir}: {reason}")]
    /// The model folder is missing something, or a file in it does not read or fit.
    #[non_exhaustive]
    Model {
        /// The folder.
        dir: PathBuf,
        /// What is wrong, at this layer (the cause is `source`).
        reason: String,
        /// A file that could not be read, a config that does not parse, or the embedder's error
        /// on the first test text.
        #[source]
        source: Option<Cause>,
    },

    #[error(
        "tokenizer {path}: {}; it must be the model's own Hugging Face tokenizer.json (tokenizer.save_pretrained): re-download or re-export it",
        .reason.trim_end_matches('.')
    )]
    /// The folder's tokenizer.json cannot be used.
    #[non_exhaustive]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
        /// The tokenizers crate's error (kept as a [`Cause`], so that its version is not part of
        /// this type).
        #[source]
        source: Option<Cause>,
    },

    #[error(
        "ONNX Runtime could not create a session for {model}; check that it is a complete ONNX model (re-download or re-export it)"
    )]
    /// ONNX Runtime could not build a session for the graph.
    #[non_exhaustive]
    Session {
        /// The graph file.
        model: PathBuf,
        /// ONNX Runtime's error (downcast it to `ort::Error`; kept as a [`Cause`] so that an `ort`
        /// upgrade does not change this type).
        #[source]
        source: Option<Cause>,
    },

    #[error("inference failed{}{reason}", if .reason.is_empty() { "" } else { ": " })]
    /// Embedding failed after the embedder was built.
    #[non_exhaustive]
    Inference {
        /// What failed, for a caller that answers differently (a server: 422 for a text the
        /// tokenizer rejects, 500 for a failed run).
        kind: InferenceKind,
        /// What failed, at this layer (empty when the cause says it all).
        reason: String,
        /// ONNX Runtime's error running the graph, the tokenizer's, or the system's.
        #[source]
        source: Option<Cause>,
    },

    /// Image `index` of an image call could not be read or prepared (not an image, truncated,
    /// over a bound): `reason` says what to do.
    #[error("image {index}: {reason}")]
    #[non_exhaustive]
    BadImage {
        /// The image's place in the call.
        index: usize,
        /// What is wrong with it, and what to do.
        reason: String,
    },

    /// An option of the embedder or of the call (`option`, as the field is named) is out of
    /// range or does not fit the model.
    #[error("invalid `{option}`: {reason}")]
    #[non_exhaustive]
    InvalidOption {
        /// The option's field name (`dim`, `chunking.window`).
        option: &'static str,
        /// What is wrong with its value.
        reason: String,
    },

    #[error(
        "text {index} has {}{tokens} tokens, more than the {max_length} the model reads: shorten it, or let the call truncate it",
        if *.exact { "" } else { "more than " }
    )]
    /// A text is longer than the model reads, and the call refuses truncation.
    #[non_exhaustive]
    TooLong {
        /// Its place in the call.
        index: usize,
        /// Its tokens with the prompt and the special tokens; a lower bound when `exact` is false
        /// (a text of megabytes is not tokenized whole to count them).
        tokens: usize,
        /// Whether `tokens` is the exact count.
        exact: bool,
        /// The most tokens the model reads.
        max_length: usize,
    },

    #[error(
        "the embedder is overloaded: {queued} texts are waiting (limit {limit}); retry shortly, or raise max_queued_texts"
    )]
    /// The queue is full and the embedder refuses rather than waits (`QueueFull::Refuse`).
    #[non_exhaustive]
    Overloaded {
        /// Texts waiting now.
        queued: usize,
        /// `max_queued_texts`.
        limit: usize,
    },

    #[error(
        "the embedder is overloaded: the texts queued ahead would take about {:.1} s, more than this call's max_wait of {:.1} s; retry shortly",
        .expected.as_secs_f64(),
        .max_wait.as_secs_f64()
    )]
    /// The call would wait longer than its `max_wait` (see [`CallOptions`](crate::CallOptions)).
    #[non_exhaustive]
    WaitTooLong {
        /// How long the texts queued ahead, with the call's own, are expected to take.
        expected: std::time::Duration,
        /// The call's bound.
        max_wait: std::time::Duration,
    },

    /// The call's [`CancelHandle`](crate::CancelHandle) was used before it finished.
    #[error("the call was cancelled through its CancelHandle")]
    Cancelled,

    /// A bug in nornir: code of the call panicked. The call fails; the embedder goes on.
    #[error(
        "internal error (a bug in nornir, please report it): {reason}; the embedder goes on, retry or change the input"
    )]
    #[non_exhaustive]
    Internal {
        /// The panic's message.
        reason: String,
    },

    /// The call is for another kind of model ([`ModelKind`]).
    #[error("`{call}` needs a model of kind {wanted}, but this model is {}: call {} on it", .kind.with_article(), .kind.calls().library)]
    #[non_exhaustive]
    WrongKind {
        /// The call refused.
        call: &'static str,
        /// The kind it needs.
        wanted: ModelKind,
        /// The model's kind.
        kind: ModelKind,
    },
}

/// What part of an embedding failed ([`EmbedError::Inference`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InferenceKind {
    /// ONNX Runtime failed running the graph.
    Runtime,
    /// The tokenizer failed on a text (or on ids to decode): the input's fault.
    Tokenizer,
    /// The graph's output has a shape the embedder cannot read.
    OutputShape,
    /// A worker or tokenizing thread could not start, or panicked before the text was done.
    WorkerFailed,
    /// The embedder was dropped with the text still queued.
    EmbedderDropped,
    /// The API was misused (a future polled after it finished).
    Misuse,
}

/// The embedder's result type.
pub type Result<T, E = EmbedError> = std::result::Result<T, E>;

/// The cause an [`EmbedError`] keeps when it can be of several types (downcast it to
/// `ort::Error`, `std::io::Error`, `EmbedError`, ...).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error's text on one line (ONNX Runtime's messages can span several).
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `e` and each of its causes on one line, joined by `": "`, as anyhow's `{:#}` prints them: what
/// a log line, a report or an HTTP answer should carry.
///
/// ```
/// let e = nornir_embed::EmbedError::Cancelled;
/// assert_eq!(nornir_embed::error_chain(&e), e.to_string());
/// ```
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = one_line(&e.to_string());
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = one_line(&c.to_string());
        if !text.is_empty() {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

fn searched_list(searched: &[PathBuf], problems: &[String]) -> String {
    let mut all: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
    all.extend(problems.iter().cloned());
    if all.is_empty() { "nothing".to_owned() } else { all.join(", ") }
}

impl EmbedError {
    /// The error of a call whose thread panicked with `payload` (what `JoinHandle::join` or
    /// `catch_unwind` returns): [`EmbedError::Internal`] with the panic's message.
    pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let reason = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Self::Internal { reason: format!("panicked: {reason}") }
    }

    pub(crate) fn invalid(option: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidOption { option, reason: reason.into() }
    }

    pub(crate) fn model(dir: &Path, reason: impl Into<String>) -> Self {
        Self::Model { dir: dir.to_path_buf(), reason: reason.into(), source: None }
    }

    /// `what` failed because of `cause`.
    pub(crate) fn model_because(dir: &Path, what: &str, cause: impl Into<Cause>) -> Self {
        Self::Model { dir: dir.to_path_buf(), reason: what.to_owned(), source: Some(cause.into()) }
    }

    pub(crate) fn tokenizer(path: &Path, reason: impl Into<String>) -> Self {
        Self::Tokenizer { path: path.to_path_buf(), reason: reason.into(), source: None }
    }

    pub(crate) fn tokenizer_because(path: &Path, cause: tokenizers::Error) -> Self {
        Self::Tokenizer { path: path.to_path_buf(), reason: "cannot be read".to_owned(), source: Some(cause) }
    }

    pub(crate) fn session_because(model: &Path, cause: impl Into<ort::Error>) -> Self {
        Self::Session { model: model.to_path_buf(), source: Some(Box::new(cause.into())) }
    }

    pub(crate) fn ort_load(path: &Path, reason: impl Into<String>) -> Self {
        Self::OrtLoad { path: path.to_path_buf(), reason: reason.into(), source: None }
    }

    pub(crate) fn ort_load_because(path: &Path, what: &str, cause: impl Into<Cause>) -> Self {
        Self::OrtLoad { path: path.to_path_buf(), reason: what.to_owned(), source: Some(cause.into()) }
    }

    pub(crate) fn inference(kind: InferenceKind, reason: impl Into<String>) -> Self {
        Self::Inference { kind, reason: reason.into(), source: None }
    }

    /// `what` failed because of `cause` (`what` empty: nothing to add to "inference failed").
    pub(crate) fn inference_because(kind: InferenceKind, what: &str, cause: impl Into<Cause>) -> Self {
        Self::Inference { kind, reason: what.to_owned(), source: Some(cause.into()) }
    }
}

/// An option refused without a model (`nornir-options`' checks) is the embedder's
/// [`EmbedError::InvalidOption`], word for word.
impl From<nornir_options::InvalidOption> for EmbedError {
    fn from(e: nornir_options::InvalidOption) -> Self {
        Self::InvalidOption { option: e.option, reason: e.reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic is a bug that names itself, never a cancellation.
    #[test]
    fn a_panic_is_an_internal_error_with_its_message() {
        let caught = std::thread::spawn(|| -> () { panic!("index out of bounds: the len is 10 but the index is 10") })
            .join()
            .expect_err("it panicked");
        let e = EmbedError::from_panic(&*caught);
        assert!(matches!(e, EmbedError::Internal { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("internal error") && text.contains("the index is 10"), "{text}");
        let formatted = std::thread::spawn(|| -> () { panic!("{} of {}", 3, 4) }).join().expect_err("it panicked");
        assert!(EmbedError::from_panic(&*formatted).to_string().contains("3 of 4"));
    }
}
