"""The peer comparison's own query (TraceLens' GPU-time definition over tokenwire's kernels
table) against the same union of intervals computed plainly here, on the sample job."""

from __future__ import annotations

from pathlib import Path

import pipeline
from benchmarks.compare_peers import _GPU_TIME_SQL


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def _covered(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def test_gpu_time_is_the_union_of_kernel_intervals(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    got = {r["rank"]: r for r in ds.sql(_GPU_TIME_SQL).iter_rows(named=True)}
    kernels = ds.sql(
        "SELECT rank, name, kind, start_ns, end_ns FROM kernels WHERE end_ns > start_ns"
    )
    assert set(got) == set(kernels["rank"])
    for rank, rows in kernels.group_by("rank"):
        comm, comp = [], []
        for r in rows.iter_rows(named=True):
            if r["kind"] == "memcpy":
                continue
            (comm if "nccl" in r["name"].lower() else comp).append((r["start_ns"], r["end_ns"]))
        comm_u, comp_u = _union(comm), _union(comp)
        row = got[rank[0]]
        assert row["comp_ns"] == sum(e - s for s, e in comp_u)
        assert row["comm_ns"] == sum(e - s for s, e in comm_u)
        assert row["exposed_comm_ns"] == row["comm_ns"] - _covered(comm_u, comp_u)
        assert row["total_ns"] == rows["end_ns"].max() - rows["start_ns"].min()
