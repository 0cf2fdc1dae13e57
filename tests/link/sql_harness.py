"""Run one link SQL file on a few hand-made rows and read back what it creates, the way
Perfetto tests its SQL standard library: rows in, the exact rows out.

An in-memory DuckDB gets the tables a file says it reads (its ``-- reads:`` and ``-- takes:``
header, pipeline/link/plan.py) from small Polars frames holding only the columns the file
uses, typed as ``schemas/`` says; then the macros and views of ``dataset/sources.sql``; then
the file itself, run as ``tokenwire link`` runs it (runner._run_file). A test compares a table
the file creates with rows it derived by hand.
"""

from __future__ import annotations

import duckdb
import polars as pl

from pipeline.dataset.schema import load_schemas, table_schema
from pipeline.dataset.sql_files import measures_sql, sql_text
from pipeline.dataset.views import typed_columns
from pipeline.link.plan import SqlFile, created_objects, sql_files
from pipeline.link.runner import _run_file
from pipeline.model.link_inputs import TABLES

_POLARS = {
    "string": pl.String,
    "int64": pl.Int64,
    "int32": pl.Int32,
    "float64": pl.Float64,
    "bool": pl.Boolean,
    "list<int64>": pl.List(pl.Int64),
    "list<string>": pl.List(pl.String),
}

#: What sources.sql makes for every connection: a file may read these without being given them.
_SOURCES_OBJECTS = set(created_objects(sql_text("pipeline.dataset", "sources.sql")))


def _column_type(table: str, column: str, like: tuple[str, ...]) -> pl.DataType:
    """``column``'s type: in ``table``'s schema, else in the first of ``like`` that has it,
    else the one type every schema with such a column gives it."""
    schemas = load_schemas()
    for name in (table, *like):
        if name in schemas:
            for c in schemas[name].columns:
                if c.name == column:
                    return _POLARS[c.type_name]
    types = {c.type_name for s in schemas.values() for c in s.columns if c.name == column}
    if len(types) != 1:
        raise KeyError(f"{table}.{column}: no single type in schemas/ ({sorted(types)})")
    return _POLARS[types.pop()]


def rows(table: str, *, like: tuple[str, ...] = (), **columns: list) -> pl.DataFrame:
    """Rows of ``table``, one list per column, each column typed as ``schemas/`` gives it
    (a working table, which has no schema, by the tables named in ``like``)."""
    return pl.DataFrame(
        {
            name: pl.Series(name, values, _column_type(table, name, like))
            for name, values in columns.items()
        }
    )


def _file(name: str) -> SqlFile:
    return next(f for f in sql_files() if f.name == name)


def _macros_read(sql: SqlFile) -> dict[str, str]:
    """The statements that make the macros of the other link files (those ``sql`` reads and
    those they call)."""
    made = {}
    for other in sql_files():
        for statement in duckdb.extract_statements(other.text):
            for obj, kind in created_objects(statement.query).items():
                # (every macro of the other files, in their order: a macro read may call
                # others, _layer_index calls _token_layers)
                if kind == "macro" and other.name != sql.name:
                    made[obj] = statement.query
    return made


def run_file(
    name: str, inputs: dict[str, pl.DataFrame], *, secondary: bool | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection on which link SQL file ``name`` has run over ``inputs`` (table name ->
    rows). Every table the file declares it reads or takes must be given (other than
    sources.sql's objects and the macros of other link files, which are made as those files
    make them), and no other. ``secondary``: whether the job has collectives of a source
    other than the profiler's (runner.SECONDARY_ONLY); by default, whether ``collectives``
    holds any."""
    sql = _file(name)
    macros = _macros_read(sql)
    needed = {*sql.reads, *sql.takes} - _SOURCES_OBJECTS - set(macros)
    assert set(inputs) - {"collectives", "ranks"} <= needed, (
        f"{name} does not read {set(inputs) - needed}"
    )
    assert needed <= set(inputs), f"{name} reads {needed - set(inputs)}: give them"
    con = duckdb.connect()
    con.execute("SET threads = 1")  # (one thread: row order of ties as on a small job)
    given = dict(inputs)
    # sources.sql's views read the collectives and the ranks (rank_hosts): an empty typed
    # table where a file needs none, the schema's other columns NULL where a test gives some
    for table in ("collectives", "ranks"):
        given[table] = _whole(table, given.get(table))
    schemas = load_schemas()
    given = {t: _whole(t, f) if t in schemas else f for t, f in given.items()}
    for table, frame in given.items():
        con.register("_given", frame.to_arrow())
        con.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM _given")
        con.unregister("_given")
    con.execute(measures_sql())
    con.execute(sql_text("pipeline.dataset", "sources.sql"))
    for statement in macros.values():
        con.execute(statement)
    if secondary is None:
        (secondary,) = con.execute(
            "SELECT coalesce(bool_or(source <> 'kineto'), false) FROM collectives"
        ).fetchone()
    _run_file(con, sql, secondary=secondary)
    return con


def _whole(table: str, frame: pl.DataFrame | None) -> pl.DataFrame:
    """``frame`` with every column of ``table``'s schema, those it lacks NULL (no rows where
    ``frame`` is None)."""
    columns = table_schema(table).columns
    if frame is None:
        return rows(table, **{c.name: [] for c in columns})
    missing = [c.name for c in columns if c.name not in frame.columns]
    return frame.with_columns(
        pl.lit(None, _column_type(table, name, ())).alias(name) for name in missing
    )


def _columns():
    return table_schema("collectives").columns


def created(
    name: str,
    inputs: dict[str, pl.DataFrame],
    table: str,
    *,
    order_by: list[str],
    secondary: bool | None = None,
) -> pl.DataFrame:
    """The rows of ``table`` after link SQL file ``name`` ran over ``inputs``, sorted by
    ``order_by``: a published table with its schema's columns and types, a working table
    with every column."""
    con = run_file(name, inputs, secondary=secondary)
    schemas = load_schemas()
    select = typed_columns(schemas[table]) if table in schemas else "*"
    got = con.sql(f"SELECT {select} FROM {table}").pl()
    con.close()
    return got.sort(order_by, nulls_last=True)


def model_input(table: str, **columns: list) -> pl.DataFrame:
    """Rows of ``table``, one of the model's inputs that link registers
    (pipeline.model.link_inputs.TABLES), one list per column, typed as link types it; no
    rows where no column is given."""
    select = ", ".join(f"NULL::{t} AS {n}" for n, t in TABLES[table].items())
    empty = duckdb.sql(f"SELECT {select} LIMIT 0").pl()
    return pl.DataFrame(columns, schema=empty.schema) if columns else empty


def no_gradient_plan() -> pl.DataFrame:
    """``_gradient_plan`` of a job linked without a job.yaml: no rows."""
    return model_input("_gradient_plan")


def no_job_facts() -> pl.DataFrame:
    """``_job_facts`` with no row: no job of the test has the degrees of a job.yaml."""
    return model_input("_job_facts")


def job_facts(job: str, bucket_key: str, dims: list[str]) -> pl.DataFrame:
    """``_job_facts`` of one job linked with a job.yaml (link_inputs.facts_row): the key
    that sets its gradient buckets and its dimensions of degree above 1."""
    return model_input(
        "_job_facts", job=[job], tokens_per_step=[None], bucket_key=[bucket_key], dims=[dims]
    )


def no_alternatives() -> pl.DataFrame:
    """``_alternative_bytes`` with no row: no other value of a key is tried."""
    return model_input("_alternative_bytes")
