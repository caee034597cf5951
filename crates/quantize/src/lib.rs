//! `nornir-quantize`: int8 for the CPU. Rewrites an ONNX model so that every `MatMul` and `Gemm`
//! whose weight is a constant (a float32 initializer, or int8 initializers that the graph
//! dequantizes through `Cast` and `Mul` or `DequantizeLinear`) runs as ONNX Runtime's dynamic int8
//! operator `com.microsoft.DynamicQuantizeMatMul`: the weight stored as int8 with a scale per
//! output column (or one per tensor), the activations quantized on the fly. `Gather` from an int8
//! table that the graph dequantizes gathers the int8 rows first and dequantizes only those.
//!
//! It is a graph-to-graph rewrite on the ONNX protobuf (rust-protobuf, with the fields it does not
//! touch kept as they were), and nothing else: it knows nothing of ONNX Runtime sessions, runs
//! nothing, and does no I/O. What the rewrite costs in quality is measured above it, by the
//! command that runs both models (`nornir vector quantize`).

#![forbid(unsafe_code)]

mod rewrite;
mod tensor;

/// The ONNX message types the quantizer reads and writes (generated from
/// `proto/onnx_subset.proto`); public for the tests' fixture graphs, not an API.
#[doc(hidden)]
#[allow(clippy::all, clippy::pedantic, clippy::restriction, missing_debug_implementations, unused_qualifications)]
pub mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx/mod.rs"));
    pub use onnx_subset::*;
}

use serde::Serialize;

pub use rewrite::quantize;

/// One scale for a whole weight, or one per output column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Granularity {
    /// One scale per output column: measured closer to fp32 at the same speed.
    #[default]
    PerChannel,
    PerTensor,
}

/// What to rewrite and how.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct QuantizeOptions {
    pub granularity: Granularity,
    /// Nodes to keep in float32: a node whose name or weight name contains any of these.
    pub keep_fp32: Vec<String>,
}

impl QuantizeOptions {
    pub fn with_granularity(mut self, g: Granularity) -> Self {
        self.granularity = g;
        self
    }
    pub fn with_keep_fp32(mut self, patterns: Vec<String>) -> Self {
        self.keep_fp32 = patterns;
        self
    }
}

/// One node that now runs in int8.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Rewritten {
    pub node: String,
    pub op: String,
    pub weight: String,
    /// `[K, N]`: input features by output features.
    pub shape: [usize; 2],
    /// Where the int8 weight came from.
    pub source: String,
    pub granularity: Granularity,
    /// Whether a following `Add` of a constant bias was folded into the int8 operator.
    pub bias_folded: bool,
}

/// One node left in float32, and why.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Kept {
    pub node: String,
    pub op: String,
    pub reason: String,
}

/// What `quantize` did.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct QuantizeReport {
    pub rewritten: Vec<Rewritten>,
    pub kept_fp32: Vec<Kept>,
    /// `Gather` nodes that now read int8 rows and dequantize after gathering.
    pub int8_gathers: Vec<String>,
    /// The model's default-domain opset.
    pub opset: i64,
    /// Weight bytes before (as stored) and after.
    pub weight_bytes_before: usize,
    pub weight_bytes_after: usize,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantizeError {
    #[error("not an ONNX model ({0}); check that it is a complete .onnx file")]
    NotOnnx(#[source] protobuf::Error),
    #[error("the model has no graph; check that it is a complete .onnx file")]
    NoGraph,
    #[error(
        "the model uses opset {0} of the default domain; int8 needs opset 10 or later: re-export the model with a newer opset"
    )]
    UnsupportedOpset(i64),
    #[error(
        "tensor {tensor:?} is stored in an external data file, which the quantizer does not read: re-export the model with its weights inside the .onnx file (under 2 GB)"
    )]
    ExternalData { tensor: String },
    #[error("tensor {tensor:?} is damaged: it {why}")]
    BadTensor { tensor: String, why: String },
    #[error("nothing to quantize: {0}")]
    NothingToQuantize(String),
    #[error("cannot write the quantized model: {0}")]
    Write(#[source] protobuf::Error),
}
