#!/usr/bin/env python3
"""nornir's own CPU kernels run where they are registered, and a model's portable body elsewhere.

  kernel_check.py alibi NORNIR WORK
      writes a small model folder whose one attention layer is nornir's `ai.nornir.AlibiAttention`
      node (the converter writes one per JinaBERT layer), with a model-local function body that is
      deliberately NOT attention (it passes the values through): a runtime without nornir's
      kernel runs that body. `nornir vector embed --device cpu` must give ALiBi attention as NumPy
      computes it in float64 from the definition (softmax(q k^T / sqrt(d) - slope |i - j|) v over
      the kept keys, biases added), mean-pooled and normalised, and not the body's vectors; texts
      embedded in one padded batch must equal the same texts embedded alone; onnxruntime in
      Python, which has no such kernel, must run the body; and `nornir vector quantize` must make
      the folder int8 (its calibration reads the shapes after the node) with vectors near.

  kernel_check.py attention NORNIR WORK
      the same for `ai.nornir.Attention` (the converter writes one per global layer of every other
      encoder family): inputs without the slopes, the `num_heads` attribute, and attention without
      ALiBi's bias as the reference; and the model with a `num_heads` its width does not divide
      must be refused in one line (exit 2), writing nothing.

  kernel_check.py window NORNIR WORK
      the same for `ai.nornir.WindowAttention` (the converter writes one per ModernBERT local
      layer): `Attention`'s inputs and attributes and `window` (150: query i attends to the keys
      j with |i - j| <= 150, so texts of 600 and 700 tokens reach past it), attention within the
      window as the reference; and the model with a negative `window` must be refused in one line
      (exit 2), writing nothing.

Texts of 3 to 700 tokens cross the kernel's tiles (256 queries x 512 keys). Prints one JSON
object; exits 1 when not ok. Run it with the bench venv's Python (numpy, onnx, onnxruntime,
tokenizers).
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import family_bench  # noqa: E402  (the sentence-transformers files beside a model)

TOKENIZER = family_bench.TOKENIZER
HEADS, HEAD = 4, 8
WINDOW = 150
WIDTH = HEADS * HEAD
EPS = 1e-5
WORDS = "the cat sat on a mat and looked at its house near an old tree by river".split()
LENGTHS = [3, 40, 255, 257, 600, 700]


def slopes(n):
    """ALiBi's slopes for a power-of-two head count: start^1 .. start^n, start = 2^(-8/n)."""
    start = 2 ** (-8 / n)
    return np.array([start ** (i + 1) for i in range(n)])


def write_folder(folder, rng, op):
    """The model folder for operator `op` ("AlibiAttention", "Attention" or "WindowAttention");
    its weights."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = json.loads(TOKENIZER.read_text())["model"]["vocab"]
    w = {
        "embedding": rng.standard_normal((len(vocab), WIDTH)).astype(np.float32),
        "wq": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
        "wk": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
        "wv": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
        "qkv_bias": (0.1 * rng.standard_normal(3 * WIDTH)).astype(np.float32),
        "negative_slopes": (-slopes(HEADS)).astype(np.float32),
        "norm_scale": (1 + 0.1 * rng.standard_normal(WIDTH)).astype(np.float32),
        "norm_shift": (0.1 * rng.standard_normal(WIDTH)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["embedding", "input_ids"], ["embedded"]),
        helper.make_node("LayerNormalization", ["embedded", "norm_scale", "norm_shift"], ["x"], axis=-1, epsilon=EPS),
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
    ]
    alibi = op == "AlibiAttention"
    actual = ["q", "k", "v", "attention_mask"] + (["negative_slopes"] if alibi else []) + ["qkv_bias"]
    attributes = {"AlibiAttention": {}, "Attention": {"num_heads": HEADS},
                  "WindowAttention": {"num_heads": HEADS, "window": WINDOW}}[op]
    nodes.append(helper.make_node(op, actual, ["last_hidden_state"], domain="ai.nornir", **attributes))
    formal = ["query", "key", "value", "attention_mask"] + (["negative_slopes"] if alibi else []) + ["qkv_bias"]
    # The body a runtime without nornir's kernel runs: the values as they are (not attention).
    body = helper.make_function("ai.nornir", op, formal, ["y"], [helper.make_node("Identity", ["value"], ["y"])],
                                [helper.make_opsetid("", 17)], attributes=list(attributes))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
              for n in ("input_ids", "attention_mask")]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", WIDTH])
    graph = helper.make_graph(nodes, "alibi_kernel_check", inputs, [output],
                              [onnx.numpy_helper.from_array(a, n) for n, a in w.items()])
    model = helper.make_model(graph, functions=[body],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.nornir", 1)])
    model.ir_version = 8
    onnx.save(model, folder / "model.onnx")
    family_bench.write_mean_pooling_files(folder, 1024)
    return w


def texts():
    """One text per length in LENGTHS tokens ([CLS], words, [SEP]; each word one token)."""
    return [" ".join(WORDS[(j + k) % len(WORDS)] for j in range(n - 2)) for k, n in enumerate(LENGTHS)]


def normed(w, ids):
    """The layer norm of the tokens' embedding rows, in float64."""
    e = w["embedding"][ids].astype(np.float64)
    e = (e - e.mean(axis=1, keepdims=True)) / np.sqrt(e.var(axis=1, keepdims=True) + EPS)
    return e * w["norm_scale"] + w["norm_shift"]


def attention(w, ids, op):
    """Attention of one text's tokens in float64 as operator `op` defines it (ALiBi's bias, a
    window, or neither), mean-pooled and normalised."""
    x = normed(w, ids)
    bias = w["qkv_bias"].astype(np.float64)
    q, k, v = (x @ w[m].astype(np.float64) + bias[i * WIDTH:(i + 1) * WIDTH] for i, m in enumerate(("wq", "wk", "wv")))
    n = len(ids)
    distance = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    outside = np.where(distance > WINDOW, -np.inf, 0.0) if op == "WindowAttention" else np.zeros((n, n))
    if op != "AlibiAttention":
        distance = np.zeros((n, n))
    out = np.zeros((n, WIDTH))
    for h in range(HEADS):
        cols = slice(h * HEAD, (h + 1) * HEAD)
        scores = q[:, cols] @ k[:, cols].T / np.sqrt(HEAD) + w["negative_slopes"][h] * distance + outside
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, cols] = (p / p.sum(axis=1, keepdims=True)) @ v[:, cols]
    return normalised(out.mean(axis=0))


def the_body(w, ids):
    """What the function's body gives: the values (before their bias), mean-pooled and normalised."""
    x = normed(w, ids)
    return normalised((x @ w["wv"].astype(np.float64)).mean(axis=0))


def normalised(v):
    return v / np.linalg.norm(v)


def embed(nornir, model, lines, out):
    src = out.with_suffix(".txt")
    src.write_text("".join(line + "\n" for line in lines))
    subprocess.run([nornir, "vector", "embed", "--quiet", "--device", "cpu", "--format", "f32", "--model", str(model),
                    "--input", str(src), "--output", str(out)], check=True)
    return np.fromfile(out, dtype="<f4").reshape(len(lines), WIDTH)


def run(op, nornir, work):
    from tokenizers import Tokenizer
    import onnxruntime as ort

    work = Path(work)
    model = work / f"{op}-kernel-model"
    w = write_folder(model, np.random.default_rng(11), op)
    lines = texts()
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    ids = [tokenizer.encode(t).ids for t in lines]
    batched = embed(nornir, model, lines, work / "batched.f32")
    alone = np.concatenate([embed(nornir, model, [t], work / f"alone-{i}.f32") for i, t in enumerate(lines)])
    want = np.array([attention(w, i, op) for i in ids])
    body = np.array([the_body(w, i) for i in ids])
    session = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    python = session.run(None, {"input_ids": np.array([ids[0]]), "attention_mask": np.ones((1, len(ids[0])), np.int64)})[0]
    # The quantizer's calibration reads the shapes after the node (the kernel infers its output's).
    subprocess.run([nornir, "vector", "quantize", "--quiet", "--model", str(model), "--output", str(work / "int8")],
                   check=True)
    int8 = embed(nornir, work / "int8", lines, work / "int8.f32")
    result = {
        "tokens": [len(i) for i in ids],
        "int8_min_cosine_to_float32": float((int8 * batched).sum(axis=1).min()),
        "max_abs_diff_to_attention": float(np.abs(batched - want).max()),
        "min_abs_diff_to_the_body": float(np.abs(batched - body).max(axis=1).min()),
        "batched_vs_alone_max_abs_diff": float(np.abs(batched - alone).max()),
        "python_onnxruntime_runs_the_body": float(np.abs(normalised(python[0].mean(axis=0)) - body[0]).max()),
    }
    if op == "Attention":
        result["wrong_num_heads"] = refused(nornir, model, work, "Attention", "num_heads", 7, "7 heads")
    if op == "WindowAttention":
        result["negative_window"] = refused(nornir, model, work, op, "window", -1, "window is -1")
    result["ok"] = bool(result["tokens"] == LENGTHS and result["max_abs_diff_to_attention"] < 1e-5
                        and result["min_abs_diff_to_the_body"] > 1e-2 and result["batched_vs_alone_max_abs_diff"] < 1e-6
                        and result["python_onnxruntime_runs_the_body"] < 1e-5
                        and result["int8_min_cosine_to_float32"] > 0.99
                        and result.get("wrong_num_heads", {"refused": True})["refused"]
                        and result.get("negative_window", {"refused": True})["refused"])
    return result


def refused(nornir, model, work, op, attribute, value, says):
    """The model with `op`'s `attribute` set to `value` (`num_heads` 7, which its width of 32
    is not a multiple of; a negative `window`): refused in one line that `says` so, with exit 2,
    and no output file."""
    broken = work / f"wrong-{attribute}"
    subprocess.run(["cp", "-r", str(model), str(broken)], check=True)
    m = onnx.load(broken / "model.onnx")
    node = next(n for n in m.graph.node if n.op_type == op)
    next(a for a in node.attribute if a.name == attribute).i = value
    onnx.save(m, broken / "model.onnx")
    out = work / f"wrong-{attribute}.f32"
    done = subprocess.run([nornir, "vector", "embed", "--device", "cpu", "--model", str(broken), "--output", str(out),
                           "a text"], capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    return {"exit": done.returncode, "stderr": lines, "refused": done.returncode == 2 and len(lines) == 1
            and says in lines[0] and not out.exists()}


def main():
    ops = {"alibi": "AlibiAttention", "attention": "Attention", "window": "WindowAttention"}
    if len(sys.argv) != 4 or sys.argv[1] not in ops:
        sys.exit(__doc__)
    result = run(ops[sys.argv[1]], sys.argv[2], sys.argv[3])
    print(json.dumps(result, indent=1))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
