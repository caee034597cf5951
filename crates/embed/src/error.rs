//! The embedder's errors. Every message says what went wrong and what to do.

use std::path::PathBuf;

use nornir_ep_select::Vendor;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    #[error(
        "no ONNX Runtime library found; searched: {searched}. Run `cargo xtask fetch`, or set ORT_DYLIB_PATH to a libonnxruntime.so"
    )]
    NoOrtLibrary { searched: String },

    #[error("{0}: point ORT_DYLIB_PATH (or --ort-lib) at a libonnxruntime.so file, or unset it to let nornir search")]
    ExplicitOrtUnusable(String),

    #[error(
        "this process already loaded ONNX Runtime from {loaded}; it cannot load {requested} as well (one ONNX Runtime per process): use the same library for every embedder, or another process"
    )]
    OrtAlreadyLoaded { loaded: PathBuf, requested: PathBuf },

    #[error(
        "{path}: cannot be loaded as ONNX Runtime: {reason}. Point ORT_DYLIB_PATH / --ort-lib at a libonnxruntime.so (1.22 or newer)"
    )]
    OrtLoad { path: PathBuf, reason: String },

    #[error(
        "{path} is ONNX Runtime {version}, older than 1.22, the oldest this build supports. Use a newer build (`cargo xtask fetch` provides 1.31.1)"
    )]
    OrtTooOld { path: PathBuf, version: String },

    #[error("{0}")]
    DeviceRefused(String),

    #[error(
        "the device was forced to {vendor}, but no {vendor} provider could be used: {details}. Use --device auto to fall back to the CPU, or fix the cause above (`nornir vector doctor`)"
    )]
    ForcedDeviceFailed {
        vendor: Vendor,
        details: String,
        /// Each provider's registration and preflight, when the failure came while building a
        /// session (empty for a failure at run time): what `doctor --json` reports.
        registrations: Vec<crate::session::Registration>,
    },

    #[error("model folder {dir}: {reason}")]
    Model { dir: PathBuf, reason: String },

    #[error(
        "tokenizer {path}: {}. It must be the model's own Hugging Face tokenizer.json (tokenizer.save_pretrained); re-download or re-export it",
        .reason.trim_end_matches('.')
    )]
    Tokenizer { path: PathBuf, reason: String },

    #[error(
        "ONNX Runtime could not create a session for {model}: {}. Check that it is a complete ONNX model (re-download or re-export it)",
        .reason.trim_end_matches('.')
    )]
    Session { model: PathBuf, reason: String },

    #[error("inference failed: {0}")]
    Inference(String),

    #[error("invalid option: {0}")]
    InvalidOption(String),

    #[error(
        "the embedder is overloaded: {queued} texts are waiting (limit {limit}); retry shortly, or raise max_queued_texts"
    )]
    Overloaded { queued: usize, limit: usize },
}

pub type Result<T, E = EmbedError> = std::result::Result<T, E>;
