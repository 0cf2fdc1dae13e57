"""nccl-tests output parser: every real output, plus inline multi-test and damaged cases."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from pipeline.dataset.schema import conform
from pipeline.errors import TraceFormatError
from pipeline.ingest.nccl import nccl_tests

ROW = re.compile(r"^(?:\[\d+,\d+\]<stdout>:)?\s*\d+\s+\d+\s+[a-z]\w*\s")


def _expected_rows(path: Path) -> int:
    """Halves printed: (fields after size/count/type/[redop]/root) / 4, counted by hand."""
    n = 0
    for line in path.read_text().splitlines():
        if ROW.match(line):
            fields = re.sub(r"^\[\d+,\d+\]<stdout>:", "", line).split()
            head = 5 if fields[3].isalpha() else 4
            n += (len(fields) - head) // 4
    return n


def _parse(path: Path) -> pl.DataFrame:
    r = nccl_tests.parse(path)
    conform(
        "bandwidth_tests", r.tables["bandwidth_tests"], job="j", source="nccl_tests", file_id="f"
    )
    return pl.from_arrow(r.tables["bandwidth_tests"])


def test_several_tests_and_damage(tmp_path):
    path = tmp_path / "out.txt"
    path.write_bytes(
        b"# Collective test starting: all_reduce_perf\r\n"
        b"#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\r\n"  # noqa: E501
        b"        1024           256     float     sum      -1    10.00    0.10    0.15      0    9.50    0.11    0.16    N/A\r\n"  # noqa: E501
        b"# Collective test starting: all_gather_perf\r\n"
        b"# Using devices\r\n#  Rank  0 Group  0 Pid  1 on h device  0 [0000:4c:00] GPU\r\n"
        b"#  Rank  1 Group  0 Pid  2 on h device  1 [0000:4d:00] GPU\r\n"
        b"#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\r\n"  # noqa: E501
        b"        2048           256  bfloat16    none      -1    1.2e+03   0.00    0.00      0    11.0    0.19    0.09      0\r\n"  # noqa: E501
        b"        4096           512  bfloat16    none      -1    20.00    0.20"
    )
    r = nccl_tests.parse(path)
    t = pl.from_arrow(r.tables["bandwidth_tests"])
    assert t.select(
        "op", "size_bytes", "dtype", "redop", "placement", "time_us", "wrong", "nranks"
    ).rows() == [
        ("all_reduce", 1024, "float32", "sum", "out_of_place", 10.0, 0, None),
        ("all_reduce", 1024, "float32", "sum", "in_place", 9.5, None, None),
        ("all_gather", 2048, "bfloat16", None, "out_of_place", 1200.0, 0, 2),
        ("all_gather", 2048, "bfloat16", None, "in_place", 11.0, 0, 2),
    ]
    text = " | ".join(r.warnings.messages())
    assert "damaged table row" in text and "last line cut" in text


def test_not_nccl_tests(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("nothing to see\n")
    with pytest.raises(TraceFormatError, match=re.escape(str(path))):
        nccl_tests.parse(path)
    (tmp_path / "e.txt").write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        nccl_tests.parse(tmp_path / "e.txt")


def test_old_header_integer_times_and_footer_written_here(tmp_path):
    # The two header shapes of nccl-tests' src/common.cu: before redop (a root column only,
    # "error" columns) and after (redop and "#wrong"); large sizes print integer times, and
    # the footer follows the table. Values made up here; rows as the program prints them.
    old = tmp_path / "broadcast_perf.txt"
    old.write_text(
        "# Using devices\n"
        "#   Rank  0 Pid  100 on host-a device  0 [0x00] Tesla V100-PCIE-16GB\n"
        "#   Rank  1 Pid  200 on host-b device  0 [0x00] Tesla V100-PCIE-16GB\n"
        "#\n"
        "#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error\n"  # noqa: E501
        "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"  # noqa: E501
        "           8             2   float       0    40.50    0.00    0.00    N/A    30.25    0.00    0.00    N/A\n"  # noqa: E501
    )
    r = nccl_tests.parse(old)
    assert r.format_version == "without redop"
    t = pl.from_arrow(r.tables["bandwidth_tests"])
    assert t.select(
        "op", "size_bytes", "count", "redop", "root", "placement", "time_us", "wrong", "nranks"
    ).rows() == [
        ("broadcast", 8, 2, None, 0, "out_of_place", 40.5, None, 2),
        ("broadcast", 8, 2, None, 0, "in_place", 30.25, None, 2),
    ]
    new = tmp_path / "all_reduce_perf.txt"
    new.write_text(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"  # noqa: E501
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"  # noqa: E501
        "  1073741824     268435456     float     sum      -1    20000   53.69   93.95      0    19000   56.51   98.90      0\n"  # noqa: E501
        "# Out of bounds values : 0 OK\n"
        "# Avg bus bandwidth    : 96.4250\n"
    )
    t = _parse(new)
    # 2 (n - 1) / n = busbw / algbw = 1.75: n = 8 ranks, as the op's factor says
    assert t.select("op", "size_bytes", "placement", "time_us", "algbw_gbps", "busbw_gbps",
                    "wrong").rows() == [
        ("all_reduce", 1073741824, "out_of_place", 20000.0, 53.69, 93.95, 0),
        ("all_reduce", 1073741824, "in_place", 19000.0, 56.51, 98.90, 0),
    ]  # fmt: skip
    assert t["root"].is_null().all() and set(t["redop"]) == {"sum"}
