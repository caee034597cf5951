"""`nornir_vector.quantize`: the library's one quantization (the CLI's too), on the real default
model: a whole int8 folder whose recorded cost is measured here, the refusals in Python's words."""

import numpy as np
import pytest

import nornir_vector as nv
from conftest import cosines


def test_quantize_writes_an_int8_folder_close_to_float32_and_refuses_in_python_words(model, sample, tmp_path):
    out = tmp_path / "int8"
    record = nv.quantize(model, out)
    assert record["format"] == "nornir int8" and record["cost"]["kind"] == "embedder"
    assert record["cost"]["cosine_min"] > 0.98, record["cost"]
    assert (out / "model.onnx").is_file() and (out / "quantization.json").is_file()
    with nv.Embedder(out, device="cpu", threads=1) as int8, nv.Embedder(model, device="cpu", threads=1) as fp32:
        measured = cosines(int8.embed(sample), fp32.embed(sample))
    assert abs(float(np.min(measured)) - record["cost"]["cosine_min"]) < 1e-3
    with pytest.raises(nv.QuantizeError, match="already exists: choose another output, or pass replace=True"):
        nv.quantize(model, out)
    with pytest.raises(nv.QuantizeError, match="calibration holds no text"):
        nv.quantize(model, tmp_path / "other", calibration=["", "  "])
    assert not (tmp_path / "other").exists(), "nothing left where a refusal happened"
    with pytest.raises(nv.QuantizeError, match="activations="):
        nv.quantize(model, tmp_path / "other", activations="sometimes")
