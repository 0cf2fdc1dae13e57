"""A serving step (``batch.forward_only``): the forward's items and nothing else."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.model.config import job_from_dict
from pipeline.model.predict import predict

JOB = {
    "model": {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 256,
              "seq_len": 32, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
              "moe": {"experts": 4, "top_k": 2, "ffn_hidden": 32, "max_nodes": 1,
                      "dispatch_dtype": "fp8", "combine_dtype": "bf16"}},
    "parallel": {"tp": 2, "dp": 4, "ep": 4},
    "batch": {"micro_batch": 1, "global_batch": 8},
    "network": {"gpus_per_node": 4},
}  # fmt: skip


def _rows(forward_only: bool) -> list[tuple]:
    job = job_from_dict(JOB | {"batch": JOB["batch"] | {"forward_only": forward_only}})
    return [(r.parallel_dim, r.op, r.phase, r.purpose, r.calls, r.bytes)
            for r in predict(job, 0).rows]  # fmt: skip


def test_a_serving_step_predicts_the_training_steps_forward_items_only():
    train, serve = _rows(False), _rows(True)
    assert serve == [r for r in train if r[2] == "forward"]
    assert {r[0] for r in train if r[2] != "forward"} >= {"tp", "ep", "dp"}
    # two micro-batches x 2 MoE layers, dispatch k·T·h·1 and combine k·T·h·2 (T = 1 x 32:
    # without sequence parallelism every TP rank routes all of its micro-batch's tokens)
    ep = {r[3]: (r[4], r[5] // r[4]) for r in serve if r[0] == "ep"}
    assert ep == {"expert dispatch": (4, 2 * 32 * 64), "expert combine": (4, 2 * 32 * 64 * 2)}


def test_forward_only_must_be_a_bool():
    with pytest.raises(ConfigError, match="batch.forward_only"):
        job_from_dict(JOB | {"batch": {"forward_only": "yes"}})
