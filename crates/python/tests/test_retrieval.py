"""SparseEncoder and Reranker: the real splade-tiny (converted by `cargo xtask test`'s set-up,
NORNIR_TEST_SPLADE_MODEL) against the `nornir` command's output and a NumPy check of its
pruning, and cross-encoders with random weights made by scripts/retrieval_reference.py (run in
the reference venv, NORNIR_TEST_REFERENCE_PYTHON) against that script's ONNX Runtime scores."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import REPO
from nornir_vector import Embedder, InvalidOption, Reranker, SparseEncoder, TooLong, WrongKind

TEXTS = ["The capital of France is Paris.", "A man is eating food.", "How do fjords form?"]


@pytest.fixture(scope="session")
def splade() -> SparseEncoder:
    path = os.environ.get("NORNIR_TEST_SPLADE_MODEL")
    if not path:
        pytest.fail("NORNIR_TEST_SPLADE_MODEL is unset: run `cargo xtask test`")
    return SparseEncoder(path, device="cpu", threads=2)


@pytest.fixture(scope="session")
def cross(tmp_path_factory) -> dict:
    python = os.environ.get("NORNIR_TEST_REFERENCE_PYTHON")
    nornir = os.environ.get("NORNIR_TEST_NORNIR")
    if not python or not nornir:
        pytest.fail("NORNIR_TEST_REFERENCE_PYTHON or NORNIR_TEST_NORNIR is unset: run `cargo xtask test`")
    work = tmp_path_factory.mktemp("cross")
    out = subprocess.run(
        [python, str(REPO / "scripts/retrieval_reference.py"), "cross", nornir, str(work)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return {case["name"]: case for case in json.loads(out)["cases"]}


def test_sparse_vectors_match_the_command_and_prune_as_asked(splade, tmp_path):
    pairs = splade.embed(TEXTS)
    assert len(pairs) == 3
    for indices, values in pairs:
        assert indices.dtype == np.uint32 and values.dtype == np.float32
        assert np.all(np.diff(indices.astype(np.int64)) > 0) and np.all(values > 0)
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    lines = subprocess.run(
        [os.environ["NORNIR_TEST_NORNIR"], "vector", "embed", "-q", "--model", os.environ["NORNIR_TEST_SPLADE_MODEL"],
         "--input", str(texts_file)],
        capture_output=True,
        check=True,
        text=True,
    ).stdout.splitlines()
    for (indices, values), line in zip(pairs, lines):
        want = json.loads(line)
        assert indices.tolist() == want["indices"]
        assert np.allclose(values, want["values"], atol=1e-6)

    indices, values = splade.embed(TEXTS[0], top_k=3)
    assert len(indices) == 3
    assert sorted(splade.tokens(indices)) == ["capital", "france", "paris"]
    # Text 0 alone, as the pruned call runs it: a text batched with others sums in another order
    # on CPUs whose kernels block by batch size, so its weights are compared with itself alone.
    full_i, full_v = splade.embed(TEXTS[0])
    kept = full_v > 1.0
    t_i, t_v = splade.embed(TEXTS[0], threshold=1.0)
    assert t_i.tolist() == full_i[kept].tolist() and np.array_equal(t_v, full_v[kept])


def test_sparse_vectors_as_a_csr_matrix(splade):
    matrix = splade.embed(TEXTS, csr=True)
    assert matrix.shape == (3, splade.vocabulary_size) == (3, 30522)
    for row, (indices, values) in enumerate(splade.embed(TEXTS)):
        dense = matrix.getrow(row).toarray()[0]
        assert np.array_equal(np.nonzero(dense)[0], indices.astype(np.int64))
        assert np.array_equal(dense[indices], values)


def test_a_cross_encoder_scores_as_the_reference(cross):
    for name, case in cross.items():
        with Reranker(case["folder"], device="cpu") as reranker:
            assert len(reranker.labels) == case["labels"]
            pairs = [tuple(p) for p in case["pairs"]]
            scores = reranker.predict(pairs)
            assert scores.shape == (len(pairs), case["labels"]) and scores.dtype == np.float32
            assert np.allclose(scores, np.array(case["scores"]), atol=1e-5), name
            raw = reranker.predict(pairs, raw_scores=True)
            assert np.allclose(raw, np.array(case["raw"]), atol=1e-5), name
            if case["labels"] != 1:
                continue
            query = "what is a fjord?"
            documents = [d for q, d in pairs if q == query]
            want = sorted(
                range(len(documents)),
                key=lambda k: -[s[0] for (q, _), s in zip(pairs, case["scores"]) if q == query][k],
            )
            ranked = reranker.rerank(query, documents, top_n=2)
            assert [i for i, _ in ranked] == want[:2]
            with pytest.raises(TooLong) as refused:
                reranker.rerank(query, ["word " * 100], truncation="refuse")
            assert refused.value.max_length == 32


def test_each_class_refuses_a_model_of_another_kind(model, splade, cross):
    folder = cross["BertForSequenceClassification-1"]["folder"]
    with pytest.raises(WrongKind) as e:
        SparseEncoder(folder, device="cpu")
    assert e.value.kind == "cross-encoder" and "Reranker" not in str(e.value)
    with pytest.raises(WrongKind) as e:
        Reranker(model, device="cpu")
    assert e.value.kind == "embedder"
    with Embedder(os.environ["NORNIR_TEST_SPLADE_MODEL"], device="cpu") as embedder:
        assert embedder.kind == "sparse-encoder"
        with pytest.raises(WrongKind, match="embed_sparse"):
            embedder.embed("a dense vector from a sparse encoder")
    with pytest.raises(TypeError, match="model= is required"):
        Reranker()


def write_safetensors(path, tensors: dict) -> None:
    """A float32 safetensors file, written by hand (the test venv needs no safetensors package)."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


@pytest.fixture(scope="session")
def colbert(tmp_path_factory) -> str:
    """The real all-MiniLM-L6-v2 under a random 384 -> 128 projection, as a PyLate folder, converted."""
    from nornir_vector import convert

    source = os.environ.get("NORNIR_TEST_MINILM_SAFETENSORS")
    if not source:
        pytest.fail("NORNIR_TEST_MINILM_SAFETENSORS is unset: run `cargo xtask test`")
    work = tmp_path_factory.mktemp("colbert")
    src = work / "pylate"
    src.mkdir()
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt"]:
        if os.path.exists(os.path.join(source, name)):
            (src / name).write_bytes(open(os.path.join(source, name), "rb").read())
    (src / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ]))
    (src / "1_Dense").mkdir()
    (src / "1_Dense/config.json").write_text(json.dumps(
        {"in_features": 384, "out_features": 128, "bias": False,
         "activation_function": "torch.nn.modules.linear.Identity"}))
    rng = np.random.default_rng(7)
    write_safetensors(src / "1_Dense/model.safetensors", {"linear.weight": rng.normal(0, 0.05, (128, 384))})
    (src / "config_sentence_transformers.json").write_text(json.dumps(
        {"query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 32, "document_length": 180,
         "do_query_expansion": True, "attend_to_expansion_tokens": False, "similarity_fn_name": "MaxSim"}))
    out = work / "colbert"
    convert(str(src), str(out))
    return str(out)


def test_a_colbert_model_gives_token_vectors_and_ranks_by_max_sim(colbert, tmp_path):
    from nornir_vector import MultiVectorEncoder, max_sim

    with MultiVectorEncoder(colbert, device="cpu", threads=2) as m:
        query = m.embed("how do fjords form?", is_query=True)
        docs = m.embed(TEXTS)
        assert query.shape == (32, 128) and query.dtype == np.float32, "expanded to query_length"
        assert [d.shape[1] for d in docs] == [128, 128, 128]
        for d in [query, *docs]:
            assert np.allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-5)
        # "The capital of France is Paris." keeps [CLS], [unused1], 6 words and [SEP]: the "." is skipped.
        assert docs[0].shape[0] == 9
        ranked = m.rerank("how do fjords form?", TEXTS)
        want = sorted(range(3), key=lambda i: -max_sim(query, docs[i]))
        assert [i for i, _ in ranked] == want
        for i, score in ranked:
            assert abs(score - max_sim(query, docs[i])) < 1e-3
        half = m.embed(TEXTS[0], dimensions=64)
        assert half.shape == (9, 64) and np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    lines = subprocess.run(
        [os.environ["NORNIR_TEST_NORNIR"], "vector", "embed", "-q", "--model", colbert, "--input", str(texts_file)],
        capture_output=True, check=True, text=True,
    ).stdout.splitlines()
    for d, line in zip(docs, lines):
        assert np.allclose(np.array(json.loads(line)["vectors"], dtype=np.float32), d, atol=1e-6)


def test_multi_vector_encoder_refuses_a_model_without_token_vectors(model):
    from nornir_vector import MultiVectorEncoder

    with pytest.raises(WrongKind, match="makes no token vectors"):
        MultiVectorEncoder(model, device="cpu", threads=2)


def test_a_long_document_is_ranked_by_its_best_chunk(cross):
    folder = cross["BertForSequenceClassification-1"]["folder"]
    query = "how fjords form?"
    long = " and ".join(["a fjord is a long narrow inlet of the sea"] * 8)
    with Reranker(folder, device="cpu") as reranker:
        ranked = reranker.rerank(query, [long, "paris is the capital of france"], long="chunk", overlap=4)
        assert all(len(r) == 3 for r in ranked)
        for index, score, (chunk, start, end) in ranked:
            text = [long, "paris is the capital of france"][index].encode("utf-8")[start:end].decode("utf-8")
            alone = reranker.predict([(query, text)])[0][0]
            assert abs(alone - score) <= 1e-4
        assert any(r[0] == 0 and r[2] != (0, 0, len(long)) for r in ranked), ranked  # the long one was cut
        assert [len(r) for r in reranker.rerank(query, [long])] == [2]
        with pytest.raises(InvalidOption, match="long"):
            reranker.rerank(query, [long], long="late")
