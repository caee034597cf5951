//! nornir's own CPU kernels: plain Rust over slices, without ONNX Runtime (the embedder registers
//! them as operators). [`alibi_attention`] is JinaBERT's attention in tiles with an online
//! softmax: memory holds one tile of scores per thread, never the queries x keys matrix.

mod alibi;
mod lanes;

pub use alibi::{AlibiInputs, AttentionShapeError, alibi_attention};
