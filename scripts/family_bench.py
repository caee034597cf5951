#!/usr/bin/env python3
"""Speed and memory of the encoder families `nornir vector convert` writes, at their published
base sizes, with random weights (the figures depend on the shapes, not on the values).

  family_bench.py speed NORNIR WORK CORPUS TEXTS ROUNDS [FAMILY ...]
      each family converted (fused, the default), then `nornir vector embed` against onnxruntime
      in Python on the same model.onnx (tokenizers, sorted by length, batches of 32, mean
      pooling, L2 norm: sentence-transformers' strategy), the first TEXTS corpus lines truncated
      at 256 tokens, 2 threads each, ROUNDS interleaved rounds: median texts/s of both
  family_bench.py lora NORNIR WORK CORPUS TEXTS ROUNDS
      jina-embeddings-v3 as one graph for every task (task_id chooses the LoRA adapter, applied
      as its low-rank update) against the same network with one adapter merged into its weights
      (what a graph per task would be): `nornir vector embed` texts/s of both, interleaved
  family_bench.py long NORNIR WORK [FAMILY ...]
      different texts of 512, 2,048 and 8,192 tokens (8,192 tokens in all per length) through
      `nornir vector embed` with its default budget: time per token after the load (nornir's
      own figure), wall time and peak RSS
  family_bench.py decoder NORNIR WORK CORPUS TEXTS ROUNDS
      a Qwen3-Embedding-0.6B-shaped checkpoint (random float16 weights, scripts/gpu_check.py's
      writer, BERT's tokenizer for realistic token counts), converted (seconds and peak RSS of
      `nornir vector convert`) and quantized (`nornir vector quantize`); then float32 and int8
      each through `nornir vector embed` and through the Python pipeline on the same graph
      (tokenizers, sorted, batches of 32, last-token pooling, L2 norm; in a child process for its
      peak RSS), ROUNDS interleaved rounds on the first TEXTS corpus lines cut at 128 tokens:
      median texts/s end to end (process start to exit) and after the load (nornir's own
      figure; Python's loop after its session is made), peak RSS, and int8's cosine to float32
  family_bench.py decoder-long NORNIR WORK LAYERS LENGTH [LENGTH ...]
      the Qwen3-Embedding-0.6B shape with LAYERS layers, converted twice: fused (layers attend
      through GroupQueryAttention on a batch without padding) and `--no-fuse` (ONNX's operators
      only: the whole causal matrix, as every decoder graph was before); texts of each LENGTH
      (LENGTH tokens in all, 8,192 at least) through `nornir vector embed`, the two graphs in
      turn: time per token after the load, wall time and peak RSS. The unfused graph is skipped, and says so, where
      its scores alone (heads x length² float32, three times) would pass the free memory
  family_bench.py decoder-convert NORNIR WORK SHAPE DTYPE
      a checkpoint of SHAPE (qwen3-0.6b or qwen3-8b: Qwen3-Embedding's sizes, random float16
      weights) converted with `--dtype DTYPE` (float32, float16, bfloat16): seconds and peak RSS
      of the conversion alone (`cargo build --release -p nornir-convert --example convert_folder`,
      found beside NORNIR) and of `nornir vector convert` (which loads the result in ONNX Runtime
      to check it, where it fits in free memory), the sizes read and written; both
      folders are removed afterwards (the 8B shape needs about 2 x 15 GB of disk while it runs)

Families: jina-v2-base, modernbert-base, nomic-v1.5, gte-base-v1.5, jina-v3. Every folder gets
the default model's tokenizer (BERT's 30,522 tokens; the families' own vocabularies only change
the embedding table) and a mean-pooling sentence-transformers config. Prints one JSON object.
"""

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert_reference as cr  # noqa: E402  (the safetensors writer and the converter call)

HOME = Path(os.environ.get("NORNIR_HOME", Path.home() / ".cache" / "nornir"))
TOKENIZER = HOME / "models" / "all-MiniLM-L6-v2" / "tokenizer.json"
TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]


def base_checkpoint(family, rng):
    """(config, tensors) of `family` at its published base size, N(0, 1/fan-in) weights."""
    w = {}

    def dense(name, n_out, n_in, bias=True):
        w[name + ".weight"] = rng.standard_normal((n_out, n_in), dtype=np.float32) / math.sqrt(n_in)
        if bias:
            w[name + ".bias"] = rng.standard_normal(n_out, dtype=np.float32) * 0.02

    def norm(name, n, bias=True):
        w[name + ".weight"] = np.ones(n, dtype=np.float32)
        if bias:
            w[name + ".bias"] = np.zeros(n, dtype=np.float32)

    def table(name, rows, n):
        w[name] = rng.standard_normal((rows, n), dtype=np.float32)

    if family == "jina-v2-base":
        h, layers, heads, inter = 768, 12, 12, 3072
        cfg = {"architectures": ["JinaBertModel"], "model_type": "bert", "position_embedding_type": "alibi",
               "feed_forward_type": "geglu", "hidden_size": h, "num_hidden_layers": layers,
               "num_attention_heads": heads, "intermediate_size": inter, "vocab_size": 30528,
               "max_position_embeddings": 8192, "type_vocab_size": 2, "layer_norm_eps": 1e-12}
        table("embeddings.word_embeddings.weight", 30528, h)
        table("embeddings.token_type_embeddings.weight", 2, h)
        norm("embeddings.LayerNorm", h)
        for i in range(layers):
            l = f"encoder.layer.{i}."
            for n in ("query", "key", "value"):
                dense(l + "attention.self." + n, h, h)
            dense(l + "attention.output.dense", h, h)
            norm(l + "attention.output.LayerNorm", h)
            dense(l + "mlp.gated_layers", 2 * inter, h, bias=False)
            dense(l + "mlp.wo", h, inter)
            norm(l + "mlp.layernorm", h)
    elif family == "modernbert-base":
        h, layers, heads, inter = 768, 22, 12, 1152
        cfg = {"architectures": ["ModernBertModel"], "model_type": "modernbert", "hidden_size": h,
               "num_hidden_layers": layers, "num_attention_heads": heads, "intermediate_size": inter,
               "vocab_size": 50368, "max_position_embeddings": 8192, "global_rope_theta": 160000.0,
               "local_rope_theta": 10000.0, "global_attn_every_n_layers": 3, "local_attention": 128,
               "norm_eps": 1e-5, "norm_bias": False, "attention_bias": False, "mlp_bias": False,
               "hidden_activation": "gelu", "pad_token_id": 0}
        table("embeddings.tok_embeddings.weight", 50368, h)
        norm("embeddings.norm", h, bias=False)
        for i in range(layers):
            l = f"layers.{i}."
            if i:
                norm(l + "attn_norm", h, bias=False)
            dense(l + "attn.Wqkv", 3 * h, h, bias=False)
            dense(l + "attn.Wo", h, h, bias=False)
            norm(l + "mlp_norm", h, bias=False)
            dense(l + "mlp.Wi", 2 * inter, h, bias=False)
            dense(l + "mlp.Wo", h, inter, bias=False)
        norm("final_norm", h, bias=False)
    elif family == "nomic-v1.5":
        h, layers, heads, inter = 768, 12, 12, 3072
        cfg = {"architectures": ["NomicBertModel"], "model_type": "nomic_bert", "n_embd": h, "n_layer": layers,
               "n_head": heads, "n_inner": inter, "vocab_size": 30528, "n_positions": 8192,
               "type_vocab_size": 2, "layer_norm_epsilon": 1e-12, "activation_function": "swiglu",
               "rotary_emb_fraction": 1.0, "rotary_emb_base": 1000, "rotary_emb_interleaved": False,
               "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "prenorm": False}
        table("embeddings.word_embeddings.weight", 30528, h)
        table("embeddings.token_type_embeddings.weight", 2, h)
        norm("emb_ln", h)
        for i in range(layers):
            l = f"encoder.layers.{i}."
            dense(l + "attn.Wqkv", 3 * h, h, bias=False)
            dense(l + "attn.out_proj", h, h, bias=False)
            norm(l + "norm1", h)
            dense(l + "mlp.fc11", inter, h, bias=False)
            dense(l + "mlp.fc12", inter, h, bias=False)
            dense(l + "mlp.fc2", h, inter, bias=False)
            norm(l + "norm2", h)
    elif family == "gte-base-v1.5":
        h, layers, heads, inter = 768, 12, 12, 3072
        cfg = {"architectures": ["NewModel"], "model_type": "new", "hidden_size": h, "num_hidden_layers": layers,
               "num_attention_heads": heads, "intermediate_size": inter, "vocab_size": 30528,
               "max_position_embeddings": 8192, "type_vocab_size": 0, "layer_norm_eps": 1e-12,
               "hidden_act": "gelu", "rope_theta": 500000, "rope_scaling": {"type": "ntk", "factor": 2.0}}
        table("embeddings.word_embeddings.weight", 30528, h)
        norm("embeddings.LayerNorm", h)
        for i in range(layers):
            l = f"encoder.layer.{i}."
            dense(l + "attention.qkv_proj", 3 * h, h)
            dense(l + "attention.o_proj", h, h)
            norm(l + "attn_ln", h)
            dense(l + "mlp.up_gate_proj", 2 * inter, h, bias=False)
            dense(l + "mlp.down_proj", h, inter)
            norm(l + "mlp_ln", h)
    elif family == "jina-v3":
        h, layers, heads, inter, rank, vocab = 1024, 24, 16, 4096, 4, 30528
        cfg = {"architectures": ["XLMRobertaLoRA"], "model_type": "xlm-roberta", "position_embedding_type": "rotary",
               "rotary_emb_base": 20000.0, "hidden_size": h, "num_hidden_layers": layers,
               "num_attention_heads": heads, "intermediate_size": inter, "vocab_size": vocab,
               "max_position_embeddings": 8194, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
               "hidden_act": "gelu", "pad_token_id": 1, "lora_adaptations": TASKS, "lora_rank": rank,
               "lora_alpha": 1.0}
        n = len(TASKS)

        def adapted(name, n_out, n_in):
            dense(name, n_out, n_in)
            w[name + ".parametrizations.weight.original"] = w.pop(name + ".weight")
            w[name + ".parametrizations.weight.0.lora_A"] = rng.standard_normal((n, rank, n_in), dtype=np.float32) * 0.01
            w[name + ".parametrizations.weight.0.lora_B"] = rng.standard_normal((n, n_out, rank), dtype=np.float32) * 0.01

        for name, rows in (("word_embeddings", vocab), ("token_type_embeddings", 1)):
            p = f"roberta.embeddings.{name}.parametrizations.weight."
            w[p + "original"] = rng.standard_normal((rows, h), dtype=np.float32)
            w[p + "0.lora_A"] = rng.standard_normal((n, rows, rank), dtype=np.float32) * 0.01
            w[p + "0.lora_B"] = rng.standard_normal((n, rank, h), dtype=np.float32) * 0.01
        norm("roberta.emb_ln", h)
        for i in range(layers):
            l = f"roberta.encoder.layers.{i}."
            adapted(l + "mixer.Wqkv", 3 * h, h)
            adapted(l + "mixer.out_proj", h, h)
            norm(l + "norm1", h)
            adapted(l + "mlp.fc1", inter, h)
            adapted(l + "mlp.fc2", h, inter)
            norm(l + "norm2", h)
    elif family == "jina-v3-merged":
        # jina-v3 with one adapter merged into its weights: the same shapes, no LoRA, no task_id.
        cfg, lora = base_checkpoint("jina-v3", rng)
        for key in ("lora_adaptations", "lora_rank", "lora_alpha"):
            cfg.pop(key)
        w = {k.replace(".parametrizations.weight.original", ".weight"): v for k, v in lora.items() if "lora_" not in k}
    else:
        raise SystemExit(f"unknown family {family}")
    return cfg, w


def write_source(folder, family, max_length):
    """The checkpoint folder, as a sentence-transformers folder of a mean-pooling embedder."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "model.safetensors").is_file():
        cfg, w = base_checkpoint(family, np.random.default_rng(7))
        (folder / "config.json").write_text(json.dumps(cfg))
        cr.write_safetensors(folder / "model.safetensors", w, "F32")
    write_mean_pooling_files(folder, max_length)


def write_mean_pooling_files(folder, max_length):
    """The default tokenizer (no truncation or padding) and a mean-pooling, normalising
    sentence-transformers configuration of `max_length` tokens, beside a model in `folder`."""
    tok = json.loads(TOKENIZER.read_text())
    tok["truncation"], tok["padding"] = None, None
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length}))


def nornir_embed(nornir, model, texts_file, extra=(), compute=None):
    """Seconds and peak RSS (MiB) of `nornir vector embed` on a file, vectors to /dev/null; with
    a list for `compute`, the seconds nornir says the texts took after loading are appended."""
    start = time.perf_counter()
    done = subprocess.run(
        [nornir, "vector", "embed", "-v", "--quiet", "--device", "cpu", "--format", "f32", "--threads", "2",
         "--model", str(model), "--input", str(texts_file), "--output", "/dev/null", *extra],
        capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"nornir vector embed failed: {done.stderr.strip()}")
    rss = re.search(r"peak RSS ([0-9.]+) MiB", done.stderr)
    if compute is not None:
        compute.append(float(re.search(r"texts in ([0-9.]+) s", done.stderr).group(1)))
    return seconds, float(rss.group(1)) if rss else None


def python_embed(model, texts, task, pooling="mean", max_length=256, loaded=None):
    """sentence-transformers' strategy on onnxruntime: seconds for `texts`; with a list for
    `loaded`, the seconds it took to load the tokenizer and the session are appended."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    start = time.perf_counter()
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(model / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    if loaded is not None:
        loaded.append(time.perf_counter() - start)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = [None] * len(texts)
    for b in range(0, len(order), 32):
        rows = order[b : b + 32]
        encs = tok.encode_batch([texts[i] for i in rows])
        longest = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), longest), dtype=np.int64)
        mask = np.zeros_like(ids)
        for k, e in enumerate(encs):
            ids[k, : len(e.ids)] = e.ids
            mask[k, : len(e.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros_like(ids)
        if "task_id" in names:
            feed["task_id"] = np.array(TASKS.index(task), dtype=np.int64)
        hidden = sess.run(None, feed)[0]
        m = mask[:, :, None].astype(np.float32)
        if pooling == "last":
            pooled = hidden[np.arange(len(encs)), mask.sum(1) - 1]
        else:
            pooled = (hidden * m).sum(1) / m.sum(1)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        for k, i in enumerate(rows):
            out[i] = pooled[k]
    return time.perf_counter() - start


def converted(nornir, work, family, max_length):
    source, out = work / f"{family}-source", work / family
    write_source(source, family, max_length)
    if not (out / "model.onnx").is_file():
        cr.convert(nornir, source, out)
    write_source(out, family, max_length)  # the pooling and length this run measures with
    return out


def speed(nornir, work, corpus, n, rounds, families):
    texts = Path(corpus).read_text(encoding="utf-8").splitlines()[:n]
    texts_file = work / "texts.txt"
    texts_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    results = {}
    for family in families:
        model = converted(nornir, work, family, 256)
        task = ["--task", "retrieval.passage"] if family == "jina-v3" else []
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(nornir_embed(nornir, model, texts_file, ["--max-length", "256", *task])[0])
            theirs.append(python_embed(model, texts, "retrieval.passage"))
        a, b = float(np.median(ours)), float(np.median(theirs))
        results[family] = {"nornir_texts_per_s": round(n / a, 1), "python_onnxruntime_texts_per_s": round(n / b, 1),
                           "ratio": round(b / a, 2), "nornir_s": ours, "python_s": theirs}
        print(json.dumps({family: results[family]}), file=sys.stderr)
    return {"texts": n, "rounds": rounds, "threads": 2, "families": results}


def lora(nornir, work, corpus, n, rounds):
    texts = Path(corpus).read_text(encoding="utf-8").splitlines()[:n]
    texts_file = work / "texts.txt"
    texts_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    graphs = {"task_id": converted(nornir, work, "jina-v3", 256), "merged": converted(nornir, work, "jina-v3-merged", 256)}
    times = {k: [] for k in graphs}
    for _ in range(rounds):
        for k, model in graphs.items():
            task = ["--task", "retrieval.passage"] if k == "task_id" else []
            times[k].append(nornir_embed(nornir, model, texts_file, ["--max-length", "256", *task])[0])
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"texts": n, "rounds": rounds, "seconds": times,
            "texts_per_s": {k: round(n / v, 2) for k, v in med.items()},
            "task_id_graph_time_over_merged": round(med["task_id"] / med["merged"], 3),
            "bytes": {k: (m / "model.onnx").stat().st_size for k, m in graphs.items()}}


# Words that BERT's tokenizer keeps whole: a long text of them has one token per word.
WORDS = "the cat sat on a mat and looked at its house near an old tree by river".split()


def long_texts(work, length, count):
    """A file of `count` different texts of `length` tokens ([CLS], length - 2 words, [SEP]):
    different, because nornir embeds identical texts of a call once."""
    f = work / f"long-{length}.txt"
    f.write_text("".join(" ".join(WORDS[(j + k) % len(WORDS)] for j in range(length - 2)) + "\n"
                         for k in range(count)))
    return f


def long_row(nornir, model, f, count, length):
    """`nornir vector embed` on `f`: wall seconds, the seconds nornir says the texts took after
    loading, ms per token of those, and peak RSS."""
    compute = []
    seconds, rss = nornir_embed(nornir, model, f, ["--max-length", str(length)], compute=compute)
    return {"seconds": round(seconds, 2), "compute_seconds": round(compute[0], 2),
            "ms_per_token": round(1000 * compute[0] / (count * length), 3), "peak_rss_mib": rss}


def long_inputs(nornir, work, families):
    results = {}
    for family in families:
        model = converted(nornir, work, family, 8192)
        rows = {}
        for length in (512, 2048, 8192):
            count = 8192 // length
            row = long_row(nornir, model, long_texts(work, length, count), count, length)
            rows[str(length)] = {"texts": count, **row}
            print(json.dumps({family: {str(length): rows[str(length)]}}), file=sys.stderr)
        results[family] = rows
    return results


def timed(argv):
    """Runs `argv`; its seconds and peak RSS (MiB) as `/usr/bin/time -v` reports it."""
    return timed_output(argv)[:2]


def timed_output(argv):
    """`timed`, and what the command printed."""
    elapsed, rss, done = timed_run(argv)
    return elapsed, rss, done.stdout


def timed_run(argv):
    """Runs `argv`: its seconds, peak RSS (MiB) as `/usr/bin/time -v` reports it, and the
    finished process (stdout and stderr); a failure stops the bench with its message."""
    import tempfile

    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        # time's report goes to its own file, so a failure shows the command's own message.
        done = subprocess.run(["/usr/bin/time", "-v", "-o", report.name, *argv], capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        measured = report.read()
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed: {done.stderr.strip()[-500:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", measured)
    return elapsed, int(rss.group(1)) / 1024 if rss else None, done


def decoder(nornir, work, corpus, n, rounds):
    import gpu_check

    source, f32, int8 = work / "qwen3-0.6b-source", work / "qwen3-0.6b", work / "qwen3-0.6b-int8"
    if not (source / "model.safetensors").is_file():
        with contextlib.redirect_stdout(sys.stderr):  # it prints the width; stdout is the JSON
            gpu_check.decoder_checkpoint(str(source), "qwen3-0.6b")
    tok = json.loads(TOKENIZER.read_text())
    tok["truncation"], tok["padding"] = None, None
    (source / "tokenizer.json").write_text(json.dumps(tok))
    convert_s, convert_rss = timed([nornir, "vector", "convert", "--model", str(source), "--output", str(f32), "--force"])
    quantize_s, _ = timed([nornir, "vector", "quantize", "--model", str(f32), "--output", str(int8), "--force"])
    texts = Path(corpus).read_text(encoding="utf-8").splitlines()[:n]
    texts_file = work / "texts.txt"
    texts_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    child = [sys.executable, __file__, "python-embed"]
    names = ("nornir_float32", "python_float32", "nornir_int8", "python_int8")
    runs, computes = {k: [] for k in names}, {k: [] for k in names}
    rss = {}
    for _ in range(rounds):
        for precision, model in (("float32", f32), ("int8", int8)):
            seconds, peak = nornir_embed(nornir, model, texts_file, ["--max-length", "128"],
                                         compute=computes[f"nornir_{precision}"])
            runs[f"nornir_{precision}"].append(seconds)
            rss[f"nornir_{precision}"] = peak
            seconds, peak, printed = timed_output([*child, str(model), str(texts_file)])
            runs[f"python_{precision}"].append(seconds)
            computes[f"python_{precision}"].append(json.loads(printed)["compute"])
            rss[f"python_{precision}"] = peak
    vectors = {}
    for precision, model in (("float32", f32), ("int8", int8)):
        out = work / f"{precision}.f32"
        subprocess.run([nornir, "vector", "embed", "--quiet", "--device", "cpu", "--format", "f32", "--max-length", "128",
                        "--model", str(model), "--input", str(texts_file), "--output", str(out)], check=True)
        vectors[precision] = np.fromfile(out, dtype=np.float32).reshape(len(texts), -1)
    cos = (vectors["float32"] * vectors["int8"]).sum(1)
    med = {k: float(np.median(v)) for k, v in runs.items()}
    med_compute = {k: float(np.median(v)) for k, v in computes.items()}
    return {
        "texts": n, "rounds": rounds, "threads": 2, "max_length": 128,
        "convert": {"seconds": round(convert_s, 1), "peak_rss_mib": convert_rss},
        "quantize_seconds": round(quantize_s, 1),
        "texts_per_s": {k: round(n / v, 2) for k, v in med.items()},
        "nornir_over_python": {p: round(med[f"python_{p}"] / med[f"nornir_{p}"], 2) for p in ("float32", "int8")},
        "after_load_texts_per_s": {k: round(n / v, 2) for k, v in med_compute.items()},
        "after_load_nornir_over_python": {
            p: round(med_compute[f"python_{p}"] / med_compute[f"nornir_{p}"], 2) for p in ("float32", "int8")},
        "peak_rss_mib": rss,
        "int8_cosine_to_float32": {"min": float(cos.min()), "mean": float(cos.mean())},
        "seconds": runs,
        "seconds_after_load": computes,
    }


def decoder_long(nornir, work, layers, lengths):
    import gpu_check

    shape = f"qwen3-0.6b-{layers}-layers"
    gpu_check.DECODER_SHAPES[shape] = dict(gpu_check.DECODER_SHAPES["qwen3-0.6b"], num_hidden_layers=layers)
    heads = gpu_check.DECODER_SHAPES[shape]["num_attention_heads"]
    source = work / f"{shape}-source"
    if not (source / "model.safetensors").is_file():
        with contextlib.redirect_stdout(sys.stderr):  # it prints the width; stdout is the JSON
            gpu_check.decoder_checkpoint(str(source), shape)
    tok = json.loads(TOKENIZER.read_text())
    tok["truncation"], tok["padding"] = None, None
    (source / "tokenizer.json").write_text(json.dumps(tok))
    graphs = {"fused": work / f"{shape}-fused", "unfused": work / f"{shape}-unfused"}
    for name, out in graphs.items():
        if not (out / "model.onnx").is_file():
            extra = [] if name == "fused" else ["--no-fuse"]
            subprocess.run([nornir, "vector", "convert", "--model", str(source), "--output", str(out), "--force",
                            *extra], check=True, capture_output=True)
    available = int(re.search(r"MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text()).group(1)) * 1024
    rows = {}
    for length in lengths:
        count = max(1, 8192 // length)
        f = long_texts(work, length, count)
        row = {"texts": count}
        for name, model in graphs.items():
            if name == "unfused" and 3 * 4 * heads * length * length > available:
                row[name] = f"skipped: {3 * 4 * heads * length * length / 2**30:.0f} GiB of scores > {available / 2**30:.0f} GiB free"
                continue
            row[name] = long_row(nornir, model, f, count, length)
        rows[str(length)] = row
        print(json.dumps({str(length): row}), file=sys.stderr)
    return {"shape": shape, "layers": layers, "threads": 2, "lengths": rows}


def decoder_convert(nornir, work, shape, dtype):
    import shutil

    import gpu_check

    source, out = work / f"{shape}-source", work / f"{shape}-{dtype}"
    try:
        if not (source / "model.safetensors").is_file():
            with contextlib.redirect_stdout(sys.stderr):  # it prints the width; stdout is the JSON
                gpu_check.decoder_checkpoint(str(source), shape)
        size = lambda folder, names: sum((folder / n).stat().st_size for n in names if (folder / n).is_file())
        result = {"shape": shape, "dtype": dtype, "checkpoint_bytes": size(source, ["model.safetensors"]),
                  "config": gpu_check.DECODER_SHAPES[shape]}
        # The conversion alone (the example beside the binary, when built), then the command,
        # whose check loads the result in ONNX Runtime where it fits in free memory.
        alone = Path(nornir).parent / "examples" / "convert_folder"
        if alone.is_file():
            seconds, peak = timed([str(alone), str(source), str(out), "--dtype", dtype])
            result["conversion_alone"] = {"seconds": round(seconds, 1), "peak_rss_mib": peak}
        seconds, peak, printed = timed_output([nornir, "vector", "convert", "--model", str(source), "--output",
                                               str(out), "--dtype", dtype, "--force", "--json"])
        record = json.loads(printed)
        result["nornir_vector_convert"] = {"seconds": round(seconds, 1), "peak_rss_mib": peak,
                                           "check": record.get("check")}
        result["written_bytes"] = size(out, ["model.onnx", "model.onnx_data"])
        return result
    finally:
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "python-embed":
        texts = Path(sys.argv[3]).read_text(encoding="utf-8").splitlines()
        loaded = []
        total = python_embed(Path(sys.argv[2]), texts, None, pooling="last", max_length=128, loaded=loaded)
        print(json.dumps({"total": total, "compute": total - loaded[0]}))
        return
    if len(sys.argv) == 7 and sys.argv[1] == "decoder":
        work = Path(sys.argv[3])
        work.mkdir(parents=True, exist_ok=True)
        print(json.dumps(decoder(sys.argv[2], work, sys.argv[4], int(sys.argv[5]), int(sys.argv[6])), indent=1))
        return
    if len(sys.argv) >= 6 and sys.argv[1] == "decoder-long":
        work = Path(sys.argv[3])
        work.mkdir(parents=True, exist_ok=True)
        print(json.dumps(decoder_long(sys.argv[2], work, int(sys.argv[4]), [int(a) for a in sys.argv[5:]]), indent=1))
        return
    if len(sys.argv) == 6 and sys.argv[1] == "decoder-convert":
        work = Path(sys.argv[3])
        work.mkdir(parents=True, exist_ok=True)
        print(json.dumps(decoder_convert(sys.argv[2], work, sys.argv[4], sys.argv[5]), indent=1))
        return
    if len(sys.argv) >= 7 and sys.argv[1] == "speed":
        work = Path(sys.argv[3])
        work.mkdir(parents=True, exist_ok=True)
        families = sys.argv[7:] or ["jina-v2-base", "modernbert-base", "nomic-v1.5", "gte-base-v1.5", "jina-v3"]
        result = speed(sys.argv[2], work, sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), families)
    elif len(sys.argv) == 7 and sys.argv[1] == "lora":
        work = Path(sys.argv[3])
        work.mkdir(parents=True, exist_ok=True)
        result = lora(sys.argv[2], work, sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "long":
        work = Path(sys.argv[3])
        work.mkdir(parents=True, exist_ok=True)
        result = long_inputs(sys.argv[2], work, sys.argv[4:] or ["modernbert-base", "jina-v2-base"])
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
