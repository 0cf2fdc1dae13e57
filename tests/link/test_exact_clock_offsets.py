"""clock_offsets.sql on hand-made rows: a known clock offset between two hosts comes out
exactly, and so does the residual left after it; send/recv calls get their instance keys."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows

LINKS = ("collective_links", "collectives")


def _links(calls: list[dict]) -> pl.DataFrame:
    """_links_sized rows (size_estimates.sql makes them) from a few fields per call."""
    default = {
        "job": "j", "source": "kineto", "file_id": "f", "comm": "c", "op": "all_reduce",
        "peer": None, "enqueue_ns": None, "bytes": 64, "group_size": 4, "step": 1,
        "phase": "forward", "layer": None, "layer_kind": None, "parallel_dim": "dp",
        "size_source": "record",
    }  # fmt: skip
    full = [{**default, **c} for c in calls]
    for i, c in enumerate(full):
        c.setdefault("collective_id", i)
        c.setdefault("start_ns", c["end_ns"] - 50 if c.get("end_ns") is not None else None)
        c.setdefault("dur_ns", 50 if c.get("end_ns") is not None else None)
    return rows("_links_sized", like=LINKS, **{k: [c[k] for c in full] for k in full[0]})


def _ranks(job: str, hosts: dict[int, str | None]) -> pl.DataFrame:
    """Each rank's host as its profiler trace names it (rank_hosts: one source, its name)."""
    n = len(hosts)
    return rows(
        "ranks", job=[job] * n, rank=list(hosts), source=["kineto"] * n, host=list(hosts.values())
    )


def test_a_hosts_offset_and_the_residual_come_out_exactly() -> None:
    # Job j: host A holds ranks 0 and 1 (the reference: rank 0's), host B ranks 2 and 3,
    # whose clock reads 1000 ns ahead. Three all_reduces end at 10000, 20000, 30000 on A's
    # clock; ranks 1 and 3 end 10 ns late at seq 1 and 30 ns late at seq 2. Seq 3 is seen
    # by rank 0 alone. Job solo: one host, two ranks ending 30 ns apart.
    true_end = {0: 10_000, 1: 20_000, 2: 30_000}
    late = {(1, 1): 10, (1, 2): 30, (3, 1): 10, (3, 2): 30}
    calls = [
        {"rank": r, "seq": s, "end_ns": end + late.get((r, s), 0) + (1000 if r >= 2 else 0)}
        for s, end in true_end.items()
        for r in range(4)
    ]
    calls.append({"rank": 0, "seq": 3, "end_ns": 40_000})
    calls += [
        {"job": "solo", "rank": 0, "seq": 0, "end_ns": 100, "group_size": 2},
        {"job": "solo", "rank": 1, "seq": 0, "end_ns": 130, "group_size": 2},
    ]
    ranks = pl.concat(
        [_ranks("j", {0: "A", 1: "A", 2: "B", 3: "B"}), _ranks("solo", {0: "h", 1: "h"})]
    )
    got = created(
        "clock_offsets.sql",
        {"_links_sized": _links(calls), "ranks": ranks},
        "clock_offsets",
        order_by=["job", "rank"],
    )
    # Host medians per instance: A 10000, 20005, 30015 (seq 3 is A's alone, shared with no
    # other host); B 11000, 21005, 31015. B - A = 1000 at each: offset 1000, A's 0.
    # Aligned ends: ranks 0, 2 at 10000, 20000, 30000; ranks 1, 3 at 10000, 20010, 30030;
    # instance medians 10000, 20005, 30015; each rank's |gaps| 0, 5, 15: residual 5 over 3
    # instances (seq 3, on one rank, says nothing).
    # solo: one host, offset 0; ends 100 and 130, median 115: residual 15 over 1 instance.
    expected = rows(
        "clock_offsets",
        job=["j"] * 4 + ["solo"] * 2,
        rank=[0, 1, 2, 3, 0, 1],
        host=["A", "A", "B", "B", "h", "h"],
        offset_ns=[0, 0, 1000, 1000, 0, 0],
        residual_ns=[5, 5, 5, 5, 15, 15],
        instances=[3, 3, 3, 3, 1, 1],
    )
    assert_frame_equal(got, expected)


def test_a_rank_with_no_shared_instance_keeps_offset_0_and_no_residual() -> None:
    # Host B's only rank ends a collective that nobody else saw (seq 7): no offset to find,
    # and no residual (null), 0 instances.
    calls = [
        {"rank": 0, "seq": 0, "end_ns": 1_000},
        {"rank": 1, "seq": 0, "end_ns": 1_200},
        {"rank": 2, "seq": 7, "end_ns": 9_000},
    ]
    got = created(
        "clock_offsets.sql",
        {"_links_sized": _links(calls), "ranks": _ranks("j", {0: "A", 1: "A", 2: "B"})},
        "clock_offsets",
        order_by=["rank"],
    )
    # ranks 0 and 1: median end 1100, |gaps| 100 each
    expected = rows(
        "clock_offsets",
        job=["j"] * 3,
        rank=[0, 1, 2],
        host=["A", "A", "B"],
        offset_ns=[0, 0, 0],
        residual_ns=[100, 100, None],
        instances=[1, 1, 0],
    )
    assert_frame_equal(got, expected)


def test_sends_and_receives_are_keyed_as_the_kth_transfer_between_two_ranks() -> None:
    # rank 0 sends to rank 1 twice (enqueued at 10 and 20); rank 1 receives twice. A recv
    # with no known peer and a collective without a sequence number are in no instance.
    calls = [
        {"rank": 0, "op": "send", "peer": 1, "seq": None, "enqueue_ns": 20, "end_ns": 300},
        {"rank": 0, "op": "send", "peer": 1, "seq": None, "enqueue_ns": 10, "end_ns": 200},
        {"rank": 1, "op": "recv", "peer": 0, "seq": None, "enqueue_ns": 5, "end_ns": 210},
        {"rank": 1, "op": "recv", "peer": 0, "seq": None, "enqueue_ns": 15, "end_ns": 310},
        {"rank": 1, "op": "recv", "peer": None, "seq": None, "end_ns": 400},
        {"rank": 1, "op": "all_reduce", "seq": None, "end_ns": 500},
        {"rank": 1, "op": "all_reduce", "seq": 4, "end_ns": 600},
    ]
    got = created(
        "clock_offsets.sql",
        {"_links_sized": _links(calls), "ranks": _ranks("j", {0: "A", 1: "A"})},
        "_instance_rows",
        order_by=["rank", "collective_id"],
    ).select("rank", "collective_id", "instance_comm", "instance_seq")
    # each direction numbered by enqueue time from 0: collective 1 (enqueued 10) is the
    # first send, collective 0 the second; the receives in their own order
    expected = rows(
        "_instance_rows",
        like=LINKS,
        rank=[0, 0, 1, 1, 1],
        collective_id=[0, 1, 2, 3, 6],
        instance_comm=["c p2p 0->1", "c p2p 0->1", "c p2p 0->1", "c p2p 0->1", "c"],
        instance_seq=[1, 0, 0, 1, 4],
    )
    assert_frame_equal(got, expected)
