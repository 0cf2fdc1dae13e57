"""Ad hoc SQL over a dataset: run statements through DuckDB views, return a Polars frame."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import duckdb
import polars as pl

from ..dataset.location import local_text, part_error
from ..dataset.snapshot import read_snapshot
from ..dataset.views import SPILL_MIN_BYTES, SPILL_PER_PART_BYTE, connect
from ..errors import TokenwireError
from ..guards import interrupt_calls


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
    """Run the statements in ``text`` in order; the result of the last one is returned
    (:func:`run_queries` returns every one's)."""
    results = run_queries(dataset, text, allow_writes=allow_writes)
    last = results[-1] if results else None
    return last if last is not None else pl.DataFrame()


def run_queries(
    dataset: Path, text: str, *, allow_writes: bool = False
) -> list[pl.DataFrame | None]:
    """Run the statements in ``text`` in order; each one's result, None for a statement
    that returns none (``SET``, ``CREATE``).

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
            f"{local_text(str(exc).splitlines()[0])}; tokenwire sql reads only the dataset's "
            "own files (--allow-writes lifts this)"
        ) from exc
    except duckdb.Error as exc:
        raise part_error(exc) or QueryError(local_text(str(exc).splitlines()[0])) from exc


def _run(dataset: Path, text: str, *, allow_writes: bool) -> list[pl.DataFrame | None]:
    con = connect(dataset, read_only=not allow_writes)
    try:
        with interrupt_calls(con.interrupt):  # (Ctrl-C stops a query that runs for hours)
            return statement_results(con, text, allow_writes=allow_writes)
    except duckdb.OutOfMemoryException as exc:
        if "max_temp_directory_size" not in str(exc):
            raise
        setting = "SELECT current_setting('max_temp_directory_size')"
        limit = con.execute(setting).fetchone()[0]
        raise QueryError(
            f"the query needs more than the {limit} of temporary disk tokenwire sql allows "
            f"({SPILL_MIN_BYTES / 1024**3:g} GiB, or {SPILL_PER_PART_BYTE} times the "
            "dataset's parts where that is more; TOKENWIRE_SQL_SPILL_BYTES sets it in bytes)"
        ) from exc
    finally:
        con.close()


#: Why a statement that may write is refused, as ``tokenwire sql`` says it.
SQL_READ_ONLY = (
    "tokenwire sql opens the dataset read-only (run it with --allow-writes if you mean to write)"
)


def run_statements(
    con: duckdb.DuckDBPyConnection,
    text: str,
    *,
    allow_writes: bool = False,
    refusal: str = SQL_READ_ONLY,
) -> pl.DataFrame:
    """Run the statements in ``text`` on ``con`` in order and return the last one's result
    (:func:`statement_results`), an empty frame when it returns none."""
    last = statement_results(con, text, allow_writes=allow_writes, refusal=refusal)[-1]
    return last if last is not None else pl.DataFrame()


def statement_results(
    con: duckdb.DuckDBPyConnection,
    text: str,
    *,
    allow_writes: bool = False,
    refusal: str = SQL_READ_ONLY,
) -> list[pl.DataFrame | None]:
    """Run the statements in ``text`` on ``con`` in order; each one's result as a Polars
    frame (types Polars or CSV cannot hold as text, whole numbers as integers:
    :func:`_frame`), None for a statement that returns none. Unless ``allow_writes``, every
    statement is checked to only read before any runs (``refusal``: why one that may write
    is refused).

    Raises
    ------
    QueryError
        No statement, or one that may write.
    duckdb.Error
        DuckDB's own error (the caller words it).
    """
    statements = con.extract_statements(text)
    if not statements:
        raise QueryError("no SQL statement found")
    if not allow_writes:
        for statement in statements:
            _check_read_only(con, statement, refusal)
    results: list[pl.DataFrame | None] = []
    for i, statement in enumerate(statements):
        # (each result is read before the next statement runs: a relation is lazy, and a
        # later SET or CREATE would change what it reads)
        relation = con.sql(statement.query)
        shown = relation is not None and (i == len(statements) - 1 or _returns_rows(statement))
        results.append(_frame(_with_text_columns(relation)) if shown else None)
    return results


#: Statement types whose result is rows the user asked for (a SET's or a CREATE's is
#: DuckDB's "Success" or row count).
_ROW_TYPES = frozenset(
    {
        duckdb.StatementType.SELECT,
        duckdb.StatementType.EXPLAIN,
        duckdb.StatementType.PRAGMA,
        duckdb.StatementType.CALL,
        duckdb.StatementType.MULTI,
    }
)


def _returns_rows(statement) -> bool:
    try:
        return statement.type in _ROW_TYPES
    except ValueError:  # a statement type newer than this duckdb module's enum knows
        return False


#: DuckDB types that Polars cannot hold, or that CSV and JSON cannot write (binary, maps
#: with keys that are not text): a column of such a type, or holding one, comes as text,
#: DuckDB's own spelling of the value.
_AS_TEXT = re.compile(
    r"\b(INTERVAL|UNION|MAP|BIT|BLOB|TIMETZ|TIME WITH TIME ZONE|VARINT|BIGNUM|GEOMETRY)\b"
)


def _with_text_columns(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``relation`` with its columns of a type in :data:`_AS_TEXT` cast to text."""
    types = [str(t) for t in relation.types]
    if not any(_AS_TEXT.search(t) for t in types):
        return relation
    names = ['"' + c.replace('"', '""') + '"' for c in relation.columns]
    return relation.project(
        ", ".join(
            f"CAST({n} AS VARCHAR) AS {n}" if _AS_TEXT.search(t) else n
            for n, t in zip(names, types, strict=True)
        )
    )


def _frame(relation: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    try:
        return whole_numbers_as_integers(pl.from_arrow(relation.to_arrow_table()))
    except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
        # (a type Polars has no place for that _AS_TEXT does not know yet)
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise QueryError(
            f"the result cannot be shown: {first}; cast the column to VARCHAR"
        ) from exc


def whole_numbers_as_integers(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its columns of whole numbers in a wider type (DuckDB's ``sum`` of a
    BIGINT is a HUGEINT or DECIMAL(38,0)) as Int64 where every value fits, so that they
    print as integers and are numbers in JSON."""
    wide = [
        c
        for c, t in frame.schema.items()
        if isinstance(t, pl.Decimal) and t.scale == 0 or t in (pl.Int128, pl.UInt64)
    ]
    narrowed = frame.select(pl.col(c).cast(pl.Int64, strict=False) for c in wide)
    fits = [c for c in wide if narrowed[c].null_count() == frame[c].null_count()]
    return frame.with_columns(narrowed.select(fits)) if fits else frame


def _check_read_only(con: duckdb.DuckDBPyConnection, statement, refusal: str) -> None:
    """Refuse ``statement`` unless DuckDB's parser says it only reads.

    ``EXPLAIN ANALYZE`` runs the statement it explains, so that one is checked too.
    """
    try:
        kind = statement.type
    except ValueError:  # a statement type newer than this duckdb module's enum knows
        kind = None
    if kind == duckdb.StatementType.EXPLAIN:
        inner = con.extract_statements(_EXPLAIN.sub("", statement.query, count=1))
        if len(inner) == 1 and inner[0].type != duckdb.StatementType.EXPLAIN:
            return _check_read_only(con, inner[0], refusal)
        kind = None
    if kind in READ_ONLY_TYPES:
        return None
    name = kind.name if kind is not None else _first_word(statement.query)
    raise QueryError(f"{name} statement refused: {refusal}")


def _first_word(query: str) -> str:
    words = query.split()
    return words[0].upper()[:40] if words else "this"


def flatten_nested(frame: pl.DataFrame) -> pl.DataFrame:
    """Lists and structs as JSON text, for formats that hold only flat values (CSV)."""
    nested = [c for c, t in frame.schema.items() if isinstance(t, (pl.List, pl.Array, pl.Struct))]
    return frame.with_columns(
        pl.struct(pl.col(c).alias("v")).struct.json_encode().str.slice(5).str.head(-1).alias(c)
        for c in nested
    )


def write_result(frame: pl.DataFrame, output: Path, fmt: str) -> None:
    """Write a query result to ``output`` in ``fmt`` (table is written as CSV), whole or not
    at all (:func:`pipeline.output.atomic_output`)."""
    from ..output import atomic_output

    with atomic_output(output) as tmp:
        if fmt == "parquet":
            frame.write_parquet(tmp)
        elif fmt == "json":
            frame.write_json(tmp)
        else:
            flatten_nested(frame).write_csv(tmp)
