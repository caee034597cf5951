"""Ray Data for real: a local cluster, the example's pipeline over the first 3,000 corpus lines
with two actors, Parquet out; every id once, every vector the command's."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, cli_vectors, cosines

ray = pytest.importorskip("ray")


def test_the_ray_pipeline_writes_every_id_once_with_the_commands_vectors(model, tmp_path):
    from nornir_vector.ray_data import embed_dataset

    lines = (REPO / "testdata/corpus.txt").read_text(encoding="utf-8").splitlines()[:3000]
    source = tmp_path / "texts.parquet"
    pq.write_table(pa.table({"id": list(range(len(lines))), "text": lines}), source)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(lines), encoding="utf-8")
    want = cli_vectors(texts, "--model", model)

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False,
             runtime_env={"env_vars": {"NORNIR_HOME": os.environ.get("NORNIR_HOME", "")}})
    try:
        # Two actors of one thread on two CPUs: each reserves half a CPU, so reading and
        # writing still get one (actors holding every CPU leave the read tasks none).
        ds = embed_dataset(ray.data.read_parquet(str(source)).repartition(8), model=model, actors=2, threads=1, batch_size=128,
                           cpus_per_actor=0.5)
        ds.write_parquet(str(tmp_path / "out"))
    finally:
        ray.shutdown()
    out = pq.read_table(tmp_path / "out")
    ids = out.column("id").to_numpy()
    assert sorted(ids.tolist()) == list(range(len(lines))), "every id exactly once"
    assert out.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    vectors = np.stack(out.column("embedding").to_numpy(zero_copy_only=False))
    assert cosines(vectors, want[ids]).min() >= 0.9999
