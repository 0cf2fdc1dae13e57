"""Run a file's parse on a thread of Polars' own pool, where its queries start at once.

Polars hands the work of most queries (a filter, a join, a group-by, a select of several
expressions) to its thread pool. From any other thread, each such query wakes a pool thread
and waits for it: two context switches (``perf stat``), 150 to 400 us a query on this
project's 2-core VM however few the rows, against about 30 us for a query that stays on the
caller's thread. A parse runs one query after another, some 140 for a small NCCL log and 270
for a small Kineto trace, so that wait was a third of a many-rank job's ingest. A query
called from a pool thread runs on it directly (rayon), and the pool's other threads still
take parallel work from it.

The parse is therefore the function of a one-row Polars query whose two expressions Polars
evaluates in its pool. Measured on the 1,024-rank generated job, one thread: a 210 KB trace
86 to 89 -> 55 to 58 ms, a 7 KB NCCL log 56 to 63 -> 40 ms; the tables are the same.
Ctrl-C still stops it: the interrupt reaches the function's Python code, and is raised here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def on_polars_thread(fn: Callable[[], T]) -> T:
    """``fn()``, run on a thread of Polars' pool; what it raises is raised here."""
    import polars as pl

    result: list[T] = []
    error: list[BaseException] = []

    def call(column: pl.Series) -> pl.Series:
        try:
            result.append(fn())
        except BaseException as exc:  # (re-raised on the caller's thread, below)
            error.append(exc)
        return column

    frame = pl.DataFrame({"a": [0], "b": [0]})
    # (two expressions: Polars evaluates them in its pool; one alone it runs on this thread)
    frame.select(pl.col("a").map_batches(call, return_dtype=pl.Int64), pl.col("b"))
    if error:
        raise error[0]
    if not result:  # (a Polars that never called the function: run it here)
        return fn()
    return result[0]
