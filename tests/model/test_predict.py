"""Per-rank rows: the sample job derived by hand, placement, and each dimension's calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.dataset.schema import conform
from pipeline.errors import ConfigError
from pipeline.model.config import job_from_dict, load_job
from pipeline.model.params import layer_params, rank_units
from pipeline.model.predict import (
    coordinates,
    group,
    layout_groups,
    predict,
    predictions_table,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "job.yaml"
DIMS = {"layers": 4, "hidden": 256, "heads": 8, "ffn_hidden": 1024, "vocab": 8192,
        "seq_len": 128}  # fmt: skip


def _rows(pred):
    """(calls, message size) per kind of collective, over the items of each kind (all of one
    size in these jobs)."""
    out: dict[tuple, tuple[int, int]] = {}
    for r in pred.rows:
        key = (r.parallel_dim, r.op, r.phase, r.layer_kind)
        calls, message = out.get(key, (0, r.bytes // r.calls))
        assert message == r.bytes // r.calls, key
        out[key] = (calls + r.calls, message)
    return out


# --------------------------------------------------------------------------- the sample job
# h = 256, f = 1024, V = 8192, s = 128, t = 2, b = 2, m = 16 / (2*2) = 4, bf16 everywhere.
# One GPT layer on one TP rank: QKV 256*768/2 + bias 768/2, O 256*256/2 + bias 256 (replicated),
# FC1 256*1024/2 + bias 1024/2, FC2 1024*256/2 + bias 256, two LayerNorms 2*(2*256).
LAYER = (
    256 * 768 // 2
    + 768 // 2
    + 256 * 256 // 2
    + 256
    + 256 * 1024 // 2
    + 1024 // 2
    + 1024 * 256 // 2
    + 256
    + 2 * 2 * 256
)
STAGE0 = 2 * LAYER + 8192 * 256 // 2 + 128 * 256  # + vocab-parallel embedding + positions
STAGE1 = 2 * LAYER + 2 * 256 + 8192 * 256 // 2  # + final LayerNorm + untied LM head
ACT = 2 * 128 * 256 * 2  # b*s*h*e_a: every TP and PP message of this job


def test_sample_job_parameters_per_tp_rank_by_hand():
    """The hand counts above against the model's parameter counting, and against what
    docs/sample-job.md prints for the sample job."""
    job = load_job(SAMPLE)
    assert [layer_params(job.model, i, tp=2).dense for i in range(4)] == [LAYER] * 4
    assert sum(u.elements for u in rank_units(job, 0)) == STAGE0
    assert sum(u.elements for u in rank_units(job, 1)) == STAGE1
    doc = (REPO / "docs" / "sample-job.md").read_text(encoding="utf-8")
    assert f"a layer holds {LAYER:,} elements" in doc
    assert f"| {STAGE0:,} / {STAGE1:,} | {2 * STAGE0:,} / {2 * STAGE1:,} |" in doc
    assert f"s·b·h = {ACT // 2:,} | {ACT:,} |" in doc


def test_sample_job_first_stage_rank():
    pred = predict(load_job(SAMPLE), 0)
    assert pred.coords == {"tp": 0, "cp": 0, "dp": 0, "pp": 0, "ep": 0, "edp": 0}
    assert pred.layers == (0, 1)
    assert _rows(pred) == {
        ("tp", "all_reduce", "forward", "transformer"): (2 * 2 * 4, ACT),
        ("tp", "all_reduce", "forward", "embedding"): (4, ACT),
        ("tp", "all_reduce", "backward", "transformer"): (2 * 2 * 4, ACT),
        ("pp", "send", "forward", "boundary"): (4, ACT),
        ("pp", "recv", "backward", "boundary"): (4, ACT),
        ("dp", "all_reduce", "backward", "all"): (1, STAGE0 * 2),
    }
    # n = 2 everywhere: ring all-reduce sends 2*(1/2)*M = M; recv sends nothing.
    for r in pred.rows:
        assert r.wire_bytes == (0 if r.op == "recv" else r.bytes)
        assert r.link == "intra" and r.group_size == 2
        # alpha-beta with the network defaults: 8.4 µs + 3.4 µs per step inside the node
        # (ring all-reduce of 2 ranks: 2 steps; send/recv: 1), M at 80% of 450 GB/s
        lat = 8.4e-6 + (2 if r.op == "all_reduce" else 1) * 3.4e-6
        assert r.est_time_s == pytest.approx(r.calls * (lat + r.bytes // r.calls / 360e9))


def test_sample_job_last_stage_rank():
    pred = predict(load_job(SAMPLE), 7)
    assert pred.coords == {"tp": 1, "cp": 0, "dp": 1, "pp": 1, "ep": 0, "edp": 1}
    assert _rows(pred) == {
        ("tp", "all_reduce", "forward", "transformer"): (16, ACT),
        ("tp", "all_reduce", "forward", "loss"): (3 * 4, 2 * 128 * 4),
        ("tp", "all_reduce", "backward", "transformer"): (16, ACT),
        ("tp", "all_reduce", "backward", "lm_head"): (4, ACT),
        ("pp", "recv", "forward", "boundary"): (4, ACT),
        ("pp", "send", "backward", "boundary"): (4, ACT),
        ("dp", "all_reduce", "backward", "all"): (1, STAGE1 * 2),
        ("dp", "all_reduce", "other", "loss"): (1, 8),
    }


def test_sample_job_groups_follow_megatron_order():
    job = load_job(SAMPLE)
    # tp-cp-ep-dp-pp: rank = tp + 2*dp + 4*pp
    assert [coordinates(job, r)["pp"] for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert group(job, 5, ("tp",)) == [4, 5]
    assert group(job, 5, ("dp", "cp")) == [5, 7]
    assert group(job, 5, ("pp",)) == [1, 5]


def test_every_rank_of_a_group_gets_the_same_members_as_a_list_of_its_own():
    """Each rank's group is the set of ranks that share its coordinates outside the group's
    dimensions (worked out here from the coordinates), and the list is the caller's to
    change (the members are worked out once per group)."""
    job = job_from_dict({"model": DIMS, "parallel": {"tp": 2, "cp": 2, "dp": 4, "pp": 2}})
    world = range(job.parallel.world_size)
    for dims, outside in ((("tp",), ("cp", "dp", "pp")), (("dp", "cp"), ("tp", "pp"))):
        for rank in world:
            mine = coordinates(job, rank)
            same = [r for r in world if all(coordinates(job, r)[d] == mine[d] for d in outside)]
            assert group(job, rank, dims) == same
    members = group(job, 3, ("dp", "cp"))
    members.append(-1)
    assert -1 not in group(job, 3, ("dp", "cp"))


@pytest.mark.parametrize(
    ("parallel", "model"),
    [
        ({"tp": 2, "cp": 2, "dp": 4, "pp": 2}, DIMS),
        ({"tp": 2, "dp": 4, "pp": 2, "ep": 2}, {**DIMS, "moe": {"experts": 4, "top_k": 2}}),
    ],
)
def test_layout_groups_are_each_ranks_group_once(parallel, model):
    """The layout's groups over some dimensions split the world: each rank is in one, and
    it is the group :func:`group` gives that rank. Dimensions of size 1 give none."""
    job = job_from_dict({"model": model, "parallel": parallel})
    world = job.parallel.world_size
    for dims, expert in ((("tp",), False), (("cp",), False), (("dp", "cp"), False),
                         (("pp",), False), (("ep",), True), (("dp",), True)):  # fmt: skip
        sizes = [job.parallel.ep if d == "ep" else getattr(job.parallel, d) for d in dims]
        groups = layout_groups(job, dims, expert=expert)
        if sizes == [1] * len(dims):
            assert groups == []
            continue
        ranks = [r for g in groups for r in g]
        assert sorted(ranks) == list(range(world))
        for g in groups:
            assert list(g) == sorted(g)
            for rank in g:
                assert group(job, rank, dims, expert=expert) == list(g)


def test_every_sample_rank_matches_its_stage():
    job = load_job(SAMPLE)
    first, last = _rows(predict(job, 0)), _rows(predict(job, 7))
    for r in range(8):
        assert _rows(predict(job, r)) == (first if r < 4 else last)


# --------------------------------------------------------------------------- placement


def test_custom_order_changes_groups_and_links():
    job = job_from_dict({"model": DIMS, "parallel": {"tp": 2, "dp": 4, "order": "dp-tp-pp"},
                         "network": {"gpus_per_node": 4}})  # fmt: skip
    assert group(job, 0, ("tp",)) == [0, 4]  # dp varies fastest
    pred = predict(job, 0)
    tp = [r for r in pred.rows if r.parallel_dim == "tp"]
    dp = [r for r in pred.rows if r.parallel_dim == "dp"]
    assert {r.link for r in tp} == {"inter"} and {r.link for r in dp} == {"intra"}
    for r in tp:
        # TP pair on 2 nodes: ring steps 2(n−1) = 2, both between nodes (2(g−1) = 2), 14 µs
        # each; the transfer at 80% of 50 GB/s
        lat = 8.4e-6 + 2 * 14e-6
        assert r.est_time_s == pytest.approx(r.calls * lat + r.wire_bytes / 40e9)


def test_rank_out_of_range():
    with pytest.raises(ConfigError, match=r"rank: 8 is outside the job's ranks 0\.\.7"):
        predict(load_job(SAMPLE), 8)


# --------------------------------------------------------------------------- dimensions


def _job(parallel, model=None, **rest):
    return job_from_dict({"model": model or DIMS, "parallel": parallel, **rest})


def test_tp_sequence_parallel_counts_per_layer():
    # Megatron-core: fwd 2 AG + 2 RS, bwd 4 AG + 2 RS per layer; + (2 AG + 2 RS) full recompute.
    job = _job({"tp": 4, "sequence_parallel": True}, batch={"micro_batch": 1, "global_batch": 3})
    rows = _rows(predict(job, 1))
    L, m = 4, 3
    assert rows[("tp", "all_gather", "forward", "transformer")][0] == 2 * L * m
    assert rows[("tp", "reduce_scatter", "forward", "transformer")][0] == 2 * L * m
    assert rows[("tp", "all_gather", "backward", "transformer")][0] == 4 * L * m
    assert rows[("tp", "reduce_scatter", "backward", "transformer")][0] == 2 * L * m
    assert rows[("tp", "reduce_scatter", "forward", "embedding")][0] == m
    assert rows[("tp", "all_gather", "backward", "embedding")][0] == m
    # SP norm grads: 4 LayerNorms per 2 layers... (2 per layer x 2h) + O and FC2 biases + final norm
    sp = 4 * (2 * 2 * 256 + 256 + 256) + 2 * 256
    assert rows[("tp", "all_reduce", "optimizer", "norm")] == (1, sp * 4)  # fp32 grads
    full = _job({"tp": 4, "sequence_parallel": True}, recompute="full")
    rows = _rows(predict(full, 0))
    assert rows[("tp", "all_gather", "backward", "transformer")][0] == 6 * L
    assert rows[("tp", "reduce_scatter", "backward", "transformer")][0] == 4 * L


def test_tp_full_recompute_is_1_5x_without_sp():
    base = predict(_job({"tp": 4}), 0)
    full = predict(_job({"tp": 4}, recompute="full"), 0)
    sel = predict(_job({"tp": 4}, recompute="selective"), 0)

    def tr(p):
        return sum(r.wire_bytes for r in p.rows if r.layer_kind == "transformer")

    assert tr(full) == 1.5 * tr(base) and tr(sel) == tr(base)


def test_pp_interleaved_sends_and_recvs():
    job = _job({"pp": 4, "vpp": 2}, model={**DIMS, "layers": 8},
               batch={"micro_batch": 1, "global_batch": 4})  # fmt: skip
    m, v = 4, 2
    expect = {  # (fwd send, fwd recv, bwd send, bwd recv) per pp rank
        0: (m * v, m * (v - 1), m * (v - 1), m * v),
        1: (m * v, m * v, m * v, m * v),
        3: (m * (v - 1), m * v, m * v, m * (v - 1)),
    }
    for r, (fs, fr, bs, br) in expect.items():
        rows = _rows(predict(job, r))
        assert rows[("pp", "send", "forward", "boundary")][0] == fs
        assert rows[("pp", "recv", "forward", "boundary")][0] == fr
        assert rows[("pp", "send", "backward", "boundary")][0] == bs
        assert rows[("pp", "recv", "backward", "boundary")][0] == br


def test_tied_embedding_grad_all_reduce_between_first_and_last_stage():
    job = _job({"pp": 4, "tp": 2}, model={**DIMS, "tied_embeddings": True})
    emb = ("pp", "all_reduce", "optimizer", "embedding")
    for rank, has in ((0, True), (3, False), (6, True), (7, True)):
        rows = _rows(predict(job, rank))
        assert (emb in rows) is has
        if has:
            assert rows[emb] == (1, 8192 * 256 // 2 * 4)
    untied = _job({"pp": 4}, model={**DIMS, "tied_embeddings": False})
    assert emb not in _rows(predict(untied, 0))


def test_cp_rows():
    # c = 2, t = 2, GQA kv_heads 4 -> K,V width per TP rank 2*(4*32/2) = 128 elements.
    job = _job({"cp": 2, "tp": 2}, model={**DIMS, "kv_heads": 4})
    rows = _rows(predict(job, 0))
    kv = 1 * 128 * 128 * 2
    assert rows[("cp", "all_gather", "forward", "attention")] == (4, kv)
    assert rows[("cp", "all_gather", "backward", "attention")] == (4, kv)
    assert rows[("cp", "reduce_scatter", "backward", "attention")] == (4, kv)
    # TP messages carry s/c tokens; DP reduces over DP x CP (here 2 ranks).
    assert rows[("tp", "all_reduce", "forward", "transformer")][1] == 64 * 256 * 2


def test_ep_rows_and_expert_data_parallel():
    moe = {**DIMS, "moe": {"experts": 4, "top_k": 2, "every": 2}}
    job = _job({"dp": 4, "ep": 2}, model=moe, batch={"micro_batch": 1, "global_batch": 4})
    pred = predict(job, 1)
    rows = _rows(pred)
    assert pred.coords["ep"] == 1 and pred.coords["edp"] == 0
    a2a = 2 * 128 * 256 * 2  # k*T*h*e
    assert rows[("ep", "all_to_all", "forward", "moe")] == (2 * 2, a2a)  # 2 MoE layers x 2
    assert rows[("ep", "all_to_all", "backward", "moe")] == (2 * 2, a2a)
    # Experts reduce over expert-DP = dp/ep = 2 ranks; each rank holds 4/2 experts.
    expert = next(r for r in pred.rows if r.parallel_dim == "dp" and r.layer_kind == "moe")
    assert expert.group_size == 2 and expert.bytes == 2 * 2 * (2 * 256 * 1024 + 1024 + 256) * 4
    dense = next(r for r in pred.rows if r.parallel_dim == "dp" and r.layer_kind == "all")
    assert dense.group_size == 4
    assert group(job, 1, ("ep",), expert=True) == [0, 1]


def test_zero_schemes_rows():
    # tp = pp = 1: the rank holds every weight, 4*(12h^2 + 13h) + 2*V*h + s*h + 2h = 7,386,624.
    n = 4 * (12 * 256**2 + 13 * 256) + 2 * 8192 * 256 + 128 * 256 + 2 * 256
    z1 = _rows(predict(_job({"dp": 4, "zero_stage": 1}), 0))
    assert z1[("dp", "reduce_scatter", "backward", "all")] == (1, n * 4)  # fp32 grads
    assert z1[("dp", "all_gather", "optimizer", "all")] == (1, n * 2)  # bf16 params
    ddp = _rows(predict(_job({"dp": 4}), 0))
    assert ddp[("dp", "all_reduce", "backward", "all")] == (1, n * 4)
    z3 = _rows(predict(_job({"dp": 4, "zero_stage": 3}), 0))
    assert z3[("dp", "all_gather", "forward", "transformer")][0] == 4
    assert z3[("dp", "all_gather", "backward", "transformer")][0] == 4
    assert z3[("dp", "reduce_scatter", "backward", "transformer")][0] == 4
    assert ("dp", "all_gather", "forward", "embedding") in z3
    nr = _rows(predict(_job({"dp": 4, "fsdp": True, "reshard_after_forward": False}), 0))
    assert ("dp", "all_gather", "backward", "transformer") not in nr


# --------------------------------------------------------------------------- outputs


def test_predictions_table_conforms_to_schema():
    table = predictions_table(SAMPLE, range(8))
    assert table.column_names[0] == "rank"
    assert sorted(set(table.column("rank").to_pylist())) == list(range(8))
    out = conform("predictions", table, job="sample")
    assert out.num_rows == 6 * 4 + 8 * 4
    assert set(out.column("job").to_pylist()) == {"sample"}
    with pytest.raises(ConfigError, match="world size: 4 ranks"):
        predictions_table(SAMPLE, [0, 1, 2, 3])
    assert predictions_table(load_job(SAMPLE), 8).num_rows == out.num_rows
    some = predictions_table(SAMPLE, [0, 7], world_size=8)
    assert some.column("rank").to_pylist() == [0] * 6 + [7] * 8
    with pytest.raises(ConfigError, match="world size: 16 ranks"):
        predictions_table(SAMPLE, [0, 7], world_size=16)
    with pytest.raises(ConfigError, match=r"rank: 9 is outside"):
        predictions_table(SAMPLE, [0, 9], world_size=8)


def test_json_shape():
    doc = json.loads(json.dumps(predict(load_job(SAMPLE), 3).to_dict()))
    assert set(doc) == {"model", "layout", "tokens_per_step", "rank", "rows", "totals"}
    assert doc["model"]["params"] == 7_386_624 and doc["model"]["flops_per_token"] > 0
    assert doc["tokens_per_step"] == 2048 and doc["rank"] == 3
    assert set(doc["rows"][0]) == {"parallel_dim", "op", "phase", "layer_kind", "purpose",
                                   "calls", "bytes", "wire_bytes", "intra_node_bytes",
                                   "inter_node_bytes", "est_time_s", "algorithm"}  # fmt: skip
    t = doc["totals"]
    split = {"wire_bytes", "intra_node_bytes", "inter_node_bytes"}
    assert set(t) == {"bytes", "bytes_per_token", "by_dim"} | split
    assert t["bytes"] == sum(r["bytes"] for r in doc["rows"])
    assert t["bytes_per_token"] == t["bytes"] / 2048
    assert set(t["by_dim"]) == {"tp", "pp", "dp"}
    assert set(t["by_dim"]["tp"]) == {"bytes"} | split


@pytest.mark.parametrize("rank", [0, 4])
def test_gradient_plan_is_the_stage_in_reverse_and_adds_up_to_its_buckets(rank: int) -> None:
    from pipeline.model.predict import coordinates, gradient_plan

    job = load_job(SAMPLE)
    pp = coordinates(job, rank)["pp"]
    plan = gradient_plan(job, pp)
    outer = "embedding" if pp == 0 else "lm_head"
    assert [(u.kind, u.layer, u.local) for u in plan] == [
        *([(outer, None, None)] if pp == 1 else []),
        ("transformer", 2 * pp + 1, 1),
        ("transformer", 2 * pp, 0),
        *([(outer, None, None)] if pp == 0 else []),
    ]
    buckets = [
        r for r in predict(job, rank).rows if r.parallel_dim == "dp" and r.phase == "backward"
    ]
    assert sum(u.bytes for u in plan) == sum(r.bytes for r in buckets) > 0


def test_gradient_plan_of_fsdp1_ends_with_its_root_unit() -> None:
    from pipeline.model.predict import gradient_plan

    job = load_job(REPO / "tests" / "data" / "cpu_gloo" / "fsdp1" / "job.yaml")
    assert [(u.kind, u.layer) for u in gradient_plan(job, 0)] == [
        ("transformer", 1),
        ("transformer", 0),
        ("root", None),
    ]
