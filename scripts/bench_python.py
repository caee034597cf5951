"""The Python pipelines nornir is compared with (`cargo xtask bench-compare` runs this).

Modes, all with tokenizers + onnxruntime + numpy, truncation at 256, mean pooling, L2 norm:
  sorted    sentence-transformers' strategy: sort by length, batches of 32 padded to the longest
  unsorted  fastembed's strategy: input order, batches of 32 padded to the longest
  floor     ONNX Runtime alone: every text tokenized first, sorted, packed under a token budget
            (texts x longest <= budget, as nornir packs), only the session runs timed

Prints one JSON object: {"mode", "texts", "seconds", "texts_per_second"}.
"""

import json
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def main() -> None:
    mode, model_dir, corpus, threads, budget = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    with open(corpus, encoding="utf-8") as f:
        texts = f.read().split("\n")
    if texts and texts[-1] == "":
        texts.pop()
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(256)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(f"{model_dir}/model.onnx", opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}

    def run(encodings):
        longest = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), longest), dtype=np.int64)
        mask = np.zeros_like(ids)
        for k, e in enumerate(encodings):
            ids[k, : len(e.ids)] = e.ids
            mask[k, : len(e.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros_like(ids)
        return feed, mask

    def pool(hidden, mask):
        m = mask[:, :, None].astype(np.float32)
        v = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    start = time.perf_counter()
    if mode in ("sorted", "unsorted"):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i])) if mode == "sorted" else list(range(len(texts)))
        out = [None] * len(texts)
        for b in range(0, len(order), 32):
            idx = order[b : b + 32]
            encodings = tok.encode_batch([texts[i] for i in idx])
            feed, mask = run(encodings)
            vecs = pool(sess.run(None, feed)[0], mask)
            for k, i in enumerate(idx):
                out[i] = vecs[k]
        seconds = time.perf_counter() - start
    elif mode == "floor":
        encodings = tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        batches, current, longest = [], [], 0
        for i in order:
            n = max(len(encodings[i].ids), 1)
            if current and (len(current) + 1) * longest > budget:
                batches.append(current)
                current = []
            if not current:
                longest = n
            current.append(i)
        if current:
            batches.append(current)
        feeds = [run([encodings[i] for i in b])[0] for b in batches]
        start = time.perf_counter()
        for feed in feeds:
            sess.run(None, feed)
        seconds = time.perf_counter() - start
    else:
        raise SystemExit(f"unknown mode {mode!r}: sorted, unsorted or floor")
    print(json.dumps({"mode": mode, "texts": len(texts), "seconds": seconds, "texts_per_second": len(texts) / seconds}))


if __name__ == "__main__":
    main()
