"""The op of each RCCL kernel from the RCCL calls (``rccl_api`` records) of its thread.

RCCL launches one kernel per collective call, or one per ``ncclGroupStart`` ...
``ncclGroupEnd`` group of calls, from the thread that made the call; its generic kernel
(``ncclDevKernel_Generic_1``) does not say which collective it runs. A thread's launches,
in the order it made them, are therefore its ungrouped collective calls and its outermost
groups, in time order, and its RCCL kernels in dispatch order are the same list: the k-th
of each are one collective. Where a thread's two counts differ (a capture that cut a group
in two, calls without kernels), its kernels keep the op their name gives and a warning
says how many were left unmatched. A group of calls of several ops has op ``unknown``.
The buffered ``rccl_api`` record has no arguments: the calls give the op, never a size.
"""

from __future__ import annotations

import polars as pl

from ...ingest.result import Warnings
from ...vocab import op_name_expr

_KEYS = ["rank", "tid"]


def match_calls(kernels: pl.DataFrame, calls: pl.DataFrame, warnings: Warnings) -> pl.DataFrame:
    """``kernels`` (communication kernels) with ``call_op``, ``call_name`` and ``call_ns``
    (the launching call's op, name and start; null where not matched)."""
    launches = _launches(calls.filter(pl.col("kind") == "rccl_api"))
    k = kernels.with_columns(
        pl.int_range(pl.len()).over(_KEYS, order_by="dispatch_id").alias("launch")
    )
    if launches.is_empty():
        return k.with_columns(
            pl.lit(None, pl.String).alias("call_op"),
            pl.lit(None, pl.String).alias("call_name"),
            pl.lit(None, pl.Int64).alias("call_ns"),
        ).drop("launch")
    calls = launches.group_by(_KEYS).len("calls")
    counts = (
        k.group_by(_KEYS)
        .len("kernels")
        .join(calls, on=_KEYS, how="full", coalesce=True)
        .with_columns(pl.col("kernels").fill_null(0), pl.col("calls").fill_null(0))
    )
    differ = counts.filter(pl.col("kernels") != pl.col("calls"))
    warnings.add(
        "RCCL kernels whose thread made a different number of RCCL launches (calls and "
        "groups): their op is not taken from the calls",
        int(differ.get_column("kernels").sum() or 0),
    )
    agreed = counts.filter(pl.col("kernels") == pl.col("calls")).select(_KEYS)
    matched = launches.join(agreed, on=_KEYS)
    return k.join(matched, on=[*_KEYS, "launch"], how="left").drop("launch")


def _launches(calls: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, thread): its ungrouped collective calls and outermost groups, numbered in
    time order (``launch``), with op, name and start."""
    name = pl.col("name")
    opened = (name == "ncclGroupStart").cast(pl.Int64) - (name == "ncclGroupEnd").cast(pl.Int64)
    c = (
        calls.sort([*_KEYS, "start_ns", "correlation"])
        .with_columns(pl.col("name").fill_null(""), opened.alias("delta"))
        .with_columns(pl.col("delta").cum_sum().over(_KEYS).alias("depth_after"))
        .with_columns(
            (pl.col("depth_after") - pl.col("delta")).alias("depth"),
            ((pl.col("delta") == -1) & (pl.col("depth_after") <= 0))
            .cast(pl.Int64)
            .cum_sum()
            .over(_KEYS)
            .alias("closed"),  # fmt: skip
            op_name_expr(name, default=None).alias("op"),
        )
        .filter(pl.col("op").is_not_null())
    )
    # an ungrouped call is a launch of its own; the calls of one group share one launch
    unit = pl.when(pl.col("depth") > 0).then(pl.lit("g") + pl.col("closed").cast(pl.String))
    unit = unit.otherwise(pl.lit("c") + pl.int_range(pl.len()).over(_KEYS).cast(pl.String))
    return (
        c.with_columns(unit.alias("unit"))
        .group_by([*_KEYS, "unit"])
        .agg(
            pl.col("start_ns").min().alias("call_ns"),
            pl.when(pl.col("op").n_unique() == 1)
            .then(pl.col("op").first())
            .otherwise(pl.lit("unknown"))
            .alias("call_op"),  # fmt: skip
            pl.when(pl.len() == 1)
            .then(pl.col("name").first())
            .otherwise(pl.lit("ncclGroupEnd"))
            .alias("call_name"),  # fmt: skip
        )
        .with_columns(pl.int_range(pl.len()).over(_KEYS, order_by="call_ns").alias("launch"))
        .drop("unit")
    )
