//! Python values in and out: texts, float32 arrays, JSON documents as Python objects.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use nornir_vector::Embeddings;

/// `str` or a sequence of `str`; whether it was one string.
pub(crate) fn texts_of(texts: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, bool)> {
    if let Ok(one) = texts.extract::<String>() {
        return Ok((vec![one], true));
    }
    texts
        .extract::<Vec<String>>()
        .map(|v| (v, false))
        .map_err(|_| PyTypeError::new_err("texts must be a str or a sequence of str"))
}

/// The embedder's rows as a float32 array of shape (n, d), or (d,) for one string.
pub(crate) fn to_array<'py>(py: Python<'py>, rows: Embeddings, one: bool) -> PyResult<Bound<'py, PyAny>> {
    let (n, d) = (rows.len(), rows.dim());
    let flat = PyArray1::from_vec(py, rows.into_vec());
    if one { Ok(flat.reshape([d])?.into_any()) } else { Ok(flat.reshape([n, d])?.into_any()) }
}

/// A JSON value (from serde) as a Python object, through Python's own `json`.
pub(crate) fn json_to_py<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}
