//! Stand-ins for a build without the `embed-ort` feature.

use anyhow::{Result, bail};

use nornir_vector::diagnostics::EpDevice;

use super::{EmbedJob, OrtChoice};
use crate::args::{BenchArgs, ModelArgs, PredictArgs, QuantizeArgs, RerankArgs, ServeArgs};

pub const NOT_COMPILED: &str =
    "this nornir was built without the ONNX Runtime embedder; rebuild with `--features embed-ort` (the default)";

/// Without the embedder no ONNX Runtime is loaded at all.
pub fn oldest_ort() -> Option<(u64, u64)> {
    None
}

/// Without the embedder no error is the embedder's.
pub fn embed_error_text(_: &(dyn std::error::Error + 'static)) -> Option<String> {
    None
}

pub fn embed(_: &EmbedJob) -> Result<()> {
    bail!(NOT_COMPILED)
}

pub fn rerank(_: &RerankArgs) -> Result<()> {
    bail!(NOT_COMPILED)
}

pub fn predict(_: &PredictArgs) -> Result<()> {
    bail!(NOT_COMPILED)
}

pub fn bench(_: &BenchArgs) -> Result<()> {
    bail!(NOT_COMPILED)
}

pub fn serve(_: &ServeArgs) -> Result<()> {
    bail!(NOT_COMPILED)
}

/// Quantizing needs the embedder to measure what it costs.
pub fn quantize(_: &QuantizeArgs) -> Result<()> {
    bail!(NOT_COMPILED)
}

/// Without the embedder a converted folder is written but not loaded.
pub fn convert_folder(
    source: &std::path::Path,
    output: &std::path::Path,
    options: &nornir_vector::convert::ConvertOptions,
) -> Result<(nornir_vector::convert::Conversion, Option<String>)> {
    let conversion = nornir_vector::convert::convert(source, output, options)?;
    Ok((conversion, Some("not checked: this nornir was built without the ONNX Runtime embedder".to_owned())))
}

pub fn plan(_: &ModelArgs, _: &[EpDevice]) -> Result<Option<nornir_vector::diagnostics::Plan>> {
    Ok(None)
}

/// Without the embedder ONNX Runtime is never loaded, so it lists nothing.
pub fn listed_devices(_: &OrtChoice) -> Vec<EpDevice> {
    Vec::new()
}

pub fn ort_choice(_: Option<&nornir_vector::diagnostics::Plan>, _: &ModelArgs) -> OrtChoice {
    OrtChoice { error: Some(NOT_COMPILED.to_owned()), ..OrtChoice::default() }
}

pub fn ort_pick(_: Option<&nornir_vector::diagnostics::Plan>, _: &ModelArgs) -> OrtChoice {
    OrtChoice { error: Some(NOT_COMPILED.to_owned()), ..OrtChoice::default() }
}

/// Without the embedder no plugin library is ever registered, so none is tried.
pub fn offer_plugin_probe() {}

/// Without the embedder there is no ONNX Runtime to register a plugin with: 3, as a probe that
/// cannot load it answers.
pub fn probe_plugin(_: &crate::args::ProbePluginArgs) -> std::process::ExitCode {
    eprintln!("{NOT_COMPILED}");
    std::process::ExitCode::from(3)
}
