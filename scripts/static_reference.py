#!/usr/bin/env python3
"""Static models (Model2Vec) saved by model2vec itself, and model2vec's own `encode` as the
reference for nornir's vectors. Nothing here uses nornir's code.

  static_reference.py cases TOKENIZER_JSON CORPUS WORK
      four static models saved with `StaticModel.save_pretrained` into WORK, random tables:
      a WordPiece tokenizer (TOKENIZER_JSON, a real one: special tokens, an unknown token) with a
      float32 table, normalised; the same vocabulary quantized to 500 rows (`mapping` and
      `weights`); the first model's table as int8; and a Unigram tokenizer with a max_length of 8
      (texts cut by tokens and, first, by characters). For each, model2vec's vectors of the
      corpus's first texts and some edge cases, and the vectors of four mistakes (special tokens
      pooled, the unknown token kept, the normalisation flipped, no character cut), so a test can
      show its comparison would catch each. Prints one JSON object.
  static_reference.py bench NORNIR TOKENIZER_JSON CORPUS WORK
      texts/s of `nornir vector embed` and of model2vec's `encode` on the whole corpus, side by
      side, on a table the size of potion-base-8M's (the tokenizer's vocabulary x 256).
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from model2vec import StaticModel
from model2vec.model import quantize_model
from tokenizers import Tokenizer, models, pre_tokenizers

EDGE_CASES = [
    "",
    "a",
    "\u2603\u2603 \u00bf\u00a1 zzzqqq",  # mostly unknown to a WordPiece vocabulary
    "[CLS] a literal special token [SEP]",
    " ".join(["fjords and glaciers carve the coast of norway"] * 80),  # longer than 512 tokens
]


def texts_of(corpus, n):
    lines = [l for l in Path(corpus).read_text(encoding="utf-8").splitlines() if l.strip()]
    return lines[:n] + EDGE_CASES


def unigram_tokenizer():
    """A small Unigram tokenizer (unk_id 0) with no special tokens around a text."""
    pieces = [("<unk>", 0.0), ("\u2581", -2.0)] + [(chr(c), -4.0) for c in range(ord("a"), ord("z") + 1)]
    words = "the fjord glacier coast norway carve and of a is sea long narrow inlet ice".split()
    pieces += [("\u2581" + w, -1.0) for w in words]
    t = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=False))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    return t


def mistaken(model, texts, special=False, keep_unknown=False, flip_normalize=False, char_cut=True):
    """model2vec's encode written out here, with one of its steps done wrong when asked."""
    tok = Tokenizer.from_str(model.tokenizer.to_str())
    if model.max_length is not None:
        tok.enable_truncation(model.max_length)
    else:
        tok.no_truncation()
    if char_cut and model.max_length is not None:
        texts = [t[: model.max_length * model.median_token_length] for t in texts]
    out = np.zeros((len(texts), model.dim), dtype=np.float32)
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=special)):
        ids = [t for t in enc.ids if keep_unknown or t != model.unk_token_id]
        if not ids:
            continue
        rows = model.embedding[model.token_mapping[ids] if model.token_mapping is not None else ids].astype(np.float32)
        if model.weights is not None:
            rows = rows * model.weights[ids][:, None]
        out[i] = rows.mean(axis=0)
    if model.normalize != flip_normalize:
        out = out / (np.linalg.norm(out, axis=1, keepdims=True) + 1e-32)
    return out


def run_cases(tokenizer_json, corpus, work):
    work = Path(work)
    rng = np.random.default_rng(61)
    wordpiece = Tokenizer.from_file(tokenizer_json)
    vocab = wordpiece.get_vocab_size(with_added_tokens=True)
    texts = texts_of(corpus, 200)
    base = StaticModel(rng.normal(0, 1, (vocab, 64)).astype(np.float32), wordpiece, normalize=True)
    clusters = 500
    quantized = StaticModel(
        rng.normal(0, 1, (clusters, 64)).astype(np.float32),
        wordpiece,
        normalize=False,
        token_mapping=rng.integers(0, clusters, vocab).astype(np.int64),
        weights=rng.uniform(0.5, 1.5, vocab).astype(np.float32),
    )
    int8 = quantize_model(base, quantize_to="int8")
    uni = unigram_tokenizer()
    short = StaticModel(
        rng.normal(0, 1, (uni.get_vocab_size(), 16)).astype(np.float32), uni, normalize=True, max_length=8
    )
    cases = []
    for name, model in (("wordpiece-f32", base), ("wordpiece-quantized", quantized), ("wordpiece-int8", int8), ("unigram-max-8", short)):
        folder = work / name
        model.save_pretrained(folder)
        loaded = StaticModel.from_pretrained(folder, force_download=False)
        want = loaded.encode(texts)
        # The script's own encode must be model2vec's before its mistakes mean anything.
        assert np.allclose(mistaken(loaded, texts), want, atol=1e-5), name
        wrong = {
            "special tokens pooled": mistaken(loaded, texts, special=True),
            "unknown token kept": mistaken(loaded, texts, keep_unknown=True),
            "normalisation flipped": mistaken(loaded, texts, flip_normalize=True),
            "no character cut": mistaken(loaded, texts, char_cut=False),
        }
        cases.append(
            {
                "name": name,
                "folder": str(folder),
                "normalize": bool(loaded.normalize),
                "dim": int(loaded.dim),
                "vectors": np.asarray(want, dtype=np.float64).tolist(),
                "wrong": {k: v.astype(np.float64).tolist() for k, v in wrong.items()},
            }
        )
    return {"texts": texts, "cases": cases}


def run_bench(nornir, tokenizer_json, corpus, work):
    work = Path(work)
    rng = np.random.default_rng(8)
    tok = Tokenizer.from_file(tokenizer_json)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    model = StaticModel(rng.normal(0, 1, (vocab, 256)).astype(np.float32), tok, normalize=True)
    folder = work / "potion-shaped"
    model.save_pretrained(folder)
    texts = [l for l in Path(corpus).read_text(encoding="utf-8").splitlines()]
    out = {"texts": len(texts), "table": [vocab, 256]}
    loaded = StaticModel.from_pretrained(folder, force_download=False)
    loaded.encode(texts[:100])  # warm
    best = []
    for _ in range(3):
        started = time.perf_counter()
        loaded.encode(texts, use_multiprocessing=False)
        best.append(time.perf_counter() - started)
    out["model2vec_texts_per_s"] = len(texts) / min(best)
    runs = []
    for _ in range(3):
        o = subprocess.run(
            [nornir, "vector", "embed", "--model", str(folder), "--input", corpus, "--format", "f32",
             "--output", str(work / "vectors.f32"), "--json", "--quiet"],
            capture_output=True, text=True, check=True,
        )
        summary = json.loads(o.stderr.strip().splitlines()[-1])
        runs.append(summary)
    out["nornir_runs"] = runs
    seconds = min(r.get("seconds", float("inf")) for r in runs)
    out["nornir_texts_per_s"] = len(texts) / seconds
    out["ratio"] = out["nornir_texts_per_s"] / out["model2vec_texts_per_s"]
    return out


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "cases":
        result = run_cases(*sys.argv[2:])
    elif len(sys.argv) == 6 and sys.argv[1] == "bench":
        result = run_bench(*sys.argv[2:])
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
