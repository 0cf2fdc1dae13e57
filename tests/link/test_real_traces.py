"""Linking on ../shared/real_traces: the real Kineto runs (gloo's tensor-parallel, pipeline
and DDP runs with their flight recorders, the DLRM job of 8 ranks), an NCCL log's topology
and the DeepSeek-V3 profile, each checked against what its files hold. The files are read
in place; without the folder this module is skipped, once. The same features are tested on
the project's own recorded runs (tests/data) in test_link.py, test_wire.py and
test_deepep.py, whose helpers these use."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import real_traces_absent
from tests.link import test_deepep, test_link, test_wire

if (absent := real_traces_absent()) is not None:
    pytest.skip(absent, allow_module_level=True)


def test_dlrm_instances_match_across_all_ranks(real_traces: Path, tmp_path: Path) -> None:
    ds = test_link._linked(real_traces / "kineto/dlrm_v100_8ranks", tmp_path, "dlrm")
    rows = ds.sql(
        "SELECT op, count(*), min(ranks_seen), bool_and(consistent) FROM collective_instances "
        "GROUP BY op ORDER BY op"
    ).rows()
    assert rows == [("all_reduce", 3, 8, True), ("all_to_all", 5, 8, True)]
    late = ds.sql("SELECT count(*) FROM collective_instances WHERE late_rank IS NULL").item()
    assert late == 0


def test_tensor_parallel_all_reduces_per_block(real_traces: Path, tmp_path: Path) -> None:
    ds = test_link._linked(real_traces / "kineto_cpu_gloo/tp_manual/ws2", tmp_path, "tp")
    rows = ds.sql(
        "SELECT rank, step, layer_index, phase, count(*) FROM collectives_linked "
        "WHERE source = 'kineto' GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert rows == [
        (r, s, block, phase, 2)
        for r in (0, 1)
        for s in (2, 3)
        for block in range(4)
        for phase in ("backward", "forward")
    ]
    dims = ds.sql("SELECT DISTINCT parallel_dim FROM collectives_linked WHERE source='kineto'")
    assert dims.rows() == [("tp",)]
    kinds = ds.sql(
        "SELECT layer_kind, count(*) FROM collectives_linked WHERE source = 'kineto' "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert kinds == [("attention", 32), ("mlp", 32)]


def test_pipeline_sends_pair_with_recvs(real_traces: Path, tmp_path: Path) -> None:
    ds = test_link._linked(real_traces / "kineto_cpu_gloo/pp/ws2", tmp_path, "pp")
    sends = ds.sql("SELECT count(*) FROM collectives WHERE source='kineto' AND op='send'").item()
    pairs = ds.sql(
        "SELECT count(*) FROM collective_instances WHERE source = 'kineto' AND op = 'send' "
        "AND ranks_seen = 2 AND consistent"
    ).item()
    assert sends == pairs == 8
    phases = ds.sql(
        "SELECT rank, op, phase, count(*) FROM collectives_linked WHERE source = 'kineto' "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert phases == [
        (0, "recv", "backward", 4),
        (0, "send", "forward", 4),
        (1, "recv", "forward", 4),
        (1, "send", "backward", 4),
    ]


def test_ddp_gradient_all_reduces_land_in_backward(real_traces: Path, tmp_path: Path) -> None:
    ds = test_link._linked(real_traces / "kineto_cpu_gloo/ddp/ws2", tmp_path, "ddp")
    rows = ds.sql(
        "SELECT op, phase, parallel_dim, count(*) FROM collectives_linked WHERE source = "
        "'kineto' GROUP BY ALL"
    ).rows()
    assert rows == [("all_reduce", "backward", "dp", 8)]


def test_flight_recorder_entries_match_profiler_calls(real_traces: Path, tmp_path: Path) -> None:
    """Every profiled collective of the MoE run is also in the flight recorder: same rank,
    process group and op, created within microseconds of the profiler's enqueue."""
    ds = test_link._linked(real_traces / "kineto_cpu_gloo/moe/ws2", tmp_path, "moe")
    profiled = ds.sql("SELECT count(*) FROM collectives WHERE source = 'kineto'").item()
    rows = ds.sql(
        "SELECT source, method, bool_and(sizes_agree), count(*), "
        "count(DISTINCT (rank, primary_collective_id)) FROM collective_matches GROUP BY ALL"
    ).rows()
    assert rows == [("flight_recorder", "time", True, profiled, profiled)]
    inherited = ds.sql(
        "SELECT count(*) FROM collectives_linked WHERE source = 'flight_recorder' "
        "AND attributed_by LIKE 'matched:%'"
    ).item()
    assert inherited > 0


def test_dlrm_collectives_take_their_phase_from_structure(real_traces: Path, tmp_path: Path):
    # the gradient all-reduces and the backward all-to-all run on the autograd engine's
    # thread inside evaluate_function; the forward all-to-all under `## forward ##` /
    # DistributedDataParallel.forward; TorchRec's input all-to-alls under `## sparse_data_dist ##`
    # (3 a rank: the features' splits, lengths and values)
    ds = test_link._linked(real_traces / "kineto/dlrm_v100_8ranks", tmp_path, "dlrm")
    rows = ds.sql(
        "SELECT op, phase, count(*) FROM collectives_linked GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert rows == [
        ("all_reduce", "backward", 24),
        ("all_to_all", "backward", 8),
        ("all_to_all", "forward", 32),
    ]
    # DLRM has no experts: its embedding all-to-alls are their own dimension, not ep
    dims = ds.sql(
        "SELECT op, parallel_dim, count(*) FROM collectives_linked GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert dims == [("all_reduce", "dp", 24), ("all_to_all", "a2a", 40)]
    # no module information: the all-to-alls take their layer from TorchRec's ranges around
    # them (kind embedding); the gradient buckets of the dense part are gradient_bucket
    layers = ds.sql(
        "SELECT op, layer, layer_kind, attributed_by, count(*) FROM collectives_linked "
        "GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert layers == [
        ("all_reduce", "gradient_bucket", None, "gradient_bucket", 24),
        ("all_to_all", "embedding/alltoall_bwd_single", "embedding", "embedding_range", 8),
        ("all_to_all", "embedding/alltoall_fwd_single", "embedding", "embedding_range", 8),
        ("all_to_all", "embedding/sparse_data_dist", "embedding", "embedding_range", 24),
    ]


def test_every_per_rank_call_carries_its_instance_key(real_traces: Path, tmp_path: Path):
    # DLRM names no process group: comm is NULL on every per-rank row and in the instance
    # key alike, and each of the 64 calls joins its instance NULL-safe
    ds = test_link._linked(real_traces / "kineto/dlrm_v100_8ranks", tmp_path, "dlrm")
    rows = ds.sql(
        "SELECT count(*), count(l.comm), count(l.instance_comm), count(i.seq), "
        "count(i.comm), count(DISTINCT (i.comm, i.seq)) "
        "FROM collectives_linked l LEFT JOIN collective_instances i "
        "ON i.job = l.job AND i.source = l.source AND i.comm IS NOT DISTINCT FROM "
        "l.instance_comm AND i.seq = l.instance_seq"
    ).rows()
    assert rows == [(64, 0, 0, 64, 0, 8)]
    waits = ds.sql("SELECT count(*), count(comm) FROM collective_waits").rows()
    assert waits == [(64, 0)]


def test_real_log_topology_carries_the_calls_written_beside_it(
    real_traces: Path, tmp_path: Path
) -> None:
    """nccl-issue-1189 (NCCL 2.21, 4 ranks on two H20 hosts): its init, ring, tree and
    connection lines as logged, with an all-reduce per rank appended (the excerpt has no COLL
    lines) and rank 0's TUNING line for it in the 2.20-2.22 shape (`Algo 0` = tree). The
    excerpt's rings and trees miss ranks, so the tree is the heap-ordered one over rank order
    (estimated), and the pairs the connection lines name carry their transport."""
    src = real_traces / "nccl_logs" / "nccl-issue-1189.log"
    text = src.read_text()
    procs = {  # rank -> (host:pid:tid prefix of the main thread, comm pointer)
        0: ("H20-GPU-05:1789224:1789224 [0]", "0x5b41750"),
        1: ("H20-GPU-05:1789225:1789225 [1]", "0x5a0ca40"),
        2: ("H20-GPU-06:4015539:4015539 [0]", "0x5a39240"),
        3: ("H20-GPU-06:4015540:4015540 [1]", "0x5b0bc60"),
    }
    count = 1 << 20
    extra = []
    for r, (prefix, comm) in procs.items():
        assert f"comm {comm} rank {r} nranks 4" in text
        extra.append(
            f"{prefix} NCCL INFO AllReduce: opCount 0 sendbuff 0x7f0000000000 recvbuff "
            f"0x7f0000000000 count {count} datatype 7 op 0 root 0 comm {comm} [nranks=4] "
            "stream 0x1"
        )
        if r == 0:
            extra.append(
                f"{prefix} NCCL INFO {count * test_wire.F32} Bytes -> Algo 0 proto 2 time 1.5"
            )
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / src.name).write_text(text + "\n".join(extra) + "\n")
    assert not ingest([tmp_path / "logs"], tmp_path / "ds", job="real", jobs=1).errors
    link(tmp_path / "ds")
    ds = pipeline.open(tmp_path / "ds")
    m = count * test_wire.F32
    parent = {1: 0, 2: 0, 3: 1}  # heap order over ranks 0..3: position k's parent is k // 2
    want = {**{(c, p): m for c, p in parent.items()}, **{(p, c): m for c, p in parent.items()}}
    assert test_wire._edges(ds, "TRUE") == pytest.approx(want)
    assert test_wire._one(ds, "TRUE") == ("tree", "rank_order", True)
    rows = ds.sql(
        "SELECT src_rank, dst_rank, src_host, dst_host, transport, src_nic, dst_nic FROM wire "
        "ORDER BY ALL"
    ).rows()
    host = {0: "H20-GPU-05", 1: "H20-GPU-05", 2: "H20-GPU-06", 3: "H20-GPU-06"}
    for src_rank, dst_rank, src_host, dst_host, *_ in rows:
        assert (src_host, dst_host) == (host[src_rank], host[dst_rank])
    # rank 3's `Channel 01/0 : 3[1] -> 1[1] [send] via NET/IB/2/GDRDMA` and `Channel 00/0 :
    # 1[1] -> 3[1] [receive] via NET/IB/2/GDRDMA`, and rank 1's `Channel 01/0 : 1[1] -> 0[0]
    # via P2P/CUMEM`, which follows its thread's Init COMPLETE (a connection made at the
    # first collective)
    assert (3, 1, "H20-GPU-06", "H20-GPU-05", "NET/IB", "2", None) in rows
    assert (1, 3, "H20-GPU-05", "H20-GPU-06", "NET/IB", None, "2") in rows
    assert (1, 0, "H20-GPU-05", "H20-GPU-05", "P2P", None, None) in rows


def test_deepseek_profile_reconciles_with_its_published_setup(real_traces, tmp_path):
    trace = real_traces / "kineto/deepseek_v3_dualpipe_train.json.gz"
    dataset = tmp_path / "ds"
    assert not ingest([trace], dataset, job="dsv3", jobs=1).errors
    link(dataset, config=test_deepep.DATA / "deepseek_v3_train.job.yaml")
    ds = pipeline.open(dataset)
    calls = test_deepep._calls(ds)
    exchanges = [c for c in calls if c["op"] == "all_to_all"]
    assert len(exchanges) == 16 and {c["parallel_dim"] for c in calls} == {"ep"}
    assert len([c for c in calls if c["op"] == "notify"]) == 16  # 12 cached_notify + 4
    assert ds.sql(
        "SELECT count(*) FROM kernels WHERE name LIKE '%get_dispatch_layout%' AND kind = 'other'"
    ).rows() == [(4,)]
    # DeepSeek-V3 (arXiv:2412.19437): k = 8, h = 7168; one 4K sequence a chunk; dispatch FP8
    # (DeepEP's FP8 tokens, scales not counted), combine BF16
    dispatch, combine = 8 * 4096 * 7168 * 1, 8 * 4096 * 7168 * 2
    assert {(c["kernel"], c["phase"], c["bytes"]) for c in exchanges} == {
        ("dispatch", "forward", dispatch), ("dispatch", "backward", dispatch),
        ("combine", "forward", combine), ("combine", "backward", combine),
    }  # fmt: skip
    assert sorted({c["layer"] for c in exchanges}) == [
        f"layers.{i}/{p}" for i in range(4) for p in ("combine", "dispatch")
    ]
    ep = ds.sql(
        "SELECT status, calls, message_bytes, size_source FROM ledger "
        "WHERE parallel_dim = 'ep' ORDER BY phase, message_bytes"
    ).rows()
    assert ep == [
        ("matched", 4, dispatch, "estimated"), ("matched", 4, combine, "estimated"),
        ("matched", 4, dispatch, "estimated"), ("matched", 4, combine, "estimated"),
    ]  # fmt: skip
    assert ds.sql("SELECT DISTINCT status FROM ledger WHERE parallel_dim <> 'ep'").rows() == [
        ("missing",)
    ]
