//! Python values in and out: texts, float32 arrays, JSON documents as Python objects.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use nornir_vector::{CompactVectors, Embeddings, Encoded, Ranges};

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

/// Compact vectors as an int8 (int8, binary) or uint8 (uint8, ubinary) array of shape (n, bytes
/// per vector), or (bytes,) for one string.
pub(crate) fn compact_array<'py>(py: Python<'py>, v: &CompactVectors, one: bool) -> PyResult<Bound<'py, PyAny>> {
    let (n, w) = (v.len(), v.bytes_per_vector());
    let flat = if v.precision.is_signed() {
        PyArray1::from_vec(py, v.as_bytes().iter().map(|&b| b as i8).collect::<Vec<i8>>()).into_any()
    } else {
        PyArray1::from_slice(py, v.as_bytes()).into_any()
    };
    let shape: Vec<usize> = if one { vec![w] } else { vec![n, w] };
    flat.call_method1("reshape", (shape,))
}

/// `ranges=`: a dict as `calibrate()` returns it, or the path of a ranges file.
pub(crate) fn ranges_of(obj: &Bound<'_, PyAny>) -> PyResult<Ranges> {
    let invalid = |e: String| crate::errors::invalid("ranges", e);
    if let Ok(path) = obj.extract::<std::path::PathBuf>() {
        return Ranges::read(&path).map_err(|e| invalid(e.to_string()));
    }
    // NaN and infinities are not JSON: refused here with the rule's words.
    let kwargs = pyo3::types::PyDict::new(obj.py());
    kwargs.set_item("allow_nan", false)?;
    let text: String = match obj.py().import("json")?.call_method("dumps", (obj,), Some(&kwargs)) {
        Ok(t) => t.extract()?,
        Err(e) => return Err(invalid(format!("min and max must be lists of finite numbers ({e})"))),
    };
    Ranges::from_json(&text).map_err(|e| invalid(e.reason))
}

/// BGE-M3's outputs as `encode` returns them: a dict with "dense" (float32 (n, dim)), "sparse"
/// (per text `(indices, values)`) and "multi_vector" (per text float32 (tokens, dim)), for those
/// computed.
pub(crate) fn encoded_dict<'py>(py: Python<'py>, encoded: Encoded) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    if let Some(rows) = encoded.dense {
        out.set_item("dense", to_array(py, rows, false)?)?;
    }
    if let Some(vectors) = encoded.sparse {
        let list = PyList::empty(py);
        for v in vectors {
            list.append((PyArray1::from_vec(py, v.indices), PyArray1::from_vec(py, v.values)))?;
        }
        out.set_item("sparse", list)?;
    }
    if let Some(mv) = encoded.multi_vector {
        let list = PyList::empty(py);
        for rows in mv.iter() {
            let n = rows.len() / mv.dim().max(1);
            list.append(PyArray1::from_slice(py, rows).reshape([n, mv.dim()])?)?;
        }
        out.set_item("multi_vector", list)?;
    }
    Ok(out)
}
