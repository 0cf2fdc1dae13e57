"""Ingest on ../shared/real_traces: every real file of each format (Kineto, NCCL debug logs,
nccl-tests outputs, Nsight Systems, nsys-jax, rocprofv3) parsed and checked against what the
file holds. The files are read in place, never copied into the project (most carry no
licence that allows it); without the folder this module is skipped, once. The same features
are tested on the project's own data in each format's test module, whose helpers these use."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from pipeline.cli import cli
from pipeline.dataset.schema import conform
from pipeline.dataset.views import connect
from pipeline.ingest.derive.time_breakdown import add_time_breakdown
from pipeline.ingest.detect import detect
from pipeline.ingest.kineto import parse as kineto
from pipeline.ingest.nccl import log as nccl_log
from pipeline.ingest.nccl import nccl_tests
from pipeline.ingest.nsys import parse as nsys
from pipeline.ingest.result import ParseResult
from pipeline.synth.nsys import write_export
from tests.conftest import real_kineto_files, real_traces_absent
from tests.ingest import (
    test_batch,
    test_detect,
    test_kineto,
    test_kineto_stream,
    test_nccl_batch,
    test_nccl_log,
    test_nccl_tests,
    test_nsys,
    test_nsys_jax,
    test_rocprof,
    test_run,
)

if (absent := real_traces_absent()) is not None:
    pytest.skip(absent, allow_module_level=True)


@pytest.mark.parametrize("rel", real_kineto_files())
def test_real_trace(rel: str, real_traces: Path) -> None:
    path = real_traces / rel
    doc = test_kineto._raw(path)
    result = kineto.parse(path)
    tables = {
        n: conform(n, t, job="j", source="kineto", file_id="f") for n, t in result.tables.items()
    }
    info = doc["distributedInfo"]

    ranks = pl.from_arrow(tables["ranks"])
    assert ranks["rank"].to_list() == [info["rank"]]
    assert ranks["world_size"].to_list() == [info["world_size"]]
    assert result.rank_source == "distributedInfo"

    colls = pl.from_arrow(tables["collectives"])
    assert Counter(colls["op"].to_list()) == +test_kineto._expected_collectives(doc)
    # (DeepEP's kernels record no size: link estimates it, tests/link/test_deepep.py)
    assert colls["bytes"].null_count() == len(test_kineto._deepep(doc["traceEvents"]))
    assert colls["bytes"].sum() == test_kineto._expected_bytes(doc)
    assert colls["rank"].unique().to_list() == [info["rank"]]

    step_names = {
        e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    }
    steps = pl.from_arrow(tables["steps"])
    # (a trace without ProfilerStep ranges is one step, 0)
    want = sorted(int(n.split("#")[1]) for n in step_names) or [0]
    assert sorted(steps["step"].to_list()) == want

    comms = pl.from_arrow(tables["communicators"])
    assert sorted(comms["pg_name"].to_list()) == sorted(
        g["pg_name"] for g in info.get("pg_config", [])
    )

    n_kernels = sum(
        1
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    assert tables["kernels"].num_rows == n_kernels


def test_metadata_kernels_keep_process_group(real_traces: Path) -> None:
    path = real_traces / "kineto/b200_rank0of8_eager.json.gz"
    colls = pl.from_arrow(kineto.parse(path).tables["collectives"])
    row = colls.filter(pl.col("op") == "all_gather").row(0, named=True)
    assert (row["op"], row["comm"], row["dtype"], row["count"], row["out_count"], row["bytes"]) == (
        "all_gather",
        "pg:3",
        "bfloat16",
        25136,
        201088,
        201088 * 2,
    )
    assert row["size_source"] == "kernel_args"


def test_symmetric_memory_all_reduces_are_collectives(real_traces: Path) -> None:
    # vLLM's tensor-parallel all-reduces on the B200 run as symm_mem multimem kernels; the
    # launching symm_mem:: op's Input Dims give the size
    path = real_traces / "kineto/b200_rank0of8_eager.json.gz"
    colls = pl.from_arrow(kineto.parse(path).tables["collectives"])
    reduces = colls.filter(pl.col("op") == "all_reduce")
    assert reduces.height == 73
    assert reduces["bytes"].sum() == 385_661_952
    assert set(reduces["op_name"]) == {"symm_mem::multimem_all_reduce_"}
    assert set(reduces["size_source"]) == {"input_dims"}
    assert set(reduces["dtype"]) == {"bfloat16"}


def test_dlrm_sizes_come_from_annotations(real_traces: Path) -> None:
    path = next((real_traces / "kineto/dlrm_v100_8ranks").glob("worker0_*"))
    colls = pl.from_arrow(kineto.parse(path).tables["collectives"])
    assert set(colls["size_source"]) == {"input_dims"}
    assert set(colls["op_name"]) == {"c10d::allreduce_", "c10d::alltoall_base_"}
    assert colls.filter(pl.col("op") == "all_reduce")["count"].sort().to_list() == [
        112,
        226960,
        394241,
    ]


def test_gloo_send_recv_peers(real_traces: Path) -> None:
    for r, peer in ((0, 1), (1, 0)):
        path = next((real_traces / "kineto_cpu_gloo/pp/ws2").glob(f"rank{r}.*.pt.trace.json.gz"))
        colls = pl.from_arrow(kineto.parse(path).tables["collectives"])
        assert set(colls["op"]) == {"send", "recv"}
        assert colls["peer"].to_list() == [peer] * colls.height
        assert colls["enqueue_ns"].null_count() == 0
        assert (colls["bytes"] == 4 * 64 * 128 * 4).all()


def test_module_scopes_and_tokens(real_traces: Path) -> None:
    path = next((real_traces / "kineto_cpu_gloo/tp_manual/ws2").glob("rank0.*.pt.trace.json.gz"))
    result = kineto.parse(path)
    ops = pl.from_arrow(result.tables["ops"])
    linear = ops.filter(pl.col("name") == "aten::linear").drop_nulls("module_path")
    # the 4-layer GPT (tests/model/test_conventions.py): Q, K, V, O, FC1, FC2 a layer and
    # the LM head, each step of 2, every one inside its module
    assert linear.height == 2 * (4 * 6 + 1)
    assert linear["module_path"].str.contains("Block_0/").any()
    modules = ops.filter(pl.col("kind") == "module")
    assert modules["name"].str.starts_with("nn.Module: ").all()
    steps = pl.from_arrow(result.tables["steps"])
    assert steps["tokens"].to_list() == [512, 512]  # micro-batch 8 x seq 64


@pytest.mark.parametrize("rel", real_kineto_files())
def test_args_land_on_the_events_that_keep_them(rel: str, real_traces: Path) -> None:
    """Each kernel's and each host range's args, against the raw events (args are read only
    from the events whose tables keep them)."""
    path = real_traces / rel
    events = [e for e in test_kineto._raw(path)["traceEvents"] if e.get("ph") == "X"]
    result = kineto.parse(path)
    gpu = [e for e in events if e.get("cat") in kineto.GPU_KINDS]
    gpu_keys = ("device", "correlation", "External id", "grid", "block", "bytes")
    gpu_columns = ("device", "correlation", "external_id", "grid", "block", "bytes")
    assert test_kineto._table_rows(result.tables["kernels"], gpu_columns) == test_kineto._arg_rows(
        gpu, gpu_keys
    )
    host = [e for e in events if e.get("cat") in kineto.HOST_KINDS]
    host_keys = ("External id", "Sequence number", "Fwd thread id", "Input Dims", "Input type")
    host_columns = ("external_id", "seq_nr", "fwd_tid", "input_dims", "input_types")
    assert test_kineto._table_rows(result.tables["ops"], host_columns) == test_kineto._arg_rows(
        host, host_keys
    )


def test_the_b200_inference_trace_gets_a_breakdown(real_traces: Path) -> None:
    tables = kineto.parse(real_traces / "kineto/b200_rank0of8_eager.json.gz").tables
    add_time_breakdown(tables)
    assert pl.from_arrow(tables["steps"]).select("step", "marker").rows() == [(0, "whole_trace")]
    assert set(pl.from_arrow(tables["collectives"])["step"]) == {0}
    breakdown = pl.from_arrow(tables["time_breakdown"])
    assert breakdown.select("step", "timeline").rows() == [(0, "gpu")]
    row = breakdown.row(0, named=True)
    parts = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "idle_ns")
    assert sum(row[p] for p in parts) == row["window_ns"]
    # vLLM decoding, one step of the whole trace: a window of 87.1 ms, 9.5 ms of compute, 2.1 ms of
    # communication (its 74 collective kernels, one after another, none overlapping compute)
    assert [row["window_ns"], *(row[p] for p in parts)] == [
        87_128_842, 9_454_981, 0, 2_141_501, 75_532_360,
    ]  # fmt: skip
    kernels = pl.from_arrow(tables["kernels"]).filter(pl.col("kind") == "comm")
    assert (kernels.height, kernels["dur_ns"].sum()) == (74, row["exposed_comm_ns"])


def test_dlrm_without_cuda_activities_keeps_its_collectives(real_traces: Path, tmp_path: Path):
    src = next((real_traces / "kineto/dlrm_v100_8ranks").glob("worker0_*"))
    doc = test_kineto._raw(src)
    full = pl.from_arrow(kineto.parse(src).tables["collectives"])
    gpu = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in gpu]
    path = tmp_path / "worker0.json"
    path.write_text(json.dumps(doc))
    host = pl.from_arrow(kineto.parse(path).tables["collectives"])
    assert host.height == full.height == 8
    assert sorted(host["op"]) == sorted(full["op"])
    assert host["bytes"].sum() == full["bytes"].sum()


def test_the_b200_trace_takes_steps_from_a_named_marker(real_traces: Path) -> None:
    # its one vLLM execute_context range bounds the step instead of the whole trace
    path = real_traces / "kineto/b200_rank0of8_eager.json.gz"
    tables = kineto.parse(path, step_marker=r"execute_context_.*").tables
    steps = pl.from_arrow(tables["steps"])
    assert steps.select("step", "marker").rows() == [(0, "execute_context_.*")]
    events = test_kineto._raw(path)["traceEvents"]
    # (the GPU's copy of the range, gpu_user_annotation, is no marker)
    (marked,) = [
        e
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context_")
    ]
    assert steps["dur_ns"].item() == round(marked["dur"] * 1000)


def test_dlrm_collectives_with_unnamed_kernels_are_found_from_their_ops(
    real_traces: Path, tmp_path: Path
) -> None:
    # rank 0 of DLRM with its NCCL kernels renamed to a name no list knows: the nccl:
    # annotations around their launches still make them the same 8 collectives, same bytes
    src = next((real_traces / "kineto/dlrm_v100_8ranks").glob("worker0_*"))
    doc = test_kineto._raw(src)
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"):
            e["name"] = "vendor_collective_kernel"
            renamed += 1
    path = tmp_path / "worker0.json"
    path.write_text(json.dumps(doc))

    def calls(trace: Path) -> list:
        frame = pl.from_arrow(kineto.parse(trace).tables["collectives"])
        return frame.group_by("op").agg(pl.len(), pl.col("bytes").sum()).sort("op").rows()

    assert renamed == 8
    assert calls(path) == calls(src) == [("all_reduce", 3, 2_485_252), ("all_to_all", 5, 64_448)]


@pytest.mark.parametrize("rel", real_kineto_files())
def test_batches_do_not_change_the_tables(rel: str, real_traces: Path) -> None:
    path = real_traces / rel
    whole = kineto.parse(path, batch_bytes=test_kineto_stream.WHOLE)
    test_kineto_stream._same(whole, kineto.parse(path, batch_bytes=64 * 1024))


def test_tiny_batches_on_a_real_trace(real_traces: Path) -> None:
    path = next((real_traces / "kineto" / "dlrm_v100_8ranks").glob("worker0*"))
    test_kineto_stream._same(
        kineto.parse(path, batch_bytes=test_kineto_stream.WHOLE),
        kineto.parse(path, batch_bytes=1500),
    )


def test_a_batch_of_real_ranks(real_traces: Path) -> None:
    files = sorted((real_traces / "kineto" / "dlrm_v100_8ranks").glob("*.json.gz"))
    if not files:
        pytest.skip("no DLRM ranks among the real traces")
    files += sorted((real_traces / "kineto_cpu_gloo").rglob("*.pt.trace.json.gz"))
    files += test_batch._gloo_files()[:4]
    for path, result in zip(files, kineto.parse_batch(files, derive=True), strict=True):
        assert isinstance(result, ParseResult), path
        test_batch._assert_same(result, test_batch._alone(path))


def test_real_dlrm_job_is_one_job_of_eight_ranks(real_traces: Path, tmp_path: Path) -> None:
    src = tmp_path / "dlrm"
    shutil.copytree(real_traces / "kineto/dlrm_v100_8ranks", src)
    result = test_run._ingest(str(src), "-o", str(tmp_path / "ds"), "--jobs", "2")
    assert result.exit_code == 0, result.output
    con = connect(tmp_path / "ds")
    assert con.execute("SELECT DISTINCT job FROM ranks").fetchall() == [("dlrm",)]
    assert con.execute("SELECT list(rank ORDER BY rank), min(world_size) FROM ranks").fetchall()[
        0
    ] == (
        list(range(8)),
        8,
    )
    per_rank = con.execute(
        "SELECT rank, op, count(*) FROM collectives GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert per_rank == [
        (r, op, n) for r in range(8) for op, n in (("all_reduce", 3), ("all_to_all", 5))
    ]


def test_a_real_trace_under_two_jobs(real_traces: Path, tmp_path: Path) -> None:
    # the same DLRM rank file ingested under --job a and --job b: both jobs hold its 8
    # collectives (dedup is per job), and each again skips it
    src = next((real_traces / "kineto/dlrm_v100_8ranks").glob("worker0_*"))
    out = tmp_path / "ds"
    for job in ("a", "b"):
        result = test_run._ingest(str(src), "-o", str(out), "--job", job)
        assert result.exit_code == 0, result.output
        assert "1 ingested, 0 skipped" in result.stderr
    con = connect(out)
    rows = con.execute(
        "SELECT job, count(*), sum(bytes), count(DISTINCT file_id) FROM collectives "
        "GROUP BY job ORDER BY job"
    ).fetchall()
    assert [r[:2] for r in rows] == [("a", 8), ("b", 8)] and rows[0][2] == rows[1][2]
    assert con.execute("SELECT count(*), count(DISTINCT sha256) FROM files").fetchall() == [(2, 1)]
    for job in ("a", "b"):
        assert (
            "0 ingested, 1 skipped"
            in test_run._ingest(str(src), "-o", str(out), "--job", job).stderr
        )


def test_every_real_file_is_detected_as_its_format(real_traces: Path) -> None:
    checked = 0
    for path in sorted(p for p in real_traces.rglob("*") if p.is_file()):
        rel = path.relative_to(real_traces).as_posix()
        expected = test_detect._expected(rel)
        if expected is None:
            continue
        assert detect(path) == expected, rel
        checked += 1
    assert checked >= 50


def test_real_fsdp2_rank_yields_each_rccl_kernel_as_a_collective(real_traces: Path) -> None:
    path = real_traces / test_rocprof.REAL
    assert detect(path) == "rocprof"
    result = test_rocprof.parse(path)
    coll, kernels = (
        test_rocprof._table(result, "collectives"),
        test_rocprof._table(result, "kernels"),
    )
    expected = test_rocprof._rccl_kernels_counted_from_json(path)
    assert expected == 1310
    assert coll.height == expected
    assert kernels.height == 43915
    assert kernels.filter(pl.col("kind") == "comm").height == expected
    # RCCL's generic kernel names no op and the file has no rccl_api records
    assert coll["op"].unique().to_list() == ["unknown"]
    assert coll["op_name"].unique().to_list() == [
        "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
    ]
    assert (coll["dur_ns"] >= 0).all()
    ranks = test_rocprof._table(result, "ranks").row(0, named=True)
    assert (ranks["rank"], ranks["pid"], ranks["gpu_name"], ranks["backend"]) == (
        0,
        908,
        "AMD Instinct MI350X",
        "rccl",
    )
    assert ranks["host"] == "smci350-zts-gtu-c6-25"
    assert result.rank_source == "file_name"


def test_every_real_log_collectives_comms_transports(real_traces):
    for path in test_nccl_log._logs(real_traces):
        lines = test_nccl_log._lines(path)
        t = test_nccl_log._parse(path)
        # One collectives row per COLL line, counted here independently.
        assert t["collectives"].height == sum(
            bool(test_nccl_log.COLL_LINE.search(x)) for x in lines
        ), path.name
        # Communicators: every Init / nRanks line's (comm, rank in comm, nranks) is a row.
        inits = [m for x in lines if (m := test_nccl_log.INIT_LINE.search(x))]
        comm_id = {
            (m[1], m[2], m[3]): m[6] for m in inits if m[6]
        }  # the 2.20+ nRanks line has none
        expected = {(comm_id.get((m[1], m[2], m[3]), m[3]), int(m[4]), int(m[5])) for m in inits}
        got = set(
            t["communicators"]
            .filter(pl.col("rank_in_comm").is_not_null())
            .select("comm", "rank_in_comm", "nranks")
            .iter_rows()
        )
        assert got == expected, path.name
        # Connection lines: the transports exactly as printed.
        printed = Counter(m[1] for x in lines if (m := test_nccl_log.CONN_LINE.search(x)))
        conn = (
            t["topology"].filter(pl.col("kind") == "connection") if t["topology"].height else None
        )
        rows = (
            Counter(re.sub(r" \[(?:send|receive)\]$", "", d) for d in conn["detail"])
            if conn is not None
            else Counter()
        )
        assert rows == printed, path.name
        # WARN lines are all kept.
        warns = sum(" NCCL WARN " in x for x in lines)
        kept = (
            t["log_messages"].filter(pl.col("level") == "WARN").height
            if t["log_messages"].height
            else 0
        )
        assert kept == warns, path.name


def test_ranks_from_init_lines(real_traces):
    for name in (
        "nccl-issue-1189.log",
        "nccl-tests-issue-29.log",
        "nccl-tests-issue-252.log",
        "nccl-issue-952.log",
    ):
        path = real_traces / "nccl_logs" / name
        lines = test_nccl_log._lines(path)
        inits = [m for x in lines if (m := test_nccl_log.INIT_LINE.search(x))]
        world = max(int(m[5]) for m in inits)
        expected = {(m[1], int(m[2]), int(m[4])) for m in inits if int(m[5]) == world}
        ranks = test_nccl_log._parse(path)["ranks"]
        got = set(ranks.select("host", "pid", "rank").iter_rows())
        assert expected <= got, name
        assert ranks.filter(pl.col("world_size") != world).height == 0


def test_1189_world_comm_and_net_ib(real_traces):
    t = test_nccl_log._parse(real_traces / "nccl_logs" / "nccl-issue-1189.log")
    comms = t["communicators"]
    assert comms["comm"].unique().to_list() == ["0xf021d9037f9243d8"]
    assert comms.sort("rank")["ranks"].to_list() == [[0, 1, 2, 3]] * 4
    ranks = t["ranks"].sort("rank")
    assert ranks.select("host", "pid").rows()[2] == ("H20-GPU-06", 4015539)
    assert ranks["bus_id"].to_list() == ["0000:18:00.0", "0000:38:00.0"] * 2
    topo = t["topology"]
    recv = topo.filter((pl.col("kind") == "connection") & (pl.col("rank") == 2))
    assert recv.select("channel", "peer", "transport", "detail").rows() == [
        (7, 0, "NET/IB", "NET/IB/3/GDRDMA [receive]")
    ]
    # Rank 1's P2P lines follow its thread's Init COMPLETE (connections made at the first
    # collective): they belong to that thread's communicator, as every other line does.
    conns = topo.filter(pl.col("kind") == "connection")
    assert conns.height == 14 and conns["comm"].to_list() == ["0xf021d9037f9243d8"] * 14
    trees = topo.filter(
        (pl.col("kind") == "tree") & (pl.col("rank") == 0) & (pl.col("channel") == 0)
    )
    assert trees["peers"].to_list() == [[-1, 1, 2, -1]]  # '[0] 1/2/-1->0->-1': up -1, down 1/2/-1


def test_transport_families(real_traces):
    cases = {
        "nccl-issue-687.log": {"NET/IB", "P2P"},
        "nccl-tests-issue-166.log": {"NET/Socket", "SHM"},
        "nccl-issue-392.log": {"NET/IB", "P2P", "SHM"},
        "nccl-tests-issue-252.log": {"P2P"},
        "tinygrad-open-gpu-kernel-modules-pr-22.log": {"P2P"},
        "nccl-issue-1453.log": {"NET/IBext_v8"},
    }
    for name, families in cases.items():
        topo = test_nccl_log._parse(real_traces / "nccl_logs" / name)["topology"]
        assert set(topo.filter(pl.col("kind") == "connection")["transport"]) == families, name
    topo = test_nccl_log._parse(real_traces / "nccl_logs" / "nccl-issue-392.log")["topology"]
    shm = topo.filter(pl.col("transport") == "SHM")
    assert shm["detail"].to_list() == ["direct shared memory"] and shm["peer"].to_list() == [7]
    assert set(topo["rank"]) == {
        0
    }  # prefix trimmed to ' [0] NCCL INFO': rank 0 from its ring lines


def test_collective_lines(real_traces):
    d = real_traces / "nccl_logs"
    send = test_nccl_log._parse(d / "nccl-issue-584.log")["collectives"]
    assert set(send["op"]) == {"send", "recv"}
    assert send["op_count"].to_list()[-3:] == [0xD60, 0xD62, 0xD60]
    assert set(send["bytes"]) == {2420736 * 4} and set(send["dtype"]) == {"float32"}
    assert send["peer"].to_list()[:2] == [1, 1] and send["root"].is_null().all()
    assert send.filter(pl.col("comm") == "0x7f5128002e10")["seq"].to_list() == [0, 1, 2, 3, 4]

    ar = test_nccl_log._parse(d / "nccl-issue-1238.log")["collectives"]
    assert ar.select("rank", "op", "dtype", "bytes", "group_size", "redop").unique().rows() == [
        (0, "all_reduce", "float32", 33554432 * 4, 1, "sum")
    ]
    bc = test_nccl_log._parse(d / "nccl-issue-147.log")["collectives"].sort("collective_id")
    assert bc["op"].unique().to_list() == ["broadcast"]
    assert bc["bytes"].to_list() == [
        53 * 8,
        53 * 8,
        25503912 * 2,
        53 * 8,
        25503912 * 2,
        25503912 * 2,
    ]
    assert bc["root"].to_list() == [0] * 6
    one = test_nccl_log._parse(d / "nccl-issue-734.log")
    assert one["collectives"].select("rank", "op", "peer", "bytes").rows() == [
        (-1, "send", 1, 257536 * 4)
    ]


def test_version_banner_and_shapes(real_traces):
    d = real_traces / "nccl_logs"
    expect = {
        "nccl-issue-392.log": "2.5.7",
        "nccl-issue-857.log": "2.10.3",
        "nccl-issue-952.log": "2.18-2.20",
        "nccl-issue-1189.log": "2.20",
        "nccl-issue-584.log": "2.7-2.11",
        "nccl-issue-1453.log": "2.21-2.22",
        "nccl-tests-issue-29.log": "2.4",
    }
    for name, version in expect.items():
        assert nccl_log.parse(d / name).format_version == version, name


def test_launcher_rank_prefix(real_traces):
    t = test_nccl_log._parse(real_traces / "nccl_logs" / "nccl-issue-1713.log")
    ranks = set(t["ranks"].select("rank", "host", "pid").iter_rows())
    assert (3, "aiplatform-wlf2-ge78-70", 102987) in ranks and (
        0,
        "aiplatform-wlf2-ge78-72",
        58070,
    ) in ranks


def test_warn_lines_kept(real_traces):
    r = nccl_log.parse(real_traces / "nccl_logs" / "nccl-issue-857.log")
    msgs = pl.from_arrow(r.tables["log_messages"])
    assert msgs.select("level", "location").unique().rows() == [("WARN", "misc/ibvwrap.cc:63")]
    path = real_traces / "nccl_logs" / "nccl-issue-857.log"
    assert msgs["line"].to_list() == [
        i for i, x in enumerate(test_nccl_log._lines(path), 1) if " NCCL WARN " in x
    ]
    assert "NCCL WARN line (x3)" in r.warnings.messages()


def test_sniff_nccl_log(real_traces, tmp_path):
    for path in test_nccl_log._logs(real_traces):
        head = path.read_bytes()[: 64 * 1024]
        assert nccl_log.sniff(path, head), path.name
    kineto = next((real_traces / "kineto").glob("*.json.gz"))
    with gzip.open(kineto) as fh:
        head = fh.read(64 * 1024)
    assert head.lstrip().startswith(b"{")
    assert not nccl_log.sniff(kineto, head)
    rnd = bytes(range(256)) * 100 + b"random text: 1:2:3 [0] INFO nothing\n"
    assert not nccl_log.sniff(tmp_path / "r.bin", rnd)
    tests = real_traces / "nccl_tests" / "nccl-tests-issue-252.txt"
    assert not nccl_log.sniff(tests, tests.read_bytes())


def test_batches_give_the_same_result(real_traces, monkeypatch):
    from pipeline.ingest.nccl import lines

    path = real_traces / "nccl_logs" / "nccl-issue-952.log"
    whole = test_nccl_log._parse(path)
    monkeypatch.setattr(lines, "BATCH_BYTES", 700)
    monkeypatch.setattr(lines.iter_batches, "__kwdefaults__", {"batch_bytes": 700})
    small = test_nccl_log._parse(path)
    for name in whole:
        assert_frame_equal(whole[name], small[name])


def test_unknown_ranks_are_warned_in_process_order(real_traces):
    """Processes whose rank the log never states are named table by table in (host, pid)
    order, so the same log gives the same warnings (and ``files`` rows) every time; they came
    in the order of a join, which changed from run to run."""
    result = nccl_log.parse(real_traces / "nccl_logs" / "nccl-issue-147.log")
    named = [m.split(";")[0] for m in result.warnings.messages() if "rank unknown for" in m]
    assert named == [
        "rank unknown for learnfair062:32617",  # the only one in the first table warned
        "rank unknown for learnfair062:32615",
        "rank unknown for learnfair062:32625",
        "rank unknown for learnfair062:32629",
        "rank unknown for lines without a host:pid prefix",
    ]


def test_batch_is_each_file_alone_on_real_logs(real_traces):
    logs = sorted((real_traces / "nccl_logs").glob("*.log"))
    test_nccl_batch._same(logs)
    test_nccl_batch._same(logs[::-1])


def test_every_real_output(real_traces):
    files = sorted((real_traces / "nccl_tests").glob("*.txt"))
    assert len(files) == 4
    for path in files:
        t = test_nccl_tests._parse(path)
        assert t.height == test_nccl_tests._expected_rows(path) > 0, path.name
        assert t["time_us"].is_not_null().all() and t["busbw_gbps"].is_not_null().all()


def test_integer_times_and_footer(real_traces):
    t = test_nccl_tests._parse(real_traces / "nccl_tests" / "nccl-tests-issue-252.txt")
    last = t.filter(pl.col("size_bytes") == 8589934592).sort("placement", descending=True)
    assert last.select("placement", "time_us", "algbw_gbps", "busbw_gbps", "wrong").rows() == [
        ("out_of_place", 158070.0, 54.34, 95.10, 0),
        ("in_place", 158561.0, 54.17, 94.80, 0),
    ]
    assert (
        set(t["dtype"]) == {"float32"} and set(t["redop"]) == {"sum"} and t["root"].is_null().all()
    )


def test_old_header_without_redop(real_traces):
    r = nccl_tests.parse(real_traces / "nccl_tests" / "nccl-tests-issue-82.txt")
    t = pl.from_arrow(r.tables["bandwidth_tests"])
    assert t.select(
        "op", "size_bytes", "count", "redop", "root", "time_us", "wrong", "nranks"
    ).rows() == [
        ("broadcast", 8, 2, None, 0, 45.82, None, 2),
        ("broadcast", 8, 2, None, 0, 38.17, None, 2),
    ]
    assert r.format_version == "without redop"


def test_devices_command_and_half_row(real_traces):
    t = test_nccl_tests._parse(real_traces / "nccl_tests" / "nccl-issue-1530.txt")
    assert t.select("op", "nranks", "placement", "time_us").rows() == [
        ("all_reduce", 8, "out_of_place", 42.56)
    ]
    aws = nccl_tests.parse(real_traces / "nccl_tests" / "aws-k8s-tester-pr-503.txt")
    assert aws.rank_source == "launcher_prefix"
    assert set(pl.from_arrow(aws.tables["bandwidth_tests"])["rank"]) == {0}


def test_sniff_nccl_tests(real_traces, tmp_path):
    for path in sorted((real_traces / "nccl_tests").glob("*.txt")):
        assert nccl_tests.sniff(path, path.read_bytes()), path.name
    kineto = next((real_traces / "kineto").glob("*.json.gz"))
    with gzip.open(kineto) as fh:
        assert not nccl_tests.sniff(kineto, fh.read(64 * 1024))
    log = real_traces / "nccl_logs" / "nccl-issue-857.log"
    assert not nccl_tests.sniff(log, log.read_bytes())
    assert not nccl_tests.sniff(tmp_path / "r", b"random text 12 34 float\n")


def test_every_real_export_is_listed(real_traces: Path) -> None:
    found = sorted(
        str(p.relative_to(real_traces / "nsys"))
        for p in (real_traces / "nsys").rglob("*")
        if p.is_file()
    )
    assert found == sorted(test_nsys.NSYS_FILES)


@pytest.mark.parametrize("name", test_nsys.NSYS_FILES)
def test_real_export_sniffed_and_conforms(real_traces: Path, name: str) -> None:
    path = real_traces / "nsys" / name
    assert nsys.sniff(path, test_nsys._head(path))
    tables = test_nsys._tables(path)
    assert set(tables) == {"kernels", "ops", "ranks", "collectives", "communicators"}
    assert tables["ranks"].height >= 1


@pytest.mark.parametrize("name", test_nsys.SQLITE_FILES)
def test_sqlite_counts_match_the_database(real_traces: Path, name: str) -> None:
    path = real_traces / "nsys" / name
    t = test_nsys._tables(path)
    kernels = t["kernels"].filter(~pl.col("kind").is_in(["memcpy", "memset"]))
    expected = (
        test_nsys._sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
        if test_nsys._has_table(path, "CUPTI_ACTIVITY_KIND_KERNEL")
        else 0
    )
    assert kernels.height == expected
    memcpys = (
        test_nsys._sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
        if test_nsys._has_table(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
        else 0
    )
    assert t["kernels"].filter(pl.col("kind") == "memcpy").height == memcpys
    nvtx = test_nsys._sql(
        path,
        "SELECT eventType, count(*) FROM NVTX_EVENTS "
        "WHERE eventType IN (34, 59, 60) GROUP BY eventType",
    )
    ops = t["ops"].filter(pl.col("kind") == "nvtx")
    assert ops.height == sum(n for _, n in nvtx)
    runtime = (
        test_nsys._sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
        if test_nsys._has_table(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
        else 0
    )
    assert t["ops"].filter(pl.col("kind").str.starts_with("cuda_")).height == runtime


@pytest.mark.parametrize("name", test_nsys.SQLITE_FILES)
def test_processes_and_threads(real_traces: Path, name: str) -> None:
    path = real_traces / "nsys" / name
    t = test_nsys._tables(path)
    union = ["SELECT globalTid AS g FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)"]
    if test_nsys._has_table(path, "CUPTI_ACTIVITY_KIND_RUNTIME"):
        union.append("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    threads = set(
        test_nsys._sql(
            path,
            "SELECT DISTINCT (g >> 24) & 16777215, g & 16777215 FROM ("
            + " UNION ALL ".join(union)
            + ")",
        )
    )
    assert set(t["ops"].select("pid", "tid").unique().iter_rows()) == threads
    pids = {p for p, _ in threads}
    if test_nsys._has_table(path, "CUPTI_ACTIVITY_KIND_KERNEL"):
        pids |= {
            r[0]
            for r in test_nsys._sql(
                path, "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL"
            )
        }
    assert set(t["ranks"]["pid"]) == pids


def test_a100_links_kernels_to_launches_and_nvtx(real_traces: Path) -> None:
    path = real_traces / "nsys" / "a100_vector_add" / "vector_add_profile_v3.sqlite"
    t = test_nsys._tables(path)
    kernels = t["kernels"].filter(pl.col("kind") != "memcpy")
    launches = set(t["ops"].filter(pl.col("kind") == "cuda_runtime")["correlation"])
    assert set(kernels["correlation"]) <= launches
    # count per enclosing range, computed independently in SQL on the raw tables
    expected = dict(
        test_nsys._sql(
            path,
            """
        SELECT n.text, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
        JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.globalTid = r.globalTid
             AND n.start <= r.start AND r.start < n."end"
        GROUP BY n.text""",
        )
    )
    got = dict(kernels.drop_nulls("nvtx_range").group_by("nvtx_range").len().iter_rows())
    assert got == expected
    start = test_nsys._sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    first = test_nsys._sql(path, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert kernels["start_ns"].min() == start + first
    assert set(kernels["kind"]) == {"other"}  # vectorAdd is none of the known kinds
    names = set(t["ops"].filter(pl.col("kind") == "cuda_runtime")["name"])
    assert "cudaLaunchKernel_v7000" in names


def test_nvtx_nesting_domains_and_marks(real_traces: Path) -> None:
    path = real_traces / "nsys" / "cpu_nvtx_nccl_like" / "nsys2023.4_cpu_nvtx_nccl_like.sqlite"
    ops = test_nsys._tables(path)["ops"]
    by_id = {r["op_id"]: r for r in ops.iter_rows(named=True)}
    layers = ops.filter(pl.col("name") == "layer_0.forward")
    assert layers.height == 3 and set(layers["depth"]) == {1}
    assert {by_id[p]["name"] for p in layers["parent_id"]} == {
        "train_step_0",
        "train_step_1",
        "train_step_2",
    }
    nccl = ops.filter(pl.col("name") == "ncclAllReduce")  # registered string via textId
    assert nccl.height == 6 and set(nccl["domain"]) == {"NCCL"}
    marks = ops.filter(pl.col("name") == "optimizer.step")
    assert (marks["dur_ns"] == 0).all() and set(marks["depth"]) == {1}
    start_end = ops.filter(pl.col("name") == "async_prefetch")
    assert start_end["depth"].to_list() == [None]


def test_json_export_decodes_nccl_payloads(real_traces: Path) -> None:
    path = real_traces / "nsys" / "cpu_nvtx_nccl_like" / "nsys2023.4_cpu_nvtx_nccl_like.json.gz"
    events = [json.loads(line) for line in gzip.open(path, "rt")]
    nvtx = [e["NvtxEvent"] for e in events if "NvtxEvent" in e]
    payload_events = [e for e in nvtx if "BinaryData" in e.get("Payload", {})]
    t = test_nsys._tables(path)
    assert t["ops"].filter(pl.col("kind") == "nvtx").height == sum(
        e["Type"] in (34, 59, 60) for e in nvtx
    )
    coll = t["collectives"]
    assert coll.height == len(payload_events) == 6
    assert set(coll["comm"]) == {"0x5ae77eb5ea4ec1ee"}
    assert sorted(set(coll["bytes"])) == [1 << 20, 2 << 20]
    assert set(coll["redop"]) == {"sum"} and set(coll["op"]) == {"all_reduce"}
    assert coll["seq"].to_list() == list(range(6))


def test_sqlite_without_payloads_warns_and_leaves_bytes_null(real_traces: Path) -> None:
    path = real_traces / "nsys" / "cpu_nvtx_nccl_like" / "nsys2023.4_cpu_nvtx_nccl_like.sqlite"
    result = nsys.parse(path)
    coll = pl.from_arrow(result.tables["collectives"])
    assert coll.height == 6 and coll["bytes"].null_count() == 6
    assert set(coll["op"]) == {"all_reduce"}
    assert any("without NCCL NVTX payload" in m for m in result.warnings.messages())


def test_generated_export_has_the_real_schema(tmp_path: Path, real_traces: Path) -> None:
    real = real_traces / "nsys" / "a100_vector_add" / "vector_add_profile_v3.sqlite"
    path = write_export(tmp_path / "job.sqlite", ranks=[0, 1, 2, 3])
    query = "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
    mine = dict(test_nsys._sql(path, query))
    theirs = dict(test_nsys._sql(real, query))
    assert all(mine[t] == theirs[t] for t in mine)


@pytest.mark.parametrize("proc", range(4))
def test_real_archive_counts_every_collective_thunk(real_traces: Path, proc: int) -> None:
    path = real_traces / f"nsys_jax/pax_fsdp4_4proc_proc{proc}.zip"
    assert detect(path) == "nsys_jax"
    result = test_nsys_jax.parse(path)
    coll = test_nsys_jax._table(result, "collectives")
    assert coll.height == test_nsys_jax._thunks_counted_from_the_archive(path) == 120
    assert coll.group_by("op").len().sort("op").rows() == [
        ("all_gather", 50),
        ("all_reduce", 50),
        ("reduce_scatter", 20),
    ]
    # 5 executions of the step module, 23 collectives in each; 5 psum all-reduces outside
    steps = test_nsys_jax._table(result, "steps")
    assert steps["step"].to_list() == [0, 1, 2, 3, 4]
    assert coll.group_by("step").len().sort("step", nulls_last=True)["len"].to_list() == [
        23, 23, 23, 23, 23, 5
    ]  # fmt: skip
    assert coll["bytes"].null_count() == 0
    assert coll["comm"].unique().to_list() == ["xla:0,1,2,3"]
    assert coll["rank"].unique().to_list() == [proc]
    assert result.rank_source == "xla_device"
    ranks = test_nsys_jax._table(result, "ranks").row(0, named=True)
    assert (ranks["gpu_name"], ranks["host"]) == ("NVIDIA A100-SXM4-40GB", "nvdl-a112-luna04")


def test_real_sizes_follow_the_hlo_operands(real_traces: Path) -> None:
    """all-gather-start.2 gathers bf16 operands of 6,981,504 bytes on 4 ranks; reduce-scatter
    .131 reduces 70,889,472 bytes to a quarter (both read from module_0040's dump)."""
    coll = test_nsys_jax._table(
        test_nsys_jax.parse(real_traces / "nsys_jax/pax_fsdp4_4proc_proc0.zip"), "collectives"
    )
    rows = coll.filter(pl.col("op_name").is_in(["all-gather-start.2", "reduce-scatter.131"]))
    got = rows.select("op_name", "count", "out_count", "bytes", "dtype").unique().sort("op_name")
    assert got.rows() == [
        ("all-gather-start.2", 3_490_752, 13_963_008, 4 * 6_981_504, "bfloat16"),
        ("reduce-scatter.131", 35_444_736, 8_861_184, 70_889_472, "bfloat16"),
    ]


def test_real_job_links_across_its_four_ranks(real_traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    run = CliRunner()
    assert run.invoke(cli, ["ingest", str(real_traces / "nsys_jax"), "-o", str(out)]).exit_code == 0
    assert run.invoke(cli, ["link", str(out)]).exit_code == 0
    query = "SELECT count(*) AS n FROM collective_instances"
    result = run.invoke(cli, ["sql", str(out), query, "--format", "csv"])
    assert result.stdout.split() == ["n", "120"]
