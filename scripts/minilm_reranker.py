#!/usr/bin/env python3
"""A reranker the size of ms-marco-MiniLM-L-6-v2, for int8 checks and speed figures where no
cross-encoder's weights can be fetched: all-MiniLM-L6-v2's real encoder and pooler (its float32
safetensors folder, `NORNIR_TEST_MINILM_SAFETENSORS`) under a one-label classifier head with
seeded random weights, written as a `BertForSequenceClassification` folder that
`nornir vector convert` turns into a cross-encoder. Its scores rank nothing meaningfully; they
exercise every layer a real reranker of this shape has. Standard library and NumPy only.

  minilm_reranker.py SOURCE OUT
"""

import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or name.endswith("position_ids"):
            continue  # a buffer, not a weight
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}; this script reads float32 weights")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype="<f4").reshape(t["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        data = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    weights = {f"bert.{k}": v for k, v in read_safetensors(source / "model.safetensors").items()}
    hidden = weights["bert.pooler.dense.weight"].shape[0]
    rng = np.random.default_rng(7)
    weights["classifier.weight"] = rng.standard_normal((1, hidden)).astype(np.float32) / np.sqrt(hidden)
    weights["classifier.bias"] = np.zeros(1, dtype=np.float32)
    write_safetensors(out / "model.safetensors", weights)
    config = json.loads((source / "config.json").read_text())
    config.update(architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    print(out)


if __name__ == "__main__":
    main()
