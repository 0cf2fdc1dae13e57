"""What a parser returns: tables keyed by table name, plus facts about the file.

Every parser (``pipeline.ingest.<format>.parse``) returns a :class:`ParseResult`. Its tables
hold the columns of ``schemas/<table>.yaml`` except ``job``, ``source`` and ``file_id``,
which the writer adds; missing nullable columns are null-filled when the tables are
conformed, so a parser only builds what its format knows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa

from ..dataset.arrow_convert import empty_table, from_numpy
from ..dataset.schema import WRITER_COLUMNS, table_schema

#: The engine the parsers' lazy plans are collected on. Polars 2 collects a LazyFrame on its
#: streaming engine by default, whose start-up costs more than a file's small frames take to
#: work through (measured: one plan over a DLRM rank's collectives, 11.6 ms streaming, 4.7 ms
#: in memory); eager DataFrame methods use the in-memory engine already.
ENGINE = "in-memory"


class Warnings:
    """Counts warnings by message, so a million bad lines give one line of summary each."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def add(self, message: str, count: int = 1) -> None:
        """Record ``count`` occurrences of ``message`` (no-op for count <= 0)."""
        if count > 0:
            self._counts[message] += count

    def extend(self, other: Warnings) -> None:
        """Add ``other``'s warnings after these."""
        for message, count in other._counts.items():
            self.add(message, count)

    @property
    def total(self) -> int:
        """Number of warnings recorded."""
        return sum(self._counts.values())

    def messages(self) -> list[str]:
        """Distinct messages, most frequent first, each with its count."""
        return [f"{msg} (x{n})" if n > 1 else msg for msg, n in self._counts.most_common()]


@dataclass
class ParseResult:
    """The output of one parser on one file.

    Attributes
    ----------
    format
        Source format name, also written as ``source`` on every row (``kineto``, ...).
    tables
        Table name -> Arrow table (columns as in ``schemas/``; ``rank`` included).
    format_version
        What the file declares or its shape implies, for ``files.format_version``.
    rank_source
        How the rank(s) were found (``distributedInfo``, ``file_name``, ...).
    warnings
        Counted warnings about the content (never fatal).
    derived
        Whether the collectives' attribution and the ``time_breakdown`` table are in
        ``tables`` already (:mod:`pipeline.ingest.derive`; a batch of Kineto files works
        them out over all its files at once), so ingest does not work them out again.
    """

    format: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    format_version: str | None = None
    rank_source: str | None = None
    warnings: Warnings = field(default_factory=Warnings)
    derived: bool = False


def columns(table: pa.Table | None, dtypes: dict[str, pl.DataType]) -> pl.DataFrame:
    """Columns of a parsed table as a Polars frame: NULL where the parser left one out, no
    rows where it made no such table."""
    if table is None:
        return pl.DataFrame(schema=dtypes)
    if all(n in table.column_names for n in dtypes):  # one conversion, no cast when typed so
        frame = pl.from_arrow(table.select(list(dtypes)))
        if frame.schema == pl.Schema(dtypes):
            return frame
    return pl.DataFrame(
        [pl.from_arrow(_column(table, n)).cast(t).alias(n) for n, t in dtypes.items()]
    )


def parsed_table(name: str, frame: pl.DataFrame) -> pa.Table:
    """A parser's frame of table ``name`` as Arrow; with no rows, every column the parser
    gives (the schema's, less the writer's), typed."""
    if frame.height:
        return frame.to_arrow()
    schema = table_schema(name).arrow
    return empty_table(pa.schema([f for f in schema if f.name not in WRITER_COLUMNS]))


#: A row's duration, as every parser's tables give it: its end less its start.
DUR_NS = pl.col("end_ns") - pl.col("start_ns")


def schema_columns(table: str, frame: pl.DataFrame, /, **made: pl.Expr | str) -> pl.DataFrame:
    """The columns of table ``table`` that a parser gives, from ``frame``, in the schema's
    order: each column of ``schemas/<table>.yaml`` (the writer's aside) that ``made`` makes
    (an expression, or the name of the column of ``frame`` it is), else that ``frame`` holds
    under the schema's name. The others are NULL when the table is conformed."""
    columns = parser_columns(table)
    unknown = sorted(set(made) - set(columns))
    if unknown:
        raise ValueError(f"table {table}: unknown columns {unknown}")
    picked = []
    for column in columns:
        if column in made:
            value = made[column]
            picked.append((pl.col(value) if isinstance(value, str) else value).alias(column))
        elif column in frame.columns:
            picked.append(pl.col(column))
    return frame.select(picked)


def parser_columns(table: str, *, without: tuple[str, ...] = ()) -> list[str]:
    """The columns of table ``table`` that a parser gives (the writer's aside), in the
    schema's order, less ``without`` (those the parser does not know, or adds later)."""
    return [
        c.name
        for c in table_schema(table).columns
        if c.name not in WRITER_COLUMNS and c.name not in without
    ]


def parser_schema(table: str, names: tuple[str, ...]) -> pa.Schema:
    """The Arrow schema of columns ``names`` of table ``table``, typed as ``schemas/``
    says (nullable: the table is conformed after)."""
    schema = table_schema(table)
    return pa.schema([pa.field(n, schema.column(n).type) for n in names])


def values_at(table: pa.Table, rows: np.ndarray, names: tuple[str, ...]) -> pl.DataFrame:
    """Columns ``names`` of ``table`` at ``rows`` only (a big trace's text columns would
    otherwise be copied whole), as strings; NULL where the parser left one out."""
    return pl.DataFrame([_take(_column(table, n), rows).cast(pl.String).alias(n) for n in names])


def _take(column: pa.ChunkedArray, rows: np.ndarray) -> pl.Series:
    if pa.types.is_string_view(column.type):  # Polars' own layout: shared, then gathered
        return pl.from_arrow(column).gather(rows)
    return pl.from_arrow(column.take(from_numpy(rows)))


def _column(table: pa.Table, name: str) -> pa.ChunkedArray:
    if name in table.column_names:
        return table.column(name)
    return pa.chunked_array([pa.nulls(table.num_rows)])
