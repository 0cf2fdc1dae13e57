"""Read an ``nsys export --type sqlite`` file (any schema version, 2020.x to 3.28) into NsysRaw.

Tables are created lazily by nsys, and columns were added over the versions, so every query
is built from what ``sqlite_master`` and ``PRAGMA table_info`` say exists: a missing table
is no data, a missing optional column reads as NULL. Each table is read with one query and
one ``fetchall`` into a Polars frame; strings are fetched as ``StringIds`` ids and resolved
with a join in Polars rather than in SQL, so millions of rows never become millions of
Python ``str`` objects.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import polars as pl

from ...ingest.nsys.raw import (
    KERNEL_SCHEMA,
    NVTX_SCHEMA,
    RUNTIME_SCHEMA,
    BadValue,
    NsysRaw,
    ProcessInfo,
    check_time,
    empty,
    frame,
)

#: Tables of which at least one must exist for a file to count as an Nsight export.
NSIGHT_TABLES = (
    "StringIds",
    "TARGET_INFO_SESSION_START_TIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
)

_ENV_LINE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$')

#: Longest text or BLOB value read from an export: kernel names, NVTX texts and payloads,
#: command lines are a few KB. A longer one is refused before it is fetched, so a small
#: file cannot make the reader hold (and its joins repeat) a value of hundreds of MB.
MAX_VALUE_BYTES = 16 * 1024 * 1024
#: The text and BLOB columns the reader fetches, by table.
STRING_COLUMNS = {
    "StringIds": ("value",),
    "NVTX_EVENTS": ("text", "binaryData"),
    "META_DATA_EXPORT": ("name", "value"),
    "EXPORT_META_DATA": ("name", "value"),
    "META_DATA_CAPTURE": ("name", "value"),
    "TARGET_INFO_SYSTEM_ENV": ("name", "value"),
    "TARGET_INFO_GPU": ("name",),
    "PROCESSES": ("name",),
}


def connect(path: Path, timeout_s: float = 1.0) -> sqlite3.Connection:
    """Open ``path`` read-only, never writing a file beside it.

    A rollback-journal database (what nsys writes) is opened ``mode=ro``: reading creates
    nothing, and a database another program holds locked fails after ``timeout_s``. A
    database in WAL mode would get ``-wal`` and ``-shm`` files created beside it (and cannot
    be opened at all in a read-only folder), so it is opened ``immutable``, which reads the
    file alone; that is only right when no write-ahead log holds committed pages, so a
    non-empty ``-wal`` beside it is refused (sqlite3.OperationalError, naming it).
    """
    uri = f"file:{quote(path.resolve().as_posix())}?mode=ro"
    if _wal_mode(path):
        _refuse_pending_log(path)
        uri += "&immutable=1"
    con = sqlite3.connect(uri, uri=True, timeout=timeout_s)
    # (bounds every value SQLite computes; values stored in the file: check_sizes)
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    # A string that is not UTF-8 (a hostile or damaged name) stays text, marked with U+FFFD.
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def _wal_mode(path: Path) -> bool:
    """Whether the header's file format versions (bytes 18, 19) say WAL (2)."""
    with open(path, "rb") as fh:
        header = fh.read(20)
    return len(header) == 20 and header[18:20] == b"\x02\x02"


def _refuse_pending_log(path: Path) -> None:
    log = path.with_name(path.name + "-wal")
    try:
        size = log.stat().st_size
    except FileNotFoundError:
        return
    if size:
        raise sqlite3.OperationalError(
            f"its write-ahead log {log.name} ({size:,} bytes) is beside it: the database is "
            "open in another program or was not closed; close it (or run sqlite3 on it once) "
            "and ingest again"
        )


def table_names(con: sqlite3.Connection) -> set[str]:
    """Names of the tables in the database (raises sqlite3 errors on a damaged header)."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def read(con: sqlite3.Connection) -> NsysRaw:
    """Read the tables the pipeline uses. The caller turns sqlite3 errors into TraceFormatError."""
    tables = table_names(con)
    cols = {t: _columns(con, t) for t in tables}
    check_sizes(con, cols)
    strings = _strings(con, tables)
    raw = NsysRaw(
        kernels=_gpu_activity(con, cols, strings),
        runtime=_runtime(con, cols, strings),
        nvtx=_nvtx(con, cols, strings),
    )
    _report_facts(con, tables, cols, raw)
    return raw


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    """The table's columns; a generated column computed on every read (``VIRTUAL``) is
    refused: nsys stores every value, and one such column of a few bytes in the file can
    claim hundreds of MB per row."""
    out = set()
    for row in con.execute(f'PRAGMA table_xinfo("{table}")'):
        if row[6] == 2:
            raise BadValue(
                f"{table}: column {row[1]!r} is a generated column, computed on every read; "
                "an Nsight export stores its values"
            )
        out.add(row[1])
    return out


def check_sizes(con: sqlite3.Connection, cols: dict[str, set[str]]) -> None:
    """Raise :class:`BadValue`, naming the table and column, for a text or BLOB value the
    reader would fetch that is longer than :data:`MAX_VALUE_BYTES` (SQLite's length limit
    bounds the values it computes, not those it reads from the file)."""
    for table, names in STRING_COLUMNS.items():
        for col in (c for c in names if c in cols.get(table, ())):
            query = f'SELECT max(length(CAST("{col}" AS BLOB))) FROM "{table}"'
            try:
                longest = con.execute(query).fetchone()[0] or 0
            except sqlite3.DataError:  # (a text value past the length limit fails its cast)
                longest = MAX_VALUE_BYTES + 1
            if longest > MAX_VALUE_BYTES:
                raise BadValue(
                    f"{table}: column {col!r}: a value longer than the {MAX_VALUE_BYTES:,} "
                    "bytes a value of an Nsight export may have"
                )


def _pick(available: set[str], wanted: list[tuple[str, str]]) -> str:
    """SELECT list: ``column AS alias`` where the column exists, ``NULL AS alias`` otherwise."""
    parts = [
        f'"{col}" AS {alias}' if col in available else f"NULL AS {alias}" for col, alias in wanted
    ]
    return ", ".join(parts)


def _strings(con: sqlite3.Connection, tables: set[str]) -> pl.DataFrame:
    if "StringIds" not in tables:
        return pl.DataFrame(schema={"id": pl.Int64, "value": pl.Utf8})
    rows = con.execute("SELECT id, value FROM StringIds").fetchall()
    return frame(rows, {"id": pl.Int64, "value": pl.Utf8}, "StringIds")


def _resolve(df: pl.DataFrame, strings: pl.DataFrame, id_col: str, out: str) -> pl.DataFrame:
    """Replace integer column ``id_col`` by its StringIds value in column ``out``."""
    joined = df.join(strings.rename({"id": id_col, "value": out}), on=id_col, how="left")
    return joined.drop(id_col)


def _gpu_activity(
    con: sqlite3.Connection, cols: dict[str, set[str]], strings: pl.DataFrame
) -> pl.DataFrame:
    parts = []
    common = [
        ("start", "start"),
        ("end", "end"),
        ("deviceId", "device"),
        ("streamId", "stream"),
        ("correlationId", "correlation"),
        ("globalPid", "global_pid"),
    ]
    if "CUPTI_ACTIVITY_KIND_KERNEL" in cols:
        avail = cols["CUPTI_ACTIVITY_KIND_KERNEL"]
        dims = [
            (c, c.replace("grid", "grid_").replace("block", "block_").lower())
            for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
        ]
        select = _pick(
            avail, common + [("demangledName", "name_id"), ("shortName", "short_id")] + dims
        )
        rows = con.execute(f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        schema = {
            k: KERNEL_SCHEMA[k]
            for k in ("start", "end", "device", "stream", "correlation", "global_pid")
        }
        schema |= {"name_id": pl.Int64, "short_id": pl.Int64}
        schema |= {alias: pl.Int64 for _, alias in dims}
        df = frame(rows, schema, "CUPTI_ACTIVITY_KIND_KERNEL")
        df = _resolve(_resolve(df, strings, "name_id", "name"), strings, "short_id", "short_name")
        df = df.with_columns(
            pl.coalesce("name", "short_name").alias("name"), pl.lit("kernel").alias("activity")
        )
        parts.append(df)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in cols:
        select = _pick(
            cols["CUPTI_ACTIVITY_KIND_MEMCPY"],
            common + [("bytes", "bytes"), ("copyKind", "copy_kind")],
        )
        rows = con.execute(f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall()
        schema = {
            k: KERNEL_SCHEMA[k]
            for k in (
                "start",
                "end",
                "device",
                "stream",
                "correlation",
                "global_pid",
                "bytes",
                "copy_kind",
            )
        }
        parts.append(
            frame(rows, schema, "CUPTI_ACTIVITY_KIND_MEMCPY").with_columns(
                pl.lit("memcpy").alias("activity")
            )
        )
    if "CUPTI_ACTIVITY_KIND_MEMSET" in cols:
        select = _pick(cols["CUPTI_ACTIVITY_KIND_MEMSET"], common + [("bytes", "bytes")])
        rows = con.execute(f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall()
        schema = {
            k: KERNEL_SCHEMA[k]
            for k in ("start", "end", "device", "stream", "correlation", "global_pid", "bytes")
        }
        parts.append(
            frame(rows, schema, "CUPTI_ACTIVITY_KIND_MEMSET").with_columns(
                pl.lit("memset").alias("activity")
            )
        )
    if not parts:
        return empty(KERNEL_SCHEMA)
    full = [
        p.with_columns(
            [pl.lit(None, t).alias(c) for c, t in KERNEL_SCHEMA.items() if c not in p.columns]
        )
        for p in parts
    ]
    return pl.concat([p.select(list(KERNEL_SCHEMA)).cast(KERNEL_SCHEMA) for p in full])


def _runtime(
    con: sqlite3.Connection, cols: dict[str, set[str]], strings: pl.DataFrame
) -> pl.DataFrame:
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in cols:
        return empty(RUNTIME_SCHEMA)
    select = _pick(
        cols["CUPTI_ACTIVITY_KIND_RUNTIME"],
        [
            ("start", "start"),
            ("end", "end"),
            ("eventClass", "event_class"),
            ("globalTid", "global_tid"),
            ("correlationId", "correlation"),
            ("nameId", "name_id"),
        ],
    )
    rows = con.execute(f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
    schema = {k: v for k, v in RUNTIME_SCHEMA.items() if k != "name"} | {"name_id": pl.Int64}
    df = _resolve(frame(rows, schema, "CUPTI_ACTIVITY_KIND_RUNTIME"), strings, "name_id", "name")
    # 2020.x exports have no eventClass: every row there is a CUDA runtime call.
    return df.with_columns(pl.col("event_class").fill_null(0)).select(list(RUNTIME_SCHEMA))


def _nvtx(
    con: sqlite3.Connection, cols: dict[str, set[str]], strings: pl.DataFrame
) -> pl.DataFrame:
    if "NVTX_EVENTS" not in cols:
        return empty(NVTX_SCHEMA)
    avail = cols["NVTX_EVENTS"]
    select = _pick(
        avail,
        [
            ("start", "start"),
            ("end", "end"),
            ("eventType", "event_type"),
            ("text", "inline_text"),
            ("globalTid", "global_tid"),
            ("endGlobalTid", "end_global_tid"),
            ("textId", "text_id"),
            ("domainId", "domain_id"),
            ("rangeId", "range_id"),
        ],
    )
    rows = con.execute(f"SELECT rowid, {select} FROM NVTX_EVENTS").fetchall()
    schema = {
        "row_id": pl.Int64,
        "start": pl.Int64,
        "end": pl.Int64,
        "event_type": pl.Int64,
        "inline_text": pl.Utf8,
        "global_tid": pl.Int64,
        "end_global_tid": pl.Int64,
        "text_id": pl.Int64,
        "domain_id": pl.Int64,
        "range_id": pl.Int64,
    }
    df = _resolve(frame(rows, schema, "NVTX_EVENTS"), strings, "text_id", "registered_text")
    df = df.with_columns(
        pl.coalesce("inline_text", "registered_text").alias("text"),
        pl.col("domain_id").fill_null(0),
    )
    payloads = _payloads(con) if "binaryData" in avail else None
    if payloads is None:
        df = df.with_columns(pl.lit(None, pl.Binary).alias("payload"))
    else:
        df = df.join(payloads, on="row_id", how="left")
    return df.select(list(NVTX_SCHEMA))


def _payloads(con: sqlite3.Connection) -> pl.DataFrame:
    """``binaryData`` (schema 3.28+, not yet seen in a real export): BLOB, or base64/hex text."""
    rows = con.execute(
        "SELECT rowid, binaryData FROM NVTX_EVENTS WHERE binaryData IS NOT NULL"
    ).fetchall()
    ids = pl.Series("row_id", [r[0] for r in rows], dtype=pl.Int64)
    values = [r[1] for r in rows]
    if all(isinstance(v, bytes) for v in values):
        return pl.DataFrame([ids, pl.Series("payload", values, dtype=pl.Binary)])
    text = pl.Series("text", [v if isinstance(v, str) else None for v in values], dtype=pl.Utf8)
    text = text.str.strip_chars()
    decoded = pl.DataFrame([text]).select(
        pl.when(pl.col("text").str.contains(r"^(0x)?[0-9a-fA-F]+$"))
        .then(pl.col("text").str.strip_prefix("0x").str.decode("hex", strict=False))
        .otherwise(pl.col("text").str.decode("base64", strict=False))
        .alias("payload")
    )
    return pl.DataFrame([ids]).with_columns(decoded["payload"])


def _session_start(value: object) -> int | None:
    """``utcEpochNs``: an integer time, or none."""
    if value is None:
        return None
    if not isinstance(value, int):
        raise BadValue("TARGET_INFO_SESSION_START_TIME: utcEpochNs is not an integer")
    return check_time(value, "TARGET_INFO_SESSION_START_TIME: utcEpochNs")


_TEXT = "typeof(name) = 'text' AND typeof(value) = 'text'"
_GPU = "WHERE typeof(name) = 'text'"


def _report_facts(
    con: sqlite3.Connection, tables: set[str], cols: dict[str, set[str]], raw: NsysRaw
) -> None:
    """Session start, schema version, host, GPUs, processes, MPI ranks, capture environment.

    A name or value of another type than nsys writes (a BLOB, a number where text belongs)
    reads as absent: these are facts for the report, not events."""
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        start = _session_start(row[0] if row else None)
        raw.session_start_ns = start
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if meta in tables:
            kv = dict(con.execute(f"SELECT name, value FROM {meta} WHERE {_TEXT}").fetchall())
            raw.format_version = kv.get("EXPORT_SCHEMA_VERSION")
            raw.times_absolute = kv.get("EXPORT_PARAM_TIME_NORMALIZE") == "true"
    if raw.format_version is None:
        raw.format_version = "2020.x (no export metadata)"
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        row = con.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' AND "
            "typeof(value) = 'text' LIMIT 1"
        ).fetchone()
        raw.hostname = row[0] if row else None
    if "TARGET_INFO_GPU" in tables and {"id", "name"} <= cols["TARGET_INFO_GPU"]:
        raw.gpu_names = dict(con.execute(f"SELECT id, name FROM TARGET_INFO_GPU {_GPU}").fetchall())
    elif "TARGET_INFO_GPU" in tables and {"deviceId", "name"} <= cols["TARGET_INFO_GPU"]:
        raw.gpu_names = dict(
            con.execute(f"SELECT deviceId, name FROM TARGET_INFO_GPU {_GPU}").fetchall()
        )
    if "PROCESSES" in tables:
        for _gpid, pid, name in con.execute(
            "SELECT globalPid, pid, iif(typeof(name) = 'text', name, NULL) FROM PROCESSES "
            "WHERE typeof(pid) = 'integer'"
        ):
            if pid is not None:
                raw.processes[int(pid)] = ProcessInfo(name=name)
    if "MPI_RANKS" in tables:
        for gtid, rank in con.execute(
            "SELECT globalTid, rank FROM MPI_RANKS WHERE typeof(globalTid) = 'integer' "
            "AND typeof(rank) = 'integer'"
        ):
            raw.mpi_ranks[(int(gtid) >> 24) & 0xFFFFFF] = int(rank)
    if "META_DATA_CAPTURE" in tables:
        for name, value in con.execute(f"SELECT name, value FROM META_DATA_CAPTURE WHERE {_TEXT}"):
            if name.endswith(":ENVIRONMENT_VARIABLE") and value:
                m = _ENV_LINE.match(value)
                if m:
                    raw.capture_env[m.group(1)] = m.group(2)
            elif name.endswith(":COMMAND") and value:
                raw.capture_args = value.split()
            elif name.endswith(":ARGUMENTS") and value:
                raw.capture_args += value.split()
