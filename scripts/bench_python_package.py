"""The Python package's speed beside its peers, for docs/performance.md (a benchmark, not a test):

    python scripts/bench_python_package.py nornir    CORPUS MODEL THREADS [LIMIT]
    python scripts/bench_python_package.py fastembed CORPUS FASTEMBED_DIR THREADS [LIMIT [BATCH]]
    python scripts/bench_python_package.py ray       CORPUS MODEL CPUS [LIMIT [ACTORS]]

Each embeds the first LIMIT lines of CORPUS (all by default) and prints {"texts_per_second"} as
JSON, timing the embedding only (the model is loaded first). fastembed embeds in batches of
BATCH texts (its default, 256, when not given). FASTEMBED_DIR holds the same
model.onnx with the tokenizer files fastembed reads (tokenizer.json, config.json,
special_tokens_map.json, tokenizer_config.json). `ray` runs nornir_vector.ray_data's pipeline on
a local cluster of CPUS CPUs with ACTORS actors (default 1) sharing CPUS threads, all of them
together reserving one CPU less than the cluster has (reading and writing keep one), batches of
1,024, and counts its wall time from the dataset to the last vector.
"""

import json
import sys
import time


def main() -> None:
    mode, corpus, model, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    limit = int(sys.argv[5]) if len(sys.argv) > 5 else None
    texts = open(corpus, encoding="utf-8").read().splitlines()[:limit]
    if mode == "nornir":
        import nornir_vector

        e = nornir_vector.Embedder(model, device="cpu", threads=n)
        e.embed(texts[:8])
        start = time.perf_counter()
        e.embed(texts)
    elif mode == "fastembed":
        from fastembed import TextEmbedding

        batch = int(sys.argv[6]) if len(sys.argv) > 6 else 256
        m = TextEmbedding("sentence-transformers/all-MiniLM-L6-v2", specific_model_path=model, threads=n)
        list(m.embed(texts[:8]))
        start = time.perf_counter()
        list(m.embed(texts, batch_size=batch))
    elif mode == "ray":
        import pyarrow as pa
        import ray

        from nornir_vector.ray_data import embed_dataset

        actors = int(sys.argv[6]) if len(sys.argv) > 6 else 1
        ray.init(num_cpus=n, include_dashboard=False, configure_logging=False, log_to_driver=False)
        table = pa.table({"id": list(range(len(texts))), "text": texts})
        start = time.perf_counter()
        ds = ray.data.from_arrow(table).repartition(8 * n)
        rows = (
            embed_dataset(ds, model=model, actors=actors, threads=max(1, n // actors),
                          cpus_per_actor=(n - 1) / actors, batch_size=1024)
            .materialize()
            .count()
        )
        assert rows == len(texts)
        ray.shutdown()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    json.dump({"mode": mode, "texts": len(texts), "seconds": seconds, "texts_per_second": len(texts) / seconds}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
