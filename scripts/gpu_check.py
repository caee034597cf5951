"""Helpers for scripts/gpu-check.sh; standard library only, except the peer (torch and
sentence-transformers, where installed).

  cuda-libs                 find the CUDA libraries of the pip wheels on sys.path; JSON on stdout
  field FILE path           the folders of a cuda-libs result, colon-separated
  parity FILE REFERENCE [DIM]
                            cosine of every row against the reference (float32, 384 wide unless
                            DIM); JSON
  decoder-checkpoint DIR SHAPE
                            a Qwen3 decoder embedder with random float16 weights, as Qwen3-Embedding
                            ships it (config.json, model.safetensors, tokenizer.json, last-token
                            pooling): SHAPE qwen3-0.6b, qwen3-8b (Qwen3-Embedding's sizes) or tiny
  st-peer --model DIR ...   sentence-transformers on the GPU: texts/s on the corpus; JSON to --out
  incomplete OUT REASON     summary.json saying the bundle is incomplete
  summary OUT               summary.json and summary.md from every result in OUT; exit 0 when CUDA
                            ran the model and matched the reference, else 1
"""

import array
import json
import math
import os
import sys
import time

DIM = 384
PARITY_FLOOR = 0.999
# What the CUDA provider of onnxruntime-gpu 1.31.1 needs (NEEDED) or opens later (cuDNN, cuFFT, NVRTC).
WANTED = [
    "libcudart.so.13",
    "libcublas.so.13",
    "libcublasLt.so.13",
    "libcurand.so.10",
    "libcudnn.so.9",
    "libcufft.so.12",
    "libnvrtc.so.13",
]


def cuda_libs():
    dirs, found = [], {}
    for entry in sys.path:
        root = os.path.join(entry or ".", "nvidia")
        if not os.path.isabs(root) or not os.path.isdir(root):
            continue
        for here, subdirs, files in os.walk(root):
            subdirs.sort()
            libs = [f for f in files if f.startswith("lib") and ".so" in f]
            if not libs:
                continue
            if here not in dirs:
                dirs.append(here)
            for soname in WANTED:
                if soname in files and soname not in found:
                    found[soname] = os.path.join(here, soname)
    print(
        json.dumps(
            {
                "python": sys.executable,
                "searched": [os.path.join(e, "nvidia") for e in sys.path if e],
                "dirs": dirs,
                "path": ":".join(dirs),
                "found": found,
                "missing": [s for s in WANTED if s not in found],
            },
            indent=2,
        )
    )


def read_f32(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def cosines(got, want, dim=DIM):
    if len(got) != len(want) or len(got) % dim:
        raise SystemExit(f"parity: {len(got)} floats against {len(want)} in the reference")
    out = []
    for i in range(0, len(want), dim):
        a, b = got[i : i + dim], want[i : i + dim]
        dot = sum(x * y for x, y in zip(a, b))
        norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        out.append(dot / norm if norm else 0.0)
    return out


def parity_report(cos, floor):
    worst = min(range(len(cos)), key=cos.__getitem__)
    return {
        "rows": len(cos),
        "min_cosine": cos[worst],
        "worst_row": worst,
        "mean_cosine": sum(cos) / len(cos),
        "floor": floor,
        "pass": cos[worst] >= floor,
    }


def parity(path, reference, dim=DIM):
    report = parity_report(cosines(read_f32(path), read_f32(reference), dim), PARITY_FLOOR)
    print(json.dumps(report, indent=2))


DECODER_SHAPES = {
    # Qwen3-Embedding-0.6B's config.json sizes.
    "qwen3-0.6b": {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151669},
    # Qwen3-Embedding-8B's (15 GB of float16 weights): for conversion memory, not meant to run here.
    "qwen3-8b": {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151665},
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "intermediate_size": 128, "vocab_size": 512},
}


def random_half(count, rng_bytes=os.urandom):
    """`count` random float16 values between 2^-8 and 2^-5 in size, either sign (random bytes
    with the exponent bits set into that range: no NaN or infinity), as little-endian bytes."""
    raw = bytearray(rng_bytes(2 * count))
    # The high byte is sign (1 bit), exponent (5), mantissa's top 2: exponents 7 to 10.
    table = bytes((b & 0x83) | ((7 + ((b >> 2) & 3)) << 2) for b in range(256))
    raw[1::2] = bytes(raw[1::2]).translate(table)
    return bytes(raw)


def decoder_checkpoint(folder, shape):
    s = DECODER_SHAPES[shape]
    h, layers, heads, kv, hd, inter, vocab = (s[k] for k in ("hidden_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size"))
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    config = dict(s, architectures=["Qwen3ForCausalLM"], model_type="qwen3", rms_norm_eps=1e-6, rope_theta=1000000,
                  rope_scaling=None, max_position_embeddings=32768, tie_word_embeddings=True, torch_dtype="float16",
                  attention_bias=False, use_sliding_window=False)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    shapes = [("embed_tokens.weight", [vocab, h]), ("norm.weight", [h])]
    for i in range(layers):
        p = f"layers.{i}."
        shapes += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
                   (p + "self_attn.q_proj.weight", [heads * hd, h]), (p + "self_attn.k_proj.weight", [kv * hd, h]),
                   (p + "self_attn.v_proj.weight", [kv * hd, h]), (p + "self_attn.o_proj.weight", [h, heads * hd]),
                   (p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd]),
                   (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
                   (p + "mlp.down_proj.weight", [h, inter])]
    header, offset = {}, 0
    for name, dims in shapes:
        n = 2 * math.prod(dims)
        header[name] = {"dtype": "F16", "shape": dims, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, dims in shapes:
            count = math.prod(dims)
            # Norm weights are 1 (float16 0x3C00), as a fresh model's are.
            f.write(b"\x00\x3c" * count if name.endswith("norm.weight") else random_half(count))
    # A word-level tokenizer over the vocabulary, an end-of-text token appended as Qwen3-Embedding's is.
    words = ["<|endoftext|>", "<unk>"] + [f"w{i}" for i in range(vocab - 2)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
                           "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}},
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<unk>"},
    }
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": h, "pooling_mode_lasttoken": True}, f)
    with open(os.path.join(folder, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], f)
    print(h)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def st_peer(args):
    opts = dict(zip(args[::2], args[1::2]))
    out = opts["--out"]
    result = {"status": "skipped"}
    try:
        import torch
        import sentence_transformers
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        result["reason"] = f"sentence-transformers and torch are not both importable in {sys.executable}: {e}"
    else:
        result["torch"] = torch.__version__
        result["sentence_transformers"] = sentence_transformers.__version__
        if not torch.cuda.is_available():
            result["reason"] = "torch sees no CUDA device (torch.cuda.is_available() is False)"
        else:
            result.update(st_measure(SentenceTransformer, torch, opts))
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))


def st_measure(SentenceTransformer, torch, opts):
    model = SentenceTransformer(opts["--model"], device="cuda")
    corpus = read_lines(opts["--corpus"])
    model.encode(corpus[:256])  # warm-up: CUDA context, kernels, allocator
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.encode(corpus)  # sentence-transformers' defaults: batch_size 32, sorted by length
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    sample = model.encode(read_lines(opts["--parity-input"]), convert_to_numpy=True)
    got = array.array("f", sample.astype("float32").ravel().tolist())
    # The reference comes from the int8 model: this is fp32 against int8, not a pass/fail.
    vs_int8 = parity_report(cosines(got, read_f32(opts["--parity-reference"])), 0.0)
    del vs_int8["pass"], vs_int8["floor"]
    return {
        "status": "ran",
        "device": torch.cuda.get_device_name(0),
        "dtype": str(next(model.parameters()).dtype),
        "batch_size": 32,
        "texts": len(corpus),
        "seconds": seconds,
        "texts_per_second": len(corpus) / seconds,
        "cosine_to_int8_reference": vs_int8,
    }


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def first_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        return None
    return lines[-1] if lines else None


def summary(out):
    facts = {}
    try:
        with open(os.path.join(out, "machine.txt")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                facts[k] = v.strip()
    except OSError:
        pass
    steps = {}
    try:
        with open(os.path.join(out, "steps.tsv")) as f:
            for line in f:
                name, rc, ms = line.rstrip("\n").split("\t")
                steps[name] = {"exit": int(rc), "seconds": int(ms) / 1000}
                if int(rc) != 0:
                    steps[name]["error"] = first_line(os.path.join(out, f"{name}.stderr"))
    except OSError:
        pass
    doctor = load(os.path.join(out, "doctor-ld-library-path.json")) if steps.get("doctor-ld-library-path", {}).get("exit") == 0 else None
    doctor = doctor or load(os.path.join(out, "doctor.json")) or {}
    session = doctor.get("session") or {}
    benches = {k: load(os.path.join(out, f"bench-{k}.json")) for k in ("cuda", "cuda-8192", "cpu")}
    parity = {k: load(os.path.join(out, f"parity-{k}.json")) for k in ("cuda", "cpu")}
    peer = load(os.path.join(out, "st-peer.json")) or {"status": "skipped", "reason": "the peer step wrote nothing"}
    decoder_benches = {k: load(os.path.join(out, f"bench-decoder-{k}.json")) for k in ("cuda", "cpu")}

    def tps(b):
        return b.get("texts_per_second") if b and b.get("active_provider") else None

    best_cuda = max((tps(benches[k]) or 0 for k in ("cuda", "cuda-8192")), default=0) or None
    cuda_ran = session.get("active_provider") == "CUDAExecutionProvider"
    parity_ok = bool(parity["cuda"] and parity["cuda"]["pass"])
    result = {
        "status": "pass" if cuda_ran and parity_ok else "fail",
        "gpu": facts.get("nvidia_smi"),
        "driver": facts.get("driver_file"),
        "cpu": facts.get("cpu"),
        "cpu_cores": facts.get("cpu_cores"),
        "cpu_vector_extensions": facts.get("cpu_vector_extensions"),
        "nornir": facts.get("nornir_version"),
        "corpus": facts.get("corpus"),
        "cuda_libs": {"source": facts.get("cuda_libs_source"), "folders": facts.get("nornir_cuda_libs"),
                      "ld_library_path": facts.get("ld_library_path", "not needed")},
        "cuda_ran_the_model": cuda_ran,
        "active_provider": session.get("active_provider"),
        "fallback": session.get("fallback"),
        "registrations": [{k: r.get(k) for k in ("provider", "ok", "error")} for r in session.get("registrations", [])],
        # Libraries the provider opens by name at run time (cuDNN): nornir preloads them and keeps
        # them loaded for the life of the process, so "loaded" here means resident at the first run.
        "opened_at_run_time": [
            {k: q.get(k) for k in ("soname", "status", "path")}
            for r in session.get("registrations", [])
            for q in ((r.get("preflight") or {}).get("requirements") or [])
            if q.get("opened") == "at_run_time"
        ],
        "placement": session.get("placement"),
        "parity": parity,
        "texts_per_second": {
            "nornir_cuda_256": tps(benches["cuda"]),
            "nornir_cuda_8192": tps(benches["cuda-8192"]),
            "nornir_cpu": tps(benches["cpu"]),
            "sentence_transformers_cuda": peer.get("texts_per_second"),
        },
        "nornir_cuda_vs_cpu": best_cuda / tps(benches["cpu"]) if best_cuda and tps(benches["cpu"]) else None,
        "nornir_cuda_vs_sentence_transformers": best_cuda / peer["texts_per_second"] if best_cuda and peer.get("texts_per_second") else None,
        # A Qwen3-Embedding-0.6B-shaped decoder (random float16 weights) converted here: CUDA's rows
        # against CPU's, and texts/s on the parity sample.
        "decoder": {
            "shape": facts.get("decoder_shape"),
            "parity_cuda_vs_cpu": load(os.path.join(out, "decoder-parity.json")),
            "texts_per_second": {k: tps(b) for k, b in decoder_benches.items()},
            "benches": decoder_benches,
        },
        "benches": benches,
        "sentence_transformers": peer,
        "steps": steps,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(markdown(result))
    sys.stdout.write(markdown(result))
    sys.exit(0 if result["status"] == "pass" else 1)


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def markdown(r):
    t = r["texts_per_second"]
    lines = [
        f"# nornir GPU check: {r['status']}",
        "",
        f"- GPU: {r['gpu']}; driver: {r['driver']}",
        f"- CPU: {r['cpu']} ({r['cpu_cores']} cores; {r['cpu_vector_extensions'] or 'no AVX2'})",
        f"- nornir: {r['nornir']}; corpus: {r['corpus']}",
        f"- CUDA libraries: {r['cuda_libs']['folders'] or '(none found)'} ({r['cuda_libs']['source']}); LD_LIBRARY_PATH: {r['cuda_libs']['ld_library_path']}",
        f"- CUDA ran the model: {r['cuda_ran_the_model']} (active provider {r['active_provider']})",
    ]
    if r["fallback"]:
        lines.append(f"- fallback: {r['fallback']}")
    for reg in r["registrations"]:
        lines.append(f"- {reg['provider']}: {'ok' if reg['ok'] else reg['error']}")
    for q in r["opened_at_run_time"]:
        lines.append(f"- {q['soname']} (opened at run time): {q['status']}{' from ' + q['path'] if q['path'] else ''}")
    placement = r["placement"] or {}
    lines.append(f"- placement: {placement.get('nodes') or placement.get('reason')}")
    for dev, p in r["parity"].items():
        if p:
            lines.append(f"- parity on {dev}: min cosine {p['min_cosine']:.6f} (row {p['worst_row']}), mean {p['mean_cosine']:.6f}, {'pass' if p['pass'] else 'FAIL'} (>= {p['floor']})")
        else:
            lines.append(f"- parity on {dev}: not measured ({(r['steps'].get('embed-' + dev) or {}).get('error')})")
    peer = r["sentence_transformers"]
    lines += [
        "",
        "| pipeline | texts/s |",
        "| --- | --- |",
        f"| nornir, CUDA, 256-token batches (default) | {fmt(t['nornir_cuda_256'])} |",
        f"| nornir, CUDA, 8192-token batches | {fmt(t['nornir_cuda_8192'])} |",
        f"| nornir, CPU | {fmt(t['nornir_cpu'])} |",
        f"| sentence-transformers fp32, CUDA, batch 32 | {fmt(t['sentence_transformers_cuda'])} |",
        "",
        f"nornir CUDA / CPU: {fmt(r['nornir_cuda_vs_cpu'], '.2f')}x; nornir CUDA / sentence-transformers: {fmt(r['nornir_cuda_vs_sentence_transformers'], '.2f')}x",
    ]
    if peer.get("status") != "ran":
        lines.append(f"sentence-transformers skipped: {peer.get('reason')}")
    failed = {k: v for k, v in r["steps"].items() if v["exit"] != 0}
    if failed:
        lines += ["", "Steps that failed:"]
        lines += [f"- {k} (exit {v['exit']}): {v.get('error')}" for k, v in failed.items()]
    return "\n".join(lines) + "\n"


def incomplete(out, reason):
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"status": "incomplete bundle", "reason": reason}, f, indent=2)
    print(f"gpu-check: {reason}", file=sys.stderr)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    cmd, rest = argv[1], argv[2:]
    if cmd == "cuda-libs":
        cuda_libs()
    elif cmd == "field":
        print(load(rest[0])[rest[1]])
    elif cmd == "parity":
        parity(rest[0], rest[1], int(rest[2]) if len(rest) > 2 else DIM)
    elif cmd == "decoder-checkpoint":
        decoder_checkpoint(rest[0], rest[1])
    elif cmd == "st-peer":
        st_peer(rest)
    elif cmd == "incomplete":
        incomplete(rest[0], rest[1])
    elif cmd == "summary":
        summary(rest[0])
    else:
        raise SystemExit(f"unknown command {cmd!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
