"""PyTorch profiler (Kineto) traces: ``.json`` / ``.json.gz`` into ops, kernels, steps and more.

The file is decoded once with msgspec into typed structs (times kept as their JSON text so
they become integer nanoseconds without passing through float); everything after that is
columnar Polars. Collectives are extracted in :mod:`pipeline.ingest.kineto_comms`.

Times: ``ts``/``dur`` are microseconds with up to 3 decimals. PyTorch 2.x writes ``ts``
relative to ``baseTimeNanoseconds``; older traces write unix-epoch microseconds. Both become
unix-epoch nanoseconds (``start_ns``), so all ranks of a job share one clock when their
hosts did.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa

from pipeline.errors import TraceFormatError
from pipeline.ingest.gz import GZIP_MAGIC, gunzip
from pipeline.ingest.kineto_comms import (
    COLLECTIVE_ARGS,
    collectives_table,
    communicators_table,
    int_list,
    json_value,
)
from pipeline.ingest.nesting import add_nesting, add_scope_path
from pipeline.ingest.result import ParseResult, Warnings
from pipeline.ingest.vocab import kernel_kind_expr

HOST_KINDS = (
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "gpu_user_annotation",
)
GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
#: Scalar args copied as they are, by Args field name -> column type.
_ARG_COLUMNS = {
    "external_id": pl.Int64,
    "correlation": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "bytes": pl.Int64,
    "collective_name": pl.String,
    "in_nelems": pl.Int64,
    "out_nelems": pl.Int64,
    "group_size": pl.Int64,
    "dtype": pl.String,
    "in_split": pl.String,
    "out_split": pl.String,
    "pg_name": pl.String,
    "pg_desc": pl.String,
    "pg_ranks": pl.String,
    "seq": pl.Int64,
    "seq_nr": pl.Int64,
    "fwd_tid": pl.Int64,
}
OPS_COLUMNS = [
    "op_id",
    "pid",
    "tid",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "dur_ns",
    "depth",
    "parent_id",
    "module_path",
    "input_dims",
    "input_types",
    "external_id",
    "correlation",
    "step",
    "seq_nr",
    "fwd_tid",
]
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)|_(\d+)\.", re.IGNORECASE)
#: Largest |ts| or |dur| read, in microseconds (about 95 years): start + dur + the base time
#: then stay inside int64 nanoseconds.
MAX_ABS_US = 3 * 10**15


#: A raw field the event did not have (msgspec cannot make a Raw field optional).
_NO_VALUE = msgspec.Raw(b"")


class Args(
    msgspec.Struct,
    rename={
        "external_id": "External id",
        "input_dims": "Input Dims",
        "input_type": "Input type",
        "concrete_inputs": "Concrete Inputs",
        "collective_name": "Collective name",
        "in_nelems": "In msg nelems",
        "out_nelems": "Out msg nelems",
        "group_size": "Group size",
        "in_split": "In split size",
        "out_split": "Out split size",
        "pg_name": "Process Group Name",
        "pg_desc": "Process Group Description",
        "pg_ranks": "Process Group Ranks",
        "seq": "Seq",
        "seq_nr": "Sequence number",
        "fwd_tid": "Fwd thread id",
    },
):
    """The ``args`` keys tokenwire reads; volatile ones stay raw JSON or loosely typed."""

    external_id: Any = None
    correlation: Any = None
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    bytes: Any = None
    input_dims: msgspec.Raw = _NO_VALUE
    input_type: msgspec.Raw = _NO_VALUE
    concrete_inputs: msgspec.Raw = _NO_VALUE
    collective_name: Any = None
    in_nelems: Any = None
    out_nelems: Any = None
    group_size: Any = None
    dtype: Any = None
    in_split: Any = None
    out_split: Any = None
    pg_name: Any = None
    pg_desc: Any = None
    pg_ranks: Any = None
    seq: Any = None
    seq_nr: Any = None
    fwd_tid: Any = None


class Event(msgspec.Struct):
    """One trace event; ``ts``/``dur`` kept as JSON text for exact conversion."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: msgspec.Raw = _NO_VALUE
    dur: msgspec.Raw = _NO_VALUE
    args: Args | None = None


class Trace(msgspec.Struct):
    """The top level of a Kineto trace."""

    traceEvents: list[Event]  # noqa: N815 - the trace's own key
    schemaVersion: Any = None  # noqa: N815
    distributedInfo: dict[str, Any] | None = None  # noqa: N815
    deviceProperties: list[dict[str, Any]] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    host_name: str | None = None


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` starts a JSON object with a key only Kineto traces have up front."""
    text = head.lstrip()
    keys = (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"', b'"deviceProperties"')
    return text.startswith(b"{") and any(key in text for key in keys)


def parse(path: Path) -> ParseResult:
    """Parse one Kineto trace into the dataset's tables.

    Raises
    ------
    TraceFormatError
        Broken gzip, malformed or truncated JSON (with the byte offset), or JSON that is
        not a trace.
    """
    trace = _decode(path, _read(path))
    warnings = Warnings()
    rank, rank_source = _rank(path, trace, warnings)
    events = _events_frame(path, trace, warnings)
    steps = _steps(events)
    ops = _ops(events, steps)
    kernels = _kernels(events, ops, steps)
    comms = collectives_table(trace, events, ops, kernels, warnings)
    tables = {
        "ranks": _ranks_table(trace, events, rank),
        "communicators": communicators_table(trace, rank, comms),
        "steps": _steps_table(steps, ops),
        "ops": ops.select(OPS_COLUMNS),
        "kernels": kernels,
        "collectives": comms.drop("_pg_desc", "_pg_ranks"),
    }
    tables = {name: _with_rank(frame, rank) for name, frame in tables.items()}
    version = f"schema {trace.schemaVersion}" if trace.schemaVersion is not None else None
    return ParseResult(
        format="kineto",
        tables=tables,
        format_version=version,
        rank_source=rank_source,
        warnings=warnings,
    )


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from exc
    return gunzip(path, data) if data.startswith(GZIP_MAGIC) else data


def _decode(path: Path, data: bytes) -> Trace:
    try:
        return msgspec.json.decode(data, type=Trace)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(path, f"not a Kineto trace: {exc}") from exc
    except msgspec.DecodeError as exc:
        found = re.search(r"byte (\d+)", str(exc))
        offset = int(found.group(1)) if found else _bad_utf8_at(data)
        if "truncated" in str(exc).lower():
            offset = len(data)
            raise TraceFormatError(path, "JSON ends early (truncated file)", offset=offset) from exc
        raise TraceFormatError(path, f"malformed JSON: {exc}", offset=offset) from exc


def _bad_utf8_at(data: bytes) -> int | None:
    """Where ``data`` stops being UTF-8 (msgspec does not say), else None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def _rank(path: Path, trace: Trace, warnings: Warnings) -> tuple[int, str]:
    info = trace.distributedInfo or {}
    from_name = _rank_from_name(path.name)
    if isinstance(info.get("rank"), int):
        if from_name is not None and from_name != info["rank"]:
            warnings.add(
                f"file name says rank {from_name}, distributedInfo says {info['rank']}: "
                "using distributedInfo"
            )
        return info["rank"], "distributedInfo"
    if from_name is not None:
        return from_name, "file_name"
    warnings.add("no rank in distributedInfo or the file name: assuming rank 0")
    return 0, "default"


def _rank_from_name(name: str) -> int | None:
    found = _RANK_IN_NAME.search(name)
    if not found:
        return None
    return int(found.group(1) or found.group(2))


def _events_frame(path: Path, trace: Trace, warnings: Warnings) -> pl.DataFrame:
    """Complete (``ph: X``) events of the categories tokenwire reads, times in ns."""
    wanted = set(HOST_KINDS) | set(GPU_KINDS)
    evs = [e for e in trace.traceEvents if e.ph == "X" and e.cat in wanted]
    skipped = sum(1 for e in evs if not e.ts or isinstance(e.pid, str))
    if skipped:
        warnings.add("events without a time or with a non-numeric pid were skipped", skipped)
        evs = [e for e in evs if e.ts and not isinstance(e.pid, str)]
    none = Args()
    args = [e.args or none for e in evs]
    columns = {
        "cat": (pl.String, [e.cat for e in evs]),
        "name": (pl.String, [e.name for e in evs]),
        "pid": (pl.Int64, [e.pid for e in evs]),
        "tid": (pl.Int64, [e.tid for e in evs]),
        "ts": (pl.Binary, [bytes(e.ts) for e in evs]),
        "dur": (pl.Binary, [bytes(e.dur) or b"0" for e in evs]),
        "grid": (pl.List(pl.Int64), [int_list(a.grid) for a in args]),
        "block": (pl.List(pl.Int64), [int_list(a.block) for a in args]),
        "input_dims": (pl.String, [_raw_text(a.input_dims) for a in args]),
        "input_types": (pl.String, [_raw_text(a.input_type) for a in args]),
        "concrete_inputs": (pl.String, [_raw_text(a.concrete_inputs) for a in args]),
    }
    for field, dtype in _ARG_COLUMNS.items():
        columns[field] = (dtype, [getattr(a, field) for a in args])
    # strict=False turns a value of another type (a string where an int belongs) into null.
    frame = pl.DataFrame(
        [
            pl.Series(name, values, dtype=dtype, strict=False)
            for name, (dtype, values) in columns.items()
        ]
    )
    base = trace.baseTimeNanoseconds or 0
    if abs(base) > MAX_ABS_US * 1000:
        raise TraceFormatError(path, f"$.baseTimeNanoseconds: {base} is out of range")
    _check_times(path, frame, trace, evs)
    start = us_text_to_ns(pl.col("ts").cast(pl.String)) + base
    dur = us_text_to_ns(pl.col("dur").cast(pl.String)).clip(lower_bound=0)
    return (
        frame.with_columns(start.alias("start_ns"), dur.alias("dur_ns"))
        .with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
        .drop("ts", "dur")
        .with_row_index("event_id")
        .with_columns(pl.col("event_id").cast(pl.Int64))
    )


def us_text_to_ns(text: pl.Expr) -> pl.Expr:
    """Microseconds written as JSON number text -> integer nanoseconds, without float.

    Decimals beyond the third (sub-nanosecond) are dropped; exponent forms, which PyTorch
    does not write, fall back to float.
    """
    parts = text.str.split_exact(".", 1)
    whole = parts.struct.field("field_0")
    frac = parts.struct.field("field_1").fill_null("").str.slice(0, 3).str.pad_end(3, "0")
    negative = whole.str.starts_with("-")
    exact = whole.cast(pl.Int64, strict=False) * 1000 + pl.when(negative).then(-1).otherwise(
        1
    ) * frac.cast(pl.Int64, strict=False)
    approx = (text.cast(pl.Float64, strict=False) * 1000).round(0).cast(pl.Int64, strict=False)
    return pl.when(text.str.contains("[eE]")).then(approx).otherwise(exact)


def _check_times(path: Path, frame: pl.DataFrame, trace: Trace, evs: list[Event]) -> None:
    """Every ``ts`` (and ``dur``, where given) must be a number within :data:`MAX_ABS_US`."""
    for col in ("ts", "dur"):
        us = pl.col(col).cast(pl.String).cast(pl.Float64, strict=False)
        bad = frame.select(pl.arg_where(~(us.abs() <= MAX_ABS_US).fill_null(False))).to_series()
        if len(bad):
            event = evs[bad[0]]
            index = next(i for i, e in enumerate(trace.traceEvents) if e is event)
            text = bytes(getattr(event, col)).decode("utf-8", "replace")
            raise TraceFormatError(
                path,
                f"$.traceEvents[{index}].{col}: {text} is not a time in microseconds "
                f"(a number within +-{MAX_ABS_US:.0e})",
            )


def _steps(events: pl.DataFrame) -> pl.DataFrame:
    """``ProfilerStep#N`` ranges on the host: step number, start, end."""
    return (
        events.filter(
            (pl.col("cat") == "user_annotation") & pl.col("name").str.starts_with("ProfilerStep#")
        )
        .select(
            pl.col("name").str.extract(r"#(\d+)").cast(pl.Int64).alias("step"),
            "start_ns",
            "end_ns",
        )
        .drop_nulls("step")
        .unique("step", keep="first")
        .sort("start_ns")
    )


def step_of(frame: pl.DataFrame, steps: pl.DataFrame, at: str = "start_ns") -> pl.DataFrame:
    """Add ``step``: the step whose host range holds ``frame[at]``, else null."""
    if steps.is_empty():
        return frame.with_columns(pl.lit(None, pl.Int64).alias("step"))
    marks = steps.select(pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"), "step")
    joined = frame.sort(at).join_asof(marks, left_on=at, right_on="_s", strategy="backward")
    return joined.with_columns(
        pl.when(pl.col(at) <= pl.col("_e")).then(pl.col("step")).alias("step")
    ).drop("_s", "_e")


def _ops(events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Host ranges with nesting, module path and step."""
    is_module = (pl.col("cat") == "python_function") & pl.col("name").str.starts_with("nn.Module: ")
    ops = events.filter(pl.col("cat").is_in(HOST_KINDS)).with_columns(
        pl.col("event_id").alias("op_id"),
        is_module.alias("is_module"),
        pl.when(is_module).then(pl.lit("module")).otherwise(pl.col("cat")).alias("kind"),
    )
    ops = add_nesting(ops)
    ops = add_scope_path(
        ops,
        scope=pl.col("is_module"),
        label=pl.col("name").str.strip_prefix("nn.Module: "),
        out="module_path",
    )
    ops = step_of(ops, steps)
    # Beside the ops table's columns, what the collective extraction reads from host ops.
    comm_args = ["concrete_inputs", "in_split", "out_split", *COLLECTIVE_ARGS]
    return ops.select(*OPS_COLUMNS, "is_module", *comm_args).sort("op_id")


def kernel_kind(name: pl.Expr, cat: pl.Expr) -> pl.Expr:
    """Classify a GPU activity: memcpy and memset by category, kernels by name."""
    return (
        pl.when(cat == "gpu_memcpy")
        .then(pl.lit("memcpy"))
        .when(cat == "gpu_memset")
        .then(pl.lit("memset"))
        .otherwise(kernel_kind_expr(name))
    )


def _kernels(events: pl.DataFrame, ops: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """GPU activity, each with the step of the runtime call that launched it."""
    gpu = events.filter(pl.col("cat").is_in(GPU_KINDS))
    launches = (
        ops.filter(pl.col("kind").is_in(["cuda_runtime", "cuda_driver"]))
        .select("correlation", pl.col("step").alias("launch_step"))
        .drop_nulls("correlation")
        .unique("correlation", keep="first")
    )
    gpu = step_of(gpu, steps).join(launches, on="correlation", how="left")
    return gpu.select(
        pl.col("event_id").alias("kernel_id"),
        "device",
        pl.col("stream").fill_null(pl.col("tid")).alias("stream"),
        "name",
        kernel_kind(pl.col("name"), pl.col("cat")).alias("kind"),
        "start_ns",
        "end_ns",
        "dur_ns",
        "correlation",
        "external_id",
        "bytes",
        "grid",
        "block",
        pl.coalesce("launch_step", "step").alias("step"),
    ).sort("kernel_id")


def _steps_table(steps: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Steps with the tokens the rank's token embedding saw in each."""
    if steps.is_empty():
        return steps.select(
            "step", "start_ns", "end_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns")
        )
    tokens = embedding_tokens(ops)
    return (
        steps.join(tokens, on="step", how="left")
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
        .select("step", "start_ns", "end_ns", "dur_ns", "tokens", "tokens_source")
        .sort("step")
    )


def embedding_tokens(ops: pl.DataFrame) -> pl.DataFrame:
    """Tokens per step from ``aten::embedding`` calls whose indices are [batch, sequence].

    The token embedding is the one with the largest table (weight rows) among those with
    2-D indices; positional embeddings take 1-D indices. Every call of it in a step counts
    (one per micro-batch).
    """
    emb = ops.filter((pl.col("name") == "aten::embedding") & pl.col("step").is_not_null())
    rows = []
    for step, dims_text in emb.select("step", "input_dims").iter_rows():
        dims = json_value(dims_text)
        if not dims or len(dims) < 2 or len(dims[0]) != 2 or len(dims[1]) != 2:
            continue
        rows.append((step, dims[0][0], dims[1][0], dims[1][1]))
    empty = pl.DataFrame(schema={"step": pl.Int64, "tokens": pl.Int64, "tokens_source": pl.String})
    if not rows:
        return empty
    calls = pl.DataFrame(rows, schema=["step", "vocab", "batch", "seq"], orient="row")
    token_table = calls.filter(pl.col("vocab") == pl.col("vocab").max().over("step"))
    return token_table.group_by("step").agg(
        (pl.col("batch") * pl.col("seq")).sum().alias("tokens"),
        pl.format(
            "aten::embedding [{}, {}] x {}",
            pl.col("batch").first(),
            pl.col("seq").first(),
            pl.len(),
        ).alias("tokens_source"),
    )


def _ranks_table(trace: Trace, events: pl.DataFrame, rank: int) -> pl.DataFrame:
    info = trace.distributedInfo or {}
    host_ops = events.filter(pl.col("cat") == "cpu_op")
    pid = host_ops.get_column("pid").mode().min() if not host_ops.is_empty() else None
    devices = events.filter(pl.col("cat") == "kernel").get_column("device").drop_nulls()
    device = int(devices.mode().min()) if len(devices) else None
    gpu_name = None
    for props in trace.deviceProperties or []:
        if device is not None and props.get("id") == device:
            gpu_name = props.get("name")
    return pl.DataFrame(
        {
            "world_size": [
                info.get("world_size") if isinstance(info.get("world_size"), int) else None
            ],
            "host": [trace.host_name],
            "pid": [pid],
            "device": [f"cuda:{device}" if device is not None else "cpu"],
            # One process per GPU is the norm, so the GPU index is the rank within the host.
            "local_rank": [device],
            "gpu_name": [gpu_name],
            "backend": [_str(info.get("backend"))],
            "comm_lib_version": [_str(info.get("nccl_version"))],
            "base_time_ns": [trace.baseTimeNanoseconds],
        },
        schema={
            "world_size": pl.Int64,
            "host": pl.String,
            "pid": pl.Int64,
            "device": pl.String,
            "local_rank": pl.Int64,
            "gpu_name": pl.String,
            "backend": pl.String,
            "comm_lib_version": pl.String,
            "base_time_ns": pl.Int64,
        },
    )


def _with_rank(frame: pl.DataFrame, rank: int) -> pa.Table:
    keep = [c for c in frame.columns if c not in ("rank",)]
    return frame.select(pl.lit(rank, pl.Int64).alias("rank"), *keep).to_arrow()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _raw_text(value: msgspec.Raw) -> str | None:
    return bytes(value).decode("utf-8", "replace") if value else None
