//! The parts of the CLI that need the embedder, behind one cfg: with `embed-ort` they load models;
//! without it every entry point says the embedder is not compiled into this build.

#[cfg(feature = "embed-ort")]
mod enabled;
#[cfg(feature = "embed-ort")]
pub use enabled::*;
#[cfg(feature = "embed-ort")]
mod concurrency;
#[cfg(feature = "embed-ort")]
mod errors;
#[cfg(feature = "embed-ort")]
pub use errors::{embed_error_text, oldest_ort};
#[cfg(feature = "embed-ort")]
mod convert_check;
#[cfg(feature = "embed-ort")]
pub use convert_check::check_converted;
#[cfg(feature = "embed-ort")]
mod quantize;
#[cfg(feature = "embed-ort")]
mod serve;
#[cfg(feature = "embed-ort")]
pub use quantize::quantize;
#[cfg(feature = "embed-ort")]
pub use serve::serve;

mod convert;
pub use convert::{ConvertArgs, convert};

#[cfg(not(feature = "embed-ort"))]
mod disabled;
#[cfg(not(feature = "embed-ort"))]
pub use disabled::*;

use std::path::PathBuf;

use crate::ModelArgs;
use crate::output::OutputFormat;
use nornir_cli::input::InputFormat;

/// One `nornir vector embed` run.
#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
pub struct EmbedJob {
    pub texts: Vec<String>,
    pub input: Option<PathBuf>,
    pub input_format: InputFormat,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    pub model: ModelArgs,
    pub long: crate::LongPolicy,
    pub window: Option<usize>,
    pub overlap: Option<usize>,
    pub json: bool,
    pub quiet: bool,
    pub verbose: bool,
}

/// The ONNX Runtime library the plan would load, as `doctor` reports it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct OrtChoice {
    pub path: Option<PathBuf>,
    pub version: Option<String>,
    pub providers: Vec<String>,
    pub reason: String,
    pub candidates: Vec<nornir_vector::diagnostics::OrtCandidate>,
    pub searched: Vec<PathBuf>,
    pub error: Option<String>,
    /// ONNX Runtime's device list with the plugins registered (the second witness).
    #[cfg(feature = "embed-ort")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<nornir_vector::diagnostics::DeviceList>,
}

/// The session part of `doctor`'s report: what really runs the model, or why nothing does. The
/// same type is written by `doctor --json` and read back from the child of `doctor --isolate`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SessionDoc {
    /// Why no session could be built (one line); the fields below are then empty, except
    /// `forced_vendor` and `registrations` when a forced device could not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The device was forced to this vendor and none of its providers could run the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forced_vendor: Option<nornir_vector::Vendor>,
    /// Each provider's registration and preflight.
    #[cfg(feature = "embed-ort")]
    pub registrations: Vec<nornir_vector::diagnostics::Registration>,
    /// The provider running the model, as ONNX Runtime names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_provider: Option<String>,
    /// Where the model really runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_vendor: Option<nornir_vector::Vendor>,
    /// For a plugin provider: its device, library, vendor and device id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_device: Option<nornir_vector::diagnostics::EpDevice>,
    /// Why the session was rebuilt on the CPU after a GPU session failed, or why the provider
    /// registered first runs nothing (`unclaimed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Set when the provider registered first claimed none of the model's nodes: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unclaimed: Option<String>,
    #[cfg(feature = "embed-ort")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<nornir_vector::diagnostics::Placement>,
    #[cfg(feature = "embed-ort")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ort: Option<nornir_vector::diagnostics::OrtInfo>,
    #[cfg(feature = "embed-ort")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<nornir_vector::diagnostics::ModelInfo>,
    /// What the model's sessions hold in memory (every session built first).
    #[cfg(feature = "embed-ort")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<nornir_vector::diagnostics::Memory>,
    /// ONNX Runtime's graph optimisation level for the session: `basic` or `all`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_optimization: Option<String>,
    /// How the weights are stored, as far as the folder says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// The CPU extensions ONNX Runtime's int8 kernels can use, best first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_int8_extensions: Vec<String>,
}

impl SessionDoc {
    pub fn failed(error: String) -> Self {
        Self { error: Some(error), ..Self::default() }
    }
}
