//! `nornir_vector.quantize(model, output)`: the library's `quantize_folder` (the int8 rewrite,
//! checked by running both models on the built-in sample as their kind runs), the GIL released
//! while it runs; quantization.json as a dict, refusals as `QuantizeError` in this function's words.

use std::path::PathBuf;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use nornir_vector::quantize::{Activations, Granularity, QuantizeOptions, WeightType};
use nornir_vector::{QuantizeFolderError, QuantizeFolderOptions, quantize_folder};

pyo3::create_exception!(
    _nornir,
    QuantizeError,
    PyException,
    "The model folder could not be quantized; nothing was left at the output."
);

/// Writes `output`, an int8 copy of the model folder `model` for the CPU, and measures what int8
/// costs against float32 on the built-in sample by the model's own output (any kind); returns
/// quantization.json as a dict (its `summary` is the cost in one line). `calibration`: texts to
/// calibrate smoothing on (default: the built-in sample).
#[pyfunction]
#[pyo3(signature = (model, output, *, replace=false, per_tensor=false, activations="per-token", weights="auto", smoothing=Some(0.5), calibration=None, external_data=false))]
#[allow(clippy::too_many_arguments)]
pub fn quantize<'py>(
    py: Python<'py>,
    model: PathBuf,
    output: PathBuf,
    replace: bool,
    per_tensor: bool,
    activations: &str,
    weights: &str,
    smoothing: Option<f32>,
    calibration: Option<Vec<String>>,
    external_data: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let bad = |what: &str, e: String| QuantizeError::new_err(format!("{what}: {e}"));
    let activations: Activations = activations.parse().map_err(|e| bad(&format!("activations={activations:?}"), e))?;
    let weights: WeightType = weights.parse().map_err(|e| bad(&format!("weights={weights:?}"), e))?;
    if smoothing.is_some_and(|a| !(0.0..=1.0).contains(&a)) {
        return Err(QuantizeError::new_err("smoothing must be between 0 and 1, or None"));
    }
    let granularity = if per_tensor { Granularity::PerTensor } else { Granularity::PerChannel };
    let rewrite = QuantizeOptions::default()
        .with_granularity(granularity)
        .with_activations(activations)
        .with_weights(weights)
        .with_smoothing(smoothing)
        .with_external_data(external_data);
    let mut options = QuantizeFolderOptions::default().with_rewrite(rewrite).with_replace(replace);
    if let Some(texts) = calibration {
        options = options.with_calibration(texts, "calibration=");
    }
    let done = py
        .detach(|| quantize_folder(&model, &output, &options))
        .map_err(|e| QuantizeError::new_err(in_python_words(&e)))?;
    crate::values::json_to_py(py, &done.record)
}

/// A refusal in this function's words where the library leaves the what-to-do to the surface.
fn in_python_words(e: &QuantizeFolderError) -> String {
    match e {
        QuantizeFolderError::OutputExists { path } => {
            format!("{} already exists: choose another output, or pass replace=True to replace it", path.display())
        }
        QuantizeFolderError::NoCalibrationTexts { .. } => "calibration holds no text: give a list of texts".to_owned(),
        other => nornir_vector::error_chain(other),
    }
}
