"""The peer comparison's own query (TraceLens' GPU-time definition over tokenwire's kernels
table) against the same union of intervals computed plainly here, on the sample job; and
tokenwire's figures in docs/peers.md against tokenwire's tables of the DLRM set."""

from __future__ import annotations

import re
from pathlib import Path

import pipeline
from benchmarks.compare_peers import _GPU_TIME_SQL, tokenwire_tables
from tests.conftest import REPO_ROOT


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


def _peer_rows() -> dict[int, list[str]]:
    """docs/peers.md's side-by-side table: per rank, its cells."""
    text = (REPO_ROOT / "docs/peers.md").read_text()
    rows = re.findall(r"^\| (\d+) \|(.*)\|$", text, re.MULTILINE)
    return {int(rank): [c.strip() for c in cells.split("|")] for rank, cells in rows}


def _us(ns) -> str:
    return f"{round(float(ns) / 1e3):,}"


def test_tokenwire_figures_in_the_peer_comparison(real_traces: Path, tmp_path: Path) -> None:
    """Each tokenwire figure of docs/peers.md, per rank of the 8-rank DLRM set: computation
    and communication (exposed) by TraceLens' definition, communication overlapped from
    time_breakdown, wait and times last from collective_waits; and the figures of what only
    tokenwire answers (the step's straggler, the critical path)."""
    tables = tokenwire_tables(real_traces / "kineto/dlrm_v100_8ranks", tmp_path)
    gpu = {r["rank"]: r for r in tables["gpu"].iter_rows(named=True)}
    breakdown = {r["rank"]: r for r in tables["breakdown"].iter_rows(named=True)}
    waits = {r["rank"]: r for r in tables["waits"].iter_rows(named=True)}
    doc = _peer_rows()
    assert sorted(doc) == list(range(8))
    for rank, cells in doc.items():
        comp, comm, _, overlapped, wait, last = (c.split(" / ")[-1] for c in cells)
        g, b, w = gpu[rank], breakdown[rank], waits[rank]
        assert comp == _us(g["comp_ns"])
        assert comm == f"{_us(g['comm_ns'])} ({_us(g['exposed_comm_ns'])})"
        share = float(b["overlapped_ns"]) / float(b["overlapped_ns"] + b["exposed_ns"])
        assert overlapped == f"{100 * share:.2f}"
        assert (wait, last) == (_us(w["wait_us"] * 1e3), str(w["times_last"]))
    ds = pipeline.open(tmp_path / "ds")
    straggler = ds.sql(
        "SELECT step, rank, delayed_collectives, caused_wait_ns, wait_share, layer "
        "FROM step_stragglers"
    ).rows()
    ((step, rank, delayed, caused_ns, share, layer),) = straggler
    assert (step, rank, delayed, round(caused_ns / 1e5) / 10, round(100 * share)) == (
        10, 7, 5, 35.6, 76,
    )  # fmt: skip
    assert layer == "embedding/alltoall_fwd_single"
    path = ds.sql(
        "SELECT segment, parallel_dim, sum(dur_ns) FROM critical_path GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert path == [("compute", None, 13_094_000), ("transfer", "a2a", 42_000),
                    ("transfer", "dp", 174_000)]  # fmt: skip
