//! Results by kind: rows pooled, put through Dense modules and normalised (embedder), sparse vectors (sparse encoder),
//! activated scores and rankings (cross-encoder), compact vectors; the rows a call gets back.

pub(crate) mod compact;
pub(crate) mod compact_calls;
pub(crate) mod multi_vector;
pub(crate) mod multi_vector_calls;
pub(crate) mod rerank;
pub(crate) mod sparse;
pub(crate) mod sparse_calls;
