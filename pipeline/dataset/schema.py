"""Table schemas: read from ``schemas/*.yaml`` into Arrow, and conform parser output to them.

``schemas/`` is the only place column names, types and units are written down; this module
turns it into ``pyarrow.Schema`` objects and checks every table before it is written.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

from ..dataset.arrow_convert import string_scalar
from ..errors import DatasetError

#: libyaml's loader where PyYAML was built with it: the pure-Python one takes 0.19 s to read
#: the schemas, in every process that touches the dataset (each ingest worker too).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "list<int64>": pa.list_(pa.int64()),
    "list<string>": pa.list_(pa.string()),
}

#: Columns every parser leaves out: the writer fills them with one value per file.
WRITER_COLUMNS = ("job", "source", "file_id")
#: Most bytes of text (uncompressed) one column of one row group of a part may hold;
#: ``$TOKENWIRE_MAX_TEXT_CHUNK_BYTES`` sets another. tokenwire writes row groups of 256 Ki
#: rows, whose longest text columns (Kineto ``input_dims``) hold tens of MB; a value as long
#: as this, which a few KB of compressed Parquet can hold, is no trace's, and one past 2 GiB
#: cannot be held as an Arrow string at all. Readers check it from a part's footer
#: (:mod:`pipeline.dataset.views`), writers before they write (:func:`conform`).
MAX_TEXT_CHUNK_BYTES = 1 << 30


@dataclass(frozen=True)
class Column:
    """One column of a table: name, Arrow type, unit, nullability, meaning."""

    name: str
    type: pa.DataType
    type_name: str
    unit: str
    nullable: bool
    meaning: str
    #: The values a part may hold (``range: [lo, hi]`` in the schema file; NaN is outside
    #: any); None where the schema states none.
    range: tuple[float, float] | None = None


@dataclass(frozen=True)
class TableSchema:
    """One table of the dataset."""

    name: str
    description: str
    partition: tuple[str, ...]
    columns: tuple[Column, ...]
    derived: bool = False

    @property
    def arrow(self) -> pa.Schema:
        """The full schema, partition columns included."""
        return pa.schema([pa.field(c.name, c.type, c.nullable) for c in self.columns])

    def part_arrow(self, folders: Collection[str]) -> pa.Schema:
        """The schema of one Parquet part whose path has the partition ``folders``: those
        columns live in the path, not the file (version 2 parts had a rank folder too)."""
        return pa.schema(
            [pa.field(c.name, c.type, c.nullable) for c in self.columns if c.name not in folders]
        )

    def column(self, name: str) -> Column:
        """The column called ``name``."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


def schemas_dir() -> Path:
    """Where the schema files are: ``$TOKENWIRE_SCHEMAS``, else ``pipeline/schemas/`` in an
    installed wheel (pyproject.toml packs the repository's ``schemas/`` there), else the
    repository's ``schemas/`` beside ``pipeline/`` (a checkout or an editable install)."""
    env = os.environ.get("TOKENWIRE_SCHEMAS")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]
    packed = package / "schemas"
    return packed if packed.is_dir() else package.parent / "schemas"


@functools.cache
def load_schemas() -> dict[str, TableSchema]:
    """Every table schema, by table name."""
    out: dict[str, TableSchema] = {}
    for path in sorted(schemas_dir().glob("*.yaml")):
        doc = yaml.load(path.read_text(), Loader=_YAML_LOADER)
        cols = tuple(
            Column(
                name=c["name"],
                type=_TYPES[c["type"]],
                type_name=c["type"],
                unit=c.get("unit") or "",
                nullable=bool(c.get("nullable", True)),
                meaning=c.get("meaning", ""),
                range=tuple(c["range"]) if "range" in c else None,
            )
            for c in doc["columns"]
        )
        out[doc["table"]] = TableSchema(
            name=doc["table"],
            description=doc.get("description", ""),
            partition=tuple(doc.get("partition", [])),
            columns=cols,
            derived=bool(doc.get("derived", False)),
        )
    if not out:
        raise FileNotFoundError(f"no table schemas found in {schemas_dir()}")
    return out


def table_schema(name: str) -> TableSchema:
    """The schema of table ``name``."""
    schemas = load_schemas()
    if name not in schemas:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(sorted(schemas))}")
    return schemas[name]


def conform(name: str, table: pa.Table, **constants: str) -> pa.Table:
    """Return ``table`` with exactly the columns of schema ``name``, in order, with its types.

    Missing nullable columns are filled with nulls; ``constants`` (e.g. ``job``, ``source``,
    ``file_id``) fill whole columns with one value. An unknown column, a missing required
    column, a null in a required column or a value that does not cast safely is an error
    (a ``ValueError`` naming the table and column): that is a parser bug, not bad input.
    """
    schema = table_schema(name)
    if table.schema.equals(schema.arrow):  # (conformed already: a batch's parts of one file)
        check_ranges(schema, table)
        check_text(schema, table)
        return _with_constants(name, table, schema, constants)
    known = {c.name for c in schema.columns}
    unknown = [c for c in table.column_names if c not in known]
    if unknown:
        raise ValueError(f"table {name}: unknown columns {unknown}")
    n = table.num_rows
    arrays = []
    for col in schema.columns:
        if col.name in constants:
            value = string_scalar(constants[col.name])
            arr = pa.repeat(value if col.type == pa.string() else value.cast(col.type), n)
        elif col.name in table.column_names:
            arr = table.column(col.name)
            if arr.type != col.type:
                try:
                    arr = arr.cast(col.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise ValueError(f"table {name}: column {col.name}: {exc}") from exc
        elif col.nullable:
            arr = pa.nulls(n, col.type)
        else:
            raise ValueError(f"table {name}: required column {col.name} missing")
        if not col.nullable and arr.null_count:
            raise ValueError(f"table {name}: required column {col.name} has nulls")
        arrays.append(arr)
    out = pa.Table.from_arrays(arrays, schema=schema.arrow)
    check_ranges(schema, out)
    check_text(schema, out)
    return out


def max_text_chunk_bytes() -> int:
    """:data:`MAX_TEXT_CHUNK_BYTES`, or ``$TOKENWIRE_MAX_TEXT_CHUNK_BYTES`` when set."""
    value = os.environ.get("TOKENWIRE_MAX_TEXT_CHUNK_BYTES", "")
    return int(value) if value.isdigit() else MAX_TEXT_CHUNK_BYTES


def check_text(schema: TableSchema, table: pa.Table) -> None:
    """Refuse a table (a row group to be written) with a text column of more bytes than
    :func:`max_text_chunk_bytes`: what a reader of the dataset would refuse is never written.

    Raises
    ------
    DatasetError
        ``TABLE.COLUMN: N bytes of text in one row group, more than LIMIT``.
    """
    limit = max_text_chunk_bytes()
    for col in schema.columns:
        text_type = col.type in (pa.string(), pa.list_(pa.string()))
        # (a partition column lives in the part's folder, not its rows)
        if not text_type or col.name not in table.column_names or col.name in schema.partition:
            continue
        size = 0
        for chunk in table.column(col.name).chunks:
            text = chunk.flatten() if pa.types.is_list(chunk.type) else chunk
            if len(text):  # (the offsets buffer: [validity, offsets, data])
                offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)
                first, last = offsets[text.offset], offsets[text.offset + len(text)]
                size += int(last - first) + 4 * len(text)
        if size > limit:
            raise DatasetError(
                f"{schema.name}.{col.name}: {size:,} bytes of text in one row group, more than "
                f"the {limit:,} a column of one row group may hold (TOKENWIRE_MAX_TEXT_CHUNK_BYTES)"
            )


def check_ranges(schema: TableSchema, table: pa.Table) -> None:
    """Refuse a value of ``table`` outside its column's ``range`` (NaN included): what a
    reader of the dataset would refuse is never written.

    Raises
    ------
    DatasetError
        ``TABLE.COLUMN: VALUE is outside LO..HI``: the input claimed it (an ingest names
        the file in front).
    """
    # (NumPy over the Arrow buffers, exact for int64: not pyarrow.compute, where a Python
    # bound handed to Arrow makes pyarrow import pandas, which the parsing workers never
    # need (tests/test_command_imports.py), nor Polars, 0.1 s to import for link's wire)
    for col in schema.columns:
        if col.range is None or col.name not in table.column_names:
            continue
        lo, hi = col.range
        for chunk in table.column(col.name).chunks:
            value = _first_outside(chunk, lo, hi)
            if value is not None:
                raise DatasetError(
                    f"{schema.name}.{col.name}: {value:.4g} is outside {lo:,}..{hi:,}, the "
                    f"values the schema of {schema.name} allows"
                )


def _first_outside(chunk: pa.Array, lo: float, hi: float) -> float | None:
    """The first value of ``chunk`` (of integers or floats) outside ``lo..hi`` or NaN, nulls
    aside; None when there is none."""
    n = len(chunk)
    if n == 0 or chunk.null_count == n:
        return None
    validity, data = chunk.buffers()[:2]
    dtype = np.dtype(chunk.type.to_pandas_dtype())
    values = np.frombuffer(data, dtype=dtype)[chunk.offset : chunk.offset + n]
    bad = (values < lo) | (values > hi)
    if dtype.kind == "f":
        bad |= np.isnan(values)
    if validity is not None and chunk.null_count:
        bits = np.frombuffer(validity, dtype=np.uint8)
        bad &= np.unpackbits(bits, bitorder="little")[chunk.offset : chunk.offset + n] == 1
    found = np.flatnonzero(bad)
    return values[found[0]].item() if len(found) else None


def _with_constants(
    name: str, table: pa.Table, schema: TableSchema, constants: dict[str, str]
) -> pa.Table:
    """``table``, whose columns and types are ``schema``'s already, with ``constants`` set
    and its required columns checked for nulls, as :func:`conform` would give it: a table
    of Kineto files parsed in a batch is conformed once for all of them, and each file's
    part then only takes its own ``job``, ``source`` and ``file_id`` (measured: 0.4 ms a
    file instead of 2 ms)."""
    arrow = schema.arrow
    for i, col in enumerate(schema.columns):
        if col.name in constants:
            value = string_scalar(constants[col.name])
            value = value if col.type == pa.string() else value.cast(col.type)
            table = table.set_column(i, arrow.field(i), pa.repeat(value, table.num_rows))
        elif not col.nullable and table.column(i).null_count:
            raise ValueError(f"table {name}: required column {col.name} has nulls")
    return table
