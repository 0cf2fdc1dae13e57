"""Numbers as people read them in the report: bytes, durations, counts, ratios."""

from __future__ import annotations

import math
from typing import Any

import polars as pl


def nbytes(value: float | None) -> str:
    """Bytes with a decimal unit (kB = 1000 B, as in GB/s)."""
    if value is None or not math.isfinite(value):
        return "–"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.3g} {unit}"
    return f"{value:,.0f} B"


def duration(ns: float | None) -> str:
    """Nanoseconds as ms, µs or s."""
    if ns is None or not math.isfinite(ns):
        return "–"
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:,.3g} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:,.3g} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:,.3g} µs"
    return f"{ns:,.0f} ns"


def count(value: float | None) -> str:
    """A count, with one decimal only when it is a fraction (a mean over steps)."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def ratio(value: float | None) -> str:
    """A ratio like 1.25×."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.3g}×"


def share(value: float | None) -> str:
    """A fraction as a percentage like 42.0%."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{100 * value:.1f}%"


class Rows:
    """A chart's data rows, handed to Altair as one opaque value.

    Altair's ``to_dict`` visits every value of a plain list of rows with slow protocol
    checks (most of a report's time for a few thousand points); it passes an object it does
    not know through untouched, and ``page.chart_spec`` puts the rows back.
    """

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows


def rows(frame: pl.DataFrame) -> Rows:
    """:func:`records` of a frame, for ``alt.Data(values=...)``."""
    return Rows(records(frame))


def records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows of a frame as JSON-ready dicts (NaN and infinities become None)."""
    # (by column: a check of every value took more than the rows themselves, 0.13 s of the
    # 16,384-rank report)
    finite = [
        pl.when(pl.col(name).is_finite()).then(pl.col(name)).alias(name)
        for name, dtype in frame.schema.items()
        if dtype.is_float()
    ]
    return frame.with_columns(finite).to_dicts()
