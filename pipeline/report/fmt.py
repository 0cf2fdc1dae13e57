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


#: The units a column of durations (ns) or of bytes is written in, largest first.
UNITS: dict[str, tuple[tuple[str, float], ...]] = {
    "ns": (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0)),
    "bytes": (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)),
}


def column_unit(values: list[Any], kind: str) -> tuple[str, float, int]:
    """The one unit a column of ``kind`` (``ns`` or ``bytes``) is written in: that of its
    largest value, with the decimals that give it three significant digits; (unit, its
    size, decimals)."""
    finite = [abs(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    largest = max(finite, default=0.0)
    units = UNITS[kind]
    name, size = next(((n, s) for n, s in units if largest >= s), units[-1])
    scaled = largest / size
    if size == 1.0 or scaled == 0:
        return name, size, 0
    return name, size, max(0, 2 - math.floor(math.log10(scaled)))


def in_unit(value: Any, size: float, decimals: int) -> str:
    """``value`` in a column's unit (:func:`column_unit`); – where it has none."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    return f"{value / size:,.{decimals}f}"


def axis_unit(values: list[Any], kind: str) -> tuple[str, str]:
    """A chart axis of raw ``ns`` or ``bytes`` labelled in the unit a table column of the
    same values is written in (:func:`column_unit`): (the unit, a Vega ``labelExpr``). The
    data stay raw, so tooltips keep the exact figure."""
    name, size, _ = column_unit(values, kind)
    return name, f"format(datum.value / {size:g}, ',')"


def count(value: float | None) -> str:
    """A count, with one decimal only when it is a fraction (a mean over steps)."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def ratio(value: float | None) -> str:
    """A ratio like 1.25×: two decimals, so that 1.00× reads as a match and a column of
    ratios lines up."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:,.2f}×"


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
