"""Bulk embedding on Ray Data with nornir: one `Embedder` per actor, vectors written to Parquet.

    python examples/ray_embed.py INPUT OUTPUT [--model DIR] [--actors N] [--threads T] [--gpus G]

INPUT is a Parquet file or folder, or JSON lines, with an `id` and a `text` column (or a plain
text file: one text per line, its line number as id). OUTPUT is a Parquet folder: the `id`
column carried through, and `embedding`, a fixed-size list of float32.

Each actor builds one `nornir_vector.Embedder` (`__init__` runs once per actor, not per batch)
and logs what really runs it (`report()`): on a node without a GPU, or whose GPU runtime is
broken, the CPU answers and the log line says why. Size it per node: actors x threads = the
cores you give the job (`num_cpus` of each actor is its threads, so Ray places no more actors on
a node than it has cores); for GPU actors, one actor per GPU (`--gpus 1` asks Ray for one each)
with `device="auto"`.
"""

from __future__ import annotations

import argparse

from nornir_vector.ray_data import NornirEmbedder, embed_dataset  # noqa: F401


def read(path: str):
    import ray

    if path.endswith((".jsonl", ".json")):
        return ray.data.read_json(path)
    if path.endswith(".txt"):
        lines = [line.rstrip("\n") for line in open(path, encoding="utf-8")]
        return ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(lines)])
    # One Parquet file is one block: split it so that every actor gets work.
    return ray.data.read_parquet(path).repartition(64)


def main() -> None:
    import ray

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--model", help="model folder (default: nornir's default model)")
    p.add_argument("--actors", type=int, default=2, help="Embedder actors (default 2)")
    p.add_argument("--threads", type=int, default=1, help="threads, and Ray CPUs, per actor (default 1)")
    p.add_argument("--gpus", type=float, default=0, help="GPUs per actor (1 for GPU actors)")
    p.add_argument("--batch-size", type=int, default=256)
    a = p.parse_args()
    ray.init()
    embed_dataset(read(a.input), model=a.model, actors=a.actors, threads=a.threads, gpus=a.gpus,
                  batch_size=a.batch_size).write_parquet(a.output)


if __name__ == "__main__":
    main()
