"""Static models (Model2Vec) through the Python package: folders saved by model2vec with random
tables, made by scripts/static_reference.py in the reference venv (NORNIR_TEST_REFERENCE_PYTHON),
embedded by `Embedder` as model2vec's own `encode` embeds them."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import REPO
from nornir_vector import Embedder


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> dict:
    python = os.environ.get("NORNIR_TEST_REFERENCE_PYTHON")
    model = os.environ.get("NORNIR_TEST_MODEL")
    corpus = os.environ.get("NORNIR_TEST_CORPUS")
    if not python or not model or not corpus:
        pytest.fail("NORNIR_TEST_REFERENCE_PYTHON, NORNIR_TEST_MODEL or NORNIR_TEST_CORPUS is unset: run `cargo xtask test`")
    work = tmp_path_factory.mktemp("static")
    out = subprocess.run(
        [python, str(REPO / "scripts/static_reference.py"), "cases", os.path.join(model, "tokenizer.json"),
         os.path.join(corpus, "corpus.txt"), str(work)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return json.loads(out)


def test_a_static_model_embeds_as_model2vec_does(reference):
    texts = reference["texts"]
    for case in reference["cases"]:
        with Embedder(case["folder"], device="cpu") as embedder:
            assert embedder.dimension == case["dim"]
            vectors = embedder.embed(texts)
            assert vectors.shape == (len(texts), case["dim"]) and vectors.dtype == np.float32
            assert np.allclose(vectors, np.array(case["vectors"]), atol=1e-5), case["name"]
            if case["normalize"]:
                assert np.allclose(np.linalg.norm(vectors[:-5], axis=1), 1.0, atol=1e-5)
