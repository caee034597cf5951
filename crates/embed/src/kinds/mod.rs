//! One module per kind of model: its options, the calls it prepares (pairs, token calls,
//! images), what it makes of its rows (its `Finish`), its methods on the `Embedder`
//! (`*_calls.rs`) and its handle, a view of the `Embedder` with that kind's calls alone (`text`,
//! `sparse_calls`, `rerank_calls`, `multi_vector_handle`, `image_calls`). The state a kind needs
//! (token rules, BGE-M3's sparse head, calibrated ranges) is the embedder's, not the engine's;
//! the queue and the workers see a text's tokens or an image's pixels, never a kind.

pub(crate) mod compact;
pub(crate) mod compact_calls;
pub(crate) mod image;
pub(crate) mod image_calls;
pub(crate) mod multi_vector;
pub(crate) mod multi_vector_calls;
pub(crate) mod multi_vector_handle;
pub(crate) mod multi_vector_tokens;
pub(crate) mod rerank;
pub(crate) mod rerank_calls;
pub(crate) mod sparse;
pub(crate) mod sparse_calls;
pub(crate) mod text;
pub(crate) mod token_vectors;
