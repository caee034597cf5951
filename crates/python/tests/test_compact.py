"""Compact vectors: `embed(precision=...)` against a NumPy reimplementation of
sentence-transformers' `quantize_embeddings` (sentence-transformers itself needs torch, which
this venv does not hold) applied to the same float32 vectors, and the `nornir` command's .npy of
the same texts with the same ranges."""

import json
import os
import subprocess

import numpy as np
import pytest

from nornir_vector import Embedder, InvalidOption


def quantize_embeddings(embeddings, precision, ranges=None):
    """sentence-transformers 5's published formula (quantization.py), with out-of-range values
    clipped where its astype would wrap."""
    if precision == "binary":
        return (np.packbits(embeddings > 0).reshape(embeddings.shape[0], -1) - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(embeddings > 0).reshape(embeddings.shape[0], -1)
    starts = ranges[0, :]
    steps = (ranges[1, :] - ranges[0, :]) / 255
    at = np.clip((embeddings - starts) / steps, 0, 255)
    if precision == "uint8":
        return at.astype(np.uint8)
    return (at - 128).astype(np.int8)


@pytest.fixture(scope="module")
def embedder(model):
    with Embedder(model, device="cpu", threads=2) as e:
        yield e


def test_binary_is_bit_identical_and_int8_within_one_step(embedder, sample):
    floats = embedder.embed(sample)
    for precision, dtype in [("binary", np.int8), ("ubinary", np.uint8)]:
        got = embedder.embed(sample, precision=precision)
        assert got.dtype == dtype and got.shape == (len(sample), 384 // 8)
        assert np.array_equal(got, quantize_embeddings(floats, precision)), precision
    ranges = embedder.calibrate()
    assert "built-in sample (99 texts, 384 dimensions)" in ranges["source"]
    table = np.array([ranges["min"], ranges["max"]], dtype=np.float32)
    for precision, dtype in [("int8", np.int8), ("uint8", np.uint8)]:
        got = embedder.embed(sample, precision=precision, ranges=ranges)
        assert got.dtype == dtype and got.shape == (len(sample), 384)
        want = quantize_embeddings(floats, precision, table)
        assert np.abs(got.astype(np.int16) - want.astype(np.int16)).max() <= 1, precision
    one = embedder.embed(sample[0], precision="ubinary")
    assert one.shape == (48,)
    half = embedder.embed(sample[:3], precision="binary", dimensions=128)
    assert half.shape == (3, 16)


def test_what_cannot_be_made_is_one_clear_error(embedder):
    # Without ranges, the library's rule: calibrated once on the built-in sample.
    assert np.array_equal(embedder.embed("a text", precision="int8"),
                          embedder.embed("a text", precision="int8", ranges=embedder.calibrate()))
    good = embedder.calibrate()
    short = {"min": good["min"], "max": good["max"][:10]}
    # Once a panic inside a worker, reported as a cancellation: now refused before any text runs.
    with pytest.raises(InvalidOption, match="min has 384 values and max 10"):
        embedder.embed("a text", precision="int8", ranges=short)
    upside_down = {"min": good["max"], "max": good["min"]}
    with pytest.raises(InvalidOption, match="is above max"):
        embedder.embed("a text", precision="int8", ranges=upside_down)
    with pytest.raises(InvalidOption, match="finite"):
        embedder.embed("a text", precision="int8", ranges={"min": [float("nan")] * 384, "max": good["max"]})
    # The embedder goes on.
    assert embedder.embed("a text").shape == (384,)
    with pytest.raises(InvalidOption, match="multiple of 8"):
        embedder.embed("a text", precision="binary", dimensions=100)
    with pytest.raises(InvalidOption, match="unknown precision"):
        embedder.embed("a text", precision="int4")
    narrow = embedder.calibrate(dimensions=64)
    with pytest.raises(InvalidOption, match="64 dimensions"):
        embedder.embed("a text", precision="uint8", ranges=narrow)


def test_the_command_writes_the_same_vectors_and_its_ranges(embedder, sample, model, tmp_path):
    nornir = os.environ["NORNIR_TEST_NORNIR"]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(sample[:20]) + "\n", encoding="utf-8")
    out = tmp_path / "docs.npy"
    run = [nornir, "vector", "embed", "-q", "--model", model, "--input", str(texts), "--format", "npy"]
    subprocess.run(run + ["--precision", "int8", "--output", str(out)], check=True, capture_output=True)
    ranges = json.loads((tmp_path / "docs.npy.ranges.json").read_text())
    got = np.load(out)
    assert got.dtype == np.int8 and got.shape == (20, 384)
    assert np.array_equal(got, embedder.embed(sample[:20], precision="int8", ranges=ranges))
    # A second run (the queries) reuses the documents' ranges.
    queries = tmp_path / "queries.npy"
    subprocess.run(run + ["--precision", "int8", "--ranges", str(tmp_path / "docs.npy.ranges.json"), "--output", str(queries)],
                   check=True, capture_output=True)
    assert np.array_equal(np.load(queries), got)
    bits = tmp_path / "bits.npy"
    subprocess.run(run + ["--precision", "ubinary", "--output", str(bits)], check=True, capture_output=True)
    assert np.array_equal(np.load(bits), embedder.embed(sample[:20], precision="ubinary"))


def test_one_ranges_rule_on_every_surface(embedder, sample, model, tmp_path):
    """The CLI, the server and Python give the same int8 bytes for the same texts without being
    given ranges: the library's rule (calibrated once on the built-in sample), not three."""
    import urllib.request
    from conftest import served

    nornir = os.environ["NORNIR_TEST_NORNIR"]
    texts = sample[:8]
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    subprocess.run([nornir, "vector", "embed", "-q", "--model", model, "--input", str(tmp_path / "t.txt"),
                    "--format", "npy", "--precision", "int8", "--output", str(out)], check=True, capture_output=True)
    cli = np.load(out)
    python = embedder.embed(texts, precision="int8")
    assert np.array_equal(cli, python)

    def cohere(port, extra=()):
        body = json.dumps({"texts": texts, "embedding_types": ["int8"], "input_type": "search_document"}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/embed", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return np.array(json.load(r)["embeddings"]["int8"], dtype=np.int8)

    def info(port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=60) as r:
            return json.load(r)["ranges"]

    with served(model) as port:
        assert np.array_equal(cohere(port), python)
        assert info(port) == {"given": None, "calibrated": [
            {"dimensions": 384, "normalized": True, "source": "nornir's built-in sample (99 texts, 384 dimensions)"}]}
    # Given ranges win, on the server as in Python, and /info names them.
    narrow = embedder.calibrate(sample[:20])
    (tmp_path / "r.json").write_text(json.dumps(narrow), encoding="utf-8")
    with served(model, "--ranges", str(tmp_path / "r.json")) as port:
        assert np.array_equal(cohere(port), embedder.embed(texts, precision="int8", ranges=narrow))
        assert info(port)["given"]["source"] == narrow["source"]
