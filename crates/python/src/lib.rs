//! nornir's embedder for Python (`nornir_vector._nornir`, wrapped by the `nornir_vector`
//! package): a conversion layer over the facade and nothing more. Texts in, numpy arrays out;
//! each `EmbedError` a Python exception of its own kind with the same one-line message; the GIL
//! released while texts wait and run, so Python threads calling one `Embedder` share batches as
//! Rust callers do; Ctrl-C cancels a running call.
//!
//! It holds no policy: options map one to one onto `EmbedderOptions` and `CallOptions`.

mod calls;
mod convert;
mod quantize;

mod embedder;
mod errors;
mod images;
mod options;
mod values;

use pyo3::prelude::*;

use crate::embedder::Embedder;
use crate::errors::invalid;
use crate::values::json_to_py;
use nornir_vector::Device;

/// `(gpu_ready, report)`: the design's preflight (docs/design.md), from the probe alone.
#[pyfunction]
fn preflight() -> (bool, String) {
    nornir_vector::preflight()
}

/// What `nornir vector doctor --json` says without a model: the probe (`cuda`, `rocm`), the
/// plan, and the ONNX Runtime library it would load.
#[pyfunction]
#[pyo3(signature = (device="auto"))]
fn doctor<'py>(py: Python<'py>, device: &str) -> PyResult<Bound<'py, PyAny>> {
    let device: Device = device.parse().map_err(|e: String| invalid("device", e))?;
    let probe = nornir_vector::probe();
    let plan = nornir_vector::diagnostics::plan_for(device);
    let (discovery, choice) = nornir_vector::diagnostics::choose_library(&plan, None);
    let doc = serde_json::json!({
        "cuda": probe.cuda,
        "rocm": probe.rocm,
        "plan": plan,
        "ort": {
            "path": choice.as_ref().map(|(c, _)| c.path.clone()),
            "reason": choice.as_ref().map(|(_, why)| why.clone()),
            "candidates": discovery.candidates,
            "searched": discovery.searched,
        },
    });
    json_to_py(py, &doc)
}

#[pymodule]
fn _nornir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Embedder>()?;
    m.add_function(wrap_pyfunction!(preflight, m)?)?;
    m.add("DEFAULT_MODEL_SUBDIR", nornir_vector::diagnostics::DEFAULT_MODEL_SUBDIR)?;
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    m.add("ConvertError", py.get_type::<convert::ConvertError>())?;
    m.add_function(wrap_pyfunction!(quantize::quantize, m)?)?;
    m.add("QuantizeError", py.get_type::<quantize::QuantizeError>())?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
