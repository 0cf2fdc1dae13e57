"""A recommendation model's embedding all-to-alls, recorded without module information
(tests/data/cpu_gloo/recsys_a2a, scripts/record_torch_runs.py: table-wise sharded embeddings
and a DDP dense MLP on 2 CPU ranks, TorchRec's ranges around the exchanges), linked without a
job.yaml: each all-to-all takes its layer from the range around it, kind embedding, dimension
a2a; each dense gradient all-reduce is a gradient_bucket."""

from __future__ import annotations

from pathlib import Path

from pipeline.link.runner import link
from tests.cpu_gloo import ingested

# scripts/record_torch_runs.py: a micro-batch of 4 samples a rank, one bag of 3 ids per table,
# tables 16 wide, fp32; 2 ranks
_IDS = 2 * 4 * 3 * 8  # every rank's int64 ids, one row per table
_POOLED = 2 * 4 * 16 * 4  # the pooled rows of both tables' lookups, fp32
_DENSE = (2 * 16 * 32 + 32) + (32 + 1)  # the dense MLP's parameters, one DDP bucket


def test_recorded_embedding_all_to_alls_take_their_layer_from_torchrec_ranges(tmp_path: Path):
    ds = ingested("recsys_a2a", tmp_path / "ds")
    link(tmp_path / "ds")
    rows = ds.sql(
        "SELECT op, phase, layer, layer_kind, attributed_by, parallel_dim, bytes, count(*) "
        "FROM collectives_linked WHERE source = 'kineto' GROUP BY ALL ORDER BY ALL"
    ).rows()
    # per rank and profiled step (2 ranks x 2 steps): one of each
    assert rows == [
        ("all_reduce", "backward", "gradient_bucket", None, "gradient_bucket", "dp",
         _DENSE * 4, 4),
        ("all_to_all", "backward", "embedding/alltoall_bwd_single", "embedding",
         "embedding_range", "a2a", _POOLED, 4),
        ("all_to_all", "forward", "embedding/alltoall_fwd_single", "embedding",
         "embedding_range", "a2a", _POOLED, 4),
        ("all_to_all", "forward", "embedding/sparse_data_dist", "embedding",
         "embedding_range", "a2a", _IDS, 4),
    ]  # fmt: skip
    # the flight recorder's calls matched to them take the same layer
    matched = ds.sql(
        "SELECT layer, attributed_by, count(*) FROM collectives_linked "
        "WHERE source = 'flight_recorder' AND layer IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert matched == [
        ("embedding/alltoall_bwd_single", "matched:embedding_range", 4),
        ("embedding/alltoall_fwd_single", "matched:embedding_range", 4),
        ("embedding/sparse_data_dist", "matched:embedding_range", 4),
        ("gradient_bucket", "matched:gradient_bucket", 4),
    ]
