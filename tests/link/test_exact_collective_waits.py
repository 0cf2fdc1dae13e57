"""collective_waits.sql on hand-made rows: a known delay injected on one rank comes out as
the others' wait, exactly; the late rank waits 0; the job's timed source alone counts."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows

CALL = ("collective_links", "collectives")


def _calls(calls: list[tuple]) -> pl.DataFrame:
    """_instance_rows: (job, source, rank, collective_id, start_ns, dur_ns, comm, seq)."""
    cols = ["job", "source", "rank", "collective_id", "start_ns", "dur_ns"]
    cols += ["instance_comm", "instance_seq"]
    data = {c: [call[i] for call in calls] for i, c in enumerate(cols)}
    return rows("_instance_rows", like=CALL, op=["all_reduce"] * len(calls), **data)


def _instances(instances: list[tuple]) -> pl.DataFrame:
    """_source_instances: (job, source, comm, seq, ranks_seen, first_start, last_start,
    late_rank)."""
    cols = ["job", "source", "comm", "seq", "ranks_seen", "first_start_ns", "last_start_ns"]
    cols += ["late_rank"]
    data = {c: [i[k] for i in instances] for k, c in enumerate(cols)}
    n = len(instances)
    return rows(
        "_source_instances",
        like=("collective_instances",),
        bytes=[1024] * n,
        step=[3] * n,
        phase=["backward"] * n,
        layer=["L"] * n,
        parallel_dim=["dp"] * n,
        **data,
    )


def _offsets(offsets: dict[tuple[str, int], int]) -> pl.DataFrame:
    return rows(
        "clock_offsets",
        job=[j for j, _ in offsets],
        rank=[r for _, r in offsets],
        offset_ns=list(offsets.values()),
    )


def test_an_injected_delay_is_the_others_wait_and_the_late_rank_waits_0() -> None:
    # Job j, all_reduce c#0 on ranks 0, 1, 2. Rank 1 is held back 30 ns: on the aligned
    # clock ranks 0 and 2 start at 100, rank 1 at 130 (the last start, 130, is the
    # instance's). Rank 2's host clock is 1000 ns ahead: its raw start is 1100.
    # c#1: rank 0 started 200 ns before the last (300) but ran only 40 ns: the wait is
    # capped at its duration. c#2 was seen on rank 0 alone: nobody to wait for, left out.
    # A call without a start (rank 1, c#1) is left out. The NCCL log's rows of the same
    # job are not the timed source (the profiler's is preferred) and are left out.
    calls = [
        ("j", "kineto", 0, 10, 100, 80, "c", 0),
        ("j", "kineto", 1, 11, 130, 50, "c", 0),
        ("j", "kineto", 2, 12, 1100, 80, "c", 0),
        ("j", "kineto", 0, 13, 100, 40, "c", 1),
        ("j", "kineto", 1, 14, None, 10, "c", 1),
        ("j", "kineto", 2, 15, 1300, 10, "c", 1),
        ("j", "kineto", 0, 16, 500, 10, "c", 2),
        ("j", "nccl_log", 0, 20, 100, 80, "c", 0),
        ("j", "nccl_log", 1, 21, 130, 50, "c", 0),
    ]
    instances = [
        ("j", "kineto", "c", 0, 3, 100, 130, 1),
        ("j", "kineto", "c", 1, 2, 100, 300, 2),
        ("j", "kineto", "c", 2, 1, 500, 500, 0),
        ("j", "nccl_log", "c", 0, 2, 100, 130, 1),
    ]
    offsets = {("j", 0): 0, ("j", 1): 0, ("j", 2): 1000}
    got = created(
        "collective_waits.sql",
        {
            "_instance_rows": _calls(calls),
            "_source_instances": _instances(instances),
            "clock_offsets": _offsets(offsets),
        },
        "collective_waits",
        order_by=["collective_id"],
    ).select("rank", "collective_id", "seq", "aligned_start_ns", "dur_ns", "wait_ns",
             "transfer_ns", "late_rank", "source")  # fmt: skip
    # c#0: wait = last start 130 - own start: rank 0 130 - 100 = 30, rank 1 0, rank 2
    #      130 - (1100 - 1000) = 30; transfer = dur - wait: 50, 50, 50.
    # c#1: rank 0 min(300 - 100, 40) = 40, transfer 0; rank 2 aligned 300, wait 0, transfer 10
    expected = rows(
        "collective_waits",
        rank=[0, 1, 2, 0, 2],
        collective_id=[10, 11, 12, 13, 15],
        seq=[0, 0, 0, 1, 1],
        aligned_start_ns=[100, 130, 100, 100, 300],
        dur_ns=[80, 50, 80, 40, 10],
        wait_ns=[30, 0, 30, 40, 0],
        transfer_ns=[50, 50, 50, 0, 10],
        late_rank=[1, 1, 1, 2, 2],
        source=["kineto"] * 5,
    )
    assert_frame_equal(got, expected)


def test_a_job_with_no_profiler_instances_on_several_ranks_times_its_log() -> None:
    # Job k: the profiler saw its instance on one rank only; the NCCL log on two, so the
    # log is the timed source: rank 1 starts 25 ns after rank 0 (last start 125).
    calls = [
        ("k", "kineto", 0, 1, 100, 60, "c", 0),
        ("k", "nccl_log", 0, 2, 100, 60, "c", 0),
        ("k", "nccl_log", 1, 3, 125, 35, "c", 0),
    ]
    instances = [
        ("k", "kineto", "c", 0, 1, 100, 100, 0),
        ("k", "nccl_log", "c", 0, 2, 100, 125, 1),
    ]
    got = created(
        "collective_waits.sql",
        {
            "_instance_rows": _calls(calls),
            "_source_instances": _instances(instances),
            "clock_offsets": _offsets({("k", 0): 0, ("k", 1): 0}),
        },
        "collective_waits",
        order_by=["rank"],
    ).select("source", "rank", "wait_ns", "transfer_ns")
    # rank 0 waits 125 - 100 = 25 and moves data 60 - 25 = 35; rank 1 waits 0
    expected = rows(
        "collective_waits",
        source=["nccl_log", "nccl_log"],
        rank=[0, 1],
        wait_ns=[25, 0],
        transfer_ns=[35, 35],
    )
    assert_frame_equal(got, expected)
