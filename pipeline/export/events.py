"""Chrome trace events from a timeline's rows, built as columns (no loop over events).

Each event becomes one line of JSON text: a struct of its fields encoded by Polars, with its
``args`` (nulls dropped) spliced in. One process per rank (``pid`` = the rank), one thread
track per step lane, phase lane, CUDA stream, stream's profiler annotations and host thread
of the rank (``tid`` numbered from 1 in that order); ``M`` events name and order them.
Collectives, steps, phases, kernels and host ranges are complete events (``X``); flow
events (``s`` then ``f``, bound to the enclosing slice) chain the calls of one collective
instance from rank to rank in arrival order. ``ts`` and ``dur`` are microseconds from
``origin_ns`` (the earliest event start, on the job's aligned clock), as the format wants;
docs/export.md lists what every event carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from ..export.scope import ExportError
from ..export.timeline import TimelineRows

#: Track kinds, in the order a rank's tracks are shown.
STEPS, PHASES, STREAM, ANNOTATIONS, THREAD = 0, 1, 2, 3, 4
_TRACK_LABEL = {
    STEPS: "steps",
    PHASES: "phases",
    STREAM: "stream",
    ANNOTATIONS: "annotations on stream",
    THREAD: "thread",
}


@dataclass
class Events:
    """The lines of one trace: metadata, slices then flows, each a JSON object."""

    origin_ns: int
    lines: pl.Series
    counts: dict[str, int]


def build_events(rows: TimelineRows) -> Events:
    """The trace events of ``rows``.

    Raises
    ------
    ExportError
        Nothing in scope (no event at all).
    """
    kinds = {
        "collectives": _collectives(rows.collectives),
        "steps": _steps(rows.steps),
        "phases": _phases(rows.phases),
        "kernels": _kernels(rows.kernels),
        "ops": _ops(rows.ops),
    }
    kinds = {k: f for k, f in kinds.items() if f is not None and f.height}
    if not kinds:
        raise ExportError(f"job {rows.job!r}: nothing to export in this scope")
    origin = min(f["start_ns"].min() for f in kinds.values())
    tracks = _tracks(kinds.values())
    placed = {k: _placed(f, tracks, origin) for k, f in kinds.items()}
    slices = pl.concat(
        [f.select("pid", "tid", "ts_ns", "dur_ns", _slice_line()) for f in placed.values()]
    )
    # (a parent before its children: at one start, the longer first)
    slices = slices.sort(["pid", "tid", "ts_ns", "dur_ns"], descending=[False, False, False, True])
    flows = _flows(placed.get("collectives"))
    lines = pl.concat([_metadata(rows.ranks, tracks), slices["line"], flows])
    counts = {k: f.height for k, f in kinds.items()}
    counts |= {"flows": flows.len() // 2, "tracks": tracks.height, "events": lines.len()}
    return Events(origin_ns=int(origin), lines=lines, counts=counts)


def _collectives(frame: pl.DataFrame) -> pl.DataFrame | None:
    if not frame.height:
        return None
    dim = pl.col("parallel_dim").fill_null("unknown")
    return frame.with_columns(
        track_kind=pl.lit(STREAM),
        track_id=pl.col("stream").fill_null(-1),
        name=pl.concat_str([pl.col("op"), pl.lit(" "), dim]),
        cat=pl.lit("collective"),
        args=pl.struct(
            "op", dim, "layer", "phase", "step", "bytes", "tokens", "comm", "pg_name", "seq",
            "dtype", "group_size", "algorithm", "protocol", "stream", "source",
            "instance_comm", "instance_seq", "wait_ns", "transfer_ns", "late_rank",
        ),
    )  # fmt: skip


def _steps(frame: pl.DataFrame) -> pl.DataFrame | None:
    if not frame.height:
        return None
    return frame.with_columns(
        track_kind=pl.lit(STEPS),
        track_id=pl.lit(0, pl.Int64),
        # (Kineto's name for a step range, which trace tools count iterations by)
        name=pl.concat_str([pl.lit("ProfilerStep#"), pl.col("step").cast(pl.String)]),
        cat=pl.lit("step"),
        args=pl.struct("step", "tokens", "range_from"),
    )


def _phases(frame: pl.DataFrame) -> pl.DataFrame | None:
    if not frame.height:
        return None
    return frame.with_columns(
        track_kind=pl.lit(PHASES),
        track_id=pl.lit(0, pl.Int64),
        name=pl.col("phase").fill_null("other"),
        cat=pl.lit("phase"),
        args=pl.struct("step", "phase", "collectives"),
    )


def _kernels(frame: pl.DataFrame) -> pl.DataFrame | None:
    if not frame.height:
        return None
    # (the profiler's categories for the same work)
    cat = (
        pl.when(pl.col("kind") == "memcpy")
        .then(pl.lit("gpu_memcpy"))
        .when(pl.col("kind") == "memset")
        .then(pl.lit("gpu_memset"))
        .otherwise(pl.lit("kernel"))
    )
    return frame.with_columns(
        track_kind=pl.lit(STREAM),
        track_id=pl.col("stream").fill_null(-1),
        cat=cat,
        args=pl.struct("kind", "stream", "step", "correlation", "bytes"),
    )


def _ops(frame: pl.DataFrame) -> pl.DataFrame | None:
    if not frame.height:
        return None
    return frame.with_columns(
        # (the profiler's annotations of GPU work may overlap one another: a track of their
        # own keeps the stream's kernels and collectives nested)
        track_kind=pl.when(pl.col("on_stream")).then(pl.lit(ANNOTATIONS)).otherwise(pl.lit(THREAD)),
        track_id=pl.col("tid").fill_null(-1),
        cat=pl.col("kind"),
        args=pl.struct("kind", "step", "module_path"),
    )


def _tracks(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """One row per track: rank, track_kind, track_id, tid (from 1 within the rank) and name."""
    keys = pl.concat([f.select("rank", "track_kind", "track_id") for f in frames]).unique()
    label = pl.col("track_kind").replace_strict(_TRACK_LABEL, return_dtype=pl.String)
    number = pl.when(pl.col("track_id") < 0).then(pl.lit("(unknown)"))
    number = number.otherwise(pl.col("track_id").cast(pl.String))
    lane = pl.col("track_kind").is_in([STEPS, PHASES])
    return keys.sort("rank", "track_kind", "track_id").with_columns(
        tid=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("rank"),
        thread=pl.when(lane).then(label).otherwise(pl.concat_str([label, pl.lit(" "), number])),
    )


def _placed(frame: pl.DataFrame, tracks: pl.DataFrame, origin: int) -> pl.DataFrame:
    """``frame`` on its track (``pid``, ``tid``), its start in ns from ``origin``."""
    frame = frame.join(tracks.select("rank", "track_kind", "track_id", "tid"),
                       on=["rank", "track_kind", "track_id"], how="left")  # fmt: skip
    return frame.with_columns(
        pid=pl.col("rank"),
        ts_ns=pl.col("start_ns") - origin,
        dur_ns=pl.col("dur_ns").fill_null(0).clip(lower_bound=0),
    )


def _micros(ns: pl.Expr) -> pl.Expr:
    """Whole ns (>= 0) as the JSON text of µs with three decimals: exact, where a float
    division prints 69474.03600000001."""
    frac = (ns % 1000).cast(pl.String).str.zfill(3)
    return pl.concat_str([(ns // 1000).cast(pl.String), pl.lit("."), frac])


def _fields(*pairs: tuple[str, pl.Expr]) -> pl.Expr:
    """``,"key":value`` for each pair, values already JSON text."""
    return pl.concat_str([pl.concat_str([pl.lit(f',"{k}":'), v]) for k, v in pairs])


def _slice_line() -> pl.Expr:
    head = pl.struct(pl.lit("X").alias("ph"), "name", "cat").struct.json_encode()
    rest = _fields(
        ("ts", _micros(pl.col("ts_ns"))),
        ("dur", _micros(pl.col("dur_ns"))),
        ("pid", pl.col("pid").cast(pl.String)),
        ("tid", pl.col("tid").cast(pl.String)),
        ("args", _args_json()),
    )
    return pl.concat_str([head.str.head(-1), rest, pl.lit("}")]).alias("line")


def _args_json() -> pl.Expr:
    """``args`` as a JSON object without its null members (keys are tokenwire's own names,
    so the pattern cannot meet a value: a quote inside a value is escaped)."""
    text = pl.col("args").struct.json_encode()
    text = text.str.replace_all(r'"[a-z_]+":null,?', "")
    return text.str.replace(r",\}$", "}")


def _flows(collectives: pl.DataFrame | None) -> pl.Series:
    """A start (``s``) and a finish (``f``, bound to the enclosing slice) per pair of calls of
    one instance that follow each other in arrival order (aligned start)."""
    if collectives is None:
        return pl.Series("line", [], pl.String)
    key = ["instance_comm", "instance_seq"]
    # (instance_comm is NULL for a collective whose source names no communicator: the
    # sequence number says whether a call is in an instance)
    calls = collectives.filter(pl.col("instance_seq").is_not_null())
    # (of equal starts the lowest rank last: the one collective_instances names late_rank)
    calls = calls.sort([*key, "ts_ns", "rank"], descending=[False, False, False, True])
    calls = calls.select(*key, "name", "pid", "tid", "ts_ns")
    pairs = calls.with_columns(
        next_pid=pl.col("pid").shift(-1).over(key),
        next_tid=pl.col("tid").shift(-1).over(key),
        next_ts_ns=pl.col("ts_ns").shift(-1).over(key),
    ).filter(pl.col("next_pid").is_not_null())
    pairs = pairs.with_columns(id=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))
    common = [pl.col("name"), pl.lit("instance").alias("cat"), "id"]

    def line(ph: str, at: str, *extra: tuple[str, pl.Expr]) -> pl.Expr:
        head = pl.struct(pl.lit(ph).alias("ph"), *common).struct.json_encode().str.head(-1)
        where = _fields(
            ("ts", _micros(pl.col(f"{at}ts_ns"))),
            ("pid", pl.col(f"{at}pid").cast(pl.String)),
            ("tid", pl.col(f"{at}tid").cast(pl.String)),
            *extra,
        )
        return pl.concat_str([head, where, pl.lit("}")])

    out = pairs.select(
        line("s", "").alias("s"), line("f", "next_", ("bp", pl.lit('"e"'))).alias("f")
    )
    return pl.concat([out["s"], out["f"].alias("s")]).alias("line")


def _metadata(ranks: pl.DataFrame, tracks: pl.DataFrame) -> pl.Series:
    """Names and order of the processes (ranks) and their tracks."""
    host = pl.concat_str([pl.lit(" ("), pl.col("host"), pl.lit(")")]).fill_null("")
    procs = ranks.with_columns(
        process=pl.concat_str([pl.lit("rank "), pl.col("rank").cast(pl.String), host])
    )
    zero = pl.lit(0, pl.Int64).alias("tid")
    named = [
        procs.select(_meta("process_name", pl.col("rank"), zero, name=pl.col("process"))),
        procs.select(_meta("process_sort_index", pl.col("rank"), zero, sort_index="rank")),
        tracks.select(_meta("thread_name", pl.col("rank"), "tid", name=pl.col("thread"))),
        tracks.select(_meta("thread_sort_index", pl.col("rank"), "tid", sort_index="tid")),
    ]
    return pl.concat([f.to_series() for f in named]).alias("line")


def _meta(event: str, pid: pl.Expr, tid: pl.Expr | str, **args: pl.Expr | str) -> pl.Expr:
    return pl.struct(
        pl.lit("M").alias("ph"), pl.lit(event).alias("name"), pid.alias("pid"), tid,
        pl.struct(**args).alias("args"),
    ).struct.json_encode()  # fmt: skip
