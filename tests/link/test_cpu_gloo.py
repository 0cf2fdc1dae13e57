"""Link of the real CPU/gloo runs in tests/data/cpu_gloo with each run's job.yaml: parallel
dimensions, phases and layers of the collectives, observed bytes per (dimension, op, phase)
next to the analytic prediction, and what the straggler run shows of the late rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.cpu_gloo import (
    A2A,
    ACT,
    CE,
    FP32,
    LOSS,
    MOE_DENSE,
    PARAMS,
    STEPS,
    TP_PARAMS,
    WORLD,
    counts,
    linked,
)

if TYPE_CHECKING:
    from pipeline.dataset.handle import Dataset  # the type pipeline.open returns


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dataset]:
    """Every run, each ingested and linked into its own dataset."""
    return {run: linked(run, tmp_path_factory.mktemp(run) / "ds") for run in WORLD}


def _per_step(rows: dict[tuple[str, str, str], tuple[int, int]]) -> dict[tuple, tuple]:
    """The same (calls, bytes) in each profiled step, observed and predicted alike."""
    return {(step, *key): (*v, *v) for step in STEPS for key, v in rows.items()}


def _wire(ds: Dataset) -> dict[tuple, tuple]:
    frame = ds.sql(
        "SELECT step, parallel_dim, op, phase, calls, bytes, predicted_calls, predicted_bytes "
        "FROM token_wire"
    )
    return {r[:4]: r[4:] for r in frame.rows()}


_DDP = {
    ("dp", "all_reduce", "backward"): (2, 2 * PARAMS * FP32),  # 1 bucket x 2 ranks
    ("dp", "all_reduce", "other"): (2, 2 * LOSS),  # the loss report
}
# per rank and step: forward 2 per layer + embedding + 3 cross-entropy reductions; backward
# 2 per layer + LM head
_TP = {
    ("tp", "all_reduce", "forward"): (2 * 8, 2 * (5 * ACT + 3 * CE)),
    ("tp", "all_reduce", "backward"): (2 * 5, 2 * 5 * ACT),
}
#: (dimension, op, phase) -> (calls, bytes) over all ranks in one step, observed = predicted
WIRE = {
    "ddp": _DDP,
    "straggler": _DDP,
    "tp": _TP,
    "tp_dp": {
        **{k: (2 * c, 2 * b) for k, (c, b) in _TP.items()},
        ("dp", "all_reduce", "backward"): (4, 4 * TP_PARAMS * FP32),
        ("dp", "all_reduce", "other"): (4, 4 * LOSS),
    },
    "pp": {  # 2 micro-batches; rank 0 sends forward, rank 1 backward
        ("pp", op, phase): (2, 2 * ACT)
        for op in ("send", "recv")
        for phase in ("forward", "backward")
    },
}


@pytest.mark.parametrize("run", sorted(WIRE))
def test_observed_bytes_equal_the_prediction(datasets: dict[str, Dataset], run: str) -> None:
    assert _wire(datasets[run]) == _per_step(WIRE[run])


def test_fsdp_all_gathers_equal_the_prediction(datasets: dict[str, Dataset]) -> None:
    wire = _wire(datasets["fsdp"])
    gathers = {k: v for k, v in wire.items() if k[2] == "all_gather"}
    # each of 4 units gathered forward and backward on 2 ranks: the whole model each time
    unit_sum = (8, 2 * PARAMS * FP32)
    assert gathers == _per_step(
        {("dp", "all_gather", "forward"): unit_sum, ("dp", "all_gather", "backward"): unit_sum}
    )


def test_fsdp_reduce_scatters_equal_the_prediction(datasets: dict[str, Dataset]) -> None:
    wire = _wire(datasets["fsdp"])
    rest = {k: v for k, v in wire.items() if k[2] != "all_gather"}
    assert rest == _per_step(
        {
            ("dp", "reduce_scatter", "backward"): (8, 2 * PARAMS * FP32),
            ("dp", "all_reduce", "other"): (2, 2 * LOSS),
        }
    )


def test_moe_gradients_equal_the_prediction(datasets: dict[str, Dataset]) -> None:
    wire = _wire(datasets["moe"])
    reduces = {k: v for k, v in wire.items() if k[2] == "all_reduce"}
    assert reduces == _per_step(
        {
            ("dp", "all_reduce", "backward"): (2, 2 * MOE_DENSE * FP32),
            ("dp", "all_reduce", "other"): (2, 2 * LOSS),
        }
    )


def test_moe_all_to_all_is_expert_parallel(datasets: dict[str, Dataset]) -> None:
    wire = _wire(datasets["moe"])
    a2a = {k: v for k, v in wire.items() if k[2] == "all_to_all"}
    # per rank and step: dispatch + combine in each of 2 layers, forward and backward
    assert a2a == _per_step(
        {
            ("ep", "all_to_all", "forward"): (2 * 4, 2 * 4 * A2A),
            ("ep", "all_to_all", "backward"): (2 * 4, 2 * 4 * A2A),
        }
    )


def test_tp_dp_communicators_take_their_dimension(datasets: dict[str, Dataset]) -> None:
    dims = datasets["tp_dp"].sql("SELECT comm, ranks, parallel_dim FROM communicator_dims")
    got = {(c, tuple(r), d) for c, r, d in dims.rows()}
    assert got == {
        ("pg:0", (0, 1, 2, 3), "world"),
        ("pg:1", (0, 1), "tp"),
        ("pg:2", (2, 3), "tp"),
        ("pg:3", (0, 2), "dp"),
        ("pg:4", (1, 3), "dp"),
    }


_LAYER = ("phase", "layer", "layer_index", "layer_kind", "attributed_by", "bytes")


def test_tp_dp_instances_are_per_group(datasets: dict[str, Dataset]) -> None:
    """The gloo trace names no group per event; each profiler call takes its group and
    sequence number from the flight recorder call it pairs with by time, so the same call of
    the two TP groups {0,1} and {2,3} is two instances."""
    got = datasets["tp_dp"].sql(
        "SELECT comm, bytes, ranks_seen, count(*) AS n FROM collective_instances "
        "WHERE source = 'kineto' GROUP BY ALL"
    )
    # per group and the 2 profiled steps: TP 10 [b,s,h] + 3 [b,s]; DP 1 bucket + 1 loss report
    want = {(f"pg:{g}", ACT, 2, 20) for g in (1, 2)} | {(f"pg:{g}", CE, 2, 6) for g in (1, 2)}
    want |= {(f"pg:{g}", TP_PARAMS * FP32, 2, 2) for g in (3, 4)}
    want |= {(f"pg:{g}", LOSS, 2, 2) for g in (3, 4)}
    assert set(got.rows()) == want


def test_tp_dp_collectives_are_one_instance_each(datasets: dict[str, Dataset]) -> None:
    """Every rank left a trace and a flight recorder dump: each of the 60 collectives the
    profiler saw is one row that names both sources (the trace's, the more trusted), and the
    recorder's 101 calls outside the profiled steps are its alone: one row per collective
    the recorder holds, none twice."""
    ds = datasets["tp_dp"]
    rows = ds.sql(
        "SELECT source, sources, count(*), count(step) FROM collective_instances "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert rows == [
        ("flight_recorder", ["flight_recorder"], 101, 0),
        ("kineto", ["flight_recorder", "kineto"], 60, 60),
    ]
    recorded = ds.sql(
        "SELECT count(DISTINCT (comm, seq)) FROM collectives WHERE source = 'flight_recorder'"
    ).item()
    keys = ds.sql("SELECT count(*), count(DISTINCT (comm, seq)) FROM collective_instances")
    assert keys.row(0) == (recorded, recorded) == (161, 161)


def _links(ds: Dataset, rank: int):
    return ds.sql(
        "SELECT c.op, l.phase, l.layer, l.layer_index, l.layer_kind, l.attributed_by, c.bytes "
        "FROM collective_links l JOIN collectives c USING (rank, file_id, collective_id) "
        f"WHERE l.source = 'kineto' AND l.rank = {rank}"
    )


@pytest.mark.parametrize("run", ["tp", "tp_dp"])
def test_tp_collectives_carry_their_layer(datasets: dict[str, Dataset], run: str) -> None:
    prefix = "DistributedDataParallel_0/TinyGPT_0" if run == "tp_dp" else "TinyGPT_0"
    want = {}
    for i in range(2):
        for part, kind in ((f"Attention_{i}", "attention"), (f"MLP_{i}", "mlp")):
            path = f"{prefix}/Block_{i}/{part}"
            want[("forward", path, i, kind, "module_scope", ACT)] = 2
            want[("backward", path, i, kind, "backward_of_forward_op", ACT)] = 2
    want[("forward", f"{prefix}/Embed_0", None, "embedding", "module_scope", ACT)] = 2
    want[("forward", f"{prefix}/Head_0", None, None, "module_scope", CE)] = 6
    want[("backward", f"{prefix}/Head_0", None, None, "backward_of_forward_op", ACT)] = 2
    for rank in range(WORLD[run]):
        links = _links(datasets[run], rank)
        tp = links.filter(links["bytes"].is_in([ACT, CE]))
        assert counts(tp, *_LAYER) == want, f"rank {rank}"


def test_moe_all_to_alls_carry_their_layer(datasets: dict[str, Dataset]) -> None:
    prefix = "DistributedDataParallel_0/TinyGPT_0"
    want = {}
    for i in range(2):
        path = f"{prefix}/Block_{i}/MoE_{i}"
        want[("forward", path, i, "moe", "module_scope", A2A)] = 4
        want[("backward", path, i, "moe", "backward_of_forward_op", A2A)] = 4
    for rank in range(2):
        links = _links(datasets["moe"], rank)
        a2a = links.filter(links["bytes"] == A2A)
        assert counts(a2a, *_LAYER) == want, f"rank {rank}"


#: The process group (pg_name) of each rank's collectives: TP groups {0,1} = "1", {2,3} = "2";
#: DP groups {0,2} = "3", {1,3} = "4" (created in that order, after the default group "0").
TP_DP_COMMS = {
    0: {("pg:1", ACT): 20, ("pg:1", CE): 6, ("pg:3", TP_PARAMS * FP32): 2, ("pg:3", LOSS): 2},
    1: {("pg:1", ACT): 20, ("pg:1", CE): 6, ("pg:4", TP_PARAMS * FP32): 2, ("pg:4", LOSS): 2},
    2: {("pg:2", ACT): 20, ("pg:2", CE): 6, ("pg:3", TP_PARAMS * FP32): 2, ("pg:3", LOSS): 2},
    3: {("pg:2", ACT): 20, ("pg:2", CE): 6, ("pg:4", TP_PARAMS * FP32): 2, ("pg:4", LOSS): 2},
}


def test_multi_group_calls_take_their_communicator_from_the_flight_recorder(
    datasets: dict[str, Dataset],
) -> None:
    """TP x DP: a rank's gloo trace names no group per call; each call is paired with its
    flight recorder entry (the same rank and op, sizes agreeing, mutually nearest in time)
    and takes its group and sequence number, so the calls of one group on its ranks are one
    instance each."""
    ds = datasets["tp_dp"]
    links = ds.sql(
        "SELECT rank, instance_comm, bytes FROM collective_links "
        "WHERE source = 'kineto' AND step IS NOT NULL"
    )
    for rank, want in TP_DP_COMMS.items():
        assert counts(links.filter(rank=rank), "instance_comm", "bytes") == want, rank
    instances = ds.sql(
        "SELECT comm, ranks_seen FROM collective_instances WHERE source = 'kineto' "
        "AND step IS NOT NULL"
    )
    assert counts(instances, "comm", "ranks_seen") == {
        ("pg:1", 2): 26, ("pg:2", 2): 26, ("pg:3", 2): 4, ("pg:4", 2): 4
    }  # fmt: skip


def test_gloo_reduce_scatters_pair_with_their_flight_recorder_all_reduce(
    datasets: dict[str, Dataset],
) -> None:
    """gloo runs FSDP's reduce-scatter as an all-reduce of the whole input, and the flight
    recorder names it gloo:all_reduce: each profiled call still pairs with its entry, the
    sizes agreeing."""
    got = datasets["fsdp"].sql(
        "SELECT c.op, m.method, m.sizes_agree FROM collectives c LEFT JOIN collective_matches m "
        "ON m.primary_file_id = c.file_id AND m.primary_collective_id = c.collective_id "
        "WHERE c.source = 'kineto'"
    )
    assert counts(got, "op", "method", "sizes_agree") == {
        ("all_gather", "time", True): 32,
        ("reduce_scatter", "time", True): 16,
        ("all_reduce", "time", True): 4,
    }


_FSDP_UNITS = ["FSDPEmbed_0", "FSDPBlock_0", "FSDPBlock_1", "FSDPHead_0"]


def test_fsdp_forward_gathers_carry_their_unit(datasets: dict[str, Dataset]) -> None:
    for rank in range(2):
        links = _links(datasets["fsdp"], rank).filter(op="all_gather", phase="forward")
        layers = counts(links, "layer")
        assert layers == {(f"FSDPTinyGPT_0/{u}",): 2 for u in _FSDP_UNITS}


def test_fsdp_backward_gathers_and_scatters_carry_their_unit(
    datasets: dict[str, Dataset],
) -> None:
    """FSDP2's backward all-gathers (pre-backward hooks and their prefetch, inside autograd)
    and gradient reduce-scatters (post-backward hooks) run outside any module scope; the
    ``FSDP::all_gather (blocks.0)`` and ``FSDP::post_backward_reduce (embed)`` ranges name the
    unit, whose forward pre-hook runs in its module scope. The root's embedding was gathered in
    forward and resharded, so every unit is gathered again, once a step."""
    for rank in range(2):
        links = _links(datasets["fsdp"], rank).filter(phase="backward")
        for op in ("all_gather", "reduce_scatter"):
            got = counts(links.filter(op=op), "layer", "attributed_by")
            want = {(f"FSDPTinyGPT_0/{u}", "fsdp_unit"): 2 for u in _FSDP_UNITS}
            assert got == want, (rank, op)


def _instances(ds: Dataset):
    return ds.sql(
        "SELECT step, late_rank, skew_ns FROM collective_instances "
        f"WHERE source = 'kineto' AND op = 'all_reduce' AND bytes = {PARAMS * FP32} ORDER BY step"
    )


def test_straggler_is_the_late_rank_of_the_gradient_all_reduce(
    datasets: dict[str, Dataset],
) -> None:
    """Rank 1 sleeps 30 ms in blocks.1's forward each step: it reaches the gradient all-reduce
    last, by more than the sleep, and rank 0's all-reduce spans that wait."""
    slow = _instances(datasets["straggler"])
    assert slow["step"].to_list() == STEPS
    assert slow["late_rank"].to_list() == [1, 1]
    assert slow["skew_ns"].min() > 30_000_000
    durations = datasets["straggler"].sql(
        "SELECT step, rank, dur_ns FROM collectives "
        f"WHERE source = 'kineto' AND bytes = {PARAMS * FP32}"
    )
    by = {(s, r): d for s, r, d in durations.rows()}
    for step in STEPS:
        assert by[(step, 0)] - by[(step, 1)] > 30_000_000


def test_without_a_straggler_the_skew_is_small(datasets: dict[str, Dataset]) -> None:
    """The same job without the sleep (ddp): no rank arrives 30 ms late."""
    assert _instances(datasets["ddp"])["skew_ns"].max() < 10_000_000


def test_step_stragglers_name_the_sleeping_rank_and_its_block(
    datasets: dict[str, Dataset],
) -> None:
    """step_stragglers names rank 1 in both steps, busy in blocks.1 (where it sleeps) while
    rank 0 waited, and straggler_ops puts that module's own time first."""
    ds = datasets["straggler"]
    stragglers = ds.sql("SELECT step, rank, busy_layer FROM step_stragglers ORDER BY step")
    assert stragglers["step"].to_list() == STEPS
    assert stragglers["rank"].to_list() == [1, 1]
    assert all(layer.endswith("Block_1") for layer in stragglers["busy_layer"])
    top = ds.sql(
        "SELECT step, name, overlap_ns FROM straggler_ops "
        "QUALIFY row_number() OVER (PARTITION BY step ORDER BY overlap_ns DESC) = 1"
    )
    assert sorted(top["name"]) == ["nn.Module: Block_1"] * 2
    assert top["overlap_ns"].min() > 10_000_000  # of the 30 ms sleep, what rank 0 waited for


def test_a_rank_slowed_in_one_step_is_named_with_that_step_and_layer(tmp_path) -> None:
    """straggler_step: rank 1 sleeps 200 ms in blocks.0's forward in step 3 only. The step
    whose straggler held the others back longest is step 3, its straggler rank 1, busy in
    Block_0, whose own time leads what it ran meanwhile; in no other step does Block_0 hold
    the straggler that long."""
    ds = linked("straggler_step", tmp_path / "ds")
    worst = ds.sql(
        "SELECT step, rank, busy_layer, caused_wait_ns FROM step_stragglers "
        "ORDER BY caused_wait_ns DESC LIMIT 1"
    ).row(0, named=True)
    assert (worst["step"], worst["rank"]) == (3, 1)
    assert worst["busy_layer"].endswith("/Block_0")
    assert worst["caused_wait_ns"] > 100_000_000  # of the 200 ms sleep
    top = ds.sql(
        "SELECT step, name, overlap_ns FROM straggler_ops "
        "QUALIFY row_number() OVER (PARTITION BY step ORDER BY overlap_ns DESC) = 1"
    )
    held = {s: n for s, name, n in top.rows() if name == "nn.Module: Block_0"}
    assert list(held) == [3] and held[3] > 100_000_000


def test_pipeline_calls_carry_their_instance_key(datasets: dict[str, Dataset]) -> None:
    # each send and its recv are one instance: 8 transfers of 2 calls each
    rows = (
        datasets["pp"]
        .sql(
            "SELECT count(*), count(i.seq), count(DISTINCT (i.comm, i.seq)) "
            "FROM collectives_linked l LEFT JOIN collective_instances i "
            "ON i.job = l.job AND i.source = l.source "
            "AND i.comm IS NOT DISTINCT FROM l.instance_comm "
            "AND i.seq = l.instance_seq WHERE l.source = 'kineto'"
        )
        .rows()
    )
    assert rows == [(16, 16, 8)]


def test_the_straggler_s_sleep_is_rank_0_s_wait_not_its_transfer(
    datasets: dict[str, Dataset],
) -> None:
    """A known delay: rank 1 sleeps 30 ms before the gradient all-reduce each step, so rank 0
    waits in it at least that long and rank 1, the last to arrive, not at all; rank 0's
    transfer is what is left once it stops waiting, no longer than rank 1's whole call. In
    the DDP run without the sleep no rank waits that long."""
    query = (
        "SELECT w.step, w.rank, w.wait_ns, w.transfer_ns, c.dur_ns FROM collective_waits w "
        "JOIN collectives c USING (job, rank, source, collective_id) "
        f"WHERE w.op = 'all_reduce' AND w.bytes = {PARAMS * FP32} ORDER BY w.step, w.rank"
    )
    rows = datasets["straggler"].sql(query).rows()
    assert [(step, rank) for step, rank, *_ in rows] == [(s, r) for s in STEPS for r in (0, 1)]
    for step in STEPS:
        (_, _, wait0, transfer0, _), (_, _, wait1, transfer1, dur1) = [
            r for r in rows if r[0] == step
        ]
        assert wait0 > 30_000_000 and wait1 == 0
        assert transfer1 == dur1 and transfer0 <= dur1
    calm = datasets["ddp"].sql(query).rows()
    assert len(calm) == 2 * len(STEPS)
    assert max(wait for _, _, wait, _, _ in calm) < 30_000_000


def test_tp_dp_gradient_buckets_name_the_blocks_they_carry(
    datasets: dict[str, Dataset],
) -> None:
    """The DDP bucket of the TP x DP run is split over the rank's units, each named by its
    module path cut after the layer (.../TinyGPT_0/Block_0, which no collective names
    itself): kind and label as collective_links gives a path's, the embedding by its own
    path, the LM head by the model's name (no path of the rank reads as an LM head)."""
    rows = (
        datasets["tp_dp"]
        .sql(
            "SELECT layer_label, layer_kind, count(DISTINCT rank) FROM gradient_bucket_layers "
            "GROUP BY ALL ORDER BY ALL"
        )
        .rows()
    )
    assert rows == [
        ("Block_0", "transformer", 4),
        ("Block_1", "transformer", 4),
        ("Embed_0", "embedding", 4),
        ("lm_head", "lm_head", 4),
    ]
