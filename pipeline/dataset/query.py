"""Ad hoc SQL over a dataset: run statements through DuckDB views, return a Polars frame."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from pipeline.dataset.views import connect
from pipeline.errors import TokenwireError


class QueryError(TokenwireError):
    """SQL that DuckDB rejected; the message is DuckDB's first line."""


def run_query(dataset: Path, text: str) -> pl.DataFrame:
    """Run the statements in ``text`` in order; the result of the last one is returned."""
    if not text.strip():
        raise QueryError("no SQL given")
    con = connect(dataset)
    try:
        statements = con.extract_statements(text)
        if not statements:
            raise QueryError("no SQL statement found")
        for statement in statements[:-1]:
            con.execute(statement).fetchall()
        relation = con.sql(statements[-1].query)
        if relation is None:
            return pl.DataFrame()
        return pl.from_arrow(relation.to_arrow_table())
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from exc
    finally:
        con.close()


def write_result(frame: pl.DataFrame, output: Path, fmt: str) -> None:
    """Write a query result to ``output`` in ``fmt`` (table is written as CSV)."""
    if fmt == "parquet":
        frame.write_parquet(output)
    elif fmt == "json":
        frame.write_json(output)
    else:
        frame.write_csv(output)
