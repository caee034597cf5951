//! `nornir_vector.convert(model, output)`: nornir-convert's safetensors-to-ONNX conversion, the
//! GIL released while it runs; its record as a dict, its errors as `ConvertError`.

use std::path::PathBuf;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use nornir_vector::convert::{ConvertOptions, convert as convert_folder};

pyo3::create_exception!(
    _nornir,
    ConvertError,
    PyException,
    "The model folder could not be converted; the message names the file (and tensor) and what to do."
);

/// Writes `output` (model.onnx, the tokenizer and configs, conversion.json) from the model folder
/// `model` (config.json and model.safetensors); returns conversion.json as a dict.
#[pyfunction]
#[pyo3(signature = (model, output, *, fuse=true, replace=false, external_data=false))]
pub fn convert<'py>(
    py: Python<'py>,
    model: PathBuf,
    output: PathBuf,
    fuse: bool,
    replace: bool,
    external_data: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mut options = ConvertOptions::default().with_fused(fuse).with_replace(replace);
    if external_data {
        options = options.with_external_data_over(0);
    }
    let record =
        py.detach(|| convert_folder(&model, &output, &options)).map_err(|e| ConvertError::new_err(e.to_string()))?;
    crate::values::json_to_py(py, &record)
}
