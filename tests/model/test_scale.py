"""Communicators in closed form: ``span`` against the enumerated ``group`` on small layouts,
and a prediction at a billion ranks."""

from __future__ import annotations

import itertools

import pytest

from pipeline.model.config import MAX_RANKS, build_job
from pipeline.model.predict import group, predict, predict_ranks, span

ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-pp-dp", "tp-dp-pp", "pp-dp-tp")
DIMS = (("tp",), ("cp",), ("dp",), ("pp",), ("dp", "cp"))


@pytest.mark.parametrize("order", ORDERS)
def test_span_matches_the_enumerated_group(order: str) -> None:
    # the reference is the list of members (pipeline.model.predict.group): its length, first
    # and last rank must be the span's, for every rank and dimension of small layouts
    cp = 2 if "cp" in order else 1
    job = build_job(None, {"model.preset": "mixtral-8x7b", "parallel.tp": 2, "parallel.pp": 2,
                           "parallel.dp": 4, "parallel.cp": cp, "parallel.ep": 2,
                           "parallel.order": order, "batch.global_batch": 16})  # fmt: skip
    dims = [d for d in DIMS if cp > 1 or "cp" not in d]
    for rank, dims_ in itertools.product(range(job.parallel.world_size), dims):
        members = group(job, rank, dims_)
        s = span(job, rank, dims_)
        assert (s.size, s.lo, s.hi) == (len(members), members[0], members[-1])
        e = group(job, rank, ("ep",), expert=True)
        se = span(job, rank, ("ep",), expert=True)
        assert (se.size, se.lo, se.hi) == (len(e), e[0], e[-1])


def test_a_billion_ranks() -> None:
    # tp 8 x pp 16 x dp 2^23 = 2^30 ranks: the last rank's DP group is every 128th rank from
    # its TP coordinate, 2^23 ranks across nodes; its TP group the 8 ranks of its node
    world = 8 * 16 * 2**23
    assert world == MAX_RANKS
    job = build_job(None, {"model.preset": "llama3-8b", "parallel.tp": 8, "parallel.pp": 16,
                           "parallel.dp": 2**23, "batch.global_batch": 2**23})  # fmt: skip
    pred = predict(job, world - 1)
    assert pred.coords == {"tp": 7, "cp": 0, "dp": 2**23 - 1, "pp": 15, "ep": 0, "edp": 2**23 - 1}
    dp = [r for r in pred.rows if r.parallel_dim == "dp"]
    assert dp and all(r.group_size == 2**23 and r.link == "inter" for r in dp)
    tp = [r for r in pred.rows if r.parallel_dim == "tp"]
    assert tp and all(r.group_size == 8 and r.link == "intra" for r in tp)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("gpus_per_node", [1, 3, 4, 16])
def test_predictions_by_class_match_every_rank(order: str, gpus_per_node: int) -> None:
    # the reference is predict() run for each rank on its own; predict_ranks shares the
    # rows of ranks of one class (stage and link classes) and must give the same table
    cp = 2 if "cp" in order else 1
    job = build_job(None, {"model.preset": "mixtral-8x7b", "parallel.tp": 2, "parallel.pp": 2,
                           "parallel.dp": 4, "parallel.cp": cp, "parallel.ep": 2,
                           "parallel.order": order, "model.tied_embeddings": True,
                           "network.gpus_per_node": gpus_per_node,
                           "batch.global_batch": 16})  # fmt: skip
    ranks = range(job.parallel.world_size)
    each = [predict(job, r) for r in ranks]
    shared = predict_ranks(job, ranks)
    assert [(p.rank, p.coords, p.layers, p.rows) for p in shared] == [
        (p.rank, p.coords, p.layers, p.rows) for p in each
    ]
