"""Turn an NsysRaw into the dataset tables: kernels, ops, ranks, collectives, communicators.

Clock: every ``*_ns`` column is UTC epoch nanoseconds, computed as
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` + the export's capture-relative timestamp
(nsys's own choice when it aligns reports, so several ranks' reports line up as well as the
hosts' clocks agree). Exports made with ``--ts-normalize=true`` are already absolute; the
json export and 2020.x SQLite exports have no session start, so their times stay relative
to the capture start (a warning says so).

Nesting: push/pop ranges (eventType 59) are strictly nested per thread, so one sort of
their start and end events per thread plus a running sum gives each range's depth, and an
as-of join on (thread, depth) gives its parent. Runtime calls and marks are point queries
in the same sweep: their parent is the innermost push/pop range open on their thread.
Start/end ranges (60) may overlap and cross threads: no depth or parent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa

from ...ingest.nsys import collectives, ranks
from ...ingest.nsys.raw import (
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_START_END,
    NsysRaw,
)
from ...ingest.result import DUR_NS, Warnings, schema_columns
from ...vocab import kernel_kind_expr, per_distinct

_COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD (unified)",
    12: "DtoH (unified)",
    13: "DtoD (unified)",
}


def _pid(col: str) -> pl.Expr:
    return ((pl.col(col) // (1 << 24)) % (1 << 24)).alias("pid")


def _tid(col: str) -> pl.Expr:
    return (pl.col(col) % (1 << 24)).alias("tid")


#: Gives a frame of (pid, device or tid) rows their rank: ``(frame, by_thread)``.
_Ranker = Callable[[pl.DataFrame, bool], pl.DataFrame]


def build(raw: NsysRaw, path: Path, warnings: Warnings) -> tuple[dict[str, pa.Table], str]:
    """The dataset tables of one export, and the rank source(s) used."""
    shift = _time_shift(raw, warnings)
    ops = nest(_ops(raw, shift, warnings))
    kernels = _with_launch(_kernels(raw.kernels, shift), ops)
    nccl_ops = ops.filter(pl.col("domain") == "NCCL")
    payloads = collectives.decode_payloads(nccl_ops, warnings)
    inits = ops.join(payloads.filter(pl.col("rank").is_not_null()), on="op_id").select(
        "pid", "cuda_dev", "comm_hash", "rank", "nranks", "start_ns"
    )
    units = _units(raw, kernels, ops, inits, path, warnings)
    with_rank = _ranker(kernels, units)
    tables = {
        "kernels": _kernel_table(with_rank(kernels, False)),
        "ops": _ops_table(with_rank(ops, True)),
        "ranks": _ranks_table(units, raw, kernels, ops),
    }
    nccl_kernels = kernels.filter(pl.col("kind") == "comm").select(
        "kernel_id",
        "pid",
        "device",
        "stream",
        "name",
        "start_ns",
        "end_ns",
        "correlation",
        "launch_tid",
        "launch_ns",
    )
    coll = collectives.collectives(nccl_ops, nccl_kernels, payloads, warnings)
    coll = with_rank(coll.with_columns(pl.col("device").cast(pl.Int64)), False)
    coll = _fill_rank(coll, units)
    tables["collectives"] = _collectives_table(coll)
    tables["communicators"] = collectives.communicators(inits, units, coll).to_arrow()
    source = ",".join(sorted(units["rank_source"].unique().to_list()))
    return tables, source


def _with_launch(kernels: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Each kernel with the thread and time of the runtime call that launched it, and the
    name of the NVTX range around that call."""
    launch = (
        ops.filter(pl.col("correlation").is_not_null())
        .sort("kind")
        .unique(["pid", "correlation"], keep="first")
        .select(
            "pid",
            "correlation",
            pl.col("tid").alias("launch_tid"),
            pl.col("start_ns").alias("launch_ns"),
            pl.col("parent_id").alias("range_id"),
        )
    )
    kernels = kernels.join(launch, on=["pid", "correlation"], how="left")
    names = ops.select(pl.col("op_id").alias("range_id"), pl.col("name").alias("nvtx_range"))
    return kernels.join(names, on="range_id", how="left").drop("range_id")


def _units(
    raw: NsysRaw,
    kernels: pl.DataFrame,
    ops: pl.DataFrame,
    inits: pl.DataFrame,
    path: Path,
    warnings: Warnings,
) -> pl.DataFrame:
    """The ranks of the export: one per (process, device) that ran kernels, one per process
    that ran none."""
    units_keys = pl.concat(
        [
            kernels.select("pid", "device"),
            ops.select("pid", pl.lit(None, pl.Int64).alias("device")),
        ]
    ).unique()
    has_dev = units_keys.filter(pl.col("device").is_not_null())["pid"].unique().implode()
    units_keys = units_keys.filter(pl.col("device").is_not_null() | ~pl.col("pid").is_in(has_dev))
    return ranks.assign(raw, units_keys, inits, path, warnings)


def _ranker(kernels: pl.DataFrame, units: pl.DataFrame) -> _Ranker:
    """Rows with a device take the rank of their (process, device); rows of a thread
    (``by_thread``) that of the device the thread launched most kernels on, else of the
    process's busiest device."""
    thread_dev = (
        kernels.drop_nulls("launch_tid")
        .group_by("pid", "launch_tid")
        .agg(pl.col("device").mode().min().alias("device"))
        .rename({"launch_tid": "tid"})
    )
    primary = (
        kernels.group_by("pid", "device")
        .len()
        .sort("len", descending=True)
        .unique("pid", keep="first")
        .select("pid", pl.col("device").alias("primary_dev"))
    )
    u = units.select("pid", pl.col("device").alias("unit_dev"), "rank")

    def with_rank(df: pl.DataFrame, by_thread: bool) -> pl.DataFrame:
        if by_thread:
            df = df.join(thread_dev, on=["pid", "tid"], how="left", suffix="_thread")
            dev = "device_thread" if "device_thread" in df.columns else "device"
            df = (
                df.join(primary, on="pid", how="left")
                .with_columns(pl.coalesce(dev, "primary_dev").alias("unit_dev"))
                .drop([c for c in ("device_thread", "primary_dev") if c in df.columns])
            )
        else:
            df = df.with_columns(pl.col("device").alias("unit_dev"))
        return df.join(u, on=["pid", "unit_dev"], how="left", nulls_equal=True).drop("unit_dev")

    return with_rank


def _time_shift(raw: NsysRaw, warnings: Warnings) -> int:
    if raw.times_absolute:
        return 0
    if raw.session_start_ns is None:
        warnings.add("no session start time in the export: times are relative to the capture")
        return 0
    return raw.session_start_ns


def _kernels(df: pl.DataFrame, shift: int) -> pl.DataFrame:
    kind = per_distinct(
        df,
        ["activity", "name"],
        pl.when(pl.col("activity") != "kernel")
        .then(pl.col("activity"))
        .otherwise(kernel_kind_expr(pl.col("name"))),
    )
    name = (
        pl.when(pl.col("activity") == "memcpy")
        .then(
            pl.lit("Memcpy ")
            + pl.col("copy_kind").replace_strict(
                _COPY_KINDS, default="Unknown", return_dtype=pl.Utf8
            )
        )
        .when(pl.col("activity") == "memset")
        .then(pl.lit("Memset"))
        .otherwise(pl.col("name"))
    )
    return df.with_row_index("kernel_id").with_columns(
        pl.col("kernel_id").cast(pl.Int64),
        _pid("global_pid"),
        (pl.col("start") + shift).alias("start_ns"),
        (pl.col("end") + shift).alias("end_ns"),
        kind.alias("kind"),
        name.fill_null("").alias("name"),
    )


def _ops(raw: NsysRaw, shift: int, warnings: Warnings) -> pl.DataFrame:
    nv = raw.nvtx.with_columns(_pid("global_tid"), _tid("global_tid"))
    domains = (
        nv.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE)
        .select("pid", "domain_id", pl.col("text").alias("domain"))
        .unique(["pid", "domain_id"], keep="last")
    )
    keep = nv.filter(pl.col("event_type").is_in([NVTX_PUSH_POP, NVTX_START_END, NVTX_MARK]))
    open_ended = keep.filter((pl.col("event_type") != NVTX_MARK) & pl.col("end").is_null()).height
    warnings.add(
        "NVTX range without an end (still open when the capture stopped): duration 0", open_ended
    )
    nvtx = keep.join(domains, on=["pid", "domain_id"], how="left").select(
        "pid",
        "tid",
        pl.col("text").fill_null("").alias("name"),
        pl.lit("nvtx").alias("kind"),
        (pl.col("start") + shift).alias("start_ns"),
        (pl.coalesce("end", "start") + shift).alias("end_ns"),
        "domain",
        pl.lit(None, pl.Int64).alias("correlation"),
        pl.col("payload"),
        pl.col("event_type")
        .replace_strict(
            {NVTX_PUSH_POP: "range", NVTX_MARK: "point"}, default=None, return_dtype=pl.Utf8
        )
        .alias("nest"),
    )
    rt = raw.runtime.with_columns(_pid("global_tid"), _tid("global_tid")).select(
        "pid",
        "tid",
        pl.col("name").fill_null(""),
        pl.when(pl.col("event_class") == 1)
        .then(pl.lit("cuda_driver"))
        .otherwise(pl.lit("cuda_runtime"))
        .alias("kind"),
        (pl.col("start") + shift).alias("start_ns"),
        (pl.col("end") + shift).alias("end_ns"),
        pl.lit(None, pl.Utf8).alias("domain"),
        "correlation",
        pl.lit(None, pl.Binary).alias("payload"),
        pl.lit("point").alias("nest"),
    )
    ops = pl.concat([nvtx, rt])
    return ops.with_row_index("op_id").with_columns(pl.col("op_id").cast(pl.Int64))


def nest(ops: pl.DataFrame) -> pl.DataFrame:
    """Add ``depth`` and ``parent_id`` (see the module docstring) to ``ops``."""
    key = [pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1)]
    ranges = ops.filter(pl.col("nest") == "range")
    points = ops.filter(pl.col("nest") == "point")
    # order at equal times: range ends (0), range starts (1, longer first), points (2),
    # ends of zero-length ranges (3) so such a range still opens before it closes
    events = pl.concat(
        [
            ranges.select(
                *key,
                pl.col("start_ns").alias("t"),
                pl.lit(1).alias("order"),
                (-pl.col("end_ns")).alias("tie"),
                pl.lit(1).alias("delta"),
                "op_id",
                pl.lit("S").alias("ev"),
            ),
            ranges.select(
                *key,
                pl.col("end_ns").alias("t"),
                pl.when(pl.col("end_ns") > pl.col("start_ns")).then(0).otherwise(3).alias("order"),
                pl.lit(0, pl.Int64).alias("tie"),
                pl.lit(-1).alias("delta"),
                pl.lit(None, pl.Int64).alias("op_id"),
                pl.lit("E").alias("ev"),
            ),
            points.select(
                *key,
                pl.col("start_ns").alias("t"),
                pl.lit(2).alias("order"),
                pl.lit(0, pl.Int64).alias("tie"),
                pl.lit(0).alias("delta"),
                "op_id",
                pl.lit("P").alias("ev"),
            ),
        ],
        how="vertical_relaxed",
    )
    events = (
        events.sort(["pid", "tid", "t", "order", "tie"])
        .with_row_index("pos")
        .with_columns(pl.col("delta").cum_sum().over(["pid", "tid"]).alias("open"))
    )
    starts = events.filter(pl.col("ev") == "S").select(
        "pos", "pid", "tid", (pl.col("open") - 1).alias("depth"), pl.col("op_id").alias("parent_id")
    )
    queries = (
        events.filter(pl.col("ev") != "E")
        .with_columns(
            pl.when(pl.col("ev") == "S")
            .then(pl.col("open") - 1)
            .otherwise(pl.col("open"))
            .alias("my_depth")
        )
        .with_columns((pl.col("my_depth") - 1).alias("depth"))
    )
    found = queries.join_asof(
        starts, on="pos", by=["pid", "tid", "depth"], strategy="backward", check_sortedness=False
    )
    found = found.select("op_id", pl.col("my_depth").cast(pl.Int64).alias("depth"), "parent_id")
    return ops.join(found, on="op_id", how="left")


def _fill_rank(df: pl.DataFrame, units: pl.DataFrame) -> pl.DataFrame:
    """Rows whose device has no unit of its own (e.g. no kernel) take the process's first rank."""
    first = units.sort("rank").unique("pid", keep="first").select("pid", pl.col("rank").alias("r"))
    return (
        df.join(first, on="pid", how="left")
        .with_columns(pl.coalesce("rank", "r").alias("rank"))
        .drop("r")
    )


def _kernel_table(k: pl.DataFrame) -> pa.Table:
    grid = pl.concat_list("grid_x", "grid_y", "grid_z")
    block = pl.concat_list("block_x", "block_y", "block_z")
    return (
        schema_columns("kernels", k, dur_ns=DUR_NS, grid=grid, block=block)
        .with_columns(
            pl.when(pl.col("grid").list.drop_nulls().list.len() == 3).then(pl.col("grid")),
            pl.when(pl.col("block").list.drop_nulls().list.len() == 3).then(pl.col("block")),
        )
        .to_arrow()
    )


def _ops_table(o: pl.DataFrame) -> pa.Table:
    return schema_columns("ops", o, dur_ns=DUR_NS).to_arrow()


def _ranks_table(
    units: pl.DataFrame, raw: NsysRaw, kernels: pl.DataFrame, ops: pl.DataFrame
) -> pa.Table:
    nccl = bool(
        kernels.filter(pl.col("kind") == "comm").height
        or ops.filter(pl.col("domain") == "NCCL").height
    )
    gpus = pl.DataFrame(
        {"device": list(raw.gpu_names), "gpu_name": list(raw.gpu_names.values())},
        schema={"device": pl.Int64, "gpu_name": pl.Utf8},
    )
    return (
        units.join(gpus, on="device", how="left")
        .select(
            "rank",
            "world_size",
            pl.lit(raw.hostname, pl.Utf8).alias("host"),
            "pid",
            "local_rank",
            pl.when(pl.col("device").is_not_null())
            .then(pl.lit("cuda:") + pl.col("device").cast(pl.Utf8))
            .alias("device"),
            "gpu_name",
            pl.lit("nccl" if nccl else None, pl.Utf8).alias("backend"),
            pl.lit(raw.session_start_ns, pl.Int64).alias("base_time_ns"),
        )
        .to_arrow()
    )


def _collectives_table(c: pl.DataFrame) -> pa.Table:
    c = c.sort("rank", pl.coalesce("start_ns", "enqueue_ns")).with_row_index("collective_id")
    c = c.with_columns(
        pl.col("collective_id").cast(pl.Int64),
        pl.int_range(pl.len()).over(["rank", "comm"]).cast(pl.Int64).alias("seq"),
    )
    return schema_columns("collectives", c).to_arrow()
