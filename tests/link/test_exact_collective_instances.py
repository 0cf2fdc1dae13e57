"""collective_instances.sql on hand-made rows: arrival skew, late rank and durations of an
instance on the aligned clock, a send and its recv as one instance (op send), the op most
ranks report, a log's instance that matched the profiler's left out, its source listed,
where its size came from, and its group size; the algorithm and bus bandwidths of an
instance (its bytes over its shortest duration across ranks, times nccl-tests' factor of its
op and group size)."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows

CALL = ("collective_links", "collectives")


def _calls(calls: list[tuple]) -> pl.DataFrame:
    """_instance_rows: (source, rank, collective_id, comm, seq, op, start_ns, dur_ns, step,
    size_source, group_size)."""
    cols = ["source", "rank", "collective_id", "instance_comm", "instance_seq", "op"]
    cols += ["start_ns", "dur_ns", "step", "size_source", "group_size"]
    data = {c: [call[i] for call in calls] for i, c in enumerate(cols)}
    n = len(calls)
    return rows(
        "_instance_rows",
        like=CALL,
        job=["j"] * n,
        file_id=[f"{c[0]}{c[1]}" for c in calls],
        bytes=[64] * n,
        phase=[None if c[8] is None else "forward" for c in calls],
        layer=[None] * n,
        layer_kind=[None] * n,
        parallel_dim=["dp"] * n,
        **data,
    )


def test_instances_across_ranks_and_sources() -> None:
    # Rank 1's clock reads 1000 ahead. The profiler's c#0: rank 0 starts at 100 for 50 ns,
    # rank 1 at 130 (raw 1130) for 20 ns, both in step 1. Its send 0->1 #0: rank 0 sends at
    # 200, rank 1 posts the recv at 190 (raw 1190). Its c#5 was seen on rank 0 alone.
    # The NCCL log's 0xabc#0 is c#0 (its calls matched the profiler's); its 0xabc#1, which
    # rank 0 logged as an all_reduce and rank 1 as a broadcast, matched nothing.
    # Sizes: c#0's is the model's on rank 1 (estimated), the others' the sources' own.
    # Group sizes: c#0's calls say 2; c#5's call says none, and communicator_dims knows c
    # has 2 ranks; the send/recv and the log's calls say none.
    kn, nl = "kineto", "nccl_log"
    calls = _calls(
        [
            (kn, 0, 0, "c", 0, "all_reduce", 100, 50, 1, "kernel_args", 2),
            (kn, 1, 1, "c", 0, "all_reduce", 1130, 20, 1, "estimated", 2),
            (kn, 0, 2, "c p2p 0->1", 0, "send", 200, 15, 1, "record_param_comms", None),
            (kn, 1, 3, "c p2p 0->1", 0, "recv", 1190, 25, 1, "record_param_comms", None),
            (kn, 0, 4, "c", 5, "all_reduce", 400, 10, 1, "kernel_args", None),
            (nl, 0, 10, "0xabc", 0, "all_reduce", 100, 50, None, "kernel_args", None),
            (nl, 1, 11, "0xabc", 0, "all_reduce", 1130, 20, None, "kernel_args", None),
            (nl, 0, 12, "0xabc", 1, "all_reduce", 500, 5, None, "record_param_comms", None),
            (nl, 1, 13, "0xabc", 1, "broadcast", 1505, 5, None, "kernel_args", None),
        ]
    )
    dims = rows("communicator_dims", job=["j"], comm=["c"], nranks=[2])
    offsets = rows("clock_offsets", job=["j", "j"], rank=[0, 1], offset_ns=[0, 1000])
    matches = rows(
        "collective_matches",
        job=["j", "j"],
        rank=[0, 1],
        source=["nccl_log", "nccl_log"],
        file_id=["nccl_log0", "nccl_log1"],
        collective_id=[10, 11],
        primary_source=["kineto", "kineto"],
        primary_file_id=["kineto0", "kineto1"],
        primary_collective_id=[0, 1],
    )
    got = created(
        "collective_instances.sql",
        {
            "_instance_rows": calls,
            "clock_offsets": offsets,
            "collective_matches": matches,
            "communicator_dims": dims,
        },
        "collective_instances",
        order_by=["source", "comm", "seq"],
        secondary=True,
    ).select("source", "comm", "seq", "op", "ranks_seen", "consistent", "first_start_ns",
             "last_start_ns", "skew_ns", "late_rank", "min_dur_ns", "max_dur_ns", "step",
             "sources", "size_source", "group_size")  # fmt: skip
    # c#0: aligned starts 100 and 130: skew 30, rank 1 last; durations 20..50; step 1.
    #      Its log twin is left out and named in sources.
    # c#5: one rank: no late rank, no skew.
    # send 0->1: aligned 200 (send) and 190 (recv): the sender last, skew 10; op send (the
    #      transfer, whichever side recorded it).
    # 0xabc#1: starts 500 and 505: rank 1 last; all_reduce and broadcast tie, the first by
    #      name stands; not consistent (the ranks disagree on the op).
    # size_source: estimated where any rank's is (c#0, rank 1's), else the first by name of
    #      its ranks' (0xabc#1: kernel_args before record_param_comms).
    # group_size: the calls' own (c#0: 2), else communicator_dims' nranks (c#5: c's 2), else
    #      a dropped twin's (none here): the send/recv's pair and 0xabc have none.
    expected = rows(
        "collective_instances",
        source=["kineto", "kineto", "kineto", "nccl_log"],
        comm=["c", "c", "c p2p 0->1", "0xabc"],
        seq=[0, 5, 0, 1],
        op=["all_reduce", "all_reduce", "send", "all_reduce"],
        ranks_seen=[2, 1, 2, 2],
        consistent=[True, True, True, False],
        first_start_ns=[100, 400, 190, 500],
        last_start_ns=[130, 400, 200, 505],
        skew_ns=[30, 0, 10, 5],
        late_rank=[1, None, 0, 1],
        min_dur_ns=[20, 10, 15, 5],
        max_dur_ns=[50, 10, 25, 5],
        step=[1, 1, 1, None],
        sources=[["kineto", "nccl_log"], ["kineto"], ["kineto"], ["nccl_log"]],
        size_source=["estimated", "kernel_args", "record_param_comms", "kernel_args"],
        group_size=[2, 2, None, None],
    )
    assert_frame_equal(got, expected)


def test_bandwidths_are_the_bytes_over_the_shortest_duration_times_the_bus_factor() -> None:
    # One step of 4 ranks, clocks aligned, every call 64 B. g#0: an all_reduce whose calls
    # say their group has 4 ranks, lasting 16, 20, 32 and 40 ns; g#1: an all_gather of the
    # same group seen on ranks 0 and 1 only (16 and 64 ns), its calls naming no group:
    # communicator_dims says g has 4 ranks; h#0: a broadcast of a group no source sizes,
    # on 2 ranks (32 and 8 ns); h#1: an all_reduce of one rank that took 0 ns.
    kn = "kineto"
    calls = _calls(
        [(kn, r, r, "g", 0, "all_reduce", 100, d, 1, "kernel_args", 4)
         for r, d in enumerate((16, 20, 32, 40))]
        + [(kn, 0, 4, "g", 1, "all_gather", 300, 16, 1, "kernel_args", None),
           (kn, 1, 5, "g", 1, "all_gather", 300, 64, 1, "kernel_args", None),
           (kn, 0, 6, "h", 0, "broadcast", 500, 32, 1, "kernel_args", None),
           (kn, 1, 7, "h", 0, "broadcast", 500, 8, 1, "kernel_args", None),
           (kn, 0, 8, "h", 1, "all_reduce", 600, 0, 1, "kernel_args", None)]
    )  # fmt: skip
    got = created(
        "collective_instances.sql",
        {
            "_instance_rows": calls,
            "clock_offsets": rows(
                "clock_offsets", job=["j"] * 4, rank=[0, 1, 2, 3], offset_ns=[0] * 4
            ),
            "collective_matches": rows("collective_matches", job=[]),
            "communicator_dims": rows("communicator_dims", job=["j"], comm=["g"], nranks=[4]),
        },  # fmt: skip
        "collective_instances",
        order_by=["comm", "seq"],
    ).select("comm", "seq", "group_size", "min_dur_ns", "algbw_gbps", "busbw_gbps")
    # (bytes per ns are GB/s)
    # g#0: 64 / 16 = 4 GB/s; all_reduce on 4: x 2 (4 - 1) / 4 = 1.5: 6 GB/s.
    # g#1: 64 / 16 = 4; all_gather on communicator_dims' 4 (not the 2 ranks seen): x 3/4: 3.
    # h#0: 64 / 8 = 8; broadcast: x 1: 8 (its 2 ranks seen stand for the group size).
    # h#1: no duration: no bandwidth.
    expected = pl.DataFrame(
        [("g", 0, 4, 16, 4.0, 6.0),
         ("g", 1, 4, 16, 4.0, 3.0),
         ("h", 0, None, 8, 8.0, 8.0),
         ("h", 1, None, 0, None, None)],
        schema=got.schema,
        orient="row",
    )  # fmt: skip
    assert_frame_equal(got, expected)
