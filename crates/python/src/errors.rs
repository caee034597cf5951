//! Each `EmbedError` kind as a Python exception of its own, with its attributes.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use nornir_vector::EmbedError;

pyo3::create_exception!(_nornir, EmbedErrorPy, PyException, "Every error of nornir's embedder.");
pyo3::create_exception!(
    _nornir,
    InvalidOption,
    EmbedErrorPy,
    "An option no embedder or call can take; `.option` names it."
);
pyo3::create_exception!(
    _nornir,
    NoOrtLibrary,
    EmbedErrorPy,
    "No usable ONNX Runtime library: install onnxruntime beside nornir-vector, or pass ort_library."
);
pyo3::create_exception!(
    _nornir,
    OrtLoadError,
    EmbedErrorPy,
    "The ONNX Runtime library could not be loaded (not ONNX Runtime, too old, or another one is loaded)."
);
pyo3::create_exception!(
    _nornir,
    DeviceError,
    EmbedErrorPy,
    "The device asked for cannot run the model (refused, or a forced GPU that failed)."
);
pyo3::create_exception!(
    _nornir,
    ModelError,
    EmbedErrorPy,
    "The model folder, its tokenizer or its graph cannot be used."
);
pyo3::create_exception!(
    _nornir,
    TooLong,
    EmbedErrorPy,
    "A text is longer than the model reads and the call refuses to truncate; `.index`, `.tokens`, `.max_length`."
);
pyo3::create_exception!(
    _nornir,
    Overloaded,
    EmbedErrorPy,
    "The embedder's queue is full, or the wait would be too long: retry."
);
pyo3::create_exception!(_nornir, Cancelled, EmbedErrorPy, "The call was cancelled.");
pyo3::create_exception!(_nornir, InferenceError, EmbedErrorPy, "Running the model failed.");
pyo3::create_exception!(
    _nornir,
    InternalError,
    EmbedErrorPy,
    "A bug in nornir (code of the call panicked): the call failed, the embedder goes on; please report it."
);
pyo3::create_exception!(_nornir, EmbedderClosed, EmbedErrorPy, "The embedder was closed.");
pyo3::create_exception!(
    _nornir,
    BadImage,
    EmbedErrorPy,
    "An image of the call could not be read or prepared; `.index` is its place in the call."
);
pyo3::create_exception!(
    _nornir,
    WrongKind,
    EmbedErrorPy,
    "The call is for another kind of model (embedder, sparse-encoder, cross-encoder); `.kind` names the model's."
);

/// The Python exception for `e`, with its attributes.
pub(crate) fn to_py(py: Python<'_>, e: &EmbedError) -> PyErr {
    let text = nornir_vector::error_chain(e);
    let err = match e {
        EmbedError::InvalidOption { .. } => InvalidOption::new_err(text),
        EmbedError::NoOrtLibrary { .. } | EmbedError::ExplicitOrtUnusable { .. } => NoOrtLibrary::new_err(text),
        EmbedError::OrtLoad { .. } | EmbedError::OrtTooOld { .. } | EmbedError::OrtAlreadyLoaded { .. } => {
            OrtLoadError::new_err(text)
        }
        EmbedError::DeviceRefused { .. } | EmbedError::ForcedDeviceFailed { .. } => DeviceError::new_err(text),
        EmbedError::Model { .. } | EmbedError::Tokenizer { .. } | EmbedError::Session { .. } => {
            ModelError::new_err(text)
        }
        EmbedError::TooLong { .. } => TooLong::new_err(text),
        EmbedError::Overloaded { .. } | EmbedError::WaitTooLong { .. } => Overloaded::new_err(text),
        EmbedError::Cancelled => Cancelled::new_err(text),
        EmbedError::Internal { .. } => InternalError::new_err(text),
        EmbedError::WrongKind { .. } => WrongKind::new_err(text),
        EmbedError::BadImage { .. } => BadImage::new_err(text),
        _ => InferenceError::new_err(text),
    };
    let value = err.value(py);
    let _ = match e {
        EmbedError::InvalidOption { option, .. } => value.setattr("option", option.to_string()),
        EmbedError::TooLong { index, tokens, max_length, .. } => value
            .setattr("index", *index)
            .and_then(|()| value.setattr("tokens", *tokens))
            .and_then(|()| value.setattr("max_length", *max_length)),
        EmbedError::WrongKind { kind, .. } => value.setattr("kind", kind.label()),
        EmbedError::BadImage { index, .. } => value.setattr("index", *index),
        _ => Ok(()),
    };
    err
}

pub(crate) fn invalid(option: &str, reason: String) -> PyErr {
    Python::attach(|py| {
        let err = InvalidOption::new_err(format!("invalid `{option}`: {reason}"));
        let _ = err.value(py).setattr("option", option);
        err
    })
}

/// Adds every exception class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("EmbedError", py.get_type::<EmbedErrorPy>())?;
    m.add("InvalidOption", py.get_type::<InvalidOption>())?;
    m.add("NoOrtLibrary", py.get_type::<NoOrtLibrary>())?;
    m.add("OrtLoadError", py.get_type::<OrtLoadError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("TooLong", py.get_type::<TooLong>())?;
    m.add("Overloaded", py.get_type::<Overloaded>())?;
    m.add("Cancelled", py.get_type::<Cancelled>())?;
    m.add("InferenceError", py.get_type::<InferenceError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("EmbedderClosed", py.get_type::<EmbedderClosed>())?;
    m.add("WrongKind", py.get_type::<WrongKind>())?;
    m.add("BadImage", py.get_type::<BadImage>())?;
    Ok(())
}
