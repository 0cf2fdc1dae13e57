"""critical_path on the sample job: contiguous segments from a step's start to its end, and
the same path as a plain backward walk written here over collective_waits and steps; on a
job whose clocks disagree (calls that end before their last rank arrives), the walk still
ends."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import pipeline
from benchmarks.bench_link import build_job
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT


def _path(dataset: Path) -> pl.DataFrame:
    return pipeline.open(dataset).sql("SELECT * FROM critical_path ORDER BY step, position")


def test_segments_tile_the_step(linked_sample: Path) -> None:
    path = _path(linked_sample)
    ds = pipeline.open(linked_sample)
    ends = ds.sql(
        "SELECT s.step, max(s.end_ns - o.offset_ns) AS end_ns FROM steps s "
        "JOIN clock_offsets o USING (job, rank) WHERE s.source = 'kineto' GROUP BY 1"
    )
    assert path["step"].unique().sort().to_list() == ends["step"].sort().to_list()
    for step, rows in path.group_by("step"):
        starts, durs = rows["start_ns"].to_list(), rows["dur_ns"].to_list()
        assert all(d > 0 for d in durs)
        # each segment begins where the one before it ended
        assert all(starts[i] + durs[i] == starts[i + 1] for i in range(len(starts) - 1))
        end = ends.filter(pl.col("step") == step[0])["end_ns"].item()
        assert starts[-1] + durs[-1] == end
        assert set(rows["segment"]) == {"compute", "transfer"}


def _walk(calls: pl.DataFrame, steps: pl.DataFrame, step: int) -> list[tuple]:
    """The definition, one hop at a time: standing on rank r at t, the latest call of r that
    ended by t; compute from its end to t, its transfer before that; go on from the last
    arrival (searching from 1 ns earlier where the call moved no data: it must not find
    itself)."""
    here = steps.filter(pl.col("step") == step).sort("end_ns", "rank", descending=[True, False])
    rank, t = here["rank"][0], here["end_ns"][0]
    search = t
    segments = []
    # every hop finds a call that ended strictly earlier than the one before
    for _ in range(calls.height + 1):
        mine = calls.filter(
            (pl.col("step") == step) & (pl.col("rank") == rank) & (pl.col("end_ns") <= search)
        ).sort("end_ns", "moving_ns", descending=True)
        if mine.is_empty():
            start = here.filter(pl.col("rank") == rank)["start_ns"].item()
            segments.append((rank, "compute", min(start, t), t))
            break
        call = mine.row(0, named=True)
        segments.append((rank, "compute", call["end_ns"], t))
        segments.append((rank, "transfer", call["moving_ns"], call["end_ns"]))
        rank, t = call["late_rank"], call["moving_ns"]
        search = t - (call["moving_ns"] == call["end_ns"])
    else:
        raise AssertionError("the walk did not end")
    return [s for s in reversed(segments) if s[3] > s[2]]


def _assert_walk(dataset: Path) -> None:
    ds = pipeline.open(dataset)
    calls = ds.sql(
        "SELECT step, rank, aligned_start_ns + wait_ns AS moving_ns, "
        "aligned_start_ns + dur_ns AS end_ns, late_rank FROM collective_waits "
        "WHERE step IS NOT NULL"
    )
    steps = ds.sql(
        "SELECT s.step, s.rank, min(s.start_ns - o.offset_ns) AS start_ns, "
        "max(s.end_ns - o.offset_ns) AS end_ns FROM steps s JOIN clock_offsets o "
        "USING (job, rank) WHERE s.source = 'kineto' GROUP BY ALL"
    )
    path = _path(dataset)
    assert path["step"].unique().sort().to_list() == steps["step"].unique().sort().to_list()
    for step in steps["step"].unique().to_list():
        got = path.filter(pl.col("step") == step).select(
            "rank", "segment", "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end")
        )
        assert got.rows() == _walk(calls, steps, step)


def test_the_path_is_the_backward_walk(linked_sample: Path) -> None:
    _assert_walk(linked_sample)


def test_the_walk_ends_where_calls_end_before_their_last_arrival(tmp_path: Path) -> None:
    """The benchmark's job copies one trace onto two ranks with no offset between copies: some
    calls end, on the aligned clock, before their late rank starts, so their transfer takes
    no time and the late rank is the rank itself."""
    build_job(REPO_ROOT / "sample_traces", tmp_path / "job", ranks=2, repeat=2)
    link(tmp_path / "job")
    zero = pipeline.open(tmp_path / "job").sql(
        "SELECT count(*) FROM collective_waits WHERE wait_ns = dur_ns AND late_rank = rank"
    )
    assert zero.item() > 0
    _assert_walk(tmp_path / "job")
