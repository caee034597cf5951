//! `nornir-quantize`: int8 for the CPU. Rewrites an ONNX model so that every `MatMul` and `Gemm`
//! whose weight is a constant (a float32 initializer, or int8 initializers that the graph
//! dequantizes through `Cast` and `Mul` or `DequantizeLinear`) runs in int8: the weight stored as
//! int8 with a scale per output column (or one per tensor), the activations quantized on the fly.
//! `Gather` from an int8 table that the graph dequantizes gathers the int8 rows first and
//! dequantizes only those.
//!
//! Activations get one scale per token by default ([`Activations::PerToken`]): each row of a
//! MatMul's input is scaled by its own largest magnitude, so a text's vector is the same alone or
//! in any batch. ONNX Runtime's fused `com.microsoft.DynamicQuantizeMatMul` takes one scale for
//! the whole input, padding and neighbouring texts included ([`Activations::PerTensor`]).
//!
//! It is a graph-to-graph rewrite on the ONNX protobuf (rust-protobuf, with the fields it does not
//! touch kept as they were), and nothing else: it knows nothing of ONNX Runtime sessions, runs
//! nothing, and does no I/O. What the rewrite costs in quality is measured above it, by the
//! command that runs both models (`nornir vector quantize`).

#![forbid(unsafe_code)]

mod external;
mod fuse;
mod graph;
mod rewrite;
mod tensor;
mod weight;

/// The ONNX message types the quantizer reads and writes (generated from
/// `proto/onnx_subset.proto`). The tests include the same generated file to build their graphs.
#[allow(clippy::all, clippy::pedantic, clippy::restriction, missing_debug_implementations, unused_qualifications)]
mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx/mod.rs"));
    pub use onnx_subset::*;
}

use serde::Serialize;

use protobuf::Message;

use crate::graph::{MS_DOMAIN, initializer_bytes};
use crate::onnx::{ModelProto, OperatorSetIdProto};
use crate::rewrite::Rewriter;

pub use external::{MAX_INLINE_WEIGHT_BYTES, ReadExternal};
pub use rewrite::{CALIBRATION_OUTPUT, calibration_model};

/// Rewrites `model` (the bytes of an .onnx file) for int8 on the CPU. Returns the new model's
/// bytes and what was done; a model with no constant-weight MatMul or Gemm is an error that says
/// why each candidate was left alone. A model whose weights are in an external data file needs
/// [`quantize_external`], which is given a way to read it.
pub fn quantize(model: &[u8], options: &QuantizeOptions) -> Result<(Vec<u8>, QuantizeReport), QuantizeError> {
    let mut m = parse(model)?;
    let report = rewrite_model(&mut m, None, options)?;
    Ok((m.write_to_bytes().map_err(QuantizeError::Write)?, report))
}

/// [`quantize`] for a model whose weights may live in external data files (ONNX's form for models
/// over 2 GB, such as a converted decoder's `model.onnx_data`): `read` reads them (this crate
/// does no I/O). Where the rewritten weights still pass [`MAX_INLINE_WEIGHT_BYTES`] (or
/// [`QuantizeOptions::external_data`] asks), the large
/// ones are returned as [`Quantized::data`], to be written beside the model as `data_file`, which
/// the model then names; else everything is in [`Quantized::model`].
pub fn quantize_external(
    model: &[u8],
    read: &mut ReadExternal<'_>,
    data_file: &str,
    options: &QuantizeOptions,
) -> Result<(Quantized, QuantizeReport), QuantizeError> {
    let mut m = parse(model)?;
    let report = rewrite_model(&mut m, Some(read), options)?;
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    let data = if options.external_data || initializer_bytes(graph) > MAX_INLINE_WEIGHT_BYTES {
        external::externalize(graph, data_file)
    } else {
        Vec::new()
    };
    Ok((Quantized { model: m.write_to_bytes().map_err(QuantizeError::Write)?, data }, report))
}

/// What [`quantize_external`] writes: the model and, where its weights are too large for one
/// file, the external data its large tensors point to (empty when there is none).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Quantized {
    pub model: Vec<u8>,
    pub data: Vec<u8>,
}

fn parse(model: &[u8]) -> Result<ModelProto, QuantizeError> {
    ModelProto::parse_from_bytes(model).map_err(QuantizeError::NotOnnx)
}

/// The rewrite itself, on a parsed model whose external weights `read` reads first (`None`: a
/// model given as bytes alone, whose weights must all be inside).
fn rewrite_model(
    m: &mut ModelProto,
    read: Option<&mut ReadExternal<'_>>,
    options: &QuantizeOptions,
) -> Result<QuantizeReport, QuantizeError> {
    let opset = m
        .opset_import
        .iter()
        .filter(|o| matches!(o.domain.as_deref().unwrap_or_default(), "" | "ai.onnx"))
        .filter_map(|o| o.version)
        .max()
        .unwrap_or(0);
    if opset < 10 {
        return Err(QuantizeError::UnsupportedOpset(opset));
    }
    let graph = m.graph.as_mut().ok_or(QuantizeError::NoGraph)?;
    external::inline(graph, read)?;
    let before = initializer_bytes(graph);
    let nodes_before = graph.node.len();
    let mut r = Rewriter::new(graph, options, opset);
    r.run()?;
    let (rewritten, kept_fp32, int8_gathers) = (r.rewritten, r.kept, r.gathers);
    if rewritten.is_empty() && int8_gathers.is_empty() {
        let why = if kept_fp32.is_empty() {
            "the graph has no MatMul or Gemm node".to_owned()
        } else {
            kept_fp32.iter().map(|k| format!("{} {}: {}", k.op, k.node, k.reason)).collect::<Vec<_>>().join("; ")
        };
        return Err(QuantizeError::NothingToQuantize(why));
    }
    let fused = fuse::fuse(graph, &options.fusions, opset);
    let after = initializer_bytes(graph);
    let nodes_after = graph.node.len();
    if !m.opset_import.iter().any(|o| o.domain.as_deref() == Some(MS_DOMAIN)) {
        let mut ms = OperatorSetIdProto::new();
        ms.domain = Some(MS_DOMAIN.to_owned());
        ms.version = Some(1);
        m.opset_import.push(ms);
    }
    Ok(QuantizeReport {
        rewritten,
        kept_fp32,
        int8_gathers,
        fused,
        nodes_before,
        nodes_after,
        opset,
        weight_bytes_before: before,
        weight_bytes_after: after,
    })
}

impl std::str::FromStr for Activations {
    type Err = String;
    /// `per-token` or `per-tensor`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "per-token" => Ok(Self::PerToken),
            "per-tensor" => Ok(Self::PerTensor),
            other => Err(format!("{other:?} is not an activation scheme: use per-token or per-tensor")),
        }
    }
}

impl std::str::FromStr for WeightType {
    type Err = String;
    /// `auto`, `int8` or `uint8`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "int8" => Ok(Self::Int8),
            "uint8" => Ok(Self::Uint8),
            other => Err(format!("{other:?} is not a weight type: use auto, int8 or uint8")),
        }
    }
}

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

/// How the float input of each int8 MatMul is quantized while the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Activations {
    /// One symmetric scale per row (token): its largest magnitude maps to 127, zero to the
    /// uint8 zero point 128 (`QuantizeLinear` of the row times its reciprocal scale, then
    /// `com.microsoft.MatMulIntegerToFloat` with the row scales). A row's result depends on that
    /// row alone.
    #[default]
    PerToken,
    /// One asymmetric scale for the whole input tensor, found at run time by
    /// `com.microsoft.DynamicQuantizeMatMul`: every row's rounding depends on the other rows of
    /// the batch and on its padding.
    PerTensor,
}

impl Activations {
    /// The ONNX Runtime operator that multiplies, as written in the rewritten graph.
    pub fn operator(self) -> &'static str {
        match self {
            Activations::PerToken => "com.microsoft.MatMulIntegerToFloat",
            Activations::PerTensor => "com.microsoft.DynamicQuantizeMatMul",
        }
    }

    /// What the scheme is, in a sentence for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Activations::PerToken => {
                "uint8, symmetric (zero point 128), one scale per token computed at run time: a text's vector does not depend on its batch"
            }
            Activations::PerTensor => {
                "uint8, asymmetric, one scale per input tensor computed at run time: a text's vector depends on the other texts of its batch"
            }
        }
    }
}

/// How the int8 weights are stored, which decides the CPU kernel ONNX Runtime multiplies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum WeightType {
    /// Whichever of the two the CPU that quantizes is fast with: [`WeightType::for_this_cpu`],
    /// decided when [`quantize`] runs, never in `Default`. Reports name the type chosen.
    #[default]
    Auto,
    /// Signed int8 (uint8 activations times int8 weights): the fast kernel on CPUs that multiply
    /// bytes straight into 32-bit sums (AVX-512 VNNI, AVX-VNNI, AMX, ARM). With AVX2 alone, ONNX
    /// Runtime's kernel (`vpmaddubsw`) adds pairs of products in 16 bits first, which saturate
    /// when activations and weights are both large: measured wrong outputs there.
    Int8,
    /// Unsigned: the int8 weights plus 128, with zero point 128 (uint8 times uint8). ONNX
    /// Runtime's kernel widens both to 16 bits before multiplying, so nothing saturates; the
    /// choice for CPUs without VNNI.
    Uint8,
}

impl WeightType {
    /// `Int8` or `Uint8`: `Auto` decided for this CPU.
    pub fn resolved(self) -> Self {
        match self {
            WeightType::Auto => Self::for_this_cpu(),
            chosen => chosen,
        }
    }

    /// `Int8` where this CPU has VNNI (AVX-512 VNNI or AVX-VNNI; AMX CPUs have both), `Uint8`
    /// on any other x86 CPU, and `Int8` elsewhere (ARM's kernels have no 16-bit step).
    pub fn for_this_cpu() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512vnni") || std::arch::is_x86_feature_detected!("avxvnni") {
                WeightType::Int8
            } else {
                WeightType::Uint8
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        WeightType::Int8
    }
}

/// A subgraph that the rewrite replaces by one ONNX Runtime operator (see `fuse.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Fusion {
    /// `x * 0.5 * (1 + erf(x / sqrt 2))` -> `com.microsoft.Gelu`.
    Gelu,
    /// Self-attention over heads (reshape, transpose, scale, `Q Kᵀ`, mask, softmax, `· V`, transpose
    /// back) -> `com.microsoft.MultiHeadAttention`, with the query, key and value biases.
    Attention,
    /// The int8 products that read the same quantized input (a layer's query, key and value) ->
    /// one product of their weights side by side, then a `Split`. Not in the default: measured no
    /// faster on an AVX-512 VNNI CPU (docs/int8.md).
    Qkv,
}

impl Fusion {
    pub const ALL: [Fusion; 3] = [Fusion::Gelu, Fusion::Attention, Fusion::Qkv];
    /// What `QuantizeOptions::default()` applies.
    pub const DEFAULT: [Fusion; 2] = [Fusion::Gelu, Fusion::Attention];

    pub fn name(self) -> &'static str {
        match self {
            Fusion::Gelu => "gelu",
            Fusion::Attention => "attention",
            Fusion::Qkv => "qkv",
        }
    }
}

/// What to rewrite and how. `Default` is the same on every machine: per-channel weights, per-token
/// activations, smoothing 0.5, and [`WeightType::Auto`], which [`quantize`] decides for the CPU it
/// runs on.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QuantizeOptions {
    pub granularity: Granularity,
    pub activations: Activations,
    pub weights: WeightType,
    /// SmoothQuant's migration strength alpha for MatMuls fed by a `LayerNormalization` (per-token
    /// activations only): `None` turns it off.
    pub smoothing: Option<f32>,
    /// The largest magnitude of each channel of an activation, by name, measured by running
    /// [`calibration_model`] on sample texts. Without it, smoothing estimates a LayerNorm output's
    /// channel `j` as `|gamma_j| + |beta_j|` (measured less accurate).
    pub channel_max: std::collections::HashMap<String, Vec<f32>>,
    /// Nodes to keep in float32: a node whose name or weight name contains any of these.
    pub keep_fp32: Vec<String>,
    /// Subgraphs to replace by one ONNX Runtime operator each: [`Fusion::DEFAULT`] by default.
    pub fusions: Vec<Fusion>,
    /// [`quantize_external`] returns the large weights as external data even where they would fit
    /// in the model's file.
    pub external_data: bool,
}

impl Default for QuantizeOptions {
    fn default() -> Self {
        QuantizeOptions {
            granularity: Granularity::default(),
            activations: Activations::default(),
            weights: WeightType::Auto,
            smoothing: Some(0.5),
            channel_max: std::collections::HashMap::new(),
            keep_fp32: Vec::new(),
            fusions: Fusion::DEFAULT.to_vec(),
            external_data: false,
        }
    }
}

impl QuantizeOptions {
    pub fn with_granularity(mut self, g: Granularity) -> Self {
        self.granularity = g;
        self
    }
    pub fn with_activations(mut self, a: Activations) -> Self {
        self.activations = a;
        self
    }
    pub fn with_weights(mut self, w: WeightType) -> Self {
        self.weights = w;
        self
    }
    pub fn with_smoothing(mut self, alpha: Option<f32>) -> Self {
        self.smoothing = alpha;
        self
    }
    pub fn with_channel_max(mut self, channel_max: std::collections::HashMap<String, Vec<f32>>) -> Self {
        self.channel_max = channel_max;
        self
    }
    pub fn with_keep_fp32(mut self, patterns: Vec<String>) -> Self {
        self.keep_fp32 = patterns;
        self
    }
    pub fn with_fusions(mut self, fusions: Vec<Fusion>) -> Self {
        self.fusions = fusions;
        self
    }
    pub fn with_external_data(mut self, external: bool) -> Self {
        self.external_data = external;
        self
    }
}

/// The graph [`calibration_model`] makes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CalibrationGraph {
    /// The model's bytes, with the output [`CALIBRATION_OUTPUT`] added.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_same_on_every_machine() {
        assert_eq!(QuantizeOptions::default().weights, WeightType::Auto);
        // `Auto` becomes a concrete type only when it is used, for the CPU it runs on.
        assert_eq!(WeightType::Auto.resolved(), WeightType::for_this_cpu());
        assert_eq!((WeightType::Int8.resolved(), WeightType::Uint8.resolved()), (WeightType::Int8, WeightType::Uint8));
    }
}
