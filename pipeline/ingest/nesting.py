"""Nesting of host-side ranges on a thread: depth, enclosing range, module path.

Profilers record ranges (ops, annotations, NVTX pushes) as start/end pairs per thread. Which
range encloses which is not written down; it follows from the times. This module derives it
with sorts, cumulative sums and as-of joins instead of a Python stack walk per event.
"""

from __future__ import annotations

import polars as pl


def add_nesting(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add ``depth`` and ``parent_id`` to ranges with ``op_id, pid, tid, start_ns, end_ns``.

    Within one (pid, tid), a range's parent is the innermost range open at its start. At equal
    times a range that ends closes before one that starts opens, and a longer range opens
    before a shorter one, so back-to-back and same-start ranges nest the way they were
    recorded. Ranges that overlap without nesting (rare, async) get a best-effort parent.
    """
    if ranges.is_empty():
        return ranges.with_columns(
            pl.lit(None, pl.Int64).alias("depth"), pl.lit(None, pl.Int64).alias("parent_id")
        )
    zero = pl.col("end_ns") == pl.col("start_ns")
    # One row per boundary. kind orders ties at one instant: closes of non-empty ranges (0),
    # then opens (1), then closes of empty ranges (2), which must follow their own open.
    opens = ranges.select(
        "op_id",
        "pid",
        "tid",
        pl.col("start_ns").alias("t"),
        pl.lit(1, pl.Int8).alias("kind"),
        (-pl.col("end_ns")).alias("tie"),
        pl.lit(1, pl.Int64).alias("delta"),
    )
    closes = ranges.select(
        "op_id",
        "pid",
        "tid",
        pl.col("end_ns").alias("t"),
        pl.when(zero).then(pl.lit(2, pl.Int8)).otherwise(pl.lit(0, pl.Int8)).alias("kind"),
        (-pl.col("start_ns")).alias("tie"),
        pl.lit(-1, pl.Int64).alias("delta"),
    )
    bounds = (
        pl.concat([opens, closes])
        .sort("pid", "tid", "t", "kind", "tie", "op_id")
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("pos"),
            (pl.col("delta").cum_sum().over("pid", "tid") - pl.col("delta")).alias("open_before"),
        )
        .filter(pl.col("kind") == 1)
        .select("op_id", "pid", "tid", "pos", pl.col("open_before").alias("depth"))
    )
    candidates = bounds.select(
        "pid",
        "tid",
        "pos",
        (pl.col("depth") + 1).alias("depth"),
        pl.col("op_id").alias("parent_id"),
    ).sort("pos")
    linked = bounds.sort("pos").join_asof(
        candidates,
        on="pos",
        by=["pid", "tid", "depth"],
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    return ranges.join(linked.select("op_id", "depth", "parent_id"), on="op_id", how="left")


def add_scope_path(
    ranges: pl.DataFrame, *, scope: pl.Expr, label: pl.Expr, out: str, sep: str = "/"
) -> pl.DataFrame:
    """Add column ``out``: labels of the enclosing ranges where ``scope`` holds, outermost first.

    ``ranges`` must have ``op_id, parent_id, depth`` (see :func:`add_nesting`). A scope range
    includes its own label. Runs one join per nesting level, not one step per range.
    """
    frame = ranges.with_columns(scope.fill_null(False).alias("_is_scope"), label.alias("_label"))
    known = pl.DataFrame(schema={"op_id": pl.Int64, out: pl.String})
    pieces = []
    for depth in sorted(frame.get_column("depth").drop_nulls().unique().to_list()):
        level = (
            frame.filter(pl.col("depth") == depth)
            .join(
                known.rename({"op_id": "parent_id", out: "_parent_path"}),
                on="parent_id",
                how="left",
            )
            .with_columns(
                pl.when(pl.col("_is_scope"))
                .then(
                    pl.when(pl.col("_parent_path").is_null())
                    .then(pl.col("_label"))
                    .otherwise(pl.col("_parent_path") + sep + pl.col("_label"))
                )
                .otherwise(pl.col("_parent_path"))
                .alias(out)
            )
        )
        known = level.select("op_id", out)
        pieces.append(level.drop("_parent_path"))
    result = pl.concat(pieces) if pieces else frame.with_columns(pl.lit(None, pl.String).alias(out))
    return result.drop("_is_scope", "_label")
