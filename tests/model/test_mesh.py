"""job.yaml's ``parallel.mesh``: a layout written as PyTorch's DeviceMesh (names and sizes,
outermost first), and HSDP's groups and items (shard x replicate)."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.model.config import job_from_dict
from pipeline.model.predict import group, predict

GPT = {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 256, "seq_len": 32}


def _job(parallel: dict) -> object:
    return job_from_dict({"model": GPT, "parallel": parallel, "dtypes": {"grad_reduce": "fp32"}})


def test_a_mesh_sets_the_degrees_and_the_order() -> None:
    """torchtitan's (pp, dp_replicate, dp_shard, tp): tp fastest, then dp (its shard part
    inside its replicate part), then pp."""
    par = _job({"mesh": {"pp": 2, "dp_replicate": 2, "dp_shard": 2, "tp": 2}, "fsdp": True})
    p = par.parallel
    assert (p.tp, p.dp, p.pp, p.dp_shard, p.hsdp) == (2, 4, 2, 2, True)
    assert p.order.split("-")[:2] == ["tp", "ep"] and p.order.index("dp") < p.order.index("pp")
    # rank = ((pp * 2 + replicate) * 2 + shard) * 2 + tp
    assert group(par, 0, ("dps",)) == [0, 2]
    assert group(par, 0, ("dpr",)) == [0, 4]
    assert group(par, 0, ("dp",)) == [0, 2, 4, 6]
    assert group(par, 0, ("tp",)) == [0, 1]
    assert group(par, 0, ("pp",)) == [0, 8]


def test_hsdp_items() -> None:
    """Each unit gathered and reduce-scattered in the shard group, its shard all-reduced in
    the replicate group; a block of 49,984 fp32 over a shard group of 2: 24,992."""
    job = _job({"mesh": {"dp_replicate": 2, "dp_shard": 2}, "fsdp": True})
    rows = [r for r in predict(job, 0).rows if r.layer_kind == "transformer"]
    items = {(r.op, r.phase, r.calls, r.bytes // r.calls, r.group_size) for r in rows}
    assert items == {
        ("all_gather", "forward", 2, 49_984 * 2, 2),
        ("all_gather", "backward", 2, 49_984 * 2, 2),
        ("reduce_scatter", "backward", 2, 49_984 * 4, 2),
        ("all_reduce", "backward", 2, 24_992 * 4, 2),
    }


@pytest.mark.parametrize(
    ("parallel", "message"),
    [
        ({"mesh": {"dp_replicate": 2, "dp_shard": 2}}, "parallel.mesh: a shard dimension"),
        ({"mesh": {"dp_shard": 2, "dp_replicate": 2}, "fsdp": True}, "must come right after"),
        ({"mesh": {"dp_replicate": 2, "tp": 2, "dp_shard": 2}, "fsdp": True}, "right after"),
        ({"mesh": {"dp": 2}, "tp": 2}, "parallel.tp: parallel.mesh gives the layout"),
        ({"mesh": {"data": 2}}, "parallel.mesh: unknown dimension 'data'"),
        ({"mesh": {"dp": 2, "dp_shard": 2}}, "parallel.mesh: dp_shard names a dimension"),
        ({"mesh": {"tp": 0}}, "parallel.mesh.tp: must be"),
        ({"mesh": [2, 2]}, "parallel.mesh: must be a mapping"),
    ],
)
def test_bad_meshes_name_the_key(parallel: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _job(parallel)
