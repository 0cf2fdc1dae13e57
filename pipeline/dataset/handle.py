"""A dataset opened from Python (notebooks): SQL in, Polars out."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from ..dataset.catalog import TableInfo, describe
from ..dataset.query import run_query
from ..dataset.views import connect


class Dataset:
    """A tokenwire dataset folder.

    Examples
    --------
    >>> import tokenwire
    >>> ds = tokenwire.open("run42.tw")                                  # doctest: +SKIP
    >>> ds.sql("SELECT op, sum(bytes) FROM collectives GROUP BY op")    # doctest: +SKIP
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def sql(self, query: str) -> pl.DataFrame:
        """Run ``query`` (one or more statements) over the dataset's views; the last result."""
        return run_query(self.path, query)

    def tables(self) -> list[TableInfo]:
        """Every table with its columns, units and row count."""
        return describe(self.path)

    def to_duckdb(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection holding one view per table, for anything :meth:`sql` lacks."""
        return connect(self.path)

    def __repr__(self) -> str:
        return f"Dataset({str(self.path)!r})"
