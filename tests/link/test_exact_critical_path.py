"""critical_path.sql on hand-made rows: a two-rank step whose path crosses between the ranks
at each collective's late arrival, and a step without collectives, segment by segment."""

from __future__ import annotations

from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows


def test_the_path_follows_each_collectives_late_rank_back_to_the_steps_start() -> None:
    # Aligned clock. Step 1: rank 0 runs 0..1000, rank 1 0..1100 (its clock reads 1000
    # ahead: raw 1000..2100). Two all_reduces:
    #   A (c#0): rank 0 starts 300, lasts 200; rank 1 starts 400 (late), lasts 100; both end
    #            500. Rank 0 waits 100, rank 1 0.
    #   B (c#1): rank 0 starts 700 (late), lasts 100; rank 1 starts 650, lasts 150; both end
    #            800. Rank 1 waits 50, rank 0 0.
    # Step 2 has no collective: rank 0 runs 2000..2500, rank 1 2000..2400. Nsight's step 2
    # row for rank 1 (ends 9999) is not the timed source's and is left out.
    waits = rows(
        "collective_waits",
        job=["j"] * 4,
        source=["kineto"] * 4,
        step=[1] * 4,
        rank=[0, 1, 0, 1],
        comm=["c"] * 4,
        seq=[0, 0, 1, 1],
        op=["all_reduce"] * 4,
        parallel_dim=["dp"] * 4,
        layer=["A", "A", "B", "B"],
        aligned_start_ns=[300, 400, 700, 650],
        dur_ns=[200, 100, 100, 150],
        wait_ns=[100, 0, 0, 50],
        late_rank=[1, 1, 0, 0],
    )
    steps = rows(
        "steps",
        job=["j"] * 5,
        source=["kineto"] * 4 + ["nsys"],
        rank=[0, 1, 0, 1, 1],
        step=[1, 1, 2, 2, 2],
        start_ns=[0, 1000, 2000, 3000, 0],
        end_ns=[1000, 2100, 2500, 3400, 9999],
    )
    offsets = rows("clock_offsets", job=["j", "j"], rank=[0, 1], offset_ns=[0, 1000])
    got = created(
        "critical_path.sql",
        {"collective_waits": waits, "steps": steps, "clock_offsets": offsets},
        "critical_path",
        order_by=["step", "position"],
    )
    # Step 1 ends last on rank 1 (1100). Walking back from there: rank 1's last call by
    # 1100 is B (ends 800): compute on rank 1 800..1100; B's data moved from its last
    # arrival, 700, to 800 (on rank 1); B's late rank is 0, so the walk goes on at rank 0
    # at 700: rank 0's last call ended by 700 is A (500): compute on rank 0 500..700, A's
    # transfer 400..500 (A's last start is 400); A's late rank is 1: on rank 1, no call
    # ended by 400, so compute from its step start, 0..400. 400 + 100 + 200 + 100 + 300 =
    # 1100, the step.
    # Step 2: rank 0 ends last (2500); compute 2000..2500 on rank 0.
    n = 6
    expected = rows(
        "critical_path",
        job=["j"] * n,
        step=[1, 1, 1, 1, 1, 2],
        position=[0, 1, 2, 3, 4, 0],
        rank=[1, 0, 0, 1, 1, 0],
        segment=["compute", "transfer", "compute", "transfer", "compute", "compute"],
        start_ns=[0, 400, 500, 700, 800, 2000],
        dur_ns=[400, 100, 200, 100, 300, 500],
        op=[None, "all_reduce", None, "all_reduce", None, None],
        parallel_dim=[None, "dp", None, "dp", None, None],
        layer=[None, "A", None, "B", None, None],
        comm=[None, "c", None, "c", None, None],
        seq=[None, 0, None, 1, None, None],
    )
    assert_frame_equal(got, expected)


def test_a_call_that_moved_no_data_hands_the_walk_on_without_finding_itself() -> None:
    # One step, two ranks, one all_reduce that rank 0 entered at 100 and left at 150, before
    # rank 1 (by the clocks) arrived at 200: its wait is its whole duration (50), so the
    # walk searches rank 1 for a call ended by 150 - 1; rank 1's own call (200..260) is not
    # one. Step: rank 0 0..300 (ends last), rank 1 0..260.
    waits = rows(
        "collective_waits",
        job=["j"] * 2,
        source=["kineto"] * 2,
        step=[1, 1],
        rank=[0, 1],
        comm=["c", "c"],
        seq=[0, 0],
        op=["all_reduce"] * 2,
        parallel_dim=["dp"] * 2,
        layer=[None, None],
        aligned_start_ns=[100, 200],
        dur_ns=[50, 60],
        wait_ns=[50, 0],
        late_rank=[1, 1],
    )
    steps = rows(
        "steps",
        job=["j"] * 2,
        source=["kineto"] * 2,
        rank=[0, 1],
        step=[1, 1],
        start_ns=[0, 0],
        end_ns=[300, 260],
    )
    offsets = rows("clock_offsets", job=["j", "j"], rank=[0, 1], offset_ns=[0, 0])
    got = created(
        "critical_path.sql",
        {"collective_waits": waits, "steps": steps, "clock_offsets": offsets},
        "critical_path",
        order_by=["position"],
    ).select("position", "rank", "segment", "start_ns", "dur_ns")
    # From rank 0 at 300: its call ended at 150: compute 150..300. The call moved no data
    # (moving = end = 150: no transfer row). Its late rank 1 at 150: no call of rank 1
    # ended by 149, so compute on rank 1 from its step start 0 to 150.
    expected = rows(
        "critical_path",
        position=[0, 1],
        rank=[1, 0],
        segment=["compute", "compute"],
        start_ns=[0, 150],
        dur_ns=[150, 150],
    )
    assert_frame_equal(got, expected)
