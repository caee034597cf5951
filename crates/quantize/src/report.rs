//! What the int8 rewrite reports: each node rewritten, kept or fused, the calibration graph, and
//! the errors.

use serde::Serialize;

use crate::options::{Activations, Fusion, Granularity, WeightType};

/// The graph [`calibration_model`](crate::calibration_model) makes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CalibrationGraph {
    /// The model's bytes, with the output [`CALIBRATION_OUTPUT`](crate::CALIBRATION_OUTPUT) added.
    pub model: Vec<u8>,
    /// Each measured activation's name and width, in the order of the output's channels.
    pub activations: Vec<(String, usize)>,
    /// The external data files the graph points at (as the source model names them, relative to
    /// its folder): the calibration graph must be written beside them.
    pub data_files: Vec<String>,
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
    pub activations: Activations,
    pub weights: WeightType,
    /// Whether a following `Add` of a constant bias was taken into the rewrite (into the int8
    /// operator, or an `Add` of a 1-D constant after it).
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

/// One subgraph replaced by one operator.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Fused {
    pub fusion: Fusion,
    /// The new node's name.
    pub node: String,
}

/// What `quantize` did.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct QuantizeReport {
    pub rewritten: Vec<Rewritten>,
    pub kept_fp32: Vec<Kept>,
    /// `Gather` nodes that now read int8 rows and dequantize after gathering.
    pub int8_gathers: Vec<String>,
    /// Subgraphs replaced by one operator each.
    pub fused: Vec<Fused>,
    /// The node count of the source graph and of the rewritten one.
    pub nodes_before: usize,
    pub nodes_after: usize,
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
        "tensor {tensor:?} is stored in an external data file, which the model's bytes alone do not hold: quantize the model's folder (`nornir vector quantize`, or `quantize_external` with a reader)"
    )]
    ExternalData { tensor: String },
    #[error("tensor {tensor:?} in external data {why}; check that the model's folder is complete")]
    ExternalRead { tensor: String, why: String },
    #[error("tensor {tensor:?} is damaged: it {why}")]
    BadTensor { tensor: String, why: String },
    #[error("nothing to quantize: {0}")]
    NothingToQuantize(String),
    #[error("cannot write the quantized model: {0}")]
    Write(#[source] protobuf::Error),
}
