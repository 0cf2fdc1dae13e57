"""Bytes inside the node and across nodes, per predicted item: counted by hand and against
the enumerated members of each communicator."""

from __future__ import annotations

import itertools

import pytest

from pipeline.model.config import build_job
from pipeline.model.predict import group, predict, predictions_table, span
from pipeline.model.traffic import node_split


def test_node_split_by_hand() -> None:
    # all-to-all over 64 ranks, 8 on this node: M/64 to each peer, 7 peers inside, 56 across
    assert node_split("all_to_all", 6300, 6400, 64, 8, crosses=True) == (700, 5600)
    # a ring over 16 ranks on 2 nodes (8 each): 2 of its 16 links cross, each carries the
    # rank's wire bytes W, so W/8 per rank crosses on average
    assert node_split("all_reduce", 1600, 900, 16, 8, crosses=True) == (1400, 200)
    # a pipeline send to the next node goes all across; a group on one node all inside
    assert node_split("send", 500, 500, 2, 1, crosses=True) == (0, 500)
    assert node_split("all_gather", 700, 800, 8, 8, crosses=False) == (700, 0)
    assert node_split("recv", 0, 800, 2, 1, crosses=True) == (0, 0)


ORDERS = ("tp-cp-ep-dp-pp", "tp-dp-pp", "pp-dp-tp", "dp-tp-pp")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("gpn", [1, 3, 4, 8])
def test_members_on_the_node_match_the_enumerated_group(order: str, gpn: int) -> None:
    # the reference: the group's listed members (pipeline.model.predict.group) on the rank's
    # node, for every rank and dimension, including node sizes that cut groups unevenly (3)
    job = build_job(None, {"model.preset": "mixtral-8x7b", "parallel.tp": 2, "parallel.pp": 2,
                           "parallel.dp": 6, "parallel.ep": 2, "parallel.order": order,
                           "batch.global_batch": 24, "network.gpus_per_node": gpn})  # fmt: skip
    for rank, dims in itertools.product(
        range(job.parallel.world_size), (("tp",), ("dp",), ("pp",), ("tp", "dp"))
    ):
        members = group(job, rank, dims)
        want = sum(m // gpn == rank // gpn for m in members)
        assert span(job, rank, dims).local == want, (rank, dims)
        e = group(job, rank, ("ep",), expert=True)
        assert span(job, rank, ("ep",), expert=True).local == sum(
            m // gpn == rank // gpn for m in e
        )


def _job(**over):
    keys = {"model.preset": "mixtral-8x7b", "parallel.tp": 2, "parallel.dp": 8,
            "parallel.ep": 8, "batch.global_batch": 8, "network.gpus_per_node": 8,
            "dtypes.grad_reduce": "bf16"}  # fmt: skip
    return build_job(None, keys | over)


def test_rows_split_by_hand() -> None:
    # tp 2 x dp 8 = 16 ranks on 2 nodes of 8, order tp-cp-ep-dp-pp: rank 0's TP group {0, 1}
    # is inside node 0; its DP group {0, 2, ..., 14} has 4 ranks on each node and its EP
    # group (expert ranks: ep varies after tp) is the same 8 ranks.
    pred = predict(_job(), 0)
    for r in pred.rows:
        assert r.intra_node_bytes + r.inter_node_bytes == pytest.approx(r.wire_bytes)
        if r.parallel_dim == "tp":
            assert (r.link, r.inter_node_bytes) == ("intra", 0)
        elif r.op == "all_to_all":
            # M/8 to each of 7 peers: 3 on node 0, 4 on node 1
            m = r.bytes
            assert r.intra_node_bytes == pytest.approx(3 / 8 * m)
            assert r.inter_node_bytes == pytest.approx(4 / 8 * m)
        else:
            # ring over 8 ranks on 2 nodes: 2 of 8 links cross, W/4 per rank
            assert r.parallel_dim == "dp" and r.group_size == 8
            assert r.inter_node_bytes == pytest.approx(r.wire_bytes / 4)
    # one node of 16 GPUs: nothing crosses
    one = predict(_job(**{"network.gpus_per_node": 16}), 0)
    assert sum(r.inter_node_bytes for r in one.rows) == 0
    assert one.totals["intra_node_bytes"] == pytest.approx(one.totals["wire_bytes"])


def test_table_carries_the_split() -> None:
    t = predictions_table(_job(), 16)
    assert {"intra_node_bytes", "inter_node_bytes"} <= set(t.column_names)
    d = t.to_pydict()
    for w, a, b in zip(d["wire_bytes"], d["intra_node_bytes"], d["inter_node_bytes"], strict=True):
        assert a + b == pytest.approx(w)
    # ranks on node 1 see the mirror image of node 0: the same totals across nodes
    inter = {}
    for rank, b in zip(d["rank"], d["inter_node_bytes"], strict=True):
        inter[rank] = inter.get(rank, 0.0) + b
    assert inter[0] == pytest.approx(inter[8]) and inter[0] > 0
