//! The parts of the CLI that need the embedder, behind one cfg: with `embed-ort` they load models;
//! without it every entry point says the embedder is not compiled into this build.

#[cfg(feature = "embed-ort")]
mod enabled;
#[cfg(feature = "embed-ort")]
pub use enabled::*;
#[cfg(feature = "embed-ort")]
mod concurrency;
#[cfg(feature = "embed-ort")]
mod quantize;
#[cfg(feature = "embed-ort")]
mod serve;
#[cfg(feature = "embed-ort")]
pub use quantize::quantize;
#[cfg(feature = "embed-ort")]
pub use serve::serve;

#[cfg(not(feature = "embed-ort"))]
mod disabled;
#[cfg(not(feature = "embed-ort"))]
pub use disabled::*;

use std::path::PathBuf;

use crate::ModelArgs;
use crate::input::InputFormat;
use crate::output::OutputFormat;

/// One `nornir vector embed` run.
#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
pub struct EmbedJob {
    pub texts: Vec<String>,
    pub input: Option<PathBuf>,
    pub input_format: InputFormat,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    pub model: ModelArgs,
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
    pub candidates: Vec<nornir_vector::gpu_probe::OrtCandidate>,
    pub searched: Vec<PathBuf>,
    pub error: Option<String>,
}
