//! The `Embedder` class's image calls' conversions (an image-and-text model: CLIP, SigLIP): images as paths,
//! bytes or NumPy arrays, embedded off the GIL into the space of the model's text vectors.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use nornir_vector::{CancelHandle, Embedder as RustEmbedder, ImageInput};

use crate::calls::run_cancellable;
use crate::options::call_options;
use crate::values::to_array;

/// `Embedder.embed_images`: the images converted, embedded off the GIL.
pub(crate) fn embed_images<'py>(
    py: Python<'py>,
    embedder: &Arc<RustEmbedder>,
    images: &Bound<'py, PyAny>,
    normalize: Option<bool>,
    dimensions: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let (images, one) = images_of(images)?;
    let cancel = CancelHandle::new();
    let options = call_options(None, None, normalize, dimensions, "right", None, None, None)?.with_cancel(&cancel);
    let rows = run_cancellable(py, &cancel, || embedder.embed_images_with(&images, &options))?;
    to_array(py, rows, one)
}

/// One image or a list or tuple of them; whether it was one.
fn images_of(images: &Bound<'_, PyAny>) -> PyResult<(Vec<ImageInput>, bool)> {
    if images.is_instance_of::<PyList>() || images.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = images.try_iter()?.collect::<PyResult<_>>()?;
        return Ok((items.iter().map(image_of).collect::<PyResult<_>>()?, false));
    }
    Ok((vec![image_of(images)?], true))
}

fn image_of(image: &Bound<'_, PyAny>) -> PyResult<ImageInput> {
    if let Ok(bytes) = image.cast::<PyBytes>() {
        return Ok(ImageInput::bytes(bytes.as_bytes()));
    }
    if let Ok(pixels) = image.extract::<PyReadonlyArray3<'_, u8>>() {
        let shape = pixels.shape();
        if shape[2] != 3 {
            return Err(PyTypeError::new_err(format!(
                "an image array must be (height, width, 3) uint8 RGB, not shape {shape:?}"
            )));
        }
        let (height, width) = (u32::try_from(shape[0]), u32::try_from(shape[1]));
        let (Ok(height), Ok(width)) = (height, width) else {
            return Err(PyTypeError::new_err("an image array is too large"));
        };
        let data = pixels.as_array().iter().copied().collect();
        return Ok(ImageInput::rgb8(width, height, data));
    }
    if let Ok(path) = image.extract::<PathBuf>() {
        return Ok(ImageInput::path(path));
    }
    Err(PyTypeError::new_err(
        "an image must be a path, the bytes of an encoded image, or a NumPy uint8 array (height, width, 3)",
    ))
}
