"""Merging a job's small Parquet parts, so that a job of thousands of ranks is a few files
per table rather than thousands.

A part per table and input file would make a job of 1,024 ranks with a Kineto trace and an
NCCL log each some 11,000 parts, most of a few hundred rows, and every query opens every
part it reads (measured: 0.15 s per scan of a table of 2,048 parts, more than the rows
cost). Ingest therefore writes the tables under :data:`SMALL_PART_ROWS` rows of the files
of one run as one part per table and job (:mod:`pipeline.dataset.small_parts`); what is left small
across runs (each later ingest into a job adds its own small part) is merged here, at
commit: the parts of each table and job under :data:`SMALL_PART_ROWS` rows are rewritten as
one part, ``<table>/job=<job>/part-<id>.parquet`` (``rank`` is a column of every part). The
manifest then lists that part under every file whose rows it holds; the parts it replaces
are deleted once the manifest no longer lists them.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from ..dataset.commit import PartWriter
from ..dataset.location import part_paths
from ..dataset.schema import TableSchema, conform, load_schemas
from ..dataset.store import (
    ROW_GROUP_ROWS,
    Manifest,
    part_columns,
    part_id,
    part_path,
    require_parts,
    row_groups,
)
from ..dataset.views import parts_select, require_readable

#: A part with fewer rows is merged with the other small parts of its table and job.
#: Measured with DuckDB on this project's tables: opening a part costs about 0.1 to 0.35 ms,
#: reading a row 2.5 ns (two columns, an aggregate) to 0.2 us (every column). Below 16 Ki
#: rows the opening is a large share of a query's time: 1,024 parts of 5,400 ops rows each
#: (a 1,024-rank job of 3 MB traces) take 105 ms to aggregate, the same rows in one part 14
#: ms. Above, a part is left as ingest wrote it: the main process writes what is gathered,
#: one file after another, and at 64 Ki the 30,000 kernels a rank of the 1 GB benchmark job
#: moved there too (peak RSS +54 MB); rewriting a 1 GB job's big parts would cost seconds
#: and save milliseconds.
SMALL_PART_ROWS = 16384


def compact(dataset: Path, manifest: Manifest, jobs: set[str]) -> list[str]:
    """Merge the small raw parts of ``jobs`` and point ``manifest`` at the merged parts.

    Writes the merged parts (atomically) but not the manifest: the caller writes it, then
    deletes the parts returned, which it no longer lists. A crash before the manifest is
    written leaves only unlisted merged parts, which the next ingest removes.
    """
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    # no parquet_metadata_cache: it would save two of the three reads of each footer, but
    # held 130 MB for the footers of 2,048 parts
    replaced: list[str] = []
    for schema in load_schemas().values():
        if schema.derived:
            continue
        for job in sorted(jobs):
            try:
                small = _small_parts(con, dataset, manifest, schema.name, job)
                if len(small) < 2:
                    continue
                merged = part_path(schema.name, job, part_id(small))
                _merge(con, dataset, schema, small, merged)
            except duckdb.Error:  # a damaged part of an earlier run is named; else a bug
                require_readable(dataset, _job_parts(manifest, schema.name, job))
                raise
            _relist(manifest, job, schema.name, set(small), merged)
            replaced.extend(small)
    return replaced


def _job_parts(manifest: Manifest, table: str, job: str) -> list[str]:
    """The parts of ``table`` of ``job``, sorted."""
    return sorted(
        {p for e in manifest.files.values() if e.job == job for p in e.parts.get(table, [])}
    )


def _small_parts(
    con: duckdb.DuckDBPyConnection, dataset: Path, manifest: Manifest, table: str, job: str
) -> list[str]:
    """The parts of ``table`` of ``job`` under :data:`SMALL_PART_ROWS` rows, in path order
    (the same set of files merges into the same part, whatever order they came in)."""
    parts = _job_parts(manifest, table, job)
    if len(parts) < 2:
        return []
    require_parts(dataset, parts)
    paths = part_paths(con, dataset, parts)
    rows = dict(
        con.execute("SELECT file_name, num_rows FROM parquet_file_metadata(?)", [paths]).fetchall()
    )
    return [p for p, path in zip(parts, paths, strict=True) if rows[path] < SMALL_PART_ROWS]


def _merge(
    con: duckdb.DuckDBPyConnection,
    dataset: Path,
    schema: TableSchema,
    parts: list[str],
    merged: str,
) -> None:
    """Write the rows of ``parts`` as one part, a row group at a time, with the columns and
    types ingest writes (a part written before a column was added gets it as nulls)."""
    select = parts_select(con, dataset, parts, schema)
    # DuckDB yields a batch per part, a few rows each: gather them into whole row groups
    with PartWriter(dataset, merged) as out:
        for group in row_groups(con.sql(select).to_arrow_reader(ROW_GROUP_ROWS)):
            out.write(_as_written(schema, group))


def _as_written(schema: TableSchema, batches: list[pa.RecordBatch]) -> pa.Table:
    """The rows as a merged part holds them: the schema's types, ``job`` in the folder."""
    return part_columns(schema.name, conform(schema.name, pa.Table.from_batches(batches)))


def _relist(manifest: Manifest, job: str, table: str, parts: set[str], merged: str) -> None:
    """List ``merged`` instead of ``parts`` under each file of ``job`` that had one of them."""
    for entry in manifest.files.values():
        rels = entry.parts.get(table)
        if entry.job != job or not rels or parts.isdisjoint(rels):
            continue
        entry.parts[table] = list(dict.fromkeys(merged if p in parts else p for p in rels))
