"""Where a model's run time goes, by operator type: ONNX Runtime's own profile of the CPU
session, at the basic graph optimisation level nornir uses, on corpus texts packed the way nornir
packs them (sorted by length, under a token budget). Prints, for each model folder, the kernel
time of each operator type and its share.

    python scripts/op_profile.py MODEL_DIR [MODEL_DIR ...] --corpus testdata/corpus.txt \
        --texts 256 --threads 1

Run it with the venv `cargo xtask bench-compare` makes (onnxruntime, tokenizers, numpy).
"""

import argparse
import collections
import json
import os

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def batches(encodings, budget):
    """Texts sorted by length, packed while texts x longest stays within `budget` tokens."""
    out, current = [], []
    for e in sorted(encodings, key=lambda e: len(e.ids)):
        if current and (len(current) + 1) * len(e.ids) > budget:
            out.append(current)
            current = []
        current.append(e)
    if current:
        out.append(current)
    return out


def feed(batch, names):
    longest = max(len(e.ids) for e in batch)
    ids = np.zeros((len(batch), longest), np.int64)
    mask = np.zeros_like(ids)
    for i, e in enumerate(batch):
        ids[i, : len(e.ids)] = e.ids
        mask[i, : len(e.ids)] = 1
    values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return {k: v for k, v in values.items() if k in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="model folders (model.onnx, tokenizer.json)")
    ap.add_argument("--corpus", required=True, help="one text per line")
    ap.add_argument("--texts", type=int, default=256, help="how many of its first lines")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=int, default=256, help="tokens per batch (nornir's default)")
    ap.add_argument("--max-length", type=int, default=256)
    a = ap.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        texts = [line for line in f.read().split("\n") if line][: a.texts]
    for model in a.models:
        tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(a.max_length)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.intra_op_num_threads = a.threads
        options.enable_mem_pattern = False
        options.enable_profiling = True
        session = ort.InferenceSession(os.path.join(model, "model.onnx"), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        packed = batches(tok.encode_batch(texts), a.budget)
        for batch in packed:
            session.run(None, feed(batch, names))
        profile = session.end_profiling()
        with open(profile, encoding="utf-8") as f:
            events = json.load(f)
        os.remove(profile)
        by_op = collections.Counter()
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                by_op[e["args"]["op_name"]] += e["dur"]
        total = sum(by_op.values())
        print(f"== {model}: {total / 1e3:.0f} ms in kernels, {len(packed)} batches of {len(texts)} texts")
        for op, micros in by_op.most_common(12):
            print(f"  {op:24s} {micros / 1e3:8.1f} ms {100 * micros / total:5.1f}%")


if __name__ == "__main__":
    main()
