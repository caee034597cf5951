//! The parts of the CLI that need the embedder, behind one cfg: with `embed-ort` they load models;
//! without it every entry point says the embedder is not compiled into this build.

#[cfg(feature = "embed-ort")]
mod bench;
#[cfg(feature = "embed-ort")]
mod embed;
#[cfg(feature = "embed-ort")]
mod load;
#[cfg(feature = "embed-ort")]
mod ort;
#[cfg(feature = "embed-ort")]
pub use bench::bench;
#[cfg(feature = "embed-ort")]
pub use embed::embed;
#[cfg(feature = "embed-ort")]
mod compact;
#[cfg(feature = "embed-ort")]
mod images;
#[cfg(feature = "embed-ort")]
mod multi_vector;
#[cfg(feature = "embed-ort")]
mod retrieval;
#[cfg(feature = "embed-ort")]
mod source;
#[cfg(feature = "embed-ort")]
mod summary;
#[cfg(feature = "embed-ort")]
pub use load::load;
#[cfg(feature = "embed-ort")]
pub use ort::{listed_devices, offer_plugin_probe, ort_choice, ort_pick, plan, probe_plugin};
#[cfg(feature = "embed-ort")]
pub use retrieval::{predict, rerank};
#[cfg(feature = "embed-ort")]
mod concurrency;
#[cfg(feature = "embed-ort")]
mod errors;
#[cfg(feature = "embed-ort")]
pub use errors::{embed_error_text, oldest_ort};
#[cfg(feature = "embed-ort")]
mod convert_check;
#[cfg(feature = "embed-ort")]
pub use convert_check::convert_folder;
#[cfg(feature = "embed-ort")]
mod quantize;
#[cfg(feature = "embed-ort")]
mod serve;
#[cfg(feature = "embed-ort")]
pub use quantize::quantize;
#[cfg(feature = "embed-ort")]
pub use serve::serve;

mod convert;
pub use convert::convert;

#[cfg(not(feature = "embed-ort"))]
mod disabled;
#[cfg(not(feature = "embed-ort"))]
pub use disabled::*;

use std::path::PathBuf;

use crate::args::ModelArgs;
use crate::output::OutputFormat;
use nornir_cli::input::InputFormat;

/// One `nornir vector embed` run.
#[cfg_attr(not(feature = "embed-ort"), allow(dead_code))]
pub struct EmbedJob {
    pub texts: Vec<String>,
    /// A file of image paths, one a line (a dual encoder's image vectors).
    pub images: Option<PathBuf>,
    pub input: Option<PathBuf>,
    pub input_format: InputFormat,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    pub model: ModelArgs,
    pub long: nornir_vector::LongInputs,
    pub window: Option<usize>,
    pub overlap: Option<usize>,
    pub sparse: crate::args::SparseArgs,
    pub multi_vector: crate::args::MultiVectorArgs,
    pub compact: crate::args::CompactArgs,
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

/// A library error in this command's words (its flags, its commands), where it has them.
fn surface_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    convert::convert_error_text(e).or_else(|| embed_error_text(e))
}

/// An error and its causes on one line, outermost first, joined by `": "` (ONNX Runtime's
/// messages can span lines). Each error says only what failed at its layer, so each cause appears
/// once; the embedder's errors are said in this command's words (its flags, its advice).
pub fn error_line(e: &anyhow::Error) -> String {
    let links: Vec<String> = e.chain().map(|cause| surface_text(cause).unwrap_or_else(|| cause.to_string())).collect();
    links.join(": ").split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_line_prints_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(io).context("reading a.txt").context("loading the corpus");
        assert_eq!(error_line(&e), "loading the corpus: reading a.txt: no such file");
        let e = anyhow::Error::new(std::io::Error::other("line one\nline two")).context("reading");
        assert_eq!(error_line(&e), "reading: line one line two");
        // A library text is not rewritten: only typed errors are said with the flags.
        let e = anyhow::Error::msg("invalid `dim`: plain text");
        assert_eq!(error_line(&e), "invalid `dim`: plain text");
    }
}
