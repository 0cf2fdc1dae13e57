"""The JAX (TSL) profiler's trace-viewer JSON, ``<host>.trace.json.gz`` beside the XPlane
``<host>.xplane.pb`` that ``jax.profiler.trace(log_dir)`` writes under
``plugins/profile/<run>/``: ``sniff`` and ``parse``.

Chrome trace-event format: one process per XLA plane (``/host:CPU``, ``/device:GPU:0``),
named by ``process_name`` metadata events, and complete (``X``) events in microseconds.
XLA's thunks carry ``args.hlo_op`` and ``args.hlo_module``; ``jax.profiler.
StepTraceAnnotation`` ranges carry ``args.step_num``.

- **ops**: every complete event (``xla_op`` for a thunk, ``python_function`` for a ``$``
  Python frame, ``runtime`` for the rest), nested per thread;
- **steps**: the ``StepTraceAnnotation`` ranges, numbered as the program numbered them;
- **collectives**: the thunks of XLA's collective instructions
  (:data:`~pipeline.vocab.XLA_COLLECTIVES`), in the step whose range holds their
  start. The trace holds no operand shapes: ``bytes`` is null.

The file names no rank and no process index: the rank is read from its path (``rank3``
in the file name or a folder above it), else 0 with a warning. Times are relative to the
start of each process's profile, so ranks do not line up in time.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import polars as pl

from ...errors import TraceFormatError
from ...ingest.derive.nesting import add_nesting
from ...ingest.gz import GZIP_MAGIC, gunzip
from ...ingest.result import ParseResult, parsed_table
from ...ingest.values import MAX_NAME_CHARS, rank_from_file_name
from ...vocab import XLA_COLLECTIVES

FORMAT = "jax_trace"
#: The names TSL's trace viewer gives its processes: the planes of an XSpace.
_PLANE = re.compile(rb'"name"\s*:\s*"/(?:host|device):')
_ARGS = pl.Struct(
    {"hlo_op": pl.String, "hlo_module": pl.String, "step_num": pl.String, "name": pl.String}
)
_EVENT = {
    "ph": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "name": pl.String,
    "args": _ARGS,
}


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` opens trace-event JSON whose processes are TSL profiler planes."""
    text = head.lstrip()
    return text.startswith(b"{") and b'"traceEvents"' in text and bool(_PLANE.search(text))


def parse(path: Path) -> ParseResult:
    """Parse one JAX profiler trace into ops, steps, collectives and ranks."""
    path = Path(path)
    events = _events(path)
    result = ParseResult(format=FORMAT, format_version="tsl trace viewer json")
    rank = _rank(path, result)
    complete = events.filter((pl.col("ph") == "X") & pl.col("name").is_not_null())
    # (µs that fit int64 ns once scaled: a damaged ts would overflow)
    timed = (pl.col("ts").abs() < 9e15) & (pl.col("dur").fill_null(0).abs() < 9e15)
    untimed = complete.filter(~timed.fill_null(False)).height
    result.warnings.add("complete event without a usable time (ts, dur): left out", untimed)
    complete = complete.filter(timed.fill_null(False))
    ops = _ops(complete)
    steps = _steps(ops)
    tables = {
        "ops": ops.drop("hlo_op", "hlo_module", "step_num"),
        "steps": steps,
        "collectives": _collectives(ops, steps),
        "ranks": pl.DataFrame({"backend": ["xla"]}),
    }
    rank_col = pl.lit(rank, pl.Int64).alias("rank")
    result.tables = {n: parsed_table(n, f.select(rank_col, pl.all())) for n, f in tables.items()}
    return result


def _events(path: Path) -> pl.DataFrame:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from None
    data = gunzip(path, raw) if raw.startswith(GZIP_MAGIC) else raw
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(path, f"not valid JSON: {exc.msg}", offset=exc.pos) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise TraceFormatError(path, "traceEvents is not a list of objects")
    events = [e for e in events if e]  # (the viewer ends the list with an empty object)
    try:
        frame = pl.from_dicts(events, schema=_EVENT) if events else pl.DataFrame(schema=_EVENT)
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise TraceFormatError(path, f"traceEvents: an event of the wrong shape: {first}") from None
    _check_names(path, frame)
    return frame


def _check_names(path: Path, events: pl.DataFrame) -> None:
    """Refuse a name (the event's, or its XLA op's or module's) longer than
    :data:`~pipeline.ingest.values.MAX_NAME_CHARS`, at its place (the index among the
    non-empty events)."""
    args = pl.col("args")
    for where, text in (("name", pl.col("name")), ("args.hlo_op", args.struct.field("hlo_op")),
                        ("args.hlo_module", args.struct.field("hlo_module"))):  # fmt: skip
        long = events.select((text.str.len_chars() > MAX_NAME_CHARS).arg_true().first()).item()
        if long is not None:
            raise TraceFormatError(
                path,
                f"$.traceEvents[{long}].{where}: longer than the {MAX_NAME_CHARS:,} characters "
                "a name may have",
            )


def _rank(path: Path, result: ParseResult) -> int:
    """The rank in the file's name, else in a ``rank<N>`` folder above it (the profiler
    names the file after the host and puts it under ``rank<N>/plugins/profile/<run>/``
    when each process is given its own log folder)."""
    folders = [p for p in list(path.parents)[:4] if p.name.lower().startswith("rank")]
    for part in (path, *folders):
        rank = rank_from_file_name(part.name)
        if rank is not None:
            result.rank_source = "file_name"
            return rank
    result.rank_source = "none"
    result.warnings.add("no rank in the file's path (rank<N>): the rank is 0")
    return 0


def _ops(complete: pl.DataFrame) -> pl.DataFrame:
    args = pl.col("args")
    ops = complete.with_row_index("op_id").select(
        pl.col("op_id").cast(pl.Int64),
        "pid",
        "tid",
        "name",
        pl.when(args.struct.field("hlo_op").is_not_null())
        .then(pl.lit("xla_op"))
        .when(pl.col("name").str.starts_with("$"))
        .then(pl.lit("python_function"))
        .otherwise(pl.lit("runtime"))
        .alias("kind"),
        (pl.col("ts") * 1000).round().cast(pl.Int64).alias("start_ns"),
        ((pl.col("ts") + pl.col("dur").fill_null(0)) * 1000).round().cast(pl.Int64).alias("end_ns"),
        args.struct.field("hlo_op").alias("hlo_op"),
        args.struct.field("hlo_module").alias("hlo_module"),
        args.struct.field("step_num").cast(pl.Int64, strict=False).alias("step_num"),
    )
    ops = ops.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    return (
        add_nesting(ops)
        if ops.height
        else ops.with_columns(
            pl.lit(None, pl.Int64).alias("depth"), pl.lit(None, pl.Int64).alias("parent_id")
        )
    )


def _steps(ops: pl.DataFrame) -> pl.DataFrame:
    return (
        ops.filter(pl.col("step_num").is_not_null())
        .select(
            pl.col("step_num").alias("step"),
            "start_ns",
            "end_ns",
            "dur_ns",
            (pl.lit("StepTraceAnnotation ") + pl.col("name")).alias("marker"),
        )
        .unique("step", keep="first")
        .sort("step")
    )


def _collectives(ops: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    base = pl.col("hlo_op").str.replace(r"\.\d+$", "")
    op = base.replace_strict(XLA_COLLECTIVES, default=None, return_dtype=pl.String)
    coll = ops.filter(op.is_not_null()).with_columns(op.alias("op")).sort("start_ns", "op_id")
    if steps.height and coll.height:
        windows = steps.select("step", pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e"))
        coll = coll.join_asof(windows.sort("s"), left_on="start_ns", right_on="s").with_columns(
            pl.when(pl.col("start_ns") < pl.col("e")).then("step").alias("step")
        )
    else:
        coll = coll.with_columns(pl.lit(None, pl.Int64).alias("step"))
    return coll.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("collective_id"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("seq"),
        "op",
        pl.col("hlo_op").alias("op_name"),
        "start_ns",
        "end_ns",
        "dur_ns",
        pl.col("tid").alias("stream"),
        "step",
        pl.lit("none").alias("size_source"),
        (pl.col("op") == "send_recv").alias("is_p2p"),
        pl.col("op_id").alias("launch_op_id"),
    )
