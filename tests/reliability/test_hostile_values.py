"""Hostile values: numbers beyond int64, products that wrap, nesting deeper than a decoder
allows, values of a type Polars cannot put in a column. Each is refused with one located line
(exit 1) or, where the format's documented rule is "unknown", read as null (exit 0); never
an internal error, never a wrapped or negative number in the dataset.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import pytest

from pipeline.synth.nsys import Layout, write_export
from tests.reliability.corpus import _json_lines, kineto_doc, nsys_json_lines
from tests.reliability.hostile import digest, error_line, run_cli

COLL = (
    "node0:48211:48211 [0] NCCL INFO AllReduce: opCount {op} sendbuff 0x7f3a00000000 recvbuff "
    "0x7f3b00000000 count {count} datatype {dtype} op 0 root 0 comm 0x5500000007a0 [nranks=2] "
    "stream 0x55d1e200001c\n"
)
BANNER = "node0:48211:48211 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
TABLE = (
    "# Collective test starting: all_reduce_perf\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "        1024           256     float     sum      -1    10.00    0.10    0.15      0"
    "    9.50    0.11    0.16      0\n"
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "traces"
    out.mkdir()
    return out


def _refused(folder: Path, path: Path, place: str) -> str:
    before = digest(folder)
    result = run_cli("ingest", path, "-o", folder.parent / "ds")
    assert result.returncode == 1, result.stderr[-2000:]
    line = error_line(result, path, place)
    assert digest(folder) == before
    return line


def _accepted(folder: Path, path: Path) -> duckdb.DuckDBPyConnection:
    before = digest(folder)
    dataset = folder.parent / "ds"
    result = run_cli("ingest", path, "-o", dataset)
    assert result.returncode == 0, result.stderr[-2000:]
    assert digest(folder) == before
    from pipeline.dataset.views import connect

    return connect(dataset)


# --------------------------------------------------------------------------- NCCL


@pytest.mark.parametrize("count", ["100000000000000000000", "9223372036854775808"])
def test_nccl_log_count_beyond_int64(folder: Path, count: str) -> None:
    """Was a strict Polars cast failing after the whole log was read (exit 3)."""
    path = folder / "rank0.nccl.log"
    path.write_text(
        BANNER + COLL.format(op=0, count=65536, dtype=7) + COLL.format(op=1, count=count, dtype=7)
    )
    _refused(folder, path, rf":3: the number '{count}' is outside 64-bit integers")


def test_nccl_log_count_times_element_size_would_wrap(folder: Path) -> None:
    """count 2**62 of float32 (datatype 7): bytes were stored wrapped, 2**64 -> 0."""
    path = folder / "rank0.nccl.log"
    path.write_text(
        BANNER + COLL.format(op=0, count=65536, dtype=7) + COLL.format(op=1, count=2**62, dtype=7)
    )
    _refused(folder, path, r":3: count x ranks x element size is beyond 64-bit integers")


def test_nccl_log_largest_count_that_fits_is_kept(folder: Path) -> None:
    path = folder / "rank0.nccl.log"
    count = 2**60  # x 4 bytes = 2**62: fits
    path.write_text(BANNER + COLL.format(op=0, count=count, dtype=7))
    con = _accepted(folder, path)
    assert con.execute("SELECT min(bytes) FROM collectives").fetchone()[0] == count * 4


def test_nccl_tests_size_beyond_int64(folder: Path) -> None:
    path = folder / "all_reduce_perf.txt"
    row = TABLE.splitlines()[-1].replace("        1024", "100000000000000000000", 1)
    path.write_text(TABLE + row + "\n")
    _refused(folder, path, r":4: the number '100000000000000000000' is outside 64-bit")


# --------------------------------------------------------------------------- Nsight


def test_nsys_json_time_that_would_wrap(folder: Path) -> None:
    path = folder / "rank0_report.nsys.json"
    lines = nsys_json_lines()
    lines[3]["NvtxEvent"]["Timestamp"] = str(2**63 - 10)
    lines[3]["NvtxEvent"]["EndTimestamp"] = str(2**63 - 5)
    path.write_bytes(_json_lines(lines))
    _refused(folder, path, r":4: .*not a time")


def test_nsys_sqlite_time_that_would_wrap(folder: Path) -> None:
    """A kernel start near 2**63 plus the session start wrapped to a negative time."""
    path = write_export(folder / "rank0.sqlite", layout=Layout(steps=1, layers=1))
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854775000, "
        "end = 9223372036854775800 WHERE rowid = 1"
    )
    con.commit()
    con.close()
    _refused(folder, path, r": CUPTI_ACTIVITY_KIND_KERNEL: a time beyond")


def test_nsys_sqlite_session_start_that_would_wrap(folder: Path) -> None:
    path = write_export(folder / "rank0.sqlite", layout=Layout(steps=1, layers=1))
    con = sqlite3.connect(path)
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 9223372036854775000")
    con.commit()
    con.close()
    _refused(folder, path, r": TARGET_INFO_SESSION_START_TIME: utcEpochNs")


# --------------------------------------------------------------------------- Kineto


def test_kineto_args_nested_deeper_than_the_decoder(folder: Path) -> None:
    """msgspec's RecursionError escaped as an internal error (exit 3)."""
    path = folder / "rank0.pt.trace.json"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(json.dumps(kineto_doc(0)).replace('"External id": 1', f'"x": {deep}'))
    _refused(folder, path, r": byte \d+: malformed JSON: nested deeper than the decoder")


def test_kineto_header_values_polars_cannot_unify_read_as_unknown(folder: Path) -> None:
    """A dict pg_desc, a numeric GPU name, an int128 world size, ranks or rank: each failed
    when its frame was built (exit 3). Read as unknown, like args of the wrong type."""
    doc = kineto_doc(0)
    doc["distributedInfo"]["world_size"] = 2**70
    doc["distributedInfo"]["rank"] = 2**70
    doc["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": {"a": [1, "x"]}, "backend_config": 5, "ranks": [0, 2**70]}
    ]
    doc["deviceProperties"] = [{"id": 0, "name": 5}]
    doc["traceEvents"][5]["args"]["In msg nelems"] = 2**62  # x 4 bytes: beyond int64
    path = folder / "rank3.pt.trace.json"
    path.write_text(json.dumps(doc))
    con = _accepted(folder, path)
    assert con.execute("SELECT rank, world_size, gpu_name FROM ranks").fetchall() == [
        (3, None, None)  # the rank from the file name
    ]
    assert con.execute("SELECT pg_desc, ranks FROM communicators").fetchall() == [(None, None)]
    assert con.execute("SELECT bytes FROM collectives").fetchall() == [(None,)]
