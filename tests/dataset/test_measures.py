"""The measures with one definition (dataset/measures.sql), on hand-made rows."""

from __future__ import annotations

import duckdb
import pytest

from pipeline.dataset.sql_files import measures_sql


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(measures_sql())
    return con


def test_achieved_busbw_is_bus_bytes_over_transfer_time(con: duckdb.DuckDBPyConnection) -> None:
    # 10 GB/s for 1 ms moves 10 MB of bus bytes, 40 GB/s for 3 ms 120 MB: 130 MB in 4 ms is
    # 32.5 GB/s (a plain mean would say 25, a median 25); an instance of no duration counts
    # for nothing
    con.execute(
        "CREATE TABLE i AS SELECT * FROM (VALUES (10.0, 1000000), (40.0, 3000000), (99.0, 0)) "
        "t(busbw_gbps, min_dur_ns)"
    )
    (value,) = con.execute("SELECT achieved_busbw(busbw_gbps, min_dur_ns) FROM i").fetchone()
    assert value == pytest.approx(32.5, rel=1e-12)


def test_achieved_busbw_of_one_size_is_nccl_tests_busbw(con: duckdb.DuckDBPyConnection) -> None:
    # nccl-tests: size / mean time x factor. 4 all-reduces of 8 MB on 8 ranks taking 1, 2, 3
    # and 2 ms: mean 2 ms, algbw 4 GB/s, busbw 4 x 2 x 7/8 = 7 GB/s
    factor = 2 * 7 / 8
    rows = [(8e6 / (ms * 1e6) * factor, int(ms * 1e6)) for ms in (1, 2, 3, 2)]
    con.execute("CREATE TABLE i (busbw_gbps DOUBLE, min_dur_ns BIGINT)")
    con.executemany("INSERT INTO i VALUES (?, ?)", rows)
    (value,) = con.execute("SELECT achieved_busbw(busbw_gbps, min_dur_ns) FROM i").fetchone()
    assert value == pytest.approx(7.0, rel=1e-12)
