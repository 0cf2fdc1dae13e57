"""Network requirements: W / (budget * step time), per dimension and link class."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.model.config import job_from_dict, load_job
from pipeline.model.network import format_requirements, requirements
from pipeline.model.predict import predict

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "job.yaml"


def test_sample_rank0_requirements():
    pred = predict(load_job(SAMPLE), 0)
    reqs = requirements(pred, step_time_s=0.5, comm_budget=0.2, achieved_busbw_GBps={"tp": 123.0})
    by = {(r.parallel_dim, r.link): r for r in reqs}
    # rank 0 sends: TP 36 all-reduces of 131,072 B (n=2: W = M), PP 4 sends, DP one 3,745,280 B.
    tp_w = 36 * 131_072
    assert by[("tp", "intra")].wire_bytes == tp_w
    assert by[("tp", "intra")].required_GBps == pytest.approx(tp_w / 0.1 / 1e9)
    assert by[("tp", "intra")].achieved_busbw_GBps == 123.0
    assert by[("pp", "intra")].wire_bytes == 4 * 131_072
    assert by[("dp", "intra")].wire_bytes == 3_745_280
    total = tp_w + 4 * 131_072 + 3_745_280
    assert by[("all", "intra")].wire_bytes == total
    assert by[("all", "intra")].available_GBps == 450.0
    assert by[("all", "intra")].headroom == pytest.approx(450.0 / (total / 0.1 / 1e9))
    text = format_requirements(reqs, step_time_s=0.5, comm_budget=0.2)
    assert "0.1 s of unhidden transfer" in text and "123.0" in text


def test_inter_node_split():
    job = job_from_dict({
        "model": {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 64,
                  "seq_len": 16},
        "parallel": {"tp": 2, "dp": 4}, "network": {"gpus_per_node": 2},
    })  # fmt: skip
    reqs = requirements(predict(job, 0), step_time_s=1.0, comm_budget=1.0)
    links = {(r.parallel_dim, r.link) for r in reqs}
    assert ("tp", "intra") in links and ("dp", "inter") in links
    inter = next(r for r in reqs if r.parallel_dim == "all" and r.link == "inter")
    assert inter.available_GBps == 50.0


@pytest.mark.parametrize(("step", "budget"), [(0, 0.2), (-1, 0.2), (1, 0), (1, 1.5)])
def test_bad_inputs(step, budget):
    with pytest.raises(ConfigError):
        requirements(predict(load_job(SAMPLE), 0), step_time_s=step, comm_budget=budget)


def test_a_group_over_two_nodes_needs_both_links():
    # tp 2 x dp 4 on nodes of 4 GPUs: DP group {0, 2, 4, 6} has two ranks on each node, so
    # of its ring's 4 links 2 cross: half of each DP all-reduce's wire bytes need the NIC
    job = job_from_dict({
        "model": {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 64,
                  "seq_len": 16},
        "parallel": {"tp": 2, "dp": 4}, "network": {"gpus_per_node": 4},
    })  # fmt: skip
    pred = predict(job, 0)
    dp_wire = sum(r.wire_bytes for r in pred.rows if r.parallel_dim == "dp")
    by = {(r.parallel_dim, r.link): r.wire_bytes for r in requirements(pred, step_time_s=1.0)}
    assert by[("dp", "intra")] == by[("dp", "inter")] == dp_wire / 2
