"""Properties that hold for any layout (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.model.config import job_from_dict
from pipeline.model.predict import predict, predictions_table

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def layouts(draw, *, dp_min=1):
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.integers(1, 4))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.integers(dp_min, 4))
    heads = tp * draw(st.sampled_from([1, 2]))
    head_dim = draw(st.sampled_from([8, 16]))
    layers = pp * vpp * draw(st.integers(1, 2)) + draw(st.integers(0, 1))
    b = draw(st.integers(1, 2))
    accum = draw(st.integers(1, 3))
    doc = {
        "model": {
            "layers": layers, "hidden": heads * head_dim, "heads": heads,
            "ffn_hidden": 4 * heads * head_dim, "vocab": draw(st.sampled_from([64, 100])),
            "seq_len": 8 * tp * cp, "tied_embeddings": draw(st.booleans()),
            "mlp": draw(st.sampled_from(["gelu", "swiglu"])),
        },
        "parallel": {
            "tp": tp, "pp": pp, "dp": dp, "cp": cp, "vpp": vpp,
            "sequence_parallel": draw(st.booleans()),
            "order": draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-pp-dp", "dp-pp-cp-tp"])),
        },
        "batch": {"micro_batch": b, "global_batch": b * dp * accum},
        "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        "network": {"gpus_per_node": draw(st.sampled_from([2, 4, 8]))},
    }  # fmt: skip
    return doc


def _with(doc, **parallel):
    out = {**doc, "parallel": {**doc["parallel"], **parallel}}
    p = out["parallel"]
    out["batch"] = {**doc["batch"], "global_batch": doc["batch"]["micro_batch"] * p["dp"]}
    return out


def _dp_rows(pred, *, grads_only=True):
    return [r for r in pred.rows if r.parallel_dim == "dp"
            and not (grads_only and r.layer_kind == "loss")]  # fmt: skip


@SETTINGS
@given(layouts(dp_min=2), st.integers(2, 4), st.data())
def test_dp_payload_independent_of_dp_and_ring_ratio(doc, other_dp, data):
    a = job_from_dict(_with(doc))
    b = job_from_dict(_with(doc, dp=other_dp))
    pp_rank = data.draw(st.integers(0, a.parallel.pp - 1))

    def rank_at_stage(job):
        from pipeline.model.predict import _compose, _sizes

        c = {"tp": 0, "cp": 0, "ep": 0, "dp": 0, "pp": pp_rank}
        return _compose(c, job.parallel.order, _sizes(job, expert=False))

    pa, pb = predict(a, rank_at_stage(a)), predict(b, rank_at_stage(b))
    assert sum(r.bytes for r in _dp_rows(pa)) == sum(r.bytes for r in _dp_rows(pb))
    for pred in (pa, pb):
        for r in pred.rows:
            if r.op == "all_reduce":
                n = r.group_size
                assert abs(r.wire_bytes - 2 * (n - 1) / n * r.bytes) <= 1e-9 * r.bytes


@SETTINGS
@given(layouts(), st.data())
def test_tp1_has_no_tp_rows(doc, data):
    job = job_from_dict(_with(doc, tp=1, sequence_parallel=False))
    rank = data.draw(st.integers(0, job.parallel.world_size - 1))
    assert not [r for r in predict(job, rank).rows if r.parallel_dim == "tp"]


@SETTINGS
@given(layouts(dp_min=2), st.data())
def test_zero3_moves_1_5x_zero1(doc, data):
    doc = {**doc, "dtypes": {"params": "bf16", "grad_reduce": "bf16"}}
    z1 = job_from_dict(_with(doc, zero_stage=1))
    z3 = job_from_dict(_with(doc, zero_stage=3))
    rank = data.draw(st.integers(0, z1.parallel.world_size - 1))
    b1 = sum(r.bytes for r in _dp_rows(predict(z1, rank)))
    b3 = sum(r.bytes for r in _dp_rows(predict(z3, rank)))
    assert 2 * b3 == 3 * b1
    w1 = sum(r.wire_bytes for r in _dp_rows(predict(z1, rank)))
    w3 = sum(r.wire_bytes for r in _dp_rows(predict(z3, rank)))
    assert abs(2 * w3 - 3 * w1) <= 1e-9 * w3


@SETTINGS
@given(layouts())
def test_pipeline_bytes_sent_equal_bytes_received(doc):
    job = job_from_dict(doc)
    sent = recv = 0
    sends = recvs = 0
    for rank in range(job.parallel.world_size):
        for r in predict(job, rank).rows:
            if r.op == "send":
                sent, sends = sent + r.bytes, sends + r.calls
            elif r.op == "recv":
                recv, recvs = recv + r.bytes, recvs + r.calls
    assert sent == recv and sends == recvs
    p = job.parallel
    # each of the v*p - 1 chunk boundaries carries m tensors each way, per pipeline
    assert sends == 2 * (p.vpp * p.pp - 1) * job.microbatches * (p.world_size // p.pp)


@SETTINGS
@given(layouts())
def test_tokens_per_step(doc):
    job = job_from_dict(doc)
    assert job.tokens_per_step == doc["batch"]["global_batch"] * doc["model"]["seq_len"]
    assert predict(job, 0).to_dict()["tokens_per_step"] == job.tokens_per_step


@SETTINGS
@given(layouts())
def test_the_predictions_table_holds_every_ranks_rows_exactly(doc):
    # (the table is built with strict types: a float count or size would fail here)
    job = job_from_dict(doc)
    world = job.parallel.world_size
    table = predictions_table(job, world)
    rows = [(rank, r.calls, r.bytes) for rank in range(world) for r in predict(job, rank).rows]
    columns = [table.column(c).to_pylist() for c in ("rank", "calls", "bytes")]
    assert list(zip(*columns, strict=True)) == rows
