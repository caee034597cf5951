"""Where a model's run time goes, by operator type: ONNX Runtime's own profile of the CPU
session, at a graph optimisation level (`--level`, basic by default), on corpus texts packed the
way nornir packs them (sorted by length, under a token budget). Prints, for each model folder, the
kernel time of each operator type and its share. `MODEL_DIR:LEVEL` profiles one folder at its own
level, so that two levels of one model can be compared in one run.

    python scripts/op_profile.py MODEL_DIR [MODEL_DIR:extended ...] --corpus testdata/corpus.txt \
        --texts 256 --threads 1

Run it with the venv `cargo xtask bench-compare` makes (onnxruntime, tokenizers, numpy).
"""

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

# Warnings about initializers the graph no longer reads would bury the table.
ort.set_default_logger_severity(3)

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


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


def model_and_level(spec, default):
    """`DIR:LEVEL` split, or `DIR` with the default level."""
    model, sep, level = spec.rpartition(":")
    return (model, level) if sep and level in LEVELS else (spec, default)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="model folders (model.onnx, tokenizer.json)")
    ap.add_argument("--corpus", required=True, help="one text per line")
    ap.add_argument("--texts", type=int, default=256, help="how many of its first lines")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=int, default=256, help="tokens per batch (nornir's default)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--level", choices=sorted(LEVELS), default="basic", help="for folders given without :LEVEL")
    ap.add_argument("--top", type=int, default=12, help="how many operator types to list")
    a = ap.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        texts = [line for line in f.read().split("\n") if line][: a.texts]
    for spec in a.models:
        model, level = model_and_level(spec, a.level)
        for name in ("model.onnx", "tokenizer.json"):
            if not os.path.isfile(os.path.join(model, name)):
                sys.exit(f"op_profile: {model} has no {name}: give a model folder (nornir vector quantize writes one)")
        tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(a.max_length)
        options = ort.SessionOptions()
        options.graph_optimization_level = LEVELS[level]
        options.intra_op_num_threads = a.threads
        options.enable_mem_pattern = False
        options.enable_profiling = True
        # ONNX Runtime writes the profile into the working folder unless told otherwise.
        options.profile_file_prefix = os.path.join(tempfile.gettempdir(), "nornir_op_profile")
        session = ort.InferenceSession(os.path.join(model, "model.onnx"), options, providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        packed = batches(tok.encode_batch(texts), a.budget)
        for batch in packed:
            session.run(None, feed(batch, names))
        profile = session.end_profiling()
        with open(profile, encoding="utf-8") as f:
            events = json.load(f)
        os.remove(profile)
        by_op, nodes = collections.Counter(), collections.defaultdict(set)
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                by_op[e["args"]["op_name"]] += e["dur"]
                nodes[e["args"]["op_name"]].add(e["name"])
        total = sum(by_op.values())
        print(f"== {model} ({level}): {total / 1e3:.0f} ms in kernels, {len(packed)} batches of {len(texts)} texts")
        for op, micros in by_op.most_common(a.top):
            print(f"  {op:28s} {micros / 1e3:8.1f} ms {100 * micros / total:5.1f}%  {len(nodes[op]):4d} nodes")


if __name__ == "__main__":
    main()
