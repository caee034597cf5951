//! `nornir-convert`: a model brought as its weights becomes a folder nornir loads. It reads
//! `config.json` and `model.safetensors` (float32, float16, bfloat16 or float64 tensors; or the
//! shards of `model.safetensors.index.json`; or, where there are none, the PyTorch checkpoint
//! `pytorch_model.bin` or the shards of `pytorch_model.bin.index.json`, read without running
//! its pickle) and writes `model.onnx`: a BERT or XLM-RoBERTa
//! encoder, with the masked-LM head (SPLADE) or the sequence-classification head (cross-encoders)
//! where `config.json`'s `architectures` names one. The tokenizer and sentence-transformers files
//! are copied beside it, and `conversion.json` records the source files' hashes and the graph.
//!
//! It is not an exporter of arbitrary PyTorch code: the graph is written from the published
//! definitions of these architectures, so any other architecture is refused by name. It knows
//! nothing of ONNX Runtime and runs nothing; the tests run what it writes against independent
//! reference implementations. The output folder is written under a temporary name and renamed
//! into place only when complete.
//!
//! The conversion is the `build` feature (on by default). Without it the crate is its config
//! reading and its registry of families, on serde alone: [`identify`] tells what a `config.json`
//! is (the family's name, whether it is a causal decoder) for a reader that converts nothing,
//! the embedder describing a folder.

#![forbid(unsafe_code)]
// Without `build`, the config reading is compiled for `identify` alone, and what only the graph
// builders read of it is unused.
#![cfg_attr(not(feature = "build"), allow(dead_code))]

mod config;
mod error;
mod families;

#[cfg(feature = "build")]
mod colbert;
#[cfg(feature = "build")]
mod conversion;
#[cfg(feature = "build")]
mod folder;
#[cfg(feature = "build")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "build")]
mod graph;
#[cfg(feature = "build")]
mod model_card;
#[cfg(feature = "build")]
mod network;
#[cfg(feature = "build")]
mod text_file;
#[cfg(feature = "build")]
mod torch;
#[cfg(feature = "build")]
mod weights;

/// The ONNX message types (generated from the quantizer's `proto/onnx_subset.proto`).
#[cfg(feature = "build")]
#[allow(clippy::all, clippy::pedantic, clippy::restriction, missing_debug_implementations, unused_qualifications)]
mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx/mod.rs"));
    pub use onnx_subset::*;
}

pub use config::Head;
#[cfg(feature = "build")]
pub use conversion::{Conversion, ConvertOptions, RerankerBy, SourceFile};
pub use error::ConvertError;
pub use families::{Identity, identify};
#[cfg(feature = "build")]
pub use folder::convert;
#[cfg(feature = "build")]
pub use graph::WeightDtype;

/// Every architecture name `config.json`'s `architectures` may give, family by family.
pub fn supported_architectures() -> impl Iterator<Item = &'static str> {
    families::supported_architectures()
}
