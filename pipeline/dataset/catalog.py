"""What a dataset holds: its tables, their columns with units, and row counts."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from ..dataset.schema import Column, load_schemas
from ..dataset.snapshot import read_snapshot
from ..dataset.store import read_parts_by_table, require_dataset, require_parts
from ..dataset.views import parts_select


@dataclass(frozen=True)
class TableInfo:
    """One table of a dataset."""

    name: str
    description: str
    rows: int
    columns: tuple[Column, ...]


def describe(dataset: Path) -> list[TableInfo]:
    """Every table of ``dataset`` (empty ones too), rows counted from Parquet metadata."""
    require_dataset(Path(dataset))
    return read_snapshot(Path(dataset), functools.partial(_describe, Path(dataset)), place="tables")


def _describe(dataset: Path) -> list[TableInfo]:
    by_table = read_parts_by_table(dataset)
    require_parts(dataset, [p for ps in by_table.values() for p in ps])
    out = []
    con = duckdb.connect()
    for schema in load_schemas().values():
        # (each part's columns checked against the schema, as every reader does)
        parts_select(con, dataset, by_table.get(schema.name, []), schema)
        rows = sum(
            pq.ParquetFile(dataset / p).metadata.num_rows for p in by_table.get(schema.name, [])
        )
        out.append(TableInfo(schema.name, schema.description, rows, schema.columns))
    return out
