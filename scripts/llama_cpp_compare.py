#!/usr/bin/env python3
"""nornir against llama.cpp on the same Qwen3-Embedding-0.6B-shaped decoder, the engine most
people run Qwen3-Embedding with on a CPU.

  llama_cpp_compare.py build SDIST BUILD
      llama.cpp's llama-embedding and llama-quantize, built with cmake and ninja (their PyPI
      wheels) from the tree vendored in llama-cpp-python's source package SDIST (PyPI has no
      wheel of llama.cpp's tools), CPU only, native instructions, into BUILD
  llama_cpp_compare.py run NORNIR BUILD WORK CORPUS TEXTS ROUNDS
      one checkpoint (scripts/gpu_check.py's writer: Qwen3-Embedding-0.6B's sizes, random float16
      weights, BERT's 30,522-token vocabulary so that both engines read the same tokens) as
      nornir converts it (float32; `nornir vector quantize`: int8) and as GGUF written here
      with the numpy-only `gguf` package under llama.cpp's Qwen3 tensor names (F32 and F16;
      `llama-quantize`: Q8_0). The first TEXTS corpus lines of at most 128 tokens, embedded by
      `nornir vector embed` and `llama-embedding --pooling last --embd-normalize 2`, 2 threads
      each, ROUNDS rounds in turn: median texts/s and tokens/s after the load (nornir's own
      figure; llama.cpp's from its first batch to its perf report) and end to end, peak RSS,
      and the cosine of each text's vectors between the engines (float32 against F32, int8
      against Q8_0)

Run it with the bench venv (`cargo xtask test` makes it: numpy, tokenizers) after
`pip install gguf cmake ninja` there. Prints one JSON object.
"""

import contextlib
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import family_bench as fb  # noqa: E402  (the timed runs and nornir's embed call)
import gpu_check  # noqa: E402  (the checkpoint writer)

SHAPE = "qwen3-0.6b-bert-vocabulary"
MAX_TOKENS = 128


def build(sdist, out):
    out = Path(out)
    src = out / "src"
    if not src.is_dir():
        with tarfile.open(sdist) as tar:
            tar.extractall(src, filter="data")
    tree = next(src.glob("*/vendor/llama.cpp"))
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
             "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_OPENMP=ON", "-DBUILD_SHARED_LIBS=OFF"]
    # cmake and ninja report on stderr: stdout is the JSON
    subprocess.run(["cmake", "-S", str(tree), "-B", str(out / "build"), "-G", "Ninja", *flags], check=True,
                   stdout=sys.stderr)
    subprocess.run(["cmake", "--build", str(out / "build"), "-j", "2", "--target", "llama-embedding",
                    "llama-quantize"], check=True, stdout=sys.stderr)
    return {"tree": str(tree), "bin": str(out / "build" / "bin")}


def write_gguf(source, path, dtype):
    """The checkpoint in `source` as GGUF: llama.cpp's Qwen3 names and keys, linear weights and
    the embedding table in `dtype` (F32 or F16), norms in F32, BERT's vocabulary (llama.cpp's
    WordPiece: [CLS] text [SEP]), last-token pooling as Qwen3-Embedding's GGUF files say."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((source / "config.json").read_text())
    w = load_file(str(source / "model.safetensors"))
    tok = json.loads((source / "tokenizer.json").read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {t["content"] for t in tok.get("added_tokens", []) if t.get("special")}
    tokens, types = [], []
    for text, _ in vocab:
        if text in special:
            tokens.append(text)
            types.append(gguf.TokenType.CONTROL)
        else:
            # llama.cpp's WordPiece reads "##x" as "x" and a word start as "\u2581x".
            tokens.append(text[2:] if text.startswith("##") else "\u2581" + text)
            types.append(gguf.TokenType.NORMAL)
    writer = gguf.GGUFWriter(str(path), "qwen3")
    writer.add_name(SHAPE)
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_key_length(cfg["head_dim"])
    writer.add_value_length(cfg["head_dim"])
    writer.add_rope_freq_base(float(cfg["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    writer.add_pooling_type(gguf.PoolingType.LAST)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "F16" else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("bert")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_bos_token_id(tok["model"]["vocab"]["[CLS]"])
    writer.add_sep_token_id(tok["model"]["vocab"]["[SEP]"])
    writer.add_unk_token_id(tok["model"]["vocab"]["[UNK]"])
    writer.add_pad_token_id(tok["model"]["vocab"]["[PAD]"])
    big = np.float16 if dtype == "F16" else np.float32
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    writer.add_tensor("token_embd.weight", w["embed_tokens.weight"].astype(big))
    writer.add_tensor("output_norm.weight", w["norm.weight"].astype(np.float32))
    for i in range(cfg["num_hidden_layers"]):
        for hf, ours in names.items():
            t = w[f"layers.{i}.{hf}.weight"]
            writer.add_tensor(f"blk.{i}.{ours}.weight", t.astype(np.float32 if t.ndim == 1 else big))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def short_texts(corpus, tokenizer, n):
    """The first `n` corpus lines of at most MAX_TOKENS tokens (so neither engine cuts one)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_padding()
    tok.no_truncation()
    out, tokens = [], 0
    for line in Path(corpus).read_text(encoding="utf-8").splitlines():
        ids = tok.encode(line).ids
        if line.strip() and len(ids) <= MAX_TOKENS:
            out.append(line)
            tokens += len(ids)
        if len(out) == n:
            break
    return out, tokens


def run(nornir, build_dir, work, corpus, n, rounds):
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(build_dir) / "build" / "bin"
    gpu_check.DECODER_SHAPES[SHAPE] = dict(gpu_check.DECODER_SHAPES["qwen3-0.6b"], vocab_size=30522)
    source = work / f"{SHAPE}-source"
    if not (source / "model.safetensors").is_file():
        with contextlib.redirect_stdout(sys.stderr):
            gpu_check.decoder_checkpoint(str(source), SHAPE)
    tok = json.loads(fb.TOKENIZER.read_text())
    tok["truncation"], tok["padding"] = None, None
    (source / "tokenizer.json").write_text(json.dumps(tok))
    f32, int8 = work / f"{SHAPE}-float32", work / f"{SHAPE}-int8"
    if not (f32 / "model.onnx").is_file():
        subprocess.run([nornir, "vector", "convert", "--model", str(source), "--output", str(f32), "--force"],
                       check=True, capture_output=True)
    if not (int8 / "model.onnx").is_file():
        subprocess.run([nornir, "vector", "quantize", "--model", str(f32), "--output", str(int8), "--force"],
                       check=True, capture_output=True)
    ggufs = {"F32": work / f"{SHAPE}-f32.gguf", "F16": work / f"{SHAPE}-f16.gguf", "Q8_0": work / f"{SHAPE}-q8_0.gguf"}
    for dtype in ("F32", "F16"):
        if not ggufs[dtype].is_file():
            write_gguf(source, ggufs[dtype], dtype)
    if not ggufs["Q8_0"].is_file():
        subprocess.run([str(bin_dir / "llama-quantize"), str(ggufs["F32"]), str(ggufs["Q8_0"]), "Q8_0", "2"],
                       check=True, capture_output=True)
    texts, tokens = short_texts(corpus, source / "tokenizer.json", n)
    texts_file = work / "texts.txt"
    texts_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    runs = {}
    vectors = {}

    def record(name, wall, compute, rss):
        r = runs.setdefault(name, {"wall": [], "compute": [], "peak_rss_mib": 0})
        r["wall"].append(wall)
        r["compute"].append(compute)
        r["peak_rss_mib"] = max(r["peak_rss_mib"], rss or 0)

    for round_ in range(rounds):
        for precision, model in (("float32", f32), ("int8", int8)):
            compute = []
            out = work / f"nornir-{precision}.f32"
            wall, rss = fb.nornir_embed(nornir, model, texts_file, ["--max-length", str(MAX_TOKENS)], compute=compute)
            record(f"nornir {precision}", wall, compute[0], rss)
            if round_ == 0:
                subprocess.run([nornir, "vector", "embed", "--quiet", "--device", "cpu", "--format", "f32",
                                "--threads", "2", "--max-length", str(MAX_TOKENS), "--model", str(model), "--input",
                                str(texts_file), "--output", str(out)], check=True)
                vectors[f"nornir {precision}"] = np.fromfile(out, dtype=np.float32).reshape(len(texts), -1)
        for dtype, g in ggufs.items():
            wall, rss, printed, log = llama_run(bin_dir / "llama-embedding", g, texts_file)
            record(f"llama.cpp {dtype}", wall, after_load(log), rss)
            if round_ == 0:
                vectors[f"llama.cpp {dtype}"] = np.array(json.loads(printed[printed.index("["):]), dtype=np.float32)
    med = {k: {"wall": float(np.median(v["wall"])), "compute": float(np.median(v["compute"]))} for k, v in runs.items()}
    result = {"texts": len(texts), "tokens": tokens, "rounds": rounds, "threads": 2,
              "cpu": cpu_name(), "flags": cpu_flags()}
    result["engines"] = {
        k: {"texts_per_s": round(len(texts) / m["compute"], 2), "tokens_per_s": round(tokens / m["compute"], 1),
            "end_to_end_texts_per_s": round(len(texts) / m["wall"], 2), "peak_rss_mib": runs[k]["peak_rss_mib"],
            "compute_seconds": runs[k]["compute"], "wall_seconds": runs[k]["wall"]}
        for k, m in med.items()}
    ratio = lambda a, b: round(med[b]["compute"] / med[a]["compute"], 2)  # noqa: E731
    result["nornir_over_llama_cpp"] = {"float32 / F32": ratio("nornir float32", "llama.cpp F32"),
                                      "float32 / F16": ratio("nornir float32", "llama.cpp F16"),
                                      "int8 / Q8_0": ratio("nornir int8", "llama.cpp Q8_0")}
    cos = lambda a, b: (vectors[a] * vectors[b]).sum(1)  # noqa: E731
    result["cosine"] = {f"{a} vs {b}": {"min": float(cos(a, b).min()), "mean": float(cos(a, b).mean())}
                        for a, b in (("nornir float32", "llama.cpp F32"), ("nornir float32", "llama.cpp F16"),
                                     ("nornir int8", "llama.cpp Q8_0"), ("nornir float32", "nornir int8"),
                                     ("llama.cpp F32", "llama.cpp Q8_0"))}
    return result


def llama_run(binary, gguf_file, texts_file):
    """`llama-embedding` on the texts: wall seconds, peak RSS (MiB), its stdout (the vectors)
    and its log (stderr, with the perf report, which it prints only with `--perf -v`)."""
    argv = [str(binary), "-m", str(gguf_file), "-f", str(texts_file), "--pooling", "last", "--embd-normalize", "2",
            "-t", "2", "-tb", "2", "-c", "4096", "-b", "4096", "-ub", "512", "-ngl", "0",
            "--embd-output-format", "array", "--perf", "-v"]
    wall, rss, done = fb.timed_run(argv)
    return wall, rss, done.stdout, done.stderr


def after_load(log):
    """Seconds from llama-embedding's first batch to its perf report, read from its log's
    timestamps (minutes.seconds.milliseconds.microseconds): the time after the load. (Its own
    "prompt eval time" counts almost nothing for embeddings in this version: 1.7 ms for 2,878
    tokens.)"""

    def stamp(marker):
        line = next(l for l in log.splitlines() if marker in l)
        m, s, ms, us = (int(x) for x in re.match(r"\s*(\d+)\.(\d+)\.(\d+)\.(\d+) ", line).groups())
        return 60 * m + s + ms / 1e3 + us / 1e6

    return stamp("llama_perf_context_print:") - stamp("batch_decode:")


def cpu_name():
    info = Path("/proc/cpuinfo").read_text()
    m = re.search(r"model name\s*:\s*(.*)", info)
    return m.group(1).strip() if m else "unknown"


def cpu_flags():
    info = Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    return sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "build":
        print(json.dumps(build(sys.argv[2], sys.argv[3]), indent=1))
    elif len(sys.argv) == 8 and sys.argv[1] == "run":
        print(json.dumps(run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]),
                             int(sys.argv[7])), indent=1))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
