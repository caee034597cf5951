#!/usr/bin/env python3
"""Late interaction, measured side by side (results go to docs/performance.md):

  late_bench.py speed NORNIR MODEL CORPUS [QUERIES] [ROUNDS]
      Reranks 100 corpus paragraphs per query by MaxSim: nornir's server (`/rerank`, one request
      per query, release build, 2 threads) against the pipeline a Python user writes
      (tokenizers + onnxruntime on the same model.onnx with 2 threads + NumPy: PyLate's markers,
      expansion and skiplist, documents sorted by length in batches of 32, the Dense projection,
      per-token normalisation, MaxSim). Rounds alternate; medians of documents/s and of each
      query's latency (p50). Both sides' scores are compared (they must agree within 1e-3
      relative), so the two compute the same thing.
  late_bench.py recall NORNIR MODEL COMPACT_DIR
      The retrieval set `cargo xtask compact` writes (COMPACT_DIR: queries.txt, documents.txt,
      relevant.txt): every document's token vectors from `nornir vector embed --format npz` at
      float32, int8 (ranges over the sample's token vectors) and binary; bytes per document at
      each; recall@10 of an exact MaxSim search (int8 dequantised by its ranges; binary as
      the float32 query against the documents' signs).

MODEL is a converted PyLate folder (model.onnx, 1_Dense/, config_sentence_transformers.json).
Prints one JSON object. Run with a Python that has numpy, onnxruntime and tokenizers (the bench
venv `cargo xtask test` makes).
"""

import json
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert_reference as cr  # noqa: E402  (its safetensors reader)


def st_config(model):
    c = json.loads((model / "config_sentence_transformers.json").read_text())
    return {
        "q": c.get("query_prefix", "[Q] "),
        "d": c.get("document_prefix", "[D] "),
        "ql": c.get("query_length", 32),
        "dl": c.get("document_length", 180),
        "expand": c.get("do_query_expansion", True),
        "attend": c.get("attend_to_expansion_tokens", False),
        "skip": c.get("skiplist_words", list(string.punctuation)),
    }


class PythonPipeline:
    """What a Python user writes for a PyLate folder exported to ONNX."""

    def __init__(self, model):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.c = st_config(model)
        self.tok = Tokenizer.from_file(str(model / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.no_truncation()
        o = ort.SessionOptions()
        o.intra_op_num_threads = 2
        self.sess = ort.InferenceSession(str(model / "model.onnx"), o, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.sess.get_inputs()]
        self.dense = cr.read_safetensors(model / "1_Dense" / "model.safetensors")["linear.weight"].astype(np.float32)
        self.qid, self.did = self.tok.token_to_id(self.c["q"]), self.tok.token_to_id(self.c["d"])
        self.mask = self.tok.token_to_id("[MASK]")
        self.skip = {self.tok.token_to_id(w) for w in self.c["skip"]} - {None}

    def ids(self, text, query):
        enc = self.tok.encode(text)
        ids, special = enc.ids, enc.special_tokens_mask
        lead = 1 if special and special[0] else 0
        trail = 1 if special and special[-1] else 0
        length = self.c["ql"] if query else self.c["dl"]
        content = ids[lead : len(ids) - trail][: length - 1 - lead - trail]
        out = ids[:lead] + [self.qid if query else self.did] + content + ids[len(ids) - trail :]
        attend = len(out)
        if query and self.c["expand"]:
            out = out + [self.mask] * (length - len(out))
            if self.c["attend"]:
                attend = len(out)
        return out, attend

    def run(self, rows):
        """Token vectors of `rows` ((ids, attend) pairs), projected and normalised."""
        n = max(len(r[0]) for r in rows)
        ids = np.zeros((len(rows), n), dtype=np.int64)
        mask = np.zeros_like(ids)
        for k, (r, attend) in enumerate(rows):
            ids[k, : len(r)] = r
            mask[k, :attend] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.sess.run(None, feed)[0]
        out = []
        for k, (r, _) in enumerate(rows):
            v = hidden[k, : len(r)] @ self.dense.T
            out.append(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))
        return out

    def rerank(self, query, documents):
        q = self.run([self.ids(query, True)])[0]
        rows = [self.ids(d, False) for d in documents]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        vectors = [None] * len(rows)
        for at in range(0, len(order), 32):
            batch = order[at : at + 32]
            for i, v in zip(batch, self.run([rows[i] for i in batch])):
                keep = [p for p, t in enumerate(rows[i][0]) if t not in self.skip]
                vectors[i] = v[keep]
        scores = [float((q @ d.T).max(axis=1).sum()) for d in vectors]
        return sorted(range(len(scores)), key=lambda i: -scores[i]), scores


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def speed(nornir, model, corpus, queries=10, rounds=3):
    paragraphs = [l.strip() for l in Path(corpus).read_text().splitlines() if l.strip()]
    asks = [(p.split(".")[0][:120], paragraphs[100 * k + 1 : 100 * k + 101]) for k, p in
            enumerate(paragraphs[: queries * 100 : 100])]
    port = free_port()
    server = subprocess.Popen([nornir, "vector", "serve", "--model", str(model), "--port", str(port), "--device",
                               "cpu", "--threads", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        python = PythonPipeline(Path(model))
        # Both sides score the same: each query once, before the timed rounds.
        worst = 0.0
        for q, docs in asks:
            got = {g["index"]: g["score"] for g in post(url + "/rerank", {"query": q, "texts": docs})}
            _, want = python.rerank(q, docs)
            worst = max(worst, max(abs(got[i] - w) / max(1.0, abs(w)) for i, w in enumerate(want)))
        results = {"nornir": [], "python": []}
        latencies = {"nornir": [], "python": []}
        for _ in range(rounds):
            for side in ("nornir", "python"):
                started = time.perf_counter()
                for q, docs in asks:
                    t = time.perf_counter()
                    if side == "nornir":
                        post(url + "/rerank", {"query": q, "texts": docs})
                    else:
                        python.rerank(q, docs)
                    latencies[side].append(time.perf_counter() - t)
                results[side].append(len(asks) * 100 / (time.perf_counter() - started))
        out = {side: {"documents_per_s": statistics.median(v), "p50_ms_per_query":
                      1000 * statistics.median(latencies[side]), "rounds": v} for side, v in results.items()}
        out["ratio"] = out["nornir"]["documents_per_s"] / out["python"]["documents_per_s"]
        out["max_relative_score_difference"] = worst
        out["queries"], out["documents_per_query"] = len(asks), 100
        return out
    finally:
        server.terminate()
        server.wait()


def npz(nornir, model, texts_file, precision, query, work):
    out = Path(work) / f"{'q' if query else 'd'}-{precision}.npz"
    args = [nornir, "vector", "embed", "-q", "--model", str(model), "--input", str(texts_file), "--format", "npz",
            "--precision", precision, "--output", str(out)]
    if query:
        args.append("--query")
    if precision == "int8" and query:
        args += ["--ranges", str(Path(work) / "d-int8.npz.ranges.json")]
    subprocess.run(args, check=True)
    z = np.load(out)
    return z["vectors"], z["offsets"]


def recall(nornir, model, compact):
    compact = Path(compact)
    relevant = [int(l) for l in (compact / "relevant.txt").read_text().split()]
    work = tempfile.mkdtemp()
    qv, qo = npz(nornir, model, compact / "queries.txt", "float32", True, work)
    queries = [qv[qo[i] : qo[i + 1]] for i in range(len(qo) - 1)]
    out = {"queries": len(queries)}
    for precision in ("float32", "int8", "binary"):
        dv, do = npz(nornir, model, compact / "documents.txt", precision, False, work)
        n = len(do) - 1
        if precision == "int8":
            r = json.loads((Path(work) / "d-int8.npz.ranges.json").read_text())
            lo, hi = np.array(r["min"], dtype=np.float32), np.array(r["max"], dtype=np.float32)
            values = lo + (dv.astype(np.float32) + 128.0 + 0.5) * (hi - lo) / 255.0
        elif precision == "binary":
            bits = np.unpackbits((dv.astype(np.int16) + 128).astype(np.uint8), axis=1)
            values = bits.astype(np.float32) * 2.0 - 1.0
        else:
            values = dv
        hits = 0
        for q, want in zip(queries, relevant):
            # Each document's rows are contiguous: the best match per query token, per document.
            best = np.maximum.reduceat(q @ values.T, do[:-1], axis=1)
            scores = best.sum(axis=0)
            hits += want in np.argpartition(-scores, 10)[:10]
        out[precision] = {"bytes_per_document": int(dv.nbytes / n), "recall@10": hits / len(queries)}
    for p in ("int8", "binary"):
        out[p]["kept_of_float32_recall@10"] = out[p]["recall@10"] / max(out["float32"]["recall@10"], 1e-9)
    return out


def main():
    mode = sys.argv[1]
    if mode == "speed":
        a = sys.argv[2:]
        r = speed(a[0], Path(a[1]), a[2], int(a[3]) if len(a) > 3 else 10, int(a[4]) if len(a) > 4 else 3)
    elif mode == "recall":
        r = recall(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown mode {mode!r}: speed or recall")
    r["cpu"] = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    json.dump(r, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
