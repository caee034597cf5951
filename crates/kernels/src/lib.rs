//! nornir's own CPU kernels: plain Rust over slices, without ONNX Runtime (the embedder registers
//! them as operators). [`alibi_attention`] is JinaBERT's attention in tiles with an online
//! softmax: memory holds one tile of scores per thread, never the queries x keys matrix, and a
//! steep head skips the keys too far away to count; [`attention`] is the same without ALiBi's
//! bias (every other family's global layers), and [`window_attention`] the same over a sliding
//! window's band of keys (ModernBERT's local layers).

mod alibi;
mod lanes;

pub use alibi::{AlibiInputs, AttentionInputs, AttentionShapeError, alibi_attention, attention, window_attention};
