"""Python and NumPy values to Arrow and back, without importing pandas.

pyarrow converting Python or NumPy objects (``pa.table`` of lists, ``pa.array``,
``pa.scalar``, ``to_numpy`` of an array with nulls, even ``Schema.empty_table``) first imports
pandas where it is installed, to check whether the objects are pandas': 0.25 to 0.35 s of
every process that does it (each ingest worker; ``tokenwire link``, where it was a quarter of
the time on a 1 GB job). tokenwire has no use for pandas. These conversions go through
Polars, which hands its arrays to pyarrow through the Arrow C interface, or build Arrow
buffers directly; ``tests/test_command_imports.py`` runs every command and checks that pandas
is never asked for.

Polars is imported where it is used: ``tokenwire link`` imports this module (through the
schemas) and, without a job.yaml, needs none of it, and Polars takes 0.16 s to import.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa


def table_from_lists(columns: Mapping[str, Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """``columns`` (a Python list for each column of ``schema``) as a table of its types."""
    import polars as pl

    nested = {
        f.name: _list_array(columns[f.name], f.type)
        for f in schema
        if pa.types.is_list(f.type) and all(isinstance(v, list) for v in columns[f.name])
    }
    flat = pa.schema([f for f in schema if f.name not in nested])
    dtypes = pl.from_arrow(empty_table(flat)).schema
    frame = pl.DataFrame({name: columns[name] for name in flat.names}, schema=dtypes)
    table = frame.to_arrow()
    for name, array in nested.items():
        table = table.append_column(name, array)
    return table.select(schema.names).cast(schema)


def _list_array(values: Sequence[list], type: pa.ListType) -> pa.Array:
    """Python lists (none of them None) as a list array of ``type``: their values in one
    column, and offsets (Polars builds a Series for each list: 0.4 s for the ranks and
    warnings of the ``files`` rows of 4,096 files)."""
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = [x for v in values for x in v]
    # (no values: an empty array of the type; an empty Polars column comes back as no
    # chunks, which pyarrow combines by way of pandas)
    inner = array_from_list(flat, type.value_type) if flat else pa.nulls(0, type.value_type)
    return pa.ListArray.from_arrays(from_numpy(offsets), inner, type=type)


def array_from_list(values: Sequence[Any], type: pa.DataType) -> pa.Array:
    """A Python list as an array of ``type``."""
    return (
        table_from_lists({"values": values}, pa.schema([("values", type)]))
        .column(0)
        .combine_chunks()
    )


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` with no rows."""
    return pa.Table.from_batches([], schema=schema)


def string_scalar(text: str) -> pa.Scalar:
    """``text`` as an Arrow string scalar, built from its UTF-8 bytes."""
    data = text.encode()
    offsets = pa.py_buffer(struct.pack("<2i", 0, len(data)))
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)])[0]


def to_floats(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Numbers as float64, NaN for a null (which compares false with anything)."""
    import polars as pl

    return pl.Series(values).cast(pl.Float64).to_numpy()


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Values without nulls (offsets, indices) as NumPy, of their own type."""
    import polars as pl

    return pl.Series(values).to_numpy()


def from_numpy(values: np.ndarray) -> pa.Array:
    """A NumPy array as Arrow, of its own type (NaN stays NaN)."""
    import polars as pl

    return pl.Series(values).to_arrow()


def ints_from_floats(values: np.ndarray) -> pa.Array:
    """float64 values (whole numbers) as int64, NaN as null.

    Built from NumPy buffers: a Polars ``fill_nan`` is a query (about 1 ms, a communicators
    part of each NCCL log makes two)."""
    nan = np.isnan(values)
    data = pa.py_buffer(np.where(nan, 0, values).astype(np.int64))
    nulls = int(nan.sum())
    validity = pa.py_buffer(np.packbits(~nan, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.int64(), len(values), [validity, data], null_count=nulls)
