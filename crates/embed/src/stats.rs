//! What an embedder has done: counters shared by its sessions, read as [`EmbedStats`].

use std::sync::atomic::AtomicU64;

use serde::Serialize;

/// Counters since the embedder was built (or since [`Embedder::reset_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EmbedStats {
    pub texts: u64,
    pub batches: u64,
    /// Real tokens, after truncation.
    pub tokens: u64,
    /// Tokens fed to the model, padding included.
    pub padded_tokens: u64,
    /// Seconds spent inside `Session::run`.
    pub ort_seconds: f64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) texts: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) tokens: AtomicU64,
    pub(crate) padded_tokens: AtomicU64,
    pub(crate) ort_nanos: AtomicU64,
}
