"""Nsight Systems exports: ``sniff`` and ``parse`` for the SQLite and json exports.

``nsys export --type sqlite`` (any schema version, 2020.x to 3.28) is read with Python's
``sqlite3``, read-only; ``nsys export --type json`` (line-delimited, optionally gzipped) with
orjson. Both go through the same table builders (:mod:`pipeline.ingest.nsys.tables`), which
write ``kernels`` (CUDA kernels, memcpys, memsets), ``ops`` (CUDA runtime/driver calls and
NVTX ranges and marks), ``ranks`` (one row per process and GPU in the report),
``collectives`` (NCCL calls with their NVTX payloads and kernels) and ``communicators`` (NCCL
communicators from their init payloads). Helpers live beside this file in the
``pipeline.ingest.nsys`` package.

A file that cannot be read (not SQLite, not an Nsight export, damaged, locked by another
writer) raises one :class:`TraceFormatError` naming the file.
"""

from __future__ import annotations

import io
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ...errors import TraceFormatError
from ...ingest.gz import GZIP_MAGIC, GzipStream
from ...ingest.nsys import json_export, sqlite_export
from ...ingest.nsys.raw import BadValue
from ...ingest.nsys.tables import build as build_tables
from ...ingest.result import ParseResult

FORMAT = "nsys"
SQLITE_MAGIC = b"SQLite format 3\x00"
_MARKERS = tuple(t.encode() for t in sqlite_export.NSIGHT_TABLES)
#: Longest line of a json export read (the first line holds every string of the report).
MAX_LINE_BYTES = 256 * 1024 * 1024


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` (the first 64 KiB, gunzipped) is clearly an Nsight export.

    SQLite: the magic header and Nsight table names in the schema page, or, when the schema
    lies beyond the head, in ``sqlite_master`` read from ``path``. json: the string table
    line followed by nsys event records.
    """
    if head.startswith(SQLITE_MAGIC):
        if any(m in head for m in _MARKERS):
            return True
        try:
            _check_sqlite_size(Path(path))
        except TraceFormatError:
            return True  # a cut-off SQLite file in a trace folder: parse says where it ends
        try:
            con = sqlite_export.connect(Path(path), timeout_s=0.1)
            try:
                return bool(sqlite_export.table_names(con) & set(sqlite_export.NSIGHT_TABLES))
            finally:
                con.close()
        except (sqlite3.Error, OSError):
            return False
    return json_export.sniff_head(head)


def parse(path: Path) -> ParseResult:
    """Parse one export into dataset tables (see the module docstring)."""
    path = Path(path)
    head = _head(path)
    result = ParseResult(format=FORMAT)
    try:
        if head.startswith(SQLITE_MAGIC):
            raw = _read_sqlite(path)
        elif head.startswith(b"\x1f\x8b") or head.lstrip().startswith(b"{"):
            raw = json_export.read(path, _lines(path))
        else:
            raise TraceFormatError(
                path, "not an Nsight Systems export (neither SQLite nor json)", offset=0
            )
    except BadValue as exc:
        raise TraceFormatError(path, str(exc)) from None
    tables, rank_source = build_tables(raw, path, result.warnings)
    result.tables = tables
    result.format_version = raw.format_version
    result.rank_source = rank_source
    return result


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(64)
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open: {exc.strerror or exc}") from None


def _read_sqlite(path: Path) -> sqlite_export.NsysRaw:
    _check_sqlite_size(path)
    con = None
    try:
        con = sqlite_export.connect(path)
        tables = sqlite_export.table_names(con)
        if not tables & set(sqlite_export.NSIGHT_TABLES):
            raise TraceFormatError(
                path,
                "SQLite database is not an Nsight Systems export (no StringIds, "
                "NVTX_EVENTS, CUPTI_ACTIVITY_KIND_* or export metadata tables)",
            )
        return sqlite_export.read(con)
    except sqlite3.Error as exc:
        raise TraceFormatError(path, f"cannot read SQLite database: {exc}") from None
    finally:
        if con is not None:
            con.close()


def _check_sqlite_size(path: Path) -> None:
    """A database shorter than its header says is a cut-off copy: say where it ends."""
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open: {exc.strerror or exc}") from None
    if len(header) < 100:
        raise TraceFormatError(path, "truncated SQLite header", offset=len(header))
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count is only valid when bytes 92..95 match the change counter (24..27).
    if pages and header[24:28] == header[92:96] and size < pages * page_size:
        raise TraceFormatError(
            path,
            f"truncated SQLite database: the header says {pages * page_size} bytes",
            offset=size,
        )


def _lines(path: Path) -> Iterator[bytes]:
    """The export's lines; one longer than :data:`MAX_LINE_BYTES` is a format error, so a
    huge file without newlines is refused instead of read into memory whole. A gzipped
    export is inflated once, with the bomb limit of :mod:`pipeline.ingest.gz`."""
    lineno = 0
    try:
        with open(path, "rb") as raw_fh:
            magic = raw_fh.read(2)
        opener = _open_gzip if magic == GZIP_MAGIC else open
        with opener(path, "rb") as fh:
            while line := fh.readline(MAX_LINE_BYTES + 1):
                lineno += 1
                if len(line) > MAX_LINE_BYTES:
                    raise TraceFormatError(
                        path, f"line longer than {MAX_LINE_BYTES} bytes", line=lineno
                    )
                yield line
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read json export: {exc}", line=lineno + 1) from None


def _open_gzip(path: Path, mode: str) -> io.BufferedReader:
    return io.BufferedReader(GzipStream(path), buffer_size=1 << 20)
