"""The in-between form of an Nsight Systems export: a few Polars frames plus report facts.

Both readers (``sqlite_export`` for ``nsys export --type sqlite``, ``json_export`` for the
line-delimited ``--type json`` export) produce an :class:`NsysRaw`; ``tables`` turns it
into dataset tables. Times here are still the export's own (capture-relative) nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ...ingest.values import MAX_NAME_CHARS

#: GPU activity: kernels, memcpys and memsets in one frame (``activity`` says which).
KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "start": pl.Int64,
    "end": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "global_pid": pl.Int64,
    "name": pl.Utf8,
    "short_name": pl.Utf8,
    "activity": pl.Utf8,
    "bytes": pl.Int64,
    "copy_kind": pl.Int64,
    "grid_x": pl.Int64,
    "grid_y": pl.Int64,
    "grid_z": pl.Int64,
    "block_x": pl.Int64,
    "block_y": pl.Int64,
    "block_z": pl.Int64,
}

#: CUDA runtime and driver API calls (``event_class`` 0 = runtime, 1 = driver).
RUNTIME_SCHEMA: dict[str, pl.DataType] = {
    "start": pl.Int64,
    "end": pl.Int64,
    "event_class": pl.Int64,
    "global_tid": pl.Int64,
    "correlation": pl.Int64,
    "name": pl.Utf8,
}

#: NVTX events of every type; ``text`` already resolved (inline text or registered string).
NVTX_SCHEMA: dict[str, pl.DataType] = {
    "start": pl.Int64,
    "end": pl.Int64,
    "event_type": pl.Int64,
    "text": pl.Utf8,
    "global_tid": pl.Int64,
    "end_global_tid": pl.Int64,
    "domain_id": pl.Int64,
    "range_id": pl.Int64,
    "payload": pl.Binary,
}

# ENUM_NSYS_EVENT_TYPE codes (identical in every export seen, 2022.4 .. 2026.4).
NVTX_MARK = 34
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A frame with ``schema`` and no rows."""
    return pl.DataFrame(schema=schema)


#: Times (ns, relative to the capture or the epoch) beyond this are not times: 95 years, the
#: bound Kineto times have too, so that capture-relative time + session start never wraps int64.
MAX_ABS_NS = 3 * 10**18
#: Columns of the raw frames that hold times.
TIME_COLUMNS = ("start", "end")


class BadValue(ValueError):
    """A value of the wrong type or range in a table of the export (the message names it)."""


def frame(rows: list[tuple], schema: dict[str, pl.DataType], what: str = "") -> pl.DataFrame:
    """Rows (tuples in ``schema`` order) into a frame; one bulk conversion, no per-row work.

    Raises :class:`BadValue`, naming ``what`` (the table), when a value does not fit its
    column (text in an integer column, an integer beyond int64).
    """
    if not rows:
        return empty(schema)
    try:
        out = pl.DataFrame(rows, schema=schema, orient="row")
    except (pl.exceptions.PolarsError, TypeError, OverflowError, ValueError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise BadValue(f"{what or 'table'}: a value does not fit its column: {first}") from None
    check_times(out, what)
    check_names(out, what)
    return out


def check_names(df: pl.DataFrame, what: str) -> None:
    """Raise :class:`BadValue`, naming ``what`` and the column, for a text longer than
    :data:`~pipeline.ingest.values.MAX_NAME_CHARS` (kernel names, NVTX texts, strings)."""
    for name in (c for c, kind in df.schema.items() if kind == pl.String):
        if df.select((pl.col(name).str.len_chars() > MAX_NAME_CHARS).any()).item():
            raise BadValue(
                f"{what or 'table'}: column {name!r}: a text longer than the "
                f"{MAX_NAME_CHARS:,} characters a name may have"
            )


def check_times(df: pl.DataFrame, what: str) -> None:
    """Raise :class:`BadValue`, naming ``what``, for a time beyond :data:`MAX_ABS_NS`."""
    columns = [c for c in TIME_COLUMNS if c in df.columns]
    if not columns or not df.height:
        return
    bad = df.select(pl.any_horizontal(pl.col(c).abs() > MAX_ABS_NS for c in columns).any())
    if bad.item():
        raise BadValue(f"{what or 'table'}: a time beyond +-{MAX_ABS_NS:.0e} ns (95 years)")


def check_time(value: int, what: str) -> int:
    """``value`` when it is a time within :data:`MAX_ABS_NS`, else :class:`BadValue`."""
    if abs(value) > MAX_ABS_NS:
        raise BadValue(f"{what}: {value} is not a time (beyond +-{MAX_ABS_NS:.0e} ns, 95 years)")
    return value


@dataclass
class ProcessInfo:
    """What the report says about one profiled process."""

    name: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class NsysRaw:
    """Everything the table builders need from one export."""

    kernels: pl.DataFrame
    runtime: pl.DataFrame
    nvtx: pl.DataFrame
    processes: dict[int, ProcessInfo] = field(default_factory=dict)
    session_start_ns: int | None = None
    times_absolute: bool = False
    format_version: str | None = None
    hostname: str | None = None
    gpu_names: dict[int, str] = field(default_factory=dict)
    mpi_ranks: dict[int, int] = field(default_factory=dict)
    capture_env: dict[str, str] = field(default_factory=dict)
    capture_args: list[str] = field(default_factory=list)
