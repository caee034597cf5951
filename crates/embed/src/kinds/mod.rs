//! One module per kind of model and what its calls make: the embedder's compact vectors
//! (`compact`, `compact_calls`), the sparse encoder's (`sparse`, `sparse_calls`), the
//! multi-vector model's token vectors and MaxSim (`multi_vector`, `multi_vector_calls`), the
//! cross-encoder's scores and rankings (`rerank`), a dual encoder's images (`image`,
//! `image_calls`). Each `*_calls` file holds that kind's methods
//! on the `Embedder`, and the state a kind needs (token rules, BGE-M3's sparse head, calibrated
//! ranges) is the embedder's, not the engine's. What is left below: the workers apply the
//! folder's Dense modules to pooled rows, and a token call's queue items carry their attended
//! length and its rows their token ids.

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
