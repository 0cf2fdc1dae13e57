"""One process of a rocprofiler-sdk JSON file as frames: agents, kernel dispatches, ROCTx
markers and RCCL calls, with their names resolved (kernel symbols, operation names, marker
messages).

Each list of records becomes a frame in one call with the schema of the fields read, so a
record of the wrong shape (a string for a timestamp, a value beyond int64) is refused with
the list it is in, and fields tokenwire does not read are never copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ...errors import TraceFormatError
from ...ingest.values import MAX_NAME_CHARS

_HANDLE = pl.Struct({"handle": pl.Int64})
_XYZ = pl.Struct({"x": pl.Int64, "y": pl.Int64, "z": pl.Int64})
_CORRELATION = pl.Struct({"internal": pl.Int64, "external": pl.Int64})
#: The fields of a traced API call (``rocprofiler_buffer_tracing_*_api_record_t``).
_API_RECORD = {
    "kind": pl.Int64,
    "operation": pl.Int64,
    "thread_id": pl.Int64,
    "correlation_id": _CORRELATION,
    "start_timestamp": pl.Int64,
    "end_timestamp": pl.Int64,
}
_DISPATCH = {
    **_API_RECORD,
    "dispatch_info": pl.Struct(
        {
            "agent_id": _HANDLE,
            "queue_id": _HANDLE,
            "kernel_id": pl.Int64,
            "dispatch_id": pl.Int64,
            "workgroup_size": _XYZ,
            "grid_size": _XYZ,
        }
    ),
}
_AGENT = {
    "id": _HANDLE,
    "type": pl.Int64,
    "name": pl.String,
    "product_name": pl.String,
    "logical_node_type_id": pl.Int64,
}
_SYMBOL = {
    "kernel_id": pl.Int64,
    "kernel_name": pl.String,
    "formatted_kernel_name": pl.String,
    "demangled_kernel_name": pl.String,
}
#: rocprofiler_agent_type_t: ROCPROFILER_AGENT_TYPE_GPU
GPU_AGENT = 2


@dataclass
class Process:
    """The frames of one ``rocprofiler-sdk-tool`` entry."""

    pid: int | None
    host: str | None
    #: handle, gpu_index, gpu_name (GPUs only)
    gpus: pl.DataFrame
    #: tid, correlation, start_ns, end_ns, agent, queue, kernel_id, dispatch_id, name,
    #: grid and block sizes
    dispatches: pl.DataFrame
    #: tid, correlation, start_ns, end_ns, name (``marker_api`` and ``rccl_api``), kind
    calls: pl.DataFrame


def read(path: Path, index: int, proc: dict) -> Process:
    """The frames of ``proc``, the ``index``-th process of ``path``."""
    where = f"rocprofiler-sdk-tool[{index}]"
    meta = _object(path, proc.get("metadata", {}), f"{where}.metadata")
    node = _object(path, meta.get("node", {}), f"{where}.metadata.node")
    buffers = _object(path, proc.get("buffer_records", {}), f"{where}.buffer_records")
    strings = _object(path, proc.get("strings", {}), f"{where}.strings")
    names = _operation_names(path, strings.get("buffer_records", []), where)
    pid, host = meta.get("pid"), node.get("hostname")
    return Process(
        pid=pid if isinstance(pid, int) else None,
        host=host if isinstance(host, str) else None,
        gpus=_gpus(path, proc.get("agents", []), where),
        dispatches=_dispatches(path, proc, buffers, where),
        calls=pl.concat(
            [
                _calls(path, buffers, "marker_api", names, where, _messages(path, strings, where)),
                _calls(path, buffers, "rccl_api", names, where),
            ]
        ),
    )


def _object(path: Path, value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise TraceFormatError(path, f"{where} is not an object")
    return value


def _frame(path: Path, rows: object, schema: dict, where: str) -> pl.DataFrame:
    """``rows`` (a list of objects) as a frame of the ``schema`` fields."""
    if not isinstance(rows, list):
        raise TraceFormatError(path, f"{where} is not a list")
    if not rows:
        return pl.DataFrame(schema=schema)
    if not all(isinstance(r, dict) for r in rows):
        raise TraceFormatError(path, f"{where} holds a value that is not an object")
    try:
        frame = pl.from_dicts(rows, schema=schema)
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise TraceFormatError(path, f"{where}: a record of the wrong shape: {first}") from None
    for name in (c for c, kind in schema.items() if kind == pl.String):
        long = frame.select((pl.col(name).str.len_chars() > MAX_NAME_CHARS).arg_true().first())
        if long.item() is not None:
            raise TraceFormatError(
                path,
                f"{where}[{long.item()}].{name}: longer than the {MAX_NAME_CHARS:,} characters "
                "a name may have",
            )
    return frame


def _operation_names(path: Path, kinds: object, where: str) -> pl.DataFrame:
    """kind, operation -> name, from ``strings.buffer_records`` (the kind is its index)."""
    frame = _frame(
        path, kinds, {"kind": pl.String, "operations": pl.List(pl.String)}, f"{where}.strings"
    )
    return (
        frame.with_row_index("kind_id")
        .select(
            pl.col("kind_id").cast(pl.Int64).alias("kind"),
            pl.col("kind").alias("kind_name"),
            "operations",
        )  # fmt: skip
        .explode("operations")
        .with_columns(pl.int_range(pl.len()).over("kind").cast(pl.Int64).alias("operation"))
        .rename({"operations": "name"})
    )


def _messages(path: Path, strings: dict, where: str) -> pl.DataFrame:
    """ROCTx messages by correlation id (``strings.marker_api``, a list of key/value)."""
    frame = _frame(
        path,
        strings.get("marker_api", []),
        {"key": pl.Int64, "value": pl.String},
        f"{where}.strings.marker_api",
    )
    return frame.rename({"key": "correlation", "value": "message"}).unique("correlation")


def _gpus(path: Path, agents: object, where: str) -> pl.DataFrame:
    frame = _frame(path, agents, _AGENT, f"{where}.agents")
    return frame.filter(pl.col("type") == GPU_AGENT).select(
        pl.col("id").struct.field("handle").alias("agent"),
        pl.col("logical_node_type_id").alias("gpu_index"),
        pl.coalesce(
            pl.col("product_name").replace("", None), pl.col("name").replace("", None)
        ).alias("gpu_name"),
    )


def _dispatches(path: Path, proc: dict, buffers: dict, where: str) -> pl.DataFrame:
    frame = _frame(path, buffers.get("kernel_dispatch", []), _DISPATCH, f"{where}.kernel_dispatch")
    symbols = _frame(path, proc.get("kernel_symbols", []), _SYMBOL, f"{where}.kernel_symbols")
    symbols = symbols.unique("kernel_id", keep="first").select(
        "kernel_id",
        pl.coalesce(
            pl.col("formatted_kernel_name").replace("", None),
            pl.col("demangled_kernel_name").replace("", None),
            pl.col("kernel_name"),
        ).alias("name"),
    )
    info = pl.col("dispatch_info")
    return (
        frame.select(
            pl.col("thread_id").alias("tid"),
            pl.col("correlation_id").struct.field("internal").alias("correlation"),
            pl.col("start_timestamp").alias("start_ns"),
            pl.col("end_timestamp").alias("end_ns"),
            info.struct.field("agent_id").struct.field("handle").alias("agent"),
            info.struct.field("queue_id").struct.field("handle").alias("queue"),
            info.struct.field("kernel_id").alias("kernel_id"),
            info.struct.field("dispatch_id").alias("dispatch_id"),
            info.struct.field("grid_size").alias("grid_size"),
            info.struct.field("workgroup_size").alias("workgroup_size"),
        )
        .join(symbols, on="kernel_id", how="left")
        .with_columns(
            pl.col("name").fill_null(pl.format("kernel {}", pl.col("kernel_id"))).fill_null("")
        )
    )


def _calls(
    path: Path,
    buffers: dict,
    key: str,
    names: pl.DataFrame,
    where: str,
    messages: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The ``key`` API records (``marker_api``, ``rccl_api``): tid, correlation, start_ns,
    end_ns, name (a marker's message, else the operation's name), kind (``key``)."""
    frame = _frame(path, buffers.get(key, []), _API_RECORD, f"{where}.{key}")
    frame = frame.select(
        "kind",
        "operation",
        pl.col("thread_id").alias("tid"),
        pl.col("correlation_id").struct.field("internal").alias("correlation"),
        pl.col("start_timestamp").alias("start_ns"),
        pl.col("end_timestamp").alias("end_ns"),
    ).join(names.select("kind", "operation", "name"), on=["kind", "operation"], how="left")
    if messages is not None:
        frame = frame.join(messages, on="correlation", how="left").with_columns(
            pl.coalesce("message", "name").alias("name")
        )
    return frame.select(
        "tid",
        "correlation",
        "start_ns",
        "end_ns",
        pl.col("name").fill_null(pl.format("{} {}", pl.lit(key), pl.col("operation"))),
        pl.lit(key).alias("kind"),
    )
