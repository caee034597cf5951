//! `nornir_vector.convert(model, output)`: nornir-convert's safetensors-to-ONNX conversion, the
//! GIL released while it runs; its record as a dict, its errors as `ConvertError`.

use std::path::PathBuf;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use nornir_vector::convert::{ConvertOptions, WeightDtype};
use nornir_vector::{ConvertCheckError, Device, EmbedderOptions, convert_checked};

pyo3::create_exception!(
    _nornir,
    ConvertError,
    PyException,
    "The model folder could not be converted; the message names the file (and tensor) and what to do."
);

/// Writes `output` (model.onnx, the tokenizer and configs, conversion.json) from the model folder
/// `model` (config.json and model.safetensors), then checks it as every caller does (the
/// library's `convert_checked`: an encoder embedded on the CPU, a fused graph compared with the
/// plain one and replaced by it where it differs); returns conversion.json as a dict, with the
/// check's line under `"check"` (None for a head's graph).
#[pyfunction]
#[pyo3(signature = (model, output, *, fuse=true, replace=false, external_data=false, reranker=false, dtype="float32"))]
#[allow(clippy::too_many_arguments)]
pub fn convert<'py>(
    py: Python<'py>,
    model: PathBuf,
    output: PathBuf,
    fuse: bool,
    replace: bool,
    external_data: bool,
    reranker: bool,
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let dtype: WeightDtype = dtype.parse().map_err(|e| ConvertError::new_err(format!("dtype={dtype:?}: {e}")))?;
    let mut options =
        ConvertOptions::default().with_fused(fuse).with_replace(replace).with_reranker(reranker).with_dtype(dtype);
    if external_data {
        options = options.with_external_data_over(0);
    }
    let cpu = EmbedderOptions::default().with_device(Device::Cpu);
    let checked = py
        .detach(|| convert_checked(&model, &output, &options, &cpu))
        .map_err(|e| ConvertError::new_err(in_python_words(&e)))?;
    let mut record = serde_json::to_value(&checked.conversion).map_err(|e| ConvertError::new_err(e.to_string()))?;
    record["check"] = checked.check.into();
    crate::values::json_to_py(py, &record)
}

/// A refusal in this function's words where the library leaves the what-to-do to the surface.
fn in_python_words(e: &ConvertCheckError) -> String {
    use nornir_vector::convert::ConvertError as Refused;
    match e {
        ConvertCheckError::Convert(Refused::OutputExists { path }) => {
            format!("{path} already exists: choose another output, or pass replace=True to replace it")
        }
        ConvertCheckError::Convert(Refused::DtypeForDecodersOnly { file, architecture, dtype }) => format!(
            "{file} names {architecture}, an encoder: dtype={dtype:?} is for decoders only; leave dtype out (float32)"
        ),
        other => nornir_vector::error_chain(other),
    }
}
