"""Ad hoc SQL over a dataset: run statements through DuckDB views, return a Polars frame."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import duckdb
import polars as pl

from pipeline.dataset.snapshot import read_snapshot
from pipeline.dataset.views import connect
from pipeline.errors import TokenwireError


class QueryError(TokenwireError):
    """SQL that DuckDB rejected; the message is DuckDB's first line."""


#: Statement types ``tokenwire sql`` runs without ``--allow-writes``: none of them writes.
READ_ONLY_TYPES = frozenset(
    {
        duckdb.StatementType.SELECT,
        duckdb.StatementType.EXPLAIN,
        duckdb.StatementType.PRAGMA,
        duckdb.StatementType.CALL,
        duckdb.StatementType.SET,
        duckdb.StatementType.VARIABLE_SET,
        duckdb.StatementType.MULTI,  # PIVOT: a SELECT over a temporary enum
    }
)
_EXPLAIN = re.compile(r"\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?", re.IGNORECASE)


def run_query(dataset: Path, text: str, *, allow_writes: bool = False) -> pl.DataFrame:
    """Run the statements in ``text`` in order; the result of the last one is returned.

    Unless ``allow_writes``, the dataset is opened read-only (see
    :func:`pipeline.dataset.views.connect`) and a statement that could write (``COPY``,
    ``INSERT``, ``DELETE``, ``CREATE``, ``ATTACH``, ``EXPORT``, ``INSTALL``/``LOAD``...) is
    refused before anything runs. A read-only query that an ingest's or link's commit
    interrupts (a part it read was replaced) runs again over the new commit
    (:func:`pipeline.dataset.snapshot.read_snapshot`); one that may write runs once.
    """
    if not text.strip():
        raise QueryError("no SQL given")
    try:
        if allow_writes:
            return _run(dataset, text, allow_writes=True)
        return read_snapshot(dataset, functools.partial(_run, dataset, text, allow_writes=False))
    except duckdb.PermissionException as exc:
        raise QueryError(
            f"{str(exc).splitlines()[0]}; tokenwire sql reads only the dataset's own files "
            "(--allow-writes lifts this)"
        ) from exc
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from exc


def _run(dataset: Path, text: str, *, allow_writes: bool) -> pl.DataFrame:
    con = connect(dataset, read_only=not allow_writes)
    try:
        statements = con.extract_statements(text)
        if not statements:
            raise QueryError("no SQL statement found")
        if not allow_writes:
            for statement in statements:
                _check_read_only(con, statement)
        for statement in statements[:-1]:
            con.execute(statement).fetchall()
        relation = con.sql(statements[-1].query)
        if relation is None:
            return pl.DataFrame()
        return pl.from_arrow(relation.to_arrow_table())
    finally:
        con.close()


def _check_read_only(con: duckdb.DuckDBPyConnection, statement) -> None:
    """Refuse ``statement`` unless DuckDB's parser says it only reads.

    ``EXPLAIN ANALYZE`` runs the statement it explains, so that one is checked too.
    """
    kind = statement.type
    if kind == duckdb.StatementType.EXPLAIN:
        inner = con.extract_statements(_EXPLAIN.sub("", statement.query, count=1))
        if len(inner) == 1 and inner[0].type != duckdb.StatementType.EXPLAIN:
            return _check_read_only(con, inner[0])
        kind = None
    if kind in READ_ONLY_TYPES:
        return None
    name = kind.name if kind is not None else "this EXPLAIN"
    raise QueryError(
        f"{name} statement refused: tokenwire sql opens the dataset read-only "
        "(run it with --allow-writes if you mean to write)"
    )


def write_result(frame: pl.DataFrame, output: Path, fmt: str) -> None:
    """Write a query result to ``output`` in ``fmt`` (table is written as CSV)."""
    if fmt == "parquet":
        frame.write_parquet(output)
    elif fmt == "json":
        frame.write_json(output)
    else:
        frame.write_csv(output)
