#!/usr/bin/env python3
"""An independent check of `nornir vector convert`: NumPy implementations of BERT and
XLM-RoBERTa written from transformers' published definitions (modeling_bert.py,
modeling_xlm_roberta.py), run on the same safetensors file, against ONNX Runtime running the
converted model.onnx. Nothing here uses nornir's code: the safetensors files are written and read
by hand (the format is an 8-byte header length, a JSON header, then raw little-endian data).

  convert_reference.py synthetic NORNIR WORK   every architecture, float32 and float16 weights,
                                               fused and plain graphs, random weights and inputs
  convert_reference.py splade NORNIR MODEL_DIR OUT CORPUS N
                                               a real BertForMaskedLM folder converted into OUT:
                                               its logits on the first N corpus texts, and its
                                               top SPLADE terms

Prints one JSON object; exits 1 when an output differs from the reference by more than 1e-4.
"""

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

TOLERANCE = 1e-4
ERF = np.frompyfunc(math.erf, 1, 1)


# --- safetensors, by hand ----------------------------------------------------------------------

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}


def bf16_bits(value):
    """float32 values rounded to bfloat16 (to nearest, ties to even), as their 16-bit patterns."""
    bits = np.ascontiguousarray(value, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def stored(value, dtype):
    """What a file of `dtype` ("F32", "F16", "BF16") holds of `value`: (its bytes, its values)."""
    if dtype == "BF16":
        bits = bf16_bits(value)
        return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    typed = np.ascontiguousarray(value.astype(np.float16 if dtype == "F16" else np.float32))
    return typed.tobytes(), typed.astype(np.float64)


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, value in tensors.items():
        data, _ = stored(value, dtype)
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_shards(folder, tensors, dtype):
    """The same tensors in two files and a `model.safetensors.index.json`, as large models ship."""
    names = list(tensors)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        write_safetensors(folder / file, {n: tensors[n] for n in part}, dtype)
        weight_map.update({n: file for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def read_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        data = raw[8 + n + start : 8 + n + end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
            value = bits.view(np.float32)
        else:
            value = np.frombuffer(data, dtype=DTYPES[info["dtype"]])
        out[name] = value.reshape(info["shape"]).astype(np.float64)
    return out


# --- the reference networks (float64) ----------------------------------------------------------


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def activation(x, name):
    if name == "gelu":
        return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)).astype(np.float64))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return np.maximum(x, 0.0)
    raise ValueError(name)


def weight(w, name):
    """LayerNorm's scale/shift under either naming."""
    if name + ".weight" in w:
        return w[name + ".weight"], w[name + ".bias"]
    return w[name + ".gamma"], w[name + ".beta"]


def linear(w, x, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def encoder(w, cfg, prefix, ids, mask, types):
    """BertModel / XLMRobertaModel: last_hidden_state [batch, seq, hidden]."""
    e = prefix + "embeddings."
    if cfg["model_type"] == "xlm-roberta":
        pad = cfg["pad_token_id"]
        not_pad = (ids != pad).astype(np.int64)
        positions = np.cumsum(not_pad, axis=1) * not_pad + pad
    else:
        positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    x = w[e + "word_embeddings.weight"][ids] + w[e + "position_embeddings.weight"][positions]
    x = x + w[e + "token_type_embeddings.weight"][types]
    x = layer_norm(x, *weight(w, e + "LayerNorm"), cfg["layer_norm_eps"])
    heads = cfg["num_attention_heads"]
    size = cfg["hidden_size"] // heads
    bias = np.where(mask[:, None, None, :] == 1, 0.0, -np.inf)
    for i in range(cfg["num_hidden_layers"]):
        l = f"{prefix}encoder.layer.{i}."

        def split(t):
            return t.reshape(t.shape[0], t.shape[1], heads, size).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(w, x, l + "attention.self." + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = layer_norm(linear(w, ctx, l + "attention.output.dense") + x, *weight(w, l + "attention.output.LayerNorm"), cfg["layer_norm_eps"])
        h = activation(linear(w, x, l + "intermediate.dense"), cfg["hidden_act"])
        x = layer_norm(linear(w, h, l + "output.dense") + x, *weight(w, l + "output.LayerNorm"), cfg["layer_norm_eps"])
    return x


def prefix_of(w):
    for p in ("", "bert.", "roberta."):
        if p + "embeddings.word_embeddings.weight" in w:
            return p
    raise KeyError("no word embeddings")


def reference(w, cfg, ids, mask, types):
    arch = cfg["architectures"][0]
    p = prefix_of(w)
    x = encoder(w, cfg, p, ids, mask, types)
    if arch.endswith("Model"):
        return x
    if arch.endswith("ForMaskedLM"):
        if arch.startswith("Bert"):
            t = "cls.predictions."
            h = layer_norm(activation(linear(w, x, t + "transform.dense"), cfg["hidden_act"]), *weight(w, t + "transform.LayerNorm"), cfg["layer_norm_eps"])
            table = w.get(t + "decoder.weight", w[p + "embeddings.word_embeddings.weight"])
            return h @ table.T + w[t + "bias"]
        h = layer_norm(activation(linear(w, x, "lm_head.dense"), "gelu"), *weight(w, "lm_head.layer_norm"), cfg["layer_norm_eps"])
        table = w.get("lm_head.decoder.weight", w[p + "embeddings.word_embeddings.weight"])
        return h @ table.T + w["lm_head.bias"]
    first = x[:, 0]
    if arch.startswith("Bert"):
        return linear(w, np.tanh(linear(w, first, p + "pooler.dense")), "classifier")
    return linear(w, np.tanh(linear(w, first, "classifier.dense")), "classifier.out_proj")


# --- running the converted graph ---------------------------------------------------------------


def run_onnx(folder, ids, mask, types):
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        feed["token_type_ids"] = types
    return session.run(None, feed)[0]


def convert(nornir, source, output, *extra):
    done = subprocess.run(
        [nornir, "vector", "convert", "--model", str(source), "--output", str(output), "--force", "--json", *extra],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"nornir vector convert {source} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


# --- synthetic checkpoints ---------------------------------------------------------------------

ARCHITECTURES = [
    "BertModel",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "XLMRobertaModel",
    "XLMRobertaForMaskedLM",
    "XLMRobertaForSequenceClassification",
]


def synthetic(arch, dtype, rng):
    """A small random checkpoint of `arch` as transformers names its tensors."""
    xlmr = arch.startswith("XLMRoberta")
    hidden, heads, layers, inter, vocab, positions = 32, 4, 2, 64, 97, 40
    labels = 1 if dtype == "F32" else 3
    act = {("BertModel", "F16"): "gelu_pytorch_tanh", ("XLMRobertaModel", "F16"): "relu"}.get((arch, dtype), "gelu")
    cfg = {
        "architectures": [arch],
        "model_type": "xlm-roberta" if xlmr else "bert",
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "max_position_embeddings": positions,
        "type_vocab_size": 1 if xlmr else 2,
        "layer_norm_eps": 1e-5 if xlmr else 1e-12,
        "hidden_act": act,
        "pad_token_id": 1 if xlmr else 0,
    }
    if arch.endswith("SequenceClassification"):
        cfg["id2label"] = {str(i): f"label_{i}" for i in range(labels)}
    p = "" if arch.endswith("Model") else ("roberta." if xlmr else "bert.")
    # BertForMaskedLM with the older gamma/beta LayerNorm names, as splade-tiny has them.
    old_norm = arch == "BertForMaskedLM"
    w = {}

    def dense(name, n_out, n_in):
        w[name + ".weight"] = rng.normal(0, 0.3, (n_out, n_in))
        w[name + ".bias"] = rng.normal(0, 0.1, (n_out,))

    def norm(name, n):
        s, b = ("gamma", "beta") if old_norm else ("weight", "bias")
        w[f"{name}.{s}"] = 1.0 + rng.normal(0, 0.1, (n,))
        w[f"{name}.{b}"] = rng.normal(0, 0.1, (n,))

    w[p + "embeddings.word_embeddings.weight"] = rng.normal(0, 1.0, (vocab, hidden))
    w[p + "embeddings.position_embeddings.weight"] = rng.normal(0, 1.0, (positions, hidden))
    w[p + "embeddings.token_type_embeddings.weight"] = rng.normal(0, 1.0, (cfg["type_vocab_size"], hidden))
    norm(p + "embeddings.LayerNorm", hidden)
    for i in range(layers):
        l = f"{p}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            dense(l + "attention.self." + n, hidden, hidden)
        dense(l + "attention.output.dense", hidden, hidden)
        norm(l + "attention.output.LayerNorm", hidden)
        dense(l + "intermediate.dense", inter, hidden)
        dense(l + "output.dense", hidden, inter)
        norm(l + "output.LayerNorm", hidden)
    if arch == "BertForMaskedLM":  # decoder tied to the word embeddings
        dense("cls.predictions.transform.dense", hidden, hidden)
        norm("cls.predictions.transform.LayerNorm", hidden)
        w["cls.predictions.bias"] = rng.normal(0, 0.1, (vocab,))
    elif arch == "XLMRobertaForMaskedLM":  # a decoder weight of its own
        dense("lm_head.dense", hidden, hidden)
        norm("lm_head.layer_norm", hidden)
        w["lm_head.decoder.weight"] = rng.normal(0, 0.3, (vocab, hidden))
        w["lm_head.bias"] = rng.normal(0, 0.1, (vocab,))
    elif arch == "BertForSequenceClassification":
        dense(p + "pooler.dense", hidden, hidden)
        dense("classifier", labels, hidden)
    elif arch == "XLMRobertaForSequenceClassification":
        dense("classifier.dense", hidden, hidden)
        dense("classifier.out_proj", labels, hidden)
    # What the file holds is what both sides compute with: the weights rounded to its dtype.
    return cfg, w


def batch(cfg, rng):
    """Three texts of 12, 7 and 3 tokens padded to 12, as a tokenizer pads them."""
    lengths, width = [12, 7, 3], 12
    pad = cfg["pad_token_id"]
    ids = rng.integers(3, cfg["vocab_size"], (3, width))
    mask = np.zeros((3, width), dtype=np.int64)
    types = np.zeros((3, width), dtype=np.int64)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = pad
        if cfg["type_vocab_size"] > 1:
            types[row, n // 2 : n] = 1
    return ids.astype(np.int64), mask, types


def run_synthetic(nornir, work):
    work = Path(work)
    rng = np.random.default_rng(44)
    results, worst = [], 0.0
    for dtype in ("F32", "F16", "BF16"):
        for arch in ARCHITECTURES:
            cfg, w = synthetic(arch, dtype, rng)
            name = f"{arch}-{dtype}"
            source = work / name
            source.mkdir(parents=True, exist_ok=True)
            (source / "config.json").write_text(json.dumps(cfg))
            write_safetensors(source / "model.safetensors", w, dtype)
            ids, mask, types = batch(cfg, rng)
            expected = reference(read_safetensors(source / "model.safetensors"), cfg, ids, mask, types)
            # Each graph fused and plain; the first also with its weights in model.onnx_data, and
            # from the same weights in two shards.
            graphs = [("fused", source, []), ("plain", source, ["--no-fuse"])]
            if not results:
                sharded = work / f"{name}-shards"
                sharded.mkdir(parents=True, exist_ok=True)
                (sharded / "config.json").write_text(json.dumps(cfg))
                write_shards(sharded, w, dtype)
                graphs += [("external-data", source, ["--external-data"]), ("sharded", sharded, [])]
            for graph, folder, flags in graphs:
                out = work / f"{name}-{graph}"
                record = convert(nornir, folder, out, *flags)
                if graph == "sharded" and len(record["sources"]) != 3:
                    raise SystemExit(f"the sharded checkpoint was not read from its two files: {record}")
                if graph == "external-data" and record["external_data"] != "model.onnx_data":
                    raise SystemExit(f"--external-data wrote no model.onnx_data: {record}")
                got = run_onnx(out, ids, mask, types)
                diff = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
                worst = max(worst, diff)
                results.append(
                    {
                        "model": name,
                        "graph": graph,
                        "output": list(got.shape),
                        "max_abs_diff": diff,
                        "largest_value": float(np.abs(expected).max()),
                        "operators": dict(record["operators"]),
                    }
                )
    return {"cases": results, "max_abs_diff": worst, "ok": worst <= TOLERANCE}


# --- a real masked-LM folder -------------------------------------------------------------------


def run_splade(nornir, model_dir, out, corpus, n):
    from tokenizers import Tokenizer

    model_dir, out = Path(model_dir), Path(out)
    record = convert(nornir, model_dir, out)
    cfg = json.loads((model_dir / "config.json").read_text())
    w = read_safetensors(model_dir / "model.safetensors")
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=cfg["max_position_embeddings"])
    texts = Path(corpus).read_text(encoding="utf-8").splitlines()[:n]
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    worst, largest = 0.0, 0.0
    for text in texts:
        enc = tok.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        types = np.array([enc.type_ids], dtype=np.int64)
        got = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        expected = reference(w, cfg, ids, mask, types)
        worst = max(worst, float(np.abs(got - expected).max()))
        largest = max(largest, float(np.abs(expected).max()))
    tops = {}
    for sentence in ("The capital of France is Paris.", "How do I install a Python package?", "Rust is a systems programming language."):
        enc = tok.encode(sentence)
        feed = {k: np.array([v], dtype=np.int64) for k, v in (("input_ids", enc.ids), ("attention_mask", enc.attention_mask), ("token_type_ids", enc.type_ids))}
        logits = session.run(None, feed)[0][0]
        weights = np.log1p(np.maximum(logits, 0.0)).max(axis=0)
        top = np.argsort(-weights)[:8]
        tops[sentence] = [[tok.id_to_token(int(i)), round(float(weights[i]), 3)] for i in top]
    return {
        "texts": len(texts),
        "max_abs_diff": worst,
        "largest_logit": largest,
        "ok": worst <= TOLERANCE,
        "operators": dict(record["operators"]),
        "top_terms": tops,
    }


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "synthetic":
        result = run_synthetic(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 7 and sys.argv[1] == "splade":
        result = run_splade(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result, indent=1))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
