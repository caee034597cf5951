"""Image-and-text models through the Python package: a random CLIP checkpoint made by
scripts/image_reference.py (an independent NumPy reference, in NORNIR_TEST_REFERENCE_PYTHON),
converted by the `nornir` under test, its images given as paths, bytes and NumPy arrays."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import REPO
from nornir_vector import Embedder


def run_reference(*args: str) -> dict:
    python = os.environ.get("NORNIR_TEST_REFERENCE_PYTHON")
    if not python:
        pytest.fail("NORNIR_TEST_REFERENCE_PYTHON is unset: run `cargo xtask test`")
    out = subprocess.run([python, str(REPO / "scripts/image_reference.py"), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def clip(tmp_path_factory):
    nornir = os.environ.get("NORNIR_TEST_NORNIR")
    if not nornir:
        pytest.fail("NORNIR_TEST_NORNIR is unset: run `cargo xtask test`")
    work = tmp_path_factory.mktemp("clip")
    run_reference("make", "clip", str(work / "weights"))
    names = run_reference("images", str(work / "images"))["images"]
    subprocess.run([nornir, "vector", "convert", "-q", "--model", str(work / "weights"), "--output", str(work / "onnx")],
                   check=True)
    pngs = [str(work / "images" / n) for n in names if n.endswith(".png")][:4]
    return work, pngs


def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def test_images_as_paths_bytes_and_arrays_match_the_reference(clip):
    work, pngs = clip
    texts = ["a photo of a cat", "two dogs"]
    want = run_reference("embed", str(work / "weights"), "--images", *pngs, "--texts", *texts)
    with Embedder(str(work / "onnx"), device="cpu") as embedder:
        assert embedder.takes_images and "CLIPImageProcessor" in embedder.image_settings
        got = embedder.embed_images(pngs)
        assert got.shape == (len(pngs), embedder.dimension) and got.dtype == np.float32
        assert np.abs(got - unit(want["images"])).max() < 1e-5
        as_bytes = embedder.embed_images([open(p, "rb").read() for p in pngs])
        assert np.array_equal(as_bytes, got)
        one = embedder.embed_images(pngs[0])
        assert one.shape == (embedder.dimension,) and np.array_equal(one, got[0])
        assert np.abs(embedder.embed(texts) - unit(want["texts"])).max() < 1e-5
        raw = embedder.embed_images(pngs, normalize=False)
        assert np.abs(raw - np.asarray(want["images"])).max() < 1e-5
        # An RGB array is the decoded pixels: the same row as the PNG it came from, when the PNG
        # is RGB already.
        rgb = [p for p in pngs if "portrait" in p]
        if rgb:
            from_png = embedder.embed_images(rgb[0])
            pixels = np.asarray(_decode_png_rgb(rgb[0]), dtype=np.uint8)
            assert np.abs(embedder.embed_images(pixels) - from_png).max() < 1e-6
        assert embedder.embed_images(pngs, dimensions=8).shape == (len(pngs), 8)


def test_bad_images_are_refused_in_one_line(clip, model):
    work, pngs = clip
    with Embedder(str(work / "onnx"), device="cpu") as embedder:
        with pytest.raises(Exception) as e:
            embedder.embed_images([b"not an image"])
        assert "image 0" in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(TypeError):
            embedder.embed_images([np.zeros((4, 4, 4), dtype=np.uint8)])
    with Embedder(model, device="cpu") as text_only:
        assert not text_only.takes_images and text_only.image_settings is None
        with pytest.raises(Exception) as e:
            text_only.embed_images(pngs[:1])
        assert "embeds text only" in str(e.value)


def _decode_png_rgb(path):
    """The pixels of an RGB PNG through the reference venv's Pillow, as nested lists."""
    python = os.environ["NORNIR_TEST_REFERENCE_PYTHON"]
    code = "import sys, json, numpy as np; from PIL import Image; print(json.dumps(np.asarray(Image.open(sys.argv[1]).convert('RGB')).tolist()))"
    return json.loads(subprocess.run([python, "-c", code, path], capture_output=True, text=True, check=True).stdout)
