"""collective_waits, step_stragglers and straggler_ops on the sample job, against the
definitions worked out here from the raw collectives and the clock offsets.

The generator slows rank 5's forward attention kernels (pipeline/synth/program.py), so rank 5
arrives last at the attention all-reduce of TP group {4, 5}.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.synth.job import JobSpec
from pipeline.synth.writer import write_job


def _waits(dataset: Path) -> pl.DataFrame:
    return pipeline.open(dataset).sql("SELECT * FROM collective_waits")


def test_every_profiled_call_of_an_instance_is_timed_once(linked_sample: Path) -> None:
    waits = _waits(linked_sample)
    # one timed source per job, every call once: the profiler's 824 calls (docs/model.md,
    # "The sample job": 45 a rank on stage 0 and 58 on stage 1, 4 ranks each, 2 steps)
    assert waits["source"].unique().to_list() == ["kineto"]
    assert waits.select("rank", "collective_id").is_unique().all()
    assert waits.height == (45 + 58) * 4 * 2
    assert (waits["wait_ns"] >= 0).all() and (waits["transfer_ns"] >= 0).all()


def test_wait_is_the_last_arrival_minus_the_own_on_the_aligned_clock(
    linked_sample: Path,
) -> None:
    ds = pipeline.open(linked_sample)
    raw = ds.sql(
        "SELECT c.rank, c.collective_id, c.start_ns - o.offset_ns AS start_ns, c.dur_ns, "
        "c.comm, c.seq FROM collectives c JOIN clock_offsets o USING (job, rank) "
        "WHERE c.source = 'kineto' AND c.op = 'all_reduce'"
    )
    expected = (
        raw.with_columns(last=pl.col("start_ns").max().over("comm", "seq"))
        .with_columns(wait=pl.min_horizontal(pl.col("last") - pl.col("start_ns"), "dur_ns"))
        .select("rank", "collective_id", "wait")
    )
    got = (
        _waits(linked_sample)
        .filter(pl.col("op") == "all_reduce")
        .select("rank", "collective_id", pl.col("wait_ns").alias("wait"))
    )
    assert_frame_equal(got.sort("rank", "collective_id"), expected.sort("rank", "collective_id"))
    # the last to arrive waited for no one
    waits = _waits(linked_sample)
    assert waits.filter(pl.col("rank") == pl.col("late_rank"))["wait_ns"].max() == 0


def test_the_slowed_rank_is_each_steps_straggler(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    stragglers = ds.sql("SELECT step, rank, layer, wait_share FROM step_stragglers ORDER BY step")
    steps = ds.sql("SELECT DISTINCT step FROM collective_waits WHERE step IS NOT NULL")
    assert stragglers["step"].to_list() == sorted(steps["step"].to_list())
    assert set(stragglers["rank"]) == {5}
    assert all("ParallelAttention" in layer for layer in stragglers["layer"])
    # what it ran while the others waited: its slow attention kernel among the top five
    ops = ds.sql("SELECT step, name FROM straggler_ops WHERE what = 'kernel'")
    for step in stragglers["step"]:
        names = ops.filter(pl.col("step") == step)["name"]
        assert any("flash_fwd_kernel" in n for n in names), step


@pytest.fixture(scope="module")
def other_straggler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated job (no NCCL logs, no Nsight) whose slowed rank is 2, not 5."""
    root = tmp_path_factory.mktemp("straggler2")
    spec = JobSpec(straggler_rank=2)
    write_job(spec, root / "traces")
    dataset = root / "ds"
    assert not ingest([root / "traces"], dataset, job="s2", jobs=1).errors
    link(dataset)
    return dataset


def test_another_slowed_rank_is_named(other_straggler: Path) -> None:
    ranks = pipeline.open(other_straggler).sql("SELECT DISTINCT rank FROM step_stragglers")
    assert ranks["rank"].to_list() == [2]
