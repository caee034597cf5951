"""nornir's sentence embedder for Python.

    >>> from nornir_vector import Embedder
    >>> embedder = Embedder()                       # the default model (fetch_default_model())
    >>> vectors = embedder.embed(["A man is eating food.", "what is a fjord?"])
    >>> vectors.shape, vectors.dtype
    ((2, 384), dtype('float32'))
    >>> embedder.report()["active_provider"]       # what really runs it
    'CPUExecutionProvider'

ONNX Runtime is not part of this package: nornir loads the `libonnxruntime.so` of the
`onnxruntime` (or `onnxruntime-gpu`, `onnxruntime-migraphx`) package installed beside it, or the
one `ort_library=` / `ORT_DYLIB_PATH` names, and `report()["ort"]` says which and why. The GIL is
released while texts wait and run: Python threads calling one `Embedder` share its batches.
Errors are `EmbedError` subclasses with nornir's one-line messages. `SparseEncoder` (SPLADE) and
`Reranker` (cross-encoders) load the other two kinds of model. `convert(model, output)` writes
an ONNX model folder from a transformers folder's safetensors weights (BERT, XLM-RoBERTa).
"""

import os as _os
import sys as _sys

# Search this interpreter's site-packages first for ONNX Runtime and plugin providers, also in
# a venv that was never activated. Set before anything probes (the probe runs once per process).
_os.environ.setdefault("NORNIR_PYTHON_PREFIX", _sys.prefix)

from ._nornir import (  # noqa: E402
    BadImage,
    Cancelled,
    InternalError,
    ConvertError,
    DeviceError,
    EmbedError,
    Embedder,
    EmbedderClosed,
    InferenceError,
    InvalidOption,
    ModelError,
    NoOrtLibrary,
    OrtLoadError,
    Overloaded,
    QuantizeError,
    TooLong,
    WrongKind,
    __version__,
    convert,
    doctor,
    preflight,
    quantize,
)
from ._fetch import DEFAULT_MODEL, fetch_default_model  # noqa: E402
from .retrieval import MultiVectorEncoder, Reranker, SparseEncoder, max_sim  # noqa: E402

__all__ = [
    "BadImage",
    "Cancelled",
    "InternalError",
    "ConvertError",
    "DEFAULT_MODEL",
    "DeviceError",
    "EmbedError",
    "Embedder",
    "EmbedderClosed",
    "InferenceError",
    "InvalidOption",
    "ModelError",
    "MultiVectorEncoder",
    "NoOrtLibrary",
    "OrtLoadError",
    "Overloaded",
    "QuantizeError",
    "Reranker",
    "SparseEncoder",
    "TooLong",
    "WrongKind",
    "__version__",
    "max_sim",
    "convert",
    "doctor",
    "fetch_default_model",
    "preflight",
    "quantize",
]
