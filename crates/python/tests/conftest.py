"""What the package's tests share: the repository, the default model, the `nornir` command built
beside the wheel (`cargo xtask test` sets NORNIR_TEST_NORNIR), and vectors from that command."""

import contextlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="session")
def model() -> str:
    path = os.environ.get("NORNIR_TEST_MODEL")
    if not path:
        pytest.fail("NORNIR_TEST_MODEL is unset: run `cargo xtask test`")
    return path


@pytest.fixture(scope="session")
def sample() -> list:
    return (REPO / "testdata/parity-sample.txt").read_text(encoding="utf-8").splitlines()


def cli_vectors(texts_file: Path, *flags: str, width: int = 384) -> np.ndarray:
    """`nornir vector embed --format f32` on a file of texts, as an (n, width) array."""
    nornir = os.environ.get("NORNIR_TEST_NORNIR")
    if not nornir:
        pytest.fail("NORNIR_TEST_NORNIR is unset: run `cargo xtask test`")
    out = subprocess.run(
        [nornir, "vector", "embed", "--quiet", "--format", "f32", "--input", str(texts_file), *flags],
        capture_output=True,
        check=True,
    ).stdout
    return np.frombuffer(out, dtype=np.float32).reshape(-1, width)


@contextlib.contextmanager
def served(model: str, *flags: str):
    """`nornir vector serve` on a free port with `flags`, stopped on exit; yields the port."""
    import json
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([os.environ["NORNIR_TEST_NORNIR"], "vector", "serve", "--port", str(port),
                               "--model", model, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 600  # a readiness wait, not a speed target
        while server.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                time.sleep(0.1)
        assert server.poll() is None, f"the server stopped: {server.stderr.read().decode()}"
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
