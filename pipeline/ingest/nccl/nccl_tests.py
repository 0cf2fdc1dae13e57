"""nccl-tests console output (``all_reduce_perf`` and friends) into the ``bandwidth_tests`` table.

Reads the ``size count type [redop] root | time algbw busbw #wrong | time algbw busbw #wrong``
tables of every test in the file (current header with ``redop``/``#wrong`` and the ~2020 one
without ``redop`` and with an ``error`` column), one row per half (out-of-place, in-place).
OpenMPI ``[1,0]<stdout>:`` tags are stripped; the test's op comes from the
``# Collective test starting: <name>_perf`` line or the binary name on a command line;
``nranks`` from the ``# Using devices`` list. Layout: nccl-tests' ``src/common.cu`` and
``src/util.cu`` (github.com/NVIDIA/nccl-tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ...errors import TraceFormatError
from ...ingest.nccl.lines import iter_batches
from ...ingest.result import ParseResult, Warnings, parsed_table
from ...ingest.values import LineOutOfRange, check_line_numbers
from ...vocab import OP_NAMES, op_name_expr

FORMAT = "nccl_tests"

_SNIFF = re.compile(
    r"(?m)#\s+size\s+count\s+type\s+(?:redop\s+)?root\s+time|^.{0,40}# nThread \d+ nGpus \d+"
    r"|# Collective test starting: \w+_perf"
)
_PREFIX = (
    r"^(?:\[\d+,(?P<l1>\d+)\]<std(?:out|err)>:|\[rank(?P<l2>\d+)\]:|\[(?P<l3>\d+)\] )?(?P<body>.*)$"
)
_HEADER = r"#\s+size\s+count\s+type\s+"
_ROW_START = r"^\s*\d+\s+\d+\s+[A-Za-z]"
_HALF = r"\s+(?P<t{0}>\S+)\s+(?P<a{0}>\S+)\s+(?P<b{0}>\S+)\s+(?P<w{0}>\S+)"
_ROW = (
    r"^\s*(?P<size_bytes>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?:(?P<redop>[A-Za-z]\w*)\s+)?"
    rf"(?P<root>-?\d+){_HALF.format(1)}(?:{_HALF.format(2)})?\s*$"
)
_OP_NAME = r"(?:^|[\s/:])([a-z]+(?:_[a-z]+)*)_perf\b"
_DTYPES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "char": "int8",
    "fp8_e4m3": "float8_e4m3",
    "fp8_e5m2": "float8_e5m2",
    "f8e4m3": "float8_e4m3",
    "f8e5m2": "float8_e5m2",
}


#: A result row: size, count, then an nccl-tests type name.
_ROW_SNIFF = re.compile(
    r"(?m)^(?:\S*:)?\s*\d+\s+\d+\s+(?:float|half|bfloat16|double|u?int(?:8|32|64)|f8e\w+)\s"
)


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` holds an nccl-tests table header or its ``# nThread`` banner, and
    either a result row or no NCCL INFO lines (a debug log that quotes the banner but holds
    no results is an NCCL log)."""
    text = head.decode("utf-8", errors="replace")
    if _SNIFF.search(text) is None:
        return False
    return _ROW_SNIFF.search(text) is not None or " NCCL INFO " not in text


def parse(path: Path) -> ParseResult:
    """Parse one nccl-tests output.

    Parameters
    ----------
    path
        Console output of one or more nccl-tests runs.

    Returns
    -------
    ParseResult
        Table ``bandwidth_tests``.

    Raises
    ------
    TraceFormatError
        Empty or unreadable file, or no nccl-tests table in it.
    """
    path = Path(path)
    warnings = Warnings()
    try:
        batches = list(iter_batches(path))
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from exc
    if not batches:
        raise TraceFormatError(path, "empty file", offset=0)
    for b in batches:
        warnings.add("non-UTF-8 bytes replaced", b.undecodable)
    if batches[-1].cut_last:
        warnings.add("last line cut (no newline at end of file)")
    lines = pl.concat([b.frame for b in batches])
    try:
        # sizes, counts and ranks are int64: a line with a longer number is refused, not cast
        check_line_numbers(lines, "line")
    except LineOutOfRange as exc:
        raise TraceFormatError(path, str(exc), line=exc.line) from None
    lines = lines.with_columns(pl.col("line").str.extract_groups(_PREFIX).alias("p")).unnest("p")
    lines = lines.with_columns(
        pl.coalesce(pl.col("l1"), pl.col("l2"), pl.col("l3")).cast(pl.Int64).alias("launcher_rank")
    )
    has_header = lines["body"].str.contains(_HEADER).any()
    candidates = lines.filter(pl.col("body").str.contains(_ROW_START))
    if not has_header and not candidates.height:
        raise TraceFormatError(path, "not nccl-tests output: no bandwidth table found", line=1)
    table = _rows(lines, candidates, path, warnings)
    return ParseResult(
        format=FORMAT,
        tables={"bandwidth_tests": parsed_table("bandwidth_tests", table)},
        format_version="with redop"
        if lines["body"].str.contains(r"#\s+size\s+count\s+type\s+redop").any()
        else "without redop"
        if has_header
        else None,  # fmt: skip
        rank_source="launcher_prefix" if lines["launcher_rank"].is_not_null().any() else "default",
        warnings=warnings,
    )


def _rows(
    lines: pl.DataFrame, candidates: pl.DataFrame, path: Path, warnings: Warnings
) -> pl.DataFrame:
    """Table rows with the op, nranks and rank of their test, one row per half."""
    op_name = pl.col("body").str.extract(_OP_NAME, 1)
    marks = lines.with_columns(
        op_name_expr(op_name, default=None).alias("op"),
        pl.col("body").str.contains(r"^#\s*Using devices").cum_sum().alias("section"),
        pl.col("body").str.contains(r"^#\s+Rank\s+\d+\s.*Pid\s+\d+").alias("is_rank"),
    ).with_columns(pl.col("op").forward_fill())
    nranks = (
        marks.filter(pl.col("is_rank"))
        .group_by("section")
        .agg(pl.len().cast(pl.Int64).alias("nranks"))
    )
    default_op = OP_NAMES.get(m.group(1)) if (m := re.search(_OP_NAME, path.name)) else None
    ex = (
        candidates.select(
            "line_no", "launcher_rank", pl.col("body").str.extract_groups(_ROW).alias("r")
        )
        .unnest("r")
        .join(marks.select("line_no", "op", "section"), on="line_no", how="left")
        .join(nranks, on="section", how="left")
    )
    bad = ex.filter(pl.col("size_bytes").is_null())
    warnings.add("damaged table row (does not parse)", bad.height)
    ex = ex.filter(pl.col("size_bytes").is_not_null())
    f64 = pl.Float64
    halves = []
    for i, placement in ((1, "out_of_place"), (2, "in_place")):
        half = ex.filter(pl.col(f"t{i}").is_not_null()).select(
            pl.coalesce("launcher_rank", pl.lit(0, pl.Int64)).alias("rank"),
            pl.coalesce("op", pl.lit(default_op or "unknown")).alias("op"),
            pl.col("size_bytes").cast(pl.Int64),
            pl.col("count").cast(pl.Int64),
            pl.col("type").replace_strict(_DTYPES, default=pl.col("type")).alias("dtype"),
            pl.when(pl.col("redop") != "none").then("redop").alias("redop"),
            pl.when(pl.col("root").cast(pl.Int64) >= 0)
            .then(pl.col("root").cast(pl.Int64))
            .alias("root"),
            pl.lit(placement).alias("placement"),
            pl.col(f"t{i}").cast(f64, strict=False).alias("time_us"),
            pl.col(f"a{i}").cast(f64, strict=False).alias("algbw_gbps"),
            pl.col(f"b{i}").cast(f64, strict=False).alias("busbw_gbps"),
            pl.col(f"w{i}").str.to_integer(strict=False).alias("wrong"),
            "nranks",
            pl.col("line_no").alias("line"),
        )
        halves.append(half)
    out = pl.concat(halves).sort("line", "placement", descending=[False, True])
    numbers = ("time_us", "algbw_gbps", "busbw_gbps")
    unreadable = out.filter(pl.any_horizontal([pl.col(c).is_null() for c in numbers])).height
    warnings.add("table value that is not a number", unreadable)
    return out
