"""Nesting of host-side ranges on a thread: depth, enclosing range, module path.

Profilers record ranges (ops, annotations, NVTX pushes) as start/end pairs per thread. Which
range encloses which is not written down; it follows from the times. This module derives it
with sorts, cumulative sums and binary searches instead of a Python stack walk per event.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ...ingest.result import ENGINE

#: Bits of a boundary's position in the packed (thread, depth, position) sort key.
_POS_BITS = 34


def add_nesting(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add ``depth`` and ``parent_id`` to ranges with ``op_id, pid, tid, start_ns, end_ns``.

    Within one (pid, tid) (of one ``file``, where ``ranges`` has that column: several files
    parsed together), a range's parent is the innermost range open at its start. At equal
    times a range that ends closes before one that starts opens, and a longer range opens
    before a shorter one, so back-to-back and same-start ranges nest the way they were
    recorded. Ranges that overlap without nesting (rare, async) get a best-effort parent.

    Worked on plain numpy arrays (one sort of the boundaries, a running sum, one binary
    search): a few arrays of the ranges' length, where the same steps as frame sorts and an
    as-of join cost several times the memory.
    """
    if ranges.is_empty():
        return ranges.with_columns(
            pl.lit(None, pl.Int64).alias("depth"), pl.lit(None, pl.Int64).alias("parent_id")
        )
    n = ranges.height
    keys = ["file", "pid", "tid"] if "file" in ranges.columns else ["pid", "tid"]
    thread = ranges.select(pl.struct(keys).rank("dense").cast(pl.Int64)).to_series()
    thread = thread.to_numpy()
    start = ranges.get_column("start_ns").to_numpy()
    end = ranges.get_column("end_ns").to_numpy()
    op_id = ranges.get_column("op_id").to_numpy()
    # One boundary per open and per close. kind orders ties at one instant: closes of
    # non-empty ranges (0), then opens (1), then closes of empty ranges (2), which must follow
    # their own open; then longer ranges open first (tie), then op_id.
    kind = np.concatenate([np.ones(n, np.int8), np.where(end == start, 2, 0).astype(np.int8)])
    order = np.lexsort(
        (
            np.concatenate([op_id, op_id]),
            np.concatenate([-end, -start]),
            kind,
            np.concatenate([start, end]),
            np.concatenate([thread, thread]),
        )
    )
    kind = kind[order]
    delta = np.where(kind == 1, 1, -1).astype(np.int32)
    # Every range opens and closes on its own thread, so the running sum is back to 0 at the
    # end of each thread: one cumulative sum counts the ranges open on each thread.
    open_before = np.cumsum(delta, dtype=np.int64) - delta
    pos = np.flatnonzero(kind == 1)  # opens, in boundary order
    row = order[pos]
    depth = open_before[pos]
    del kind, delta, open_before, order
    # The parent is the last open before this one on the same thread one level up: search
    # for it in the opens sorted by (thread, depth, position), packed into one integer.
    key = thread[row] * (int(depth.max()) + 2) + depth
    packed = (key << _POS_BITS) | pos
    by_key = np.argsort(packed, kind="stable")
    packed = packed[by_key]
    j = np.searchsorted(packed, ((key - 1) << _POS_BITS) | pos, side="left") - 1
    j_safe = np.clip(j, 0, None)
    found = (j >= 0) & ((packed[j_safe] >> _POS_BITS) == key - 1) & (depth > 0)
    out_depth = np.empty(n, np.int64)
    out_depth[row] = depth
    out_parent = np.empty(n, np.int64)
    out_parent[row] = np.where(found, op_id[row[by_key[j_safe]]], 0)
    has_parent = np.empty(n, bool)
    has_parent[row] = found
    return ranges.with_columns(
        pl.Series("depth", out_depth),
        pl.when(pl.Series(has_parent)).then(pl.Series(out_parent)).alias("parent_id"),
    )


def add_scope_path(
    ranges: pl.DataFrame, *, scope: pl.Expr, label: pl.Expr, out: str, sep: str = "/"
) -> pl.DataFrame:
    """Add column ``out``: labels of the enclosing ranges where ``scope`` holds, outermost first.

    ``ranges`` must have ``op_id, parent_id, depth`` (see :func:`add_nesting`). A scope range
    includes its own label. Two passes: the innermost scope of every range (integers only,
    :func:`_innermost_scopes`), then the path of each scope range (scope rows only, one join
    per nesting level). Every range then takes its scope's path: each distinct path is one
    string, shared by all the ranges inside it, instead of one string per range (millions in
    a big trace).
    """
    is_scope = scope.fill_null(False) & label.is_not_null()
    frame = ranges.select("op_id", "parent_id", is_scope.alias("_is_scope"))
    innermost = _innermost_scopes(frame).alias("_scope")
    # a scope's enclosing scope: that of its parent range
    parent_scopes = pl.DataFrame([frame.get_column("op_id").alias("parent_id"), innermost])
    scopes = (
        ranges.lazy()
        .filter(is_scope)
        .select("op_id", "parent_id", "depth", label.alias("_label"))
        .join(
            parent_scopes.lazy().rename({"_scope": "parent_scope"}),
            on="parent_id",
            how="left",
        )
        .select("op_id", pl.col("parent_scope").alias("parent_id"), "depth", "_label")
        .collect(engine=ENGINE)
    )
    paths = _by_level(
        scopes,
        lambda level, parent: level.select(
            "op_id",
            pl.when(parent.is_null())
            .then(pl.col("_label"))
            .otherwise(parent + sep + pl.col("_label"))
            .alias("_scope"),
        ),
        {"op_id": pl.Int64, "_scope": pl.String},
    ).rename({"op_id": "_scope", "_scope": out})
    # (joined on the one column: a join of the whole frame would copy each of its columns)
    path = (
        innermost.to_frame()
        .lazy()
        .join(paths.lazy(), on="_scope", how="left", maintain_order="left")
        .collect(engine=ENGINE)
        .get_column(out)
    )
    return ranges.hstack([path.rechunk()])


def rows_of(op_ids: pl.Series, wanted: pl.Series) -> np.ndarray:
    """The row in ``op_ids`` of each id in ``wanted`` (-1: NULL, or not in the file).

    Both parsers number ops uniquely per file, so an op_id names one row even in a file that
    holds several ranks.
    """
    ids = op_ids.to_numpy()
    order = None if np.all(ids[1:] > ids[:-1]) else np.argsort(ids, kind="stable")
    ordered = ids if order is None else ids[order]
    if wanted.null_count():
        want = wanted.fill_null(-1).to_numpy()
        known = wanted.is_not_null().to_numpy()
    else:  # (no query for what every row has)
        want = wanted.to_numpy()
        known = np.ones(len(want), dtype=bool)
    at = np.minimum(np.searchsorted(ordered, want), len(ordered) - 1)
    found = known & (ordered[at] == want)
    rows = at if order is None else order[at]
    return np.where(found, rows, -1)


def _innermost_scopes(frame: pl.DataFrame) -> pl.Series:
    """The op_id of the innermost scope range around each range (itself when it is one),
    null outside every scope.

    Pointer jumping on row numbers: each row points at itself when it is a scope, else at
    its parent; a row whose target is no scope takes its target's pointer, which doubles the
    distance covered each round, so a nesting depth d takes about log2(d) rounds of numpy
    gathers instead of a join per level.
    """
    parent = rows_of(frame.get_column("op_id"), frame.get_column("parent_id"))
    is_scope = frame.get_column("_is_scope").to_numpy()
    target = np.where(is_scope, np.arange(len(parent)), parent)
    for _ in range(64):  # nesting is acyclic: a depth of 2**64 is never reached
        safe = np.maximum(target, 0)
        moving = (target >= 0) & ~is_scope[safe]
        if not moving.any():
            break
        target = np.where(moving, target[safe], target)
    op_ids = frame.get_column("op_id").to_numpy()
    found = target >= 0
    scope_ids = np.where(found, op_ids[np.maximum(target, 0)], 0)
    return pl.Series(scope_ids, dtype=pl.Int64).set(pl.Series(~found), None)


def _by_level(frame: pl.DataFrame, step, schema: dict) -> pl.DataFrame:
    """``step(level, parent)`` for each depth of ``frame`` in turn, outermost first, where
    ``parent`` is the value already worked out for each row's ``parent_id`` (``_scope``),
    looked up among every level done so far (a scope's enclosing scope may be several levels
    up).
    """
    pieces = []
    for depth in sorted(frame.get_column("depth").drop_nulls().unique().to_list()):
        parents = pl.concat(pieces) if pieces else pl.DataFrame(schema=schema)
        level = frame.filter(pl.col("depth") == depth).join(
            parents.rename({"op_id": "parent_id", "_scope": "_parent"}), on="parent_id", how="left"
        )
        pieces.append(step(level, pl.col("_parent")))
    return pl.concat(pieces) if pieces else pl.DataFrame(schema=schema)
