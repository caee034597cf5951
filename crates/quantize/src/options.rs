//! The options of the int8 rewrite: the scales' granularity, the activations' scheme, the weight
//! type, the fusions, and [`QuantizeOptions`] that holds them.

use serde::Serialize;

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
    /// decided when [`quantize`](crate::quantize) runs, never in `Default`. Reports name the type chosen.
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
/// activations, smoothing 0.5, and [`WeightType::Auto`], which [`quantize`](crate::quantize) decides for the CPU it
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
    /// [`calibration_model`](crate::calibration_model) on sample texts. Without it, smoothing estimates a LayerNorm output's
    /// channel `j` as `|gamma_j| + |beta_j|` (measured less accurate).
    pub channel_max: std::collections::HashMap<String, Vec<f32>>,
    /// Nodes to keep in float32: a node whose name or weight name contains any of these.
    pub keep_fp32: Vec<String>,
    /// Subgraphs to replace by one ONNX Runtime operator each: [`Fusion::DEFAULT`] by default.
    pub fusions: Vec<Fusion>,
    /// [`quantize_external`](crate::quantize_external) returns the large weights as external data even where they would fit
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
