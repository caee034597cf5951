"""Ray Data with nornir: `NornirEmbedder`, a callable class for `Dataset.map_batches` whose
`__init__` builds one `Embedder` per actor, and `embed_dataset`, the whole pipeline.

    import ray
    from nornir_vector.ray_data import embed_dataset
    ds = ray.data.read_parquet("texts/")            # columns: id, text
    embed_dataset(ds, actors=4, threads=2).write_parquet("vectors/")

Needs `ray[data]` (and so pyarrow); this module imports them only when used.
"""

from __future__ import annotations

from typing import Any


class NornirEmbedder:
    """A Ray Data callable class: `ds.map_batches(NornirEmbedder, fn_constructor_kwargs=...,
    concurrency=N, num_cpus=T, batch_format="pyarrow")`."""

    def __init__(self, model: str | None = None, device: str = "auto", threads: int | None = None,
                 text_column: str = "text", **options: Any) -> None:
        import nornir_vector

        self.text_column = text_column
        self.embedder = nornir_vector.Embedder(model, device=device, threads=threads, **options)
        report = self.embedder.report()
        why = "; ".join(report["plan"]["reasons"])
        if report.get("fallback"):
            why += "; " + report["fallback"]
        # Ray forwards an actor's log lines to the driver, prefixed with the actor.
        print(f"nornir actor: {report['active_provider']} ({self.embedder.gpu_vendor()}): {why}", flush=True)

    def __call__(self, batch: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        texts = batch.column(self.text_column).to_pylist()
        vectors = self.embedder.embed(texts)
        flat = pa.array(np.ascontiguousarray(vectors).reshape(-1), type=pa.float32())
        embedding = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
        return batch.drop_columns([self.text_column]).append_column("embedding", embedding)


def embed_dataset(ds, *, model: str | None = None, actors: int = 2, threads: int = 1, gpus: float = 0,
                  batch_size: int = 256, device: str = "auto", cpus_per_actor: float | None = None):
    """The pipeline: `ds` (with `id` and `text`) -> `id`, `embedding`. Each of the `actors`
    holds one Embedder with `threads` threads and reserves `cpus_per_actor` of Ray's CPUs
    (default: `threads`). Leave the cluster a CPU for reading and writing: actors that hold
    every CPU leave none for the read tasks, and the job waits for ever."""
    return ds.map_batches(
        NornirEmbedder,
        fn_constructor_kwargs={"model": model, "device": device, "threads": threads},
        concurrency=actors,
        num_cpus=threads if cpus_per_actor is None else cpus_per_actor,
        num_gpus=gpus,
        batch_size=batch_size,
        batch_format="pyarrow",
    )
