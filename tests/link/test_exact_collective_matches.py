"""collective_matches.sql on hand-made rows: an NCCL log's calls matched to the profiler's by
order at the offset where the sizes agree, a flight recorder's by mutually nearest enqueue
time, and the sizes each match fills in."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows

COMMS = ("communicators",)


def _comms(entries: list[tuple]) -> pl.DataFrame:
    """_communicators_stored: (source, comm, rank, nranks, ranks, ranks_first)."""
    cols = ["source", "comm", "rank", "nranks", "ranks", "ranks_first"]
    data = {c: [e[i] for e in entries] for i, c in enumerate(cols)}
    n = len(entries)
    return rows("_communicators_stored", like=COMMS, job=["j"] * n, ranks_stride=[None] * n, **data)


def _collectives(calls: list[tuple]) -> pl.DataFrame:
    """collectives of rank 0: (source, file_id, collective_id, comm, seq, bytes, enqueue)."""
    cols = ["source", "file_id", "collective_id", "comm", "seq", "bytes", "enqueue_ns"]
    data = {c: [call[i] for call in calls] for i, c in enumerate(cols)}
    n = len(calls)
    return rows(
        "collectives",
        job=["j"] * n,
        rank=[0] * n,
        op=["all_reduce"] * n,
        op_name=[None] * n,
        dtype=["float32"] * n,
        **data,
    )


MATCH_COLUMNS = ["source", "collective_id", "primary_collective_id", "method", "sizes_agree"]


def test_a_logs_calls_match_at_the_offset_where_the_sizes_agree() -> None:
    # Ranks 0 and 1 form profiler group pg:0 and NCCL communicator 0xabc (each log row knows
    # only its own rank: the two logs together give the set {0, 1}, pg:0's). Rank 0's
    # profiler window holds 3 all_reduces of 100, 200, 300 bytes (PyTorch seq 5, 6, 7);
    # its log 5, of 50, 100, 200, 300, 400 bytes (opCount 0..4). No sequence number is
    # shared, so the offset is scored on sizes: log call k + 1 against profiler call k
    # agrees on all three sizes, every other offset on fewer.
    comms = _comms(
        [
            ("kineto", "pg:0", 0, 2, [0, 1], None),
            ("kineto", "pg:0", 1, 2, [0, 1], None),
            ("nccl_log", "0xabc", 0, 2, None, 0),
            ("nccl_log", "0xabc", 1, 2, None, 1),
        ]
    )
    calls = [("kineto", "k0", i, "pg:0", 5 + i, b, None) for i, b in enumerate([100, 200, 300])]
    calls += [
        ("nccl_log", "log0", 10 + i, "0xabc", i, b, None)
        for i, b in enumerate([50, 100, 200, 300, 400])
    ]
    inputs = {"_communicators_stored": comms, "collectives": _collectives(calls)}
    got = created(
        "collective_matches.sql", inputs, "collective_matches", order_by=["collective_id"]
    ).select(MATCH_COLUMNS)
    expected = rows(
        "collective_matches",
        source=["nccl_log"] * 3,
        collective_id=[11, 12, 13],
        primary_collective_id=[0, 1, 2],
        method=["order"] * 3,
        sizes_agree=[True] * 3,
    )
    assert_frame_equal(got, expected)


def test_a_recorders_calls_match_the_mutually_nearest_profiler_call() -> None:
    # Rank 0's profiler calls P0 (enqueued 1.0 ms, 64 bytes) and P1 (2.0 ms, no size) on
    # pg:0; its flight recorder's on pg:0 (the same name): F0 1.0001 ms, F1 1.0005 ms,
    # F2 2.0003 ms (128 bytes), F3 200 ms.
    comms = _comms(
        [("kineto", "pg:0", 0, 1, [0], None), ("flight_recorder", "pg:0", 0, 1, [0], None)]
    )
    calls = [
        ("kineto", "k0", 0, "pg:0", 1, 64, 1_000_000),
        ("kineto", "k0", 1, "pg:0", 2, None, 2_000_000),
        ("flight_recorder", "fr0", 20, "pg:0", 1, 64, 1_000_100),
        ("flight_recorder", "fr0", 21, "pg:0", 2, 64, 1_000_500),
        ("flight_recorder", "fr0", 22, "pg:0", 3, 128, 2_000_300),
        ("flight_recorder", "fr0", 23, "pg:0", 4, 64, 200_000_000),
    ]
    inputs = {"_communicators_stored": comms, "collectives": _collectives(calls)}
    got = created(
        "collective_matches.sql", inputs, "collective_matches", order_by=["collective_id"]
    ).select(MATCH_COLUMNS)
    # P0's nearest is F0 (100 ns; F1 is 500 ns off): F1 is nobody's. F2 is 300 ns from P1
    # (a missing size agrees with any). F3 has no profiler call within 50 ms.
    expected = rows(
        "collective_matches",
        source=["flight_recorder"] * 2,
        collective_id=[20, 22],
        primary_collective_id=[0, 1],
        method=["time"] * 2,
        sizes_agree=[True, True],
    )
    assert_frame_equal(got, expected)
    filled = created(
        "collective_matches.sql", inputs, "_filled_sizes", order_by=["collective_id"]
    ).select("collective_id", "bytes", "filled_from")
    # each matched profiler call gets its match's size: P0 64, P1 128
    expected_filled = pl.DataFrame(
        {"collective_id": [0, 1], "bytes": [64, 128], "filled_from": ["flight_recorder"] * 2},
        schema={"collective_id": pl.Int64, "bytes": pl.Int64, "filled_from": pl.String},
    )
    assert_frame_equal(filled, expected_filled)


def test_a_log_communicator_that_could_be_two_profiler_groups_matches_nothing() -> None:
    # pg:0 and pg:1 both hold ranks {0, 1}: the log's 0xabc could be either.
    comms = _comms(
        [
            ("kineto", "pg:0", 0, 2, [0, 1], None),
            ("kineto", "pg:1", 0, 2, [0, 1], None),
            ("nccl_log", "0xabc", 0, 2, None, 0),
            ("nccl_log", "0xabc", 1, 2, None, 1),
        ]
    )
    calls = [
        ("kineto", "k0", 0, "pg:0", 1, 100, None),
        ("nccl_log", "log0", 10, "0xabc", 0, 100, None),
    ]
    inputs = {"_communicators_stored": comms, "collectives": _collectives(calls)}
    got = created("collective_matches.sql", inputs, "collective_matches", order_by=["rank"])
    assert_frame_equal(got, rows("collective_matches", **{c: [] for c in got.columns}))
