//! The embedder's errors. Every message is one line that says what went wrong and what to do.
//!
//! A variant caused by another error (ONNX Runtime's, the tokenizer's, a file's) keeps it as
//! [`source`](std::error::Error::source), typed, and also quotes it in its message on one line, so
//! `{e}` alone is whole. Printing the chain should skip a cause the message already quotes (the
//! CLI does).

use std::path::{Path, PathBuf};

use nornir_ep_select::Vendor;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    #[error(
        "no ONNX Runtime library found; searched: {searched}. Run `cargo xtask fetch`, or set ORT_DYLIB_PATH to a libonnxruntime.so"
    )]
    #[non_exhaustive]
    NoOrtLibrary { searched: String },

    #[error("{0}: point ORT_DYLIB_PATH (or --ort-lib) at a libonnxruntime.so file, or unset it to let nornir search")]
    ExplicitOrtUnusable(String),

    #[error(
        "this process already loaded ONNX Runtime from {loaded}; it cannot load {requested} as well (one ONNX Runtime per process): use the same library for every embedder, or another process"
    )]
    #[non_exhaustive]
    OrtAlreadyLoaded { loaded: PathBuf, requested: PathBuf },

    #[error(
        "{path}: cannot be loaded as ONNX Runtime: {reason}. Point ORT_DYLIB_PATH / --ort-lib at a libonnxruntime.so (1.22 or newer)"
    )]
    #[non_exhaustive]
    OrtLoad {
        path: PathBuf,
        reason: String,
        /// `ort`'s error loading or initialising the library.
        #[source]
        source: Option<Cause>,
    },

    #[error(
        "{path} is ONNX Runtime {version}, older than 1.22, the oldest this build supports. Use a newer build (`cargo xtask fetch` provides 1.31.1)"
    )]
    #[non_exhaustive]
    OrtTooOld { path: PathBuf, version: String },

    #[error("{0}")]
    DeviceRefused(String),

    #[error(
        "the device was forced to {vendor}, but no {vendor} provider could be used: {details}. Use --device auto to fall back to the CPU, or fix the cause above (`nornir vector doctor`)"
    )]
    #[non_exhaustive]
    ForcedDeviceFailed {
        vendor: Vendor,
        details: String,
        /// Each provider's registration and preflight, when the failure came while building a
        /// session (empty for a failure at run time): what `doctor --json` reports.
        registrations: Vec<crate::session::Registration>,
    },

    #[error("model folder {dir}: {reason}")]
    #[non_exhaustive]
    Model {
        dir: PathBuf,
        reason: String,
        /// A file that could not be read, a config that does not parse, or the embedder's error
        /// on the first test text.
        #[source]
        source: Option<Cause>,
    },

    #[error(
        "tokenizer {path}: {}. It must be the model's own Hugging Face tokenizer.json (tokenizer.save_pretrained); re-download or re-export it",
        .reason.trim_end_matches('.')
    )]
    #[non_exhaustive]
    Tokenizer {
        path: PathBuf,
        reason: String,
        #[source]
        source: Option<tokenizers::Error>,
    },

    #[error(
        "ONNX Runtime could not create a session for {model}: {}. Check that it is a complete ONNX model (re-download or re-export it)",
        .reason.trim_end_matches('.')
    )]
    #[non_exhaustive]
    Session {
        model: PathBuf,
        reason: String,
        #[source]
        source: Option<ort::Error>,
    },

    #[error("inference failed: {reason}")]
    #[non_exhaustive]
    Inference {
        reason: String,
        /// ONNX Runtime's error running the graph, the tokenizer's, or the system's.
        #[source]
        source: Option<Cause>,
    },

    #[error("invalid option: {0}")]
    InvalidOption(String),

    #[error(
        "text {index} has {}{tokens} tokens, more than the {max_length} the model reads: shorten it, or let the call truncate it",
        if *.exact { "" } else { "more than " }
    )]
    #[non_exhaustive]
    TooLong {
        /// Its place in the call.
        index: usize,
        /// Its tokens with the prompt and the special tokens; a lower bound when `exact` is false
        /// (a text of megabytes is not tokenized whole to count them).
        tokens: usize,
        exact: bool,
        max_length: usize,
    },

    #[error(
        "the embedder is overloaded: {queued} texts are waiting (limit {limit}); retry shortly, or raise max_queued_texts"
    )]
    #[non_exhaustive]
    Overloaded { queued: usize, limit: usize },

    #[error(
        "the embedder is overloaded: the texts queued ahead would take about {:.1} s, more than this call's max_wait of {:.1} s; retry shortly",
        .expected.as_secs_f64(),
        .max_wait.as_secs_f64()
    )]
    #[non_exhaustive]
    WaitTooLong { expected: std::time::Duration, max_wait: std::time::Duration },

    /// The call's [`CancelHandle`](crate::CancelHandle) was used before it finished.
    #[error("the call was cancelled through its CancelHandle")]
    Cancelled,
}

pub type Result<T, E = EmbedError> = std::result::Result<T, E>;

/// The cause an [`EmbedError`] keeps when it can be of several types (downcast it to
/// `ort::Error`, `std::io::Error`, `EmbedError`, ...).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error's text on one line (ONNX Runtime's messages can span several).
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl EmbedError {
    pub(crate) fn model(dir: &Path, reason: impl Into<String>) -> Self {
        Self::Model { dir: dir.to_path_buf(), reason: reason.into(), source: None }
    }

    /// `what` failed because of `cause`, quoted after it.
    pub(crate) fn model_because(dir: &Path, what: &str, cause: impl Into<Cause>) -> Self {
        let cause = cause.into();
        Self::Model {
            dir: dir.to_path_buf(),
            reason: format!("{what}: {}", one_line(&cause.to_string())),
            source: Some(cause),
        }
    }

    pub(crate) fn tokenizer(path: &Path, reason: impl Into<String>) -> Self {
        Self::Tokenizer { path: path.to_path_buf(), reason: reason.into(), source: None }
    }

    pub(crate) fn tokenizer_because(path: &Path, cause: tokenizers::Error) -> Self {
        Self::Tokenizer { path: path.to_path_buf(), reason: one_line(&cause.to_string()), source: Some(cause) }
    }

    pub(crate) fn session_because(model: &Path, cause: impl Into<ort::Error>) -> Self {
        let cause = cause.into();
        Self::Session { model: model.to_path_buf(), reason: one_line(&cause.to_string()), source: Some(cause) }
    }

    pub(crate) fn ort_load(path: &Path, reason: impl Into<String>) -> Self {
        Self::OrtLoad { path: path.to_path_buf(), reason: reason.into(), source: None }
    }

    pub(crate) fn ort_load_because(path: &Path, cause: impl Into<Cause>) -> Self {
        let cause = cause.into();
        Self::OrtLoad { path: path.to_path_buf(), reason: one_line(&cause.to_string()), source: Some(cause) }
    }

    pub(crate) fn inference(reason: impl Into<String>) -> Self {
        Self::Inference { reason: reason.into(), source: None }
    }

    /// `what` failed because of `cause`, quoted after it (`what` empty: the cause alone).
    pub(crate) fn inference_because(what: &str, cause: impl Into<Cause>) -> Self {
        let cause = cause.into();
        let text = one_line(&cause.to_string());
        let reason = if what.is_empty() { text } else { format!("{what}: {text}") };
        Self::Inference { reason, source: Some(cause) }
    }
}
