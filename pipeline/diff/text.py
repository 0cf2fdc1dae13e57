"""``tokenwire diff`` as text: each view a table that fits the terminal's width, its
numbers in full."""

from __future__ import annotations

import textwrap

import polars as pl
import polars.selectors as cs


def wrapped(text: str, width: int) -> str:
    """``text`` in lines of ``width`` columns (0: one line)."""
    return textwrap.fill(text, width) if width else text


def table_text(frame: pl.DataFrame, width: int) -> str:
    """A diff view as a table: numbers in full (bytes, not 2.158592e6), times in whole ns
    (the unit in the column's name), other fractions to 3 decimals, fitting ``width``
    columns: its leading text columns (the rows' keys) and as many of the others as fit,
    then the keys again with the next ones (``width`` 0: one block)."""
    times = cs.ends_with("_ns", "_ns_a", "_ns_b")
    frame = frame.with_columns(cs.float().round(3)).with_columns(times.round(0))
    if "metric" in frame.columns:  # (diff_steps: a row per metric, its unit in its name)
        whole = pl.col("metric").str.ends_with("_ns")
        floats = [n for n in ("a", "b", "change") if n in frame.columns]
        frame = frame.with_columns(
            pl.when(whole).then(pl.col(n).round(0)).otherwise(pl.col(n)).alias(n) for n in floats
        )
    keys = []
    for name, dtype in frame.schema.items():
        if dtype != pl.String:
            break
        keys.append(name)
    values = frame.columns[len(keys) :]
    # (long keys, such as layer paths and op names, lose their middle until they leave a
    # third of the width to values: their heads and tails tell them apart)
    text_chars = 80
    while (
        text_chars > 16
        and width
        and _table_width(_cut(frame.select(keys), keys, text_chars)) > width * 2 // 3
    ):
        text_chars -= 4
    frame = _cut(frame, keys, text_chars)
    blocks: list[list[str]] = []
    for name in values:
        trial = [*keys, *(blocks[-1] if blocks else []), name]
        if blocks and (not width or _table_width(frame.select(trial)) <= width):
            blocks[-1].append(name)
        else:
            blocks.append([name])
    return "\n".join(_table_text(frame.select([*keys, *block])) for block in blocks or [[]])


def _cut(frame: pl.DataFrame, columns: list[str], chars: int) -> pl.DataFrame:
    """``frame`` with the text of ``columns`` longer than ``chars`` cut in the middle."""
    head, tail = chars // 2, chars - chars // 2 - 1
    return frame.with_columns(
        pl.when(pl.col(c).str.len_chars() > chars)
        .then(pl.col(c).str.head(head) + "…" + pl.col(c).str.tail(tail))
        .otherwise(pl.col(c))
        .alias(c)
        for c in columns
    )


def _table_text(frame: pl.DataFrame) -> str:
    with pl.Config(
        tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=1000, tbl_width_chars=10_000,
        fmt_float="full", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
    ):  # fmt: skip
        return str(frame) + "\n"


def _table_width(frame: pl.DataFrame) -> int:
    return max(len(line) for line in _table_text(frame).splitlines())
