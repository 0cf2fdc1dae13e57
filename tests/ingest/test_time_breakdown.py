"""Compute, overlapped and exposed communication, and idle time per rank and step, from one
file's steps, kernels, ops and collectives at ingest."""

from __future__ import annotations

import pyarrow as pa

from pipeline.ingest.derive.time_breakdown import add_time_breakdown


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def _breakdown(**tables: list[dict]) -> list[dict]:
    parsed = {name: _table(rows) for name, rows in tables.items()}
    add_time_breakdown(parsed)
    if "time_breakdown" not in parsed:
        return []
    return parsed["time_breakdown"].to_pylist()


def _split(window: int, compute: int, overlapped: int, exposed: int, idle: int) -> dict:
    return {
        "window_ns": window,
        "compute_ns": compute,
        "overlapped_comm_ns": overlapped,
        "exposed_comm_ns": exposed,
        "idle_ns": idle,
    }


def test_gpu_step_splits_into_the_four_parts():
    # step opens at -5; a GEMM runs 0..10, an all-reduce 5..15 and a nested copy 2..4
    rows = _breakdown(
        steps=[{"rank": 3, "step": 7, "start_ns": -5, "end_ns": 40}],
        kernels=[
            {"rank": 3, "step": 7, "start_ns": 0, "end_ns": 10, "kind": "gemm"},
            {"rank": 3, "step": 7, "start_ns": 2, "end_ns": 4, "kind": "memcpy"},
            {"rank": 3, "step": 7, "start_ns": 5, "end_ns": 15, "kind": "comm"},
        ],
        ops=[{"rank": 3, "step": 7, "start_ns": 0, "end_ns": 30, "kind": "cpu_op",
              "name": "aten::mm", "tid": 1}],
    )  # fmt: skip
    assert rows == [{"rank": 3, "step": 7, "timeline": "gpu", **_split(20, 5, 5, 5, 5)}]


def test_host_step_counts_collective_threads_as_communication():
    # no kernels (gloo): aten ops on thread 1 are compute; thread 2 runs the collectives, so
    # its aten ops are communication work, not compute
    rows = _breakdown(
        steps=[{"rank": 0, "step": 1, "start_ns": 0, "end_ns": 50}],
        ops=[
            {"rank": 0, "step": 1, "start_ns": 0, "end_ns": 10, "kind": "cpu_op",
             "name": "aten::addmm", "tid": 1},
            {"rank": 0, "step": 1, "start_ns": 2, "end_ns": 6, "kind": "cpu_op",
             "name": "aten::mm", "tid": 1},
            {"rank": 0, "step": 1, "start_ns": 0, "end_ns": 30, "kind": "cpu_op",
             "name": "aten::copy_", "tid": 2},
            {"rank": 0, "step": 1, "start_ns": 0, "end_ns": 40, "kind": "user_annotation",
             "name": "forward", "tid": 1},
        ],
        collectives=[{"rank": 0, "step": 1, "start_ns": 8, "end_ns": 20, "stream": 2}],
    )  # fmt: skip
    assert rows == [{"rank": 0, "step": 1, "timeline": "host", **_split(20, 8, 2, 10, 0)}]


def test_a_file_without_steps_or_activity_gets_no_rows():
    kernel = {"rank": 0, "step": None, "start_ns": 0, "end_ns": 5, "kind": "gemm"}
    assert _breakdown(kernels=[kernel]) == []
    step = {"rank": 0, "step": 1, "start_ns": 0, "end_ns": 5}
    assert _breakdown(steps=[step], kernels=[kernel]) == []
