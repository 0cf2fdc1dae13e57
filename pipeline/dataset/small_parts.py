"""Parts shared by several input files: the tables too small for a part of their own.

Most tables of most files of a many-rank job hold a few hundred rows; a part each would make
thousands of parts (:mod:`pipeline.dataset.compact`). Ingest keeps such a table packed
(:func:`pack_table`: conformed, as a part holds it, in a compressed Arrow stream) until it
writes those of one job together, one part per table (:func:`write_shared_parts`); a file
refused after its rows were written takes them out of a shared part by a rewrite of that
part without them (:func:`copy_part_without`). :func:`files_part` is the ``files`` rows of
one job's files, as their part holds them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..dataset.arrow_convert import array_from_list, table_from_lists
from ..dataset.commit import PartWriter
from ..dataset.schema import conform, table_schema
from ..dataset.store import ROW_GROUP_ROWS, part_columns, part_id, part_path, row_groups


@dataclass(frozen=True)
class SmallRows:
    """One file's rows of a small table: ``count`` rows from ``start`` of a packed table
    (:func:`pack_table`) that the files of its batch share (sent from a worker once for all
    of them, unpacked once at the commit); ``nbytes``: the rows' size as a table."""

    packed: bytes = field(repr=False)
    start: int
    count: int
    nbytes: int


def pack_table(table: pa.Table) -> bytes:
    """``table`` as an Arrow stream in one LZ4 frame, after its uncompressed size: a fifth of
    the table's size (measured: packing or unpacking a rank's small tables, 0.2 ms; LZ4 for
    each buffer of the stream instead, 0.7 ms)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    raw = sink.getvalue()
    return raw.size.to_bytes(8, "little") + pa.compress(raw, "lz4", asbytes=True)


def packed_rows(table: pa.Table) -> SmallRows:
    """A lone file's small table, packed."""
    packed = pack_table(table)
    return SmallRows(packed, 0, table.num_rows, unpacked_size(packed))


def unpacked_size(data: bytes) -> int:
    """The size of a table :func:`pack_table` packed as ``data``, unpacked (its Arrow
    stream's; the table's ``nbytes`` takes a pass over each column of a table of slices)."""
    return int.from_bytes(data[:8], "little")


def unpack_table(data: bytes) -> pa.Table:
    """The table :func:`pack_table` packed."""
    size = unpacked_size(data)
    return pa.ipc.open_stream(pa.decompress(memoryview(data)[8:], size, "lz4")).read_all()


def write_shared_parts(
    dataset: Path, job: str, held: list[tuple[str, dict[str, SmallRows]]]
) -> dict[str, str]:
    """Write the packed tables of ``held`` (file id, its rows of each small table by name)
    as one part per table, its rows in file id order, and return each table's
    part. Each table is taken out of its file's dict as it is written (memory).

    The tables are written side by side, a thread per core, each holding one row group at
    a time: unpacking and Parquet encoding release the GIL (measured: the commit of a
    1,024-rank job, 2.7 -> 1.8 s on 2 cores).
    """
    held = sorted(held, key=lambda h: h[0])
    names = sorted({name for _, tables in held for name in tables})
    holders = {name: [tables for _, tables in held if name in tables] for name in names}
    ids = {name: [fid for fid, tables in held if name in tables] for name in names}
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        # (leaving the block waits for every write: a failed one leaves no thread writing)
        written = {
            n: pool.submit(_write_shared_part, dataset, job, n, ids[n], holders[n]) for n in names
        }
    return {name: future.result() for name, future in written.items()}  # (the first error)


def _write_shared_part(
    dataset: Path, job: str, name: str, file_ids: list[str], holders: list[dict[str, SmallRows]]
) -> str:
    """Write table ``name`` of ``holders`` (the files ``file_ids``) as one part.

    Each packed table is unpacked once, and each holder's rows are a slice of it; a row
    group is written as one array per column (a table of thousands of pieces takes the
    Parquet writer 1.5 to 3 times as long to encode: per piece, not per row).
    """
    rel = part_path(name, job, part_id(file_ids))
    held = [tables.pop(name) for tables in holders]
    tables: dict[int, pa.Table] = {}
    for rows in held:
        if id(rows.packed) not in tables:
            tables[id(rows.packed)] = unpack_table(rows.packed)
    pieces = [tables[id(rows.packed)].slice(rows.start, rows.count) for rows in held]
    sizes = [rows.nbytes for rows in held]
    del held, tables  # (the packed bytes: those of this table are no longer needed)
    with PartWriter(dataset, rel) as part:
        for group in row_groups(pieces, sizes):
            part.write(pa.concat_tables(group).combine_chunks())
    return rel


def copy_part_without(dataset: Path, rel: str, new: str, file_ids: set[str]) -> None:
    """Write part ``rel`` again as ``new``, without the rows of ``file_ids``."""
    import pyarrow.compute as pc  # (50 ms to import, for a rank clash only)

    unwanted = array_from_list(sorted(file_ids), pa.string())
    with PartWriter(dataset, new) as part:
        for batch in pq.ParquetFile(dataset / rel).iter_batches(ROW_GROUP_ROWS):
            part.write(
                pa.Table.from_batches([batch]).filter(
                    pc.invert(pc.is_in(batch.column("file_id"), unwanted))
                )
            )


def files_part(job: str, rows: dict[str, list]) -> pa.Table:
    """The ``files`` rows of ``job``'s files (a list per column) as their part holds them."""
    schema = pa.schema([f for f in table_schema("files").arrow if f.name in rows])
    return part_columns("files", conform("files", table_from_lists(rows, schema), job=job))
