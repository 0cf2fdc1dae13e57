"""DuckDB over the dataset: one view per table, named after it, reading the manifest's parts.

Views read only the parts the manifest lists, by their paths inside the dataset folder and
never as a glob (:mod:`pipeline.dataset.location`), with the partition columns (``job``,
``rank``) taken from the manifest's part paths and every column cast to its schema type, so
an empty table is still a typed view and queries never depend on which sources a job
happened to have. Each part's columns are checked against the schema when a view is made:
a column of another type or of no column of the table is one error naming the part.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ..dataset import rank_sets
from ..dataset.location import part_paths, partition_values
from ..dataset.schema import TableSchema, load_schemas, max_text_chunk_bytes
from ..dataset.sql_files import measures_sql, sql_text
from ..dataset.store import Manifest, read_parts_by_table, require_dataset, require_parts
from ..errors import DatasetError, shown

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
    dataset: Path | str,
    *,
    derived: bool = True,
    read_only: bool = False,
    manifest: Manifest | None = None,
    tables: Collection[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table of ``dataset``.

    With ``derived=False`` only the raw tables get views (``tokenwire link`` makes the rest).
    With ``read_only``, DuckDB itself is locked down once the views exist: file access only
    to the parts the manifest lists (``allowed_paths``), no other file, extension or
    database (``enable_external_access = false``), and no way to undo that
    (``lock_configuration``). Statements that write are refused by the caller
    (:func:`pipeline.dataset.query.run_query`). ``manifest``: the dataset's, already read
    by a caller that holds the writer lock (else it is read here). ``tables``: only these
    tables get views (a caller that reads a few of them: each view reads the footers of
    all its parts); the others are then unknown to the connection.

    Raises
    ------
    DatasetError
        When ``dataset`` is not a tokenwire dataset.
    """
    dataset = Path(dataset)
    require_dataset(dataset)
    schemas = [
        s
        for s in load_schemas().values()
        if (derived or not s.derived) and (tables is None or s.name in tables)
    ]
    by_table = manifest.parts_by_table() if manifest is not None else read_parts_by_table(dataset)
    by_table = {schema.name: by_table.get(schema.name, []) for schema in schemas}
    parts = [rel for rels in by_table.values() for rel in rels]
    require_parts(dataset, parts)
    # Progress bars would go to stdout, among the data.
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET parquet_metadata_cache = true")
    try:
        for schema in schemas:
            con.execute(view_sql(con, dataset, by_table[schema.name], schema))
    except duckdb.Error:
        con.close()
        require_readable(dataset, parts)  # a damaged part is named; anything else is a bug
        raise
    con.execute(measures_sql())
    con.execute(sql_text(__package__, "sources.sql"))
    if derived:
        add_convenience_views(con)
    if read_only:
        # DuckDB may always reach its temporary folder, by default ``.tmp`` of the current
        # folder: one of its own, unguessable and not there yet, which it removes on close
        spill = Path(tempfile.gettempdir()) / f"tokenwire-sql-{secrets.token_hex(8)}"
        con.execute("SET temp_directory = ?", [str(spill)])
        # (DuckDB's own bound is 90% of that disk: a runaway query would fill it)
        con.execute("SET max_temp_directory_size = ?", [f"{spill_limit(dataset, parts)}B"])
        con.execute("SET allowed_paths = ?", [part_paths(con, dataset, parts)])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


#: A read-only connection spills at most this many bytes to disk, or
#: :data:`SPILL_PER_PART_BYTE` times the dataset's parts where that is more; a query that
#: needs more fails with its limit named (``$TOKENWIRE_SQL_SPILL_BYTES`` sets the bound).
SPILL_MIN_BYTES = 4 * 1024**3
#: Parquet parts hold a table in about a fifth to a tenth of its size in memory: a query that
#: sorts or joins every table of the dataset fits in this many times their size.
SPILL_PER_PART_BYTE = 16


def spill_limit(dataset: Path, parts: list[str]) -> int:
    """The bytes a read-only connection to ``dataset`` may spill to disk:
    ``$TOKENWIRE_SQL_SPILL_BYTES`` when set, else :data:`SPILL_MIN_BYTES` or
    :data:`SPILL_PER_PART_BYTE` times the size of ``parts``, whichever is more."""
    value = os.environ.get("TOKENWIRE_SQL_SPILL_BYTES", "")
    if value.isdigit():
        return int(value)
    size = sum(os.path.getsize(dataset / rel) for rel in parts if (dataset / rel).is_file())
    return max(SPILL_MIN_BYTES, SPILL_PER_PART_BYTE * size)


def add_convenience_views(con: duckdb.DuckDBPyConnection) -> None:
    """The views of ``views.sql`` over the connection's raw and derived tables (each a
    table or view of ``con`` already)."""
    con.execute(sql_text(__package__, "views.sql"))


def require_readable(dataset: Path, parts: list[str]) -> None:
    """Name the first of ``parts`` that is not a whole Parquet file: every footer is read
    first (what a view needs), then every page. Called when DuckDB failed on the dataset,
    to tell damaged input (exit 1, naming the part) from a bug.

    Raises
    ------
    DatasetError
        The part and pyarrow's reason.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    def refuse(rel: str, exc: Exception) -> DatasetError:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return DatasetError(f"{dataset}: {rel}: unreadable Parquet part: {first}")

    for rel in parts:
        try:
            pq.read_metadata(dataset / rel)
        except (OSError, ValueError, pa.ArrowException) as exc:
            if os.path.lexists(dataset / rel):  # (one a commit deleted meanwhile is not damaged)
                raise refuse(rel, exc) from None
    for rel in parts:
        try:
            for _batch in pq.ParquetFile(dataset / rel).iter_batches(64 * 1024):
                pass
        except (OSError, ValueError, pa.ArrowException) as exc:
            if os.path.lexists(dataset / rel):
                raise refuse(rel, exc) from None


def view_sql(
    con: duckdb.DuckDBPyConnection, dataset: Path, parts: list[str], schema: TableSchema
) -> str:
    """The ``CREATE VIEW`` statement for one table over its ``parts`` (relative paths; see
    :func:`parts_select`). Communicators get two views: their rows as stored, which link
    gathers each communicator's members from, and the table's, with every list whole
    (:mod:`pipeline.dataset.rank_sets`)."""
    select = parts_select(con, dataset, parts, schema)
    if schema.name == rank_sets.TABLE:
        return f"CREATE VIEW {rank_sets.STORED_VIEW} AS {select};\n{rank_sets.VIEW_SQL}"
    return f"CREATE VIEW {_ident(schema.name)} AS {select}"


def parts_select(
    con: duckdb.DuckDBPyConnection, dataset: Path, parts: list[str], schema: TableSchema
) -> str:
    """A ``SELECT`` of the rows of ``parts`` (relative paths) of a table, as the parts hold
    them: every column of its schema, with its type.

    Parts written before a column was added to the schema lack it; the select gives NULL
    there. Parts are read in groups of the same columns and partition values, each without
    ``union_by_name`` and without hive partitioning (the values are the manifest's, written
    as constants): with ``union_by_name``, DuckDB reads the schema of every part again each
    time a query names the view (measured: 0.2 s per reference of a table of 2,048 parts,
    more than the scan itself).

    Raises
    ------
    DatasetError
        A part holding a column the table does not have, or one of another type.
    """
    if not parts:
        return empty_select(schema)
    selects = []
    for partition, group in _parts_by_columns(con, dataset, parts):
        files = "[" + ", ".join(_literal(p) for p in group.paths) + "]"
        source = f"read_parquet({files}, hive_partitioning = false)"
        first = f"read_parquet([{_literal(group.paths[0])}], hive_partitioning = false)"
        present = {
            row[0]: row[1] for row in con.execute(f"DESCRIBE SELECT * FROM {first}").fetchall()
        }
        _check_columns(dataset, group.parts[0], schema, present, partition)
        _check_ranges(con, dataset, group, schema, present)
        _check_text_sizes(con, dataset, group)
        values = dict(partition)
        casts = ", ".join(
            f"CAST({_value(c.name, present, values)} AS "
            f"{_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}"
            for c in schema.columns
        )
        selects.append(f"SELECT {casts} FROM {source}")
    return "\nUNION ALL\n".join(selects)


def _value(name: str, present: dict[str, str], partition: dict[str, str]) -> str:
    """The SQL of column ``name`` of a group of parts: the manifest's partition value, the
    part's column, or NULL."""
    if name in partition:
        return _literal(partition[name])
    return _ident(name) if name in present else "NULL"


def _check_columns(
    dataset: Path,
    rel: str,
    schema: TableSchema,
    present: dict[str, str],
    partition: tuple[tuple[str, str], ...],
) -> None:
    """Refuse part ``rel`` when a column it holds is not one of ``schema``'s, is a partition
    column its path gives, or has another type than the schema's (a float where integers
    belong, a decimal, a timestamp where nanoseconds are integers)."""
    folders = {key for key, _ in partition}
    for name, kind in present.items():
        where = f"{dataset}: {rel}: column {shown(name, 60)}"
        try:
            column = schema.column(name)
        except KeyError:
            raise DatasetError(f"{where}: not a column of table {schema.name}") from None
        if name in folders:
            raise DatasetError(
                f"{where}: the part's folder gives this column; a part never holds it"
            )
        expected = _DUCKDB_TYPES[column.type_name]
        if kind != expected:
            raise DatasetError(
                f"{where}: {shown(kind, 60)} where the schema of {schema.name} says {expected}"
            )


def _check_ranges(
    con: duckdb.DuckDBPyConnection,
    dataset: Path,
    group: _Group,
    schema: TableSchema,
    present: dict[str, str],
) -> None:
    """Refuse a part of ``group`` holding a value outside its column's ``range`` in the
    schema (NaN included): a count of ranks or bytes a few bytes of Parquet can claim, which
    a view would expand into a list of that many ranks or a query add up past 64 bits."""
    for column in schema.columns:
        if column.range is None or column.name not in present:
            continue
        lo, hi = column.range
        name = _ident(column.name)
        files = "[" + ", ".join(_literal(p) for p in group.paths) + "]"
        bad = con.execute(
            f"SELECT filename, {name} FROM read_parquet({files}, filename = true, "
            f"hive_partitioning = false) WHERE NOT ({name} BETWEEN {lo} AND {hi}) LIMIT 1"
        ).fetchone()
        if bad is not None:
            rel = group.parts[group.paths.index(bad[0])]
            raise DatasetError(
                f"{dataset}: {rel}: column {column.name}: {bad[1]:.4g} is outside "
                f"{lo:,}..{hi:,}, the values the schema of {schema.name} allows"
            )


def _check_text_sizes(con: duckdb.DuckDBPyConnection, dataset: Path, group: _Group) -> None:
    """Refuse a part of ``group`` with a text column whose row group holds more than
    :func:`max_text_chunk_bytes` bytes, read from the footers alone: every value of it is
    that long at most, and a longer one would be inflated into memory by the first query
    that reads the column."""
    limit = max_text_chunk_bytes()
    bad = con.execute(
        "SELECT file_name, path_in_schema, row_group_id, total_uncompressed_size "
        "FROM parquet_metadata(?) WHERE type = 'BYTE_ARRAY' AND total_uncompressed_size > ? "
        "LIMIT 1",
        [group.paths, limit],
    ).fetchone()
    if bad is not None:
        rel = group.parts[group.paths.index(bad[0])]
        column = shown(bad[1].split(", ")[0], 60)
        raise DatasetError(
            f"{dataset}: {rel}: column {column}: row group {bad[2]} holds {bad[3]:,} bytes of "
            f"text, more than the {limit:,} a column of one row group may hold "
            "(TOKENWIRE_MAX_TEXT_CHUNK_BYTES)"
        )


@dataclass
class _Group:
    """Parts of one table read by one ``read_parquet``: same columns, same partition."""

    parts: list[str]
    paths: list[str]


def _parts_by_columns(
    con: duckdb.DuckDBPyConnection, dataset: Path, parts: list[str]
) -> list[tuple[tuple[tuple[str, str], ...], _Group]]:
    """``parts`` (relative paths) grouped by their Parquet columns (names, types and logical
    types) and partition values (from the manifest's paths): (partition values, the group's
    parts in the order of ``parts``) per group, which is read without ``union_by_name``.
    One read of every footer (which a connection with ``parquet_metadata_cache`` keeps for
    the queries after)."""
    paths = part_paths(con, dataset, parts)
    rows = con.execute(
        "SELECT file_name, list(name || ':' || coalesce(type, '') || ':' "
        "|| coalesce(converted_type, '') || ':' || coalesce(CAST(logical_type AS VARCHAR), '') "
        "ORDER BY name, type) FROM parquet_schema(?) GROUP BY file_name",
        [paths],
    ).fetchall()
    columns_of = {file: tuple(columns) for file, columns in rows}
    groups: dict[tuple, tuple[tuple[tuple[str, str], ...], _Group]] = {}
    for rel, path in zip(parts, paths, strict=True):
        partition = partition_values(rel)
        key = (columns_of[path], partition)
        group = groups.setdefault(key, (partition, _Group([], [])))[1]
        group.parts.append(rel)
        group.paths.append(path)
    return list(groups.values())


def empty_select(schema: TableSchema) -> str:
    """A ``SELECT`` of no rows with the columns and types of ``schema``."""
    nulls = ", ".join(
        f"CAST(NULL AS {_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}" for c in schema.columns
    )
    return f"SELECT {nulls} WHERE false"


def typed_columns(schema: TableSchema) -> str:
    """The select list of every column of ``schema``, each cast to its type (a no-op where
    DuckDB already has it; a ``sum`` is HUGEINT, which Arrow would get as a decimal)."""
    return ", ".join(
        f"CAST({_ident(c.name)} AS {_DUCKDB_TYPES[c.type_name]}) AS {_ident(c.name)}"
        for c in schema.columns
    )


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
