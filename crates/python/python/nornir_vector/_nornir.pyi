"""Type stubs of the native module (crates/python/src/lib.rs)."""

from os import PathLike
from typing import Any, Literal, Sequence, overload

import numpy as np
import numpy.typing as npt

__version__: str

class EmbedError(Exception):
    """Every error of nornir's embedder."""

class InvalidOption(EmbedError):
    option: str

class NoOrtLibrary(EmbedError): ...
class OrtLoadError(EmbedError): ...
class DeviceError(EmbedError): ...
class ModelError(EmbedError): ...

class TooLong(EmbedError):
    index: int
    tokens: int
    max_length: int

class Overloaded(EmbedError): ...
class Cancelled(EmbedError): ...
class InternalError(EmbedError): ...
class InferenceError(EmbedError): ...
class EmbedderClosed(EmbedError): ...

class BadImage(EmbedError):
    index: int

class WrongKind(EmbedError):
    kind: Literal["embedder", "sparse-encoder", "cross-encoder", "multi-vector"]

class Embedder:
    """One loaded model; thread-safe: Python threads calling one Embedder share its batches."""

    def __init__(
        self,
        model: str | PathLike[str] | None = None,
        *,
        device: Literal["auto", "cpu", "cuda", "nvidia", "rocm", "amd"] = "auto",
        threads: int | None = None,
        workers: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        pooling: str | None = None,
        ort_library: str | PathLike[str] | None = None,
        providers: Sequence[str] | None = None,
        task: str | None = None,
    ) -> None: ...
    @overload
    def embed(
        self,
        texts: str,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncation: Literal["right", "left", "refuse"] = "right",
        long: Literal["chunk", "late"] | None = None,
        window: int | None = None,
        overlap: int | None = None,
        precision: Literal["float32", "int8", "uint8", "binary", "ubinary"] | None = None,
        ranges: dict[str, Any] | str | PathLike[str] | None = None,
    ) -> npt.NDArray[Any]: ...
    @overload
    def embed(
        self,
        texts: Sequence[str],
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncation: Literal["right", "left", "refuse"] = "right",
        long: Literal["chunk", "late"] | None = None,
        window: int | None = None,
        overlap: int | None = None,
        precision: Literal["float32", "int8", "uint8", "binary", "ubinary"] | None = None,
        ranges: dict[str, Any] | str | PathLike[str] | None = None,
    ) -> npt.NDArray[Any]: ...
    @overload
    def embed_images(
        self,
        images: str | PathLike[str] | bytes | npt.NDArray[np.uint8],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def embed_images(
        self,
        images: Sequence[str | PathLike[str] | bytes | npt.NDArray[np.uint8]],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
    ) -> npt.NDArray[np.float32]: ...
    @property
    def takes_images(self) -> bool: ...
    @property
    def image_settings(self) -> str | None: ...
    def embed_chunks(
        self,
        texts: str | Sequence[str],
        *,
        window: int | None = None,
        overlap: int | None = None,
        late: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        normalize: bool | None = None,
        dimensions: int | None = None,
    ) -> list[dict[str, Any]]: ...
    def tokenize(
        self, text: str, *, add_special_tokens: bool = True, prompt_name: str | None = None, prompt: str | None = None
    ) -> list[dict[str, Any]]: ...
    def calibrate(
        self,
        texts: Sequence[str] | None = None,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        normalize: bool | None = None,
        dimensions: int | None = None,
    ) -> dict[str, Any]: ...
    def embed_sparse(
        self,
        texts: str | Sequence[str],
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        truncation: Literal["right", "left", "refuse"] = "right",
    ) -> list[tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]]]: ...
    def embed_multi_vector(
        self,
        texts: str | Sequence[str],
        *,
        is_query: bool = False,
        dimensions: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        truncation: Literal["right", "left", "refuse"] = "right",
    ) -> list[npt.NDArray[np.float32]]: ...
    def encode(
        self,
        texts: str | Sequence[str],
        *,
        dense: bool = True,
        sparse: bool = True,
        multi_vector: bool = True,
        is_query: bool = False,
        dimensions: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        truncation: Literal["right", "left", "refuse"] = "right",
    ) -> dict[str, Any]: ...
    @property
    def multi_vector(self) -> bool: ...
    def predict(
        self,
        inputs: Sequence[tuple[str, str] | str],
        *,
        raw_scores: bool = False,
        truncation: Literal["right", "left", "refuse"] = "right",
    ) -> npt.NDArray[np.float32]: ...
    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        raw_scores: bool = False,
        truncation: Literal["right", "left", "refuse"] = "right",
    ) -> list[tuple[int, float]]: ...
    def vocabulary_terms(self, ids: Sequence[int]) -> list[str]: ...
    @property
    def kind(self) -> Literal["embedder", "sparse-encoder", "cross-encoder"]: ...
    @property
    def labels(self) -> list[str]: ...
    def report(self) -> dict[str, Any]: ...
    def stats(self) -> dict[str, Any]: ...
    def gpu_vendor(self) -> Literal["rocm", "cuda", "cpu", "other"]: ...
    def rocm_ready(self) -> bool: ...
    @property
    def dimension(self) -> int: ...
    @property
    def workers(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Embedder: ...
    def __exit__(self, *args: object) -> bool: ...

# The default model's folder inside the nornir cache (what `fetch_default_model()` fills).
DEFAULT_MODEL_SUBDIR: str

def preflight() -> tuple[bool, str]: ...
def doctor(device: str = "auto") -> dict[str, Any]: ...

class ConvertError(Exception): ...

def convert(
    model: str | PathLike[str],
    output: str | PathLike[str],
    *,
    fuse: bool = True,
    replace: bool = False,
    external_data: bool = False,
    reranker: bool = False,
    dtype: str = "float32",
) -> dict[str, Any]: ...

class QuantizeError(Exception): ...

def quantize(
    model: str | PathLike[str],
    output: str | PathLike[str],
    *,
    replace: bool = False,
    per_tensor: bool = False,
    activations: str = "per-token",
    weights: str = "auto",
    smoothing: float | None = 0.5,
    calibration: list[str] | None = None,
    external_data: bool = False,
) -> dict[str, Any]: ...
