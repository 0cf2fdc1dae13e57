"""DuckDB over the dataset: one view per table, named after it, reading the manifest's parts.

Views read only the parts the manifest lists, with the partition columns (``job``, ``rank``)
taken from the folder names and every column cast to its schema type, so an empty table is
still a typed view and queries never depend on which sources a job happened to have.
"""

from __future__ import annotations

from importlib import resources
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


def connect(
    dataset: Path | str, *, derived: bool = True, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table of ``dataset``.

    With ``derived=False`` only the raw tables get views (``tokenwire link`` makes the rest).
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
    # Progress bars would go to stdout, among the data.
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET parquet_metadata_cache = true")
    parts: list[str] = []
    for schema in load_schemas().values():
        if derived or not schema.derived:
            con.execute(view_sql(con, dataset, manifest, schema))
            parts.extend(str(dataset / p) for p in manifest.parts(schema.name))
    con.execute(resources.files("pipeline.dataset").joinpath("sources.sql").read_text())
    if derived:
        con.execute(resources.files("pipeline.dataset").joinpath("views.sql").read_text())
    if read_only:
        con.execute("SET allowed_paths = ?", [parts])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


def view_sql(
    con: duckdb.DuckDBPyConnection, dataset: Path, manifest: Manifest, schema: TableSchema
) -> str:
    """The ``CREATE VIEW`` statement for one table.

    Parts written before a column was added to the schema lack it; the view gives NULL there.
    """
    parts = [str(dataset / p) for p in manifest.parts(schema.name)]
    if not parts:
        return f"CREATE VIEW {_ident(schema.name)} AS SELECT {_null_row(schema)} WHERE false"
    files = "[" + ", ".join(_literal(p) for p in parts) + "]"
    hive_types = ", ".join(
        f"{_literal(c)}: '{_DUCKDB_TYPES[schema.column(c).type_name]}'" for c in schema.partition
    )
    source = (
        f"read_parquet({files}, hive_partitioning = true, hive_types = {{{hive_types}}}, "
        "union_by_name = true)"
    )
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    casts = ", ".join(
        f"CAST({_ident(c.name) if c.name in present else 'NULL'} AS "
        f"{_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}"
        for c in schema.columns
    )
    return f"CREATE VIEW {_ident(schema.name)} AS SELECT {casts} FROM {source}"


def _null_row(schema: TableSchema) -> str:
    return ", ".join(
        f"CAST(NULL AS {_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}" for c in schema.columns
    )


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
