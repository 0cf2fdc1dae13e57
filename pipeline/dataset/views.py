"""DuckDB over the dataset: one view per table, named after it, reading the manifest's parts.

Views read only the parts the manifest lists, with the partition columns (``job``, ``rank``)
taken from the folder names and every column cast to its schema type, so an empty table is
still a typed view and queries never depend on which sources a job happened to have.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipeline.dataset.schema import TableSchema, load_schemas
from pipeline.dataset.store import MANIFEST, Manifest, read_manifest
from pipeline.errors import DatasetError

_DUCKDB_TYPES = {
    "string": "VARCHAR",
    "int64": "BIGINT",
    "int32": "INTEGER",
    "float64": "DOUBLE",
    "bool": "BOOLEAN",
    "list<int64>": "BIGINT[]",
    "list<string>": "VARCHAR[]",
}


def connect(dataset: Path | str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table of ``dataset``.

    With ``read_only``, DuckDB itself is locked down once the views exist: file access only
    to the parts the manifest lists (``allowed_paths``), no other file, extension or
    database (``enable_external_access = false``), and no way to undo that
    (``lock_configuration``). Statements that write are refused by the caller
    (:func:`pipeline.dataset.query.run_query`).

    Raises
    ------
    DatasetError
        When ``dataset`` is not a tokenwire dataset.
    """
    dataset = Path(dataset)
    if not (dataset / MANIFEST).is_file():
        raise DatasetError(f"{dataset}: not a tokenwire dataset (no {MANIFEST})")
    manifest = read_manifest(dataset)
    con = duckdb.connect()
    parts: list[str] = []
    for schema in load_schemas().values():
        con.execute(view_sql(dataset, manifest, schema))
        parts.extend(str(dataset / p) for p in manifest.parts(schema.name))
    if read_only:
        con.execute("SET allowed_paths = ?", [parts])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


def view_sql(dataset: Path, manifest: Manifest, schema: TableSchema) -> str:
    """The ``CREATE VIEW`` statement for one table."""
    casts = ", ".join(
        f"CAST({_ident(c.name)} AS {_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}"
        for c in schema.columns
    )
    parts = [str(dataset / p) for p in manifest.parts(schema.name)]
    if not parts:
        return f"CREATE VIEW {_ident(schema.name)} AS SELECT {_null_row(schema)} WHERE false"
    files = "[" + ", ".join(_literal(p) for p in parts) + "]"
    hive_types = ", ".join(
        f"{_literal(c)}: '{_DUCKDB_TYPES[schema.column(c).type_name]}'" for c in schema.partition
    )
    return (
        f"CREATE VIEW {_ident(schema.name)} AS SELECT {casts} FROM read_parquet({files}, "
        f"hive_partitioning = true, hive_types = {{{hive_types}}}, union_by_name = true)"
    )


def _null_row(schema: TableSchema) -> str:
    return ", ".join(
        f"CAST(NULL AS {_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}" for c in schema.columns
    )


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
