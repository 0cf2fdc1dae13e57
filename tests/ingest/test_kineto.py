"""Kineto parser on every real trace, with expectations computed from the raw JSON."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from pipeline.ingest.derive.time_breakdown import add_time_breakdown
from pipeline.ingest.kineto import parse as kineto

DTYPE_BYTES = {
    "float": 4,
    "Float": 4,
    "BFloat16": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "Long": 8,
    "int": 4,
}
GLOO_OPS = {"all_reduce", "all_to_all", "all_gather", "send", "recv", "broadcast"}


def _raw(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _expected_collectives(doc: dict) -> Counter:
    """Collectives per op, derived straight from the raw events, independently of the parser."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    nccl = [e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    out: Counter = Counter()
    for e in nccl:
        name = e.get("args", {}).get("Collective name")
        if name:
            out[
                {
                    "allreduce": "all_reduce",
                    "broadcast": "broadcast",
                    "_allgather_base": "all_gather",
                }[name]
            ] += 1
    if nccl and not out:
        # No metadata anywhere: one c10d op encloses each NCCL kernel's launch.
        c10d = Counter(e["name"] for e in events if e["name"].startswith("c10d::"))
        out["all_to_all"] = c10d["c10d::alltoall_base_"]
        out["all_reduce"] = c10d["c10d::allreduce_"]
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"].startswith("gloo:"):
            out[e["name"].removeprefix("gloo:")] += 1
    # symmetric-memory all-reduces: one multimem kernel per symm_mem op
    out["all_reduce"] += sum(e["name"] == "symm_mem::multimem_all_reduce_" for e in events)
    # DeepEP (dpsk::ep:: in DeepSeek's profiles): token exchanges and metadata exchanges; its
    # layout kernel is local work
    for e in _deepep(events):
        out["notify" if "notify" in e["name"] else "all_to_all"] += 1
    return +out


def _deepep(events: list[dict]) -> list[dict]:
    """DeepEP's communication kernels: dispatch, combine and the notify kernels."""
    return [
        e for e in events
        if e.get("cat") == "kernel" and re.search(r"(?:deep_ep|dpsk::ep)::", e["name"])
        and re.search(r"::(?:dispatch|combine|notify_dispatch|cached_notify)<", e["name"])
    ]  # fmt: skip


def _expected_bytes(doc: dict) -> int:
    """Sum of message sizes: kernel metadata, else the nccl:/gloo: annotation's input dims."""
    total = 0
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    with_meta = [e for e in kernels if "Collective name" in e.get("args", {})]
    for e in with_meta:
        a = e["args"]
        n = a["Out msg nelems"] if "allgather" in a["Collective name"] else a["In msg nelems"]
        total += n * DTYPE_BYTES[a["dtype"]]
    for e in events:
        if e["name"] == "symm_mem::multimem_all_reduce_":
            numel = 1
            for d in e["args"]["Input Dims"][0]:
                numel *= d
            total += numel * DTYPE_BYTES[e["args"]["Input type"][0]]
    if with_meta:
        return total
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"].split(":")[0] in ("nccl", "gloo"):
            numel = 1
            for d in e["args"]["Input Dims"][0]:
                numel *= d
            total += numel * DTYPE_BYTES[e["args"]["Input type"][0]]
    return total


def test_collective_kernels_beyond_nccl_take_their_launching_op(tmp_path: Path) -> None:
    kernel = "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(...)"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "symm_mem::multimem_all_reduce_", "pid": 1,
         "tid": 1, "ts": 100, "dur": 20, "args": {"External id": 5,
         "Input Dims": [[1024, 4], [], []], "Input type": ["c10::BFloat16", "", ""]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 105, "dur": 5, "args": {"correlation": 9, "External id": 5}},
        {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": 110, "dur": 50,
         "args": {"correlation": 9, "External id": 5, "stream": 7, "device": 0}},
    ]  # fmt: skip
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    tables = kineto.parse(path).tables
    row = pl.from_arrow(tables["collectives"]).row(0, named=True)
    assert (row["op"], row["dtype"], row["count"], row["bytes"]) == (
        "all_reduce",
        "bfloat16",
        4096,
        8192,
    )
    assert pl.from_arrow(tables["kernels"])["kind"].to_list() == ["comm"]


def test_rank_from_file_name(tmp_path: Path) -> None:
    doc = {
        "schemaVersion": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::add",
                "pid": 1,
                "tid": 1,
                "ts": 10.5,
                "dur": 2,
            }
        ],
    }
    for name, rank in (
        ("worker3.json", 3),
        ("rank-5.pt.trace.json", 5),
        ("trace_7.json", 7),
        ("rank12.json", 12),
    ):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        result = kineto.parse(path)
        assert result.rank_source == "file_name"
        assert result.tables["ops"].column("rank").to_pylist() == [rank]


def test_times_are_exact_integers(tmp_path: Path) -> None:
    doc = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "a",
                "pid": 1,
                "tid": 1,
                "ts": 4458677009853.422,
                "dur": 2636.669,
            },
            {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 0.0015},
            {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 6, "dur": 0.0025},
            {"ph": "X", "cat": "cpu_op", "name": "d", "pid": 1, "tid": 1, "ts": 7, "dur": 8},
        ],
    }
    path = tmp_path / "rank0.json"
    text = json.dumps(doc).replace('"ts": 7, "dur": 8', '"ts": 1.5E3, "dur": 2e-3')
    path.write_text(text)
    ops = pl.from_arrow(kineto.parse(path).tables["ops"]).sort("op_id")
    base = 1_700_000_000_000_000_000
    assert ops["start_ns"].to_list() == [
        base + 4458677009853422,
        base + 5000,
        base + 6000,
        base + 1_500_000,
    ]
    # (sub-nanosecond digits, which PyTorch does not write, round half to even; exponent
    # forms are read exactly too)
    assert ops["dur_ns"].to_list() == [2636669, 2, 2, 2]


def _arg_rows(events: list[dict], keys: tuple[str, ...]) -> Counter:
    """(name, each arg in ``keys``) per event, JSON values made hashable."""

    def value(v):
        return json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v

    return Counter((e["name"], *(value(e.get("args", {}).get(k)) for k in keys)) for e in events)


def _table_rows(table, columns: tuple[str, ...]) -> Counter:
    def value(v):
        if isinstance(v, str) and v[:1] in "[{":
            return json.dumps(json.loads(v), sort_keys=True)
        return json.dumps(v) if isinstance(v, list) else v

    rows = table.select(["name", *columns]).to_pylist()
    return Counter((r["name"], *(value(r[c]) for c in columns)) for r in rows)


def test_a_trace_without_profiler_steps_is_one_step(tmp_path: Path) -> None:
    # an inference run: no ProfilerStep#N, so one step 0 spans the trace, and the breakdown
    # is there
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 100,
         "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 7, "tid": 7,
         "ts": 130, "dur": 1},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7, "tid": 8,
         "ts": 131, "dur": 20, "args": {"Input Dims": [[1024]], "Input type": ["float"]}},
    ]  # fmt: skip
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    tables = kineto.parse(path).tables
    add_time_breakdown(tables)
    steps = pl.from_arrow(tables["steps"])
    assert steps.select("step", "start_ns", "end_ns", "marker").rows() == [
        (0, 100_000, 151_000, "whole_trace")
    ]
    assert pl.from_arrow(tables["collectives"])["step"].to_list() == [0]
    breakdown = pl.from_arrow(tables["time_breakdown"])
    assert breakdown.select(
        "step", "timeline", "window_ns", "compute_ns", "exposed_comm_ns", "idle_ns"
    ).rows() == [(0, "host", 51_000, 30_000, 20_000, 1_000)]


def _nccl_trace(path: Path, with_kernel: bool, pg_config: list | None = None) -> Path:
    """One all_gather of 4 x 256 floats over 4 ranks: its nccl: annotation keeps only the
    input, its c10d::_allgather_base_ both buffers (output first)."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "c10d::_allgather_base_", "pid": 1, "tid": 1,
         "ts": 100, "dur": 30, "args": {"External id": 3, "Input Dims": [[1024], [256]],
         "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "user_annotation", "name": "nccl:_all_gather_base", "pid": 1,
         "tid": 1, "ts": 101, "dur": 20, "args": {"Input Dims": [[256]],
         "Input type": ["float"]}},
    ]  # fmt: skip
    if with_kernel:
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 110, "dur": 5, "args": {"correlation": 9, "External id": 3}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(...)",
             "pid": 0, "tid": 7, "ts": 120, "dur": 50,
             "args": {"correlation": 9, "External id": 3, "stream": 7, "device": 0}},
        ]  # fmt: skip
    info = {"backend": "nccl", "rank": 0, "world_size": 8, "pg_config": pg_config or []}
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": info,
                                "traceEvents": events}))  # fmt: skip
    return path


@pytest.mark.parametrize("with_kernel", [True, False])
def test_all_gather_sizes_from_the_launching_op(tmp_path: Path, with_kernel: bool) -> None:
    # two process groups: neither says which one ran the call, so the group size comes from
    # the buffers; without CUDA activities the nccl: annotation is the collective
    groups = [{"pg_name": "0", "ranks": list(range(8))}, {"pg_name": "1", "ranks": [0, 1, 2, 3]}]
    result = kineto.parse(_nccl_trace(tmp_path / "rank0.json", with_kernel, groups))
    row = pl.from_arrow(result.tables["collectives"]).row(0, named=True)
    got = (row["op"], row["count"], row["out_count"], row["group_size"], row["bytes"])
    assert got == ("all_gather", 256, 1024, 4, 4096)
    assert not [m for m in result.warnings.messages() if "size metadata" in m]


def _marked_trace(tmp_path: Path, *, profiler_step: bool = False) -> Path:
    """A trace without ProfilerStep#N whose steps the user marked: ``batch 3`` and ``batch
    4`` (the second holding a nested ``batch 9``), an all-reduce in each, and an unrelated
    annotation ``batch 3 setup`` whose name only starts like a marker."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "batch 3", "pid": 7, "tid": 7, "ts": 100,
         "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 110,
         "dur": 20},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7, "tid": 8,
         "ts": 131, "dur": 10, "args": {"Input Dims": [[1024]], "Input type": ["float"]}},
        {"ph": "X", "cat": "user_annotation", "name": "batch 3 setup", "pid": 7, "tid": 7,
         "ts": 160, "dur": 5},
        {"ph": "X", "cat": "user_annotation", "name": "batch 4", "pid": 7, "tid": 7, "ts": 200,
         "dur": 60},
        {"ph": "X", "cat": "user_annotation", "name": "batch 9", "pid": 7, "tid": 7, "ts": 210,
         "dur": 10},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7, "tid": 8,
         "ts": 230, "dur": 10, "args": {"Input Dims": [[1024]], "Input type": ["float"]}},
    ]  # fmt: skip
    if profiler_step:
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                       "pid": 7, "tid": 7, "ts": 90, "dur": 200})  # fmt: skip
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


@pytest.mark.parametrize(
    ("marker", "steps", "calls"),
    [
        # the capture group numbers the steps; the nested batch 9 is part of step 4
        (r"batch (\d+)", [(3, 100_000, 150_000), (4, 200_000, 260_000)], [3, 4]),
        # no group: numbered in order from 0
        (r"batch \d+", [(0, 100_000, 150_000), (1, 200_000, 260_000)], [0, 1]),
        # an exact name is a pattern too; the first all-reduce is then in no step
        ("batch 4", [(0, 200_000, 260_000)], [None, 0]),
    ],
)
def test_steps_from_a_marker_the_user_names(
    tmp_path: Path, marker: str, steps: list, calls: list
) -> None:
    tables = kineto.parse(_marked_trace(tmp_path), step_marker=marker).tables
    got = pl.from_arrow(tables["steps"]).sort("start_ns")
    assert got.select("step", "start_ns", "end_ns").rows() == steps
    assert set(got["marker"]) == {marker}
    assert pl.from_arrow(tables["collectives"]).sort("start_ns")["step"].to_list() == calls


def test_a_step_marker_yields_to_profiler_steps_and_to_a_trace_without_it(
    tmp_path: Path,
) -> None:
    with_steps = kineto.parse(_marked_trace(tmp_path, profiler_step=True), step_marker="batch 4")
    got = pl.from_arrow(with_steps.tables["steps"]).select("step", "marker").rows()
    assert got == [(1, "ProfilerStep")]
    no_match = kineto.parse(_marked_trace(tmp_path), step_marker="epoch").tables["steps"]
    assert pl.from_arrow(no_match).select("step", "marker").rows() == [(0, "whole_trace")]


def test_ingest_step_marker_option(tmp_path: Path) -> None:
    from click.testing import CliRunner

    import pipeline
    from pipeline.cli import cli

    trace = _marked_trace(tmp_path)
    dataset = tmp_path / "ds"
    args = ["ingest", str(trace), "-o", str(dataset), "--job", "marked"]
    result = CliRunner().invoke(cli, [*args, "--step-marker", r"batch (\d+)"])
    assert result.exit_code == 0, result.output
    steps = pipeline.open(dataset).sql("SELECT step, marker FROM steps ORDER BY step").rows()
    assert steps == [(3, r"batch (\d+)"), (4, r"batch (\d+)")]
    bad = CliRunner().invoke(cli, [*args, "--step-marker", "batch ("])
    assert bad.exit_code == 2
    assert "--step-marker" in bad.output and "not a regular expression" in bad.output


def _launch(ts: int, corr: int, name: str, *, cat: str = "kernel") -> list[dict]:
    """A runtime call on the host thread at ``ts`` and the GPU activity it launched."""
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": ts, "dur": 2, "args": {"correlation": corr}},
        {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts + 10, "dur": 20,
         "args": {"correlation": corr, "stream": 7, "device": 0}},
    ]  # fmt: skip


def test_an_unnamed_kernel_a_collective_op_launched_is_communication(tmp_path: Path) -> None:
    """c10d::allreduce_ launches a kernel no name list knows (and a second one after it, and
    a copy): the first is its all-reduce. The same kernel name outside a collective op, and
    one beside an NCCL kernel in another collective op, stay compute."""

    def op(name: str, ts: int, dur: int) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": {"Input Dims": [[1024]], "Input type": ["float"]}}  # fmt: skip

    events = [
        op("c10d::allreduce_", 100, 50),
        *_launch(105, 1, "vendor_collective_kernel"),
        *_launch(115, 2, "vendor_collective_kernel"),
        *_launch(125, 3, "Memcpy DtoD", cat="gpu_memcpy"),
        *_launch(200, 4, "vendor_collective_kernel"),
        op("c10d::broadcast_", 300, 50),
        *_launch(305, 5, "ncclDevKernel_Broadcast_RING_LL(...)"),
        *_launch(315, 6, "vendor_collective_kernel"),
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    tables = kineto.parse(path).tables
    kernels = pl.from_arrow(tables["kernels"]).sort("start_ns")
    assert kernels["kind"].to_list() == ["comm", "other", "memcpy", "other", "comm", "other"]
    calls = pl.from_arrow(tables["collectives"]).sort("start_ns")
    assert calls.select("op", "start_ns", "count").rows() == [
        ("all_reduce", 115_000, 1024),
        ("broadcast", 315_000, 1024),
    ]
