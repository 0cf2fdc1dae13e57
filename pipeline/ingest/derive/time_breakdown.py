"""Where one rank's time went in each step of its own file: compute alone, communication
overlapped with compute, communication exposed (nothing else running), and idle.

Steps come from the profiler (``ProfilerStep#N``), and a job holds one profiler file per rank,
so a rank's steps, kernels, ops and collectives all come from one file: ingest computes the
``time_breakdown`` rows in its workers, next to the parse, and ``tokenwire link`` never reads
the kernels or the ops for it.

GPU timeline when the rank has kernels in the step (comm = NCCL kernels, compute = all other
GPU work); otherwise the host timeline (comm = the collectives' execution, e.g. gloo work;
compute = ``aten::`` ops on threads that run no collective). The window runs from the step's
start to the end of its last activity. A sweep over the interval boundaries counts the
running compute and comm intervals, so nested and overlapping intervals are not counted
twice.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from ...ingest.result import ENGINE, columns, values_at

_KEYS = ["rank", "step", "timeline"]
_ZERO, _ONE = pl.lit(0, pl.Int64), pl.lit(1, pl.Int64)
_INTERVAL = {"rank": pl.Int64, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
_ACTIVITY = ["rank", "step", "timeline", "start_ns", "end_ns", "compute", "comm"]


def add_time_breakdown(tables: dict[str, pa.Table]) -> None:
    """Add a ``time_breakdown`` table to ``tables`` (one file's parse) when it has steps with
    activity; otherwise leave ``tables`` as it is."""
    steps = tables.get("steps")
    if steps is None or steps.num_rows == 0:
        return
    activity = _activity(tables)
    if activity.is_empty():
        return
    breakdown = _sweep(activity.lazy(), columns(steps, _INTERVAL).lazy())
    tables["time_breakdown"] = breakdown.collect(engine=ENGINE).to_arrow()


def _timed() -> pl.Expr:
    """Rows of a step with a start and an end."""
    return (
        pl.col("step").is_not_null()
        & pl.col("start_ns").is_not_null()
        & pl.col("end_ns").is_not_null()
    )


def _activity(tables: dict[str, pa.Table]) -> pl.DataFrame:
    """Every timed interval of a step: rank, step, timeline, start_ns, end_ns, compute, comm.

    Lazy plans, each collected once (a file's frames are small: the fixed cost of each query
    is most of the time)."""
    timed = _timed()
    kernels = columns(tables.get("kernels"), {**_INTERVAL, "kind": pl.String}).lazy()
    gpu = kernels.filter(timed).select(
        "rank",
        "step",
        pl.lit("gpu").alias("timeline"),
        "start_ns",
        "end_ns",
        (pl.col("kind") != "comm").fill_null(True).cast(pl.Int64).alias("compute"),
        (pl.col("kind") == "comm").fill_null(False).cast(pl.Int64).alias("comm"),
    )
    gpu_steps = kernels.filter(pl.col("step").is_not_null()).select("rank", "step").unique()
    calls = columns(tables.get("collectives"), {**_INTERVAL, "stream": pl.Int64}).lazy()
    comm = (
        calls.filter(timed)
        .join(gpu_steps, on=["rank", "step"], how="anti", nulls_equal=True)
        .select("rank", "step", "start_ns", "end_ns", compute=_ZERO, comm=_ONE)
    )
    # threads that run collectives (gloo's work threads) are communication, not compute
    comm_threads = calls.filter(pl.col("stream").is_not_null()).select(
        "rank", pl.col("stream").alias("tid")
    )
    compute = _host_compute(tables.get("ops"), gpu_steps, comm_threads.unique())
    host = pl.concat([comm, compute.lazy()]).with_columns(pl.lit("host").alias("timeline"))
    return pl.concat([gpu, host.select(_ACTIVITY)]).collect(engine=ENGINE)


def _host_compute(
    ops: pa.Table | None, gpu_steps: pl.LazyFrame, comm_threads: pl.LazyFrame
) -> pl.DataFrame:
    """The ``aten::`` ops of steps without kernels, on threads that run no collective."""
    timed = _timed()
    host = (
        columns(ops, {**_INTERVAL, "tid": pl.Int64})
        .lazy()
        .with_row_index("row")
        .filter(timed)
        .join(gpu_steps, on=["rank", "step"], how="anti", nulls_equal=True)
        .join(comm_threads, on=["rank", "tid"], how="anti", nulls_equal=True)
        .collect(engine=ENGINE)
    )
    if host.is_empty() or ops is None:  # GPU runs: every step has kernels
        return host.select("rank", "step", "start_ns", "end_ns", compute=_ONE, comm=_ZERO)
    names = values_at(ops, host.get_column("row").to_numpy(), ("kind", "name"))
    return host.filter(
        (names.get_column("kind") == "cpu_op").fill_null(False)
        & names.get_column("name").str.starts_with("aten::").fill_null(False)
    ).select("rank", "step", "start_ns", "end_ns", compute=_ONE, comm=_ZERO)


def _sweep(activity: pl.LazyFrame, steps: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (rank, step, timeline) from a sweep over the interval boundaries."""
    starts = activity.select(*_KEYS, pl.col("start_ns").alias("t"), "compute", "comm")
    ends = activity.select(*_KEYS, pl.col("end_ns").alias("t"), -pl.col("compute"), -pl.col("comm"))
    step_starts = (
        activity.select(_KEYS)
        .unique()
        .join(steps.select("rank", "step", pl.col("start_ns").alias("t")), on=["rank", "step"])
        .with_columns(compute=_ZERO, comm=_ZERO)
        .select(*_KEYS, "t", "compute", "comm")
    )
    bounds = pl.concat([starts, ends, step_starts]).sort(
        *_KEYS, "t", pl.col("compute") + pl.col("comm")
    )
    # Every interval opens and closes within its own group, so each group's counts start
    # from 0 and one running sum over the sorted frame is the per-group one (no windows).
    same_group_next = pl.all_horizontal(pl.col(k) == pl.col(k).shift(-1) for k in _KEYS)
    segments = bounds.select(
        *_KEYS,
        pl.col("compute").cum_sum().alias("computing"),
        pl.col("comm").cum_sum().alias("communicating"),
        pl.when(same_group_next).then(pl.col("t").shift(-1) - pl.col("t")).alias("len_ns"),
    ).filter(pl.col("len_ns").is_not_null())
    computing, communicating = pl.col("computing") > 0, pl.col("communicating") > 0
    length = pl.col("len_ns")
    return (
        segments.group_by(_KEYS)
        .agg(
            length.sum().alias("window_ns"),
            length.filter(computing & ~communicating).sum().alias("compute_ns"),
            length.filter(computing & communicating).sum().alias("overlapped_comm_ns"),
            length.filter(~computing & communicating).sum().alias("exposed_comm_ns"),
            length.filter(~computing & ~communicating).sum().alias("idle_ns"),
        )
        .sort(_KEYS)
    )
