#!/usr/bin/env python3
"""Images per second and peak memory of `nornir vector embed --images` against the Python loop
people write (Pillow and NumPy as transformers' slow CLIPImageProcessor computes them, then ONNX
Runtime on the same vision_model.onnx, 16 images a batch), side by side, rounds interleaved.

  image_bench.py NORNIR WORK [--images N] [--rounds R] [--threads T] [--tiny]
  image_bench.py python-side FOLDER LIST THREADS OUT.npy   (the baseline, run as a child)

The model is a CLIP ViT-B/32 (OpenAI's sizes: vision 768 wide, 12 layers, 224 pixels in 32-pixel
patches; text 512 wide, 12 layers) with random weights, made by scripts/image_reference.py's
writer and converted by the `nornir` under test; the images are N 640 x 480 JPEGs (gradients,
waves and noise, quality 90). Each side is a fresh process; its peak RSS is the kernel's
(VmHWM). With --tiny the towers are one layer 32 wide (still 224 pixels in, as OpenAI's
processor): the preprocessing is then most of the work. Both sides' vectors are compared (cosine), so they did the same work. Prints one JSON
object.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import image_reference as ref  # noqa: E402

BATCH = 16


def make_model(nornir, work, tiny):
    name = "clip-tiny-224" if tiny else "clip-b32"
    src, out = work / f"{name}-weights", work / name
    if not (out / "vision_model.onnx").is_file():
        text = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
                    max_position_embeddings=77)
        vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                      image_size=224, patch_size=32)
        if tiny:
            text.update(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
            vision.update(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
        ref.SPECS["clip"] = dict(text=text, vision=vision, projection_dim=32 if tiny else 512, shortest_edge=224)
        ref.cmd_make("clip", src, 0)
        subprocess.run([nornir, "vector", "convert", "-q", "--force", "--model", str(src), "--output", str(out)],
                       check=True)
    return out


def make_images(work, n):
    from PIL import Image
    folder = work / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    paths = []
    for i in range(n):
        path = folder / f"photo_{i:04d}.jpg"
        if not path.is_file():
            Image.fromarray(ref.photo(rng, 640, 480, phase=i * 0.37)).save(path, quality=90)
        paths.append(str(path))
    listing = work / "photos.txt"
    listing.write_text("\n".join(paths) + "\n")
    return listing


def python_side(folder, listing, threads, out):
    """The baseline: Pillow + NumPy preprocessing, ONNX Runtime, NumPy normalisation."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(Path(folder) / "vision_model.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    paths = Path(listing).read_text().split()
    rows = []
    for i in range(0, len(paths), BATCH):
        pixels = ref.pixel_values(folder, paths[i:i + BATCH])
        v = session.run(["image_embeds"], {"pixel_values": pixels})[0]
        rows.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    np.save(out, np.concatenate(rows))


def peak_rss_mib(pid):
    """The process's own peak resident memory (VmHWM), or None once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def timed(cmd):
    """Wall seconds and peak RSS in MiB of `cmd` as a child process. The peak is VmHWM read every
    20 ms: wait4's ru_maxrss would count the pages this (forking) process held."""
    started = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = 0.0
    while child.poll() is None:
        peak = max(peak, peak_rss_mib(child.pid) or 0.0)
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed with status {child.returncode}")
    return seconds, peak


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "python-side":
        python_side(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    p = argparse.ArgumentParser()
    p.add_argument("nornir")
    p.add_argument("work")
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--tiny", action="store_true")
    a = p.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model = make_model(a.nornir, work, a.tiny)
    listing = make_images(work, a.images)
    ours, theirs = work / "nornir.f32", work / "python.npy"
    runs = {"nornir": [], "python": []}
    for _ in range(a.rounds):
        runs["nornir"].append(timed([a.nornir, "vector", "embed", "--quiet", "--model", str(model), "--threads",
                                     str(a.threads), "--images", str(listing), "--format", "f32", "--output",
                                     str(ours)]))
        runs["python"].append(timed([sys.executable, __file__, "python-side", str(model), str(listing),
                                     str(a.threads), str(theirs)]))
    a_rows = np.fromfile(ours, dtype="<f4").reshape(a.images, -1)
    b_rows = np.load(theirs)
    cosine = float((a_rows * b_rows).sum(1).min())
    result = {"model": model.name, "images": a.images, "threads": a.threads, "min_cosine_nornir_vs_python": cosine}
    for side, values in runs.items():
        seconds = sorted(s for s, _ in values)[len(values) // 2]
        result[side] = {"images_per_second": round(a.images / seconds, 2), "seconds": round(seconds, 3),
                        "peak_rss_mib": round(max(m for _, m in values), 1)}
    result["speedup"] = round(result["nornir"]["images_per_second"] / result["python"]["images_per_second"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
