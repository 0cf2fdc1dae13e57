"""The path DuckDB reads a dataset's parts by: the dataset folder itself, whatever its name.

DuckDB treats every path it reads as a glob (``*``, ``?``, ``[``): a dataset at ``runs/ds*``
or ``r[12]`` would read its siblings' parts, or none. Its ``key=value`` folder names are
data too, with hive partitioning: a dataset under ``rank=7/job=x/`` would get ``rank`` 7 in
every row. So DuckDB never sees the dataset's own path: each connection holds the dataset
folder open and reads its parts as ``/proc/self/fd/N/<part>``, a path of the manifest's part
names only (checked to be names: letters, digits, ``.``, ``_``, ``-``, ``=``), with hive
partitioning off; the partition values come from the manifest's part paths
(:func:`partition_values`). Where ``/proc/self/fd`` does not exist, the dataset's absolute
path is used, and a path holding a glob character is refused.
"""

from __future__ import annotations

import os
import re
import weakref
from pathlib import Path

import duckdb

from ..errors import DatasetError, one_line, shown

_PROC_FD = Path("/proc/self/fd")
_GLOB = re.compile(r"[*?\[\]{}]")
#: The folder that holds a connection's open dataset, by (connection id, dataset path).
_ROOTS: dict[tuple[int, str], str] = {}
#: The dataset each such folder was last opened for, kept after the connection closes: an
#: error naming a part may reach the command line after its connection is gone.
_DATASET_OF: dict[str, str] = {}


def part_root(con: duckdb.DuckDBPyConnection, dataset: Path) -> str:
    """The path ``con`` reads the parts of ``dataset`` under (no trailing ``/``): the folder
    held open as long as ``con`` lives.

    Raises
    ------
    DatasetError
        The folder cannot be opened, or (without ``/proc``) its path holds a glob character.
    """
    key = (id(con), str(dataset))
    root = _ROOTS.get(key)
    if root is not None:
        return root
    if not _PROC_FD.is_dir():
        root = str(Path(dataset).absolute())
        if _GLOB.search(root):
            raise DatasetError(
                f"{dataset}: the dataset's path holds a glob character (*?[]{{}}), which DuckDB "
                "would expand; move the dataset to a path without one"
            )
        _ROOTS[key] = root
        weakref.finalize(con, _ROOTS.pop, key, None)
        return root
    try:
        fd = os.open(dataset, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise DatasetError(f"{dataset}: cannot open the dataset folder: {exc.strerror}") from None
    root = f"{_PROC_FD}/{fd}"
    _ROOTS[key] = root
    _DATASET_OF[root] = str(dataset)
    weakref.finalize(con, _forget, key, fd)
    return root


def _forget(key: tuple[int, str], fd: int) -> None:
    _ROOTS.pop(key, None)
    os.close(fd)


def part_paths(con: duckdb.DuckDBPyConnection, dataset: Path, parts: list[str]) -> list[str]:
    """``parts`` (relative paths from the manifest) as ``con`` reads them."""
    root = part_root(con, dataset)
    return [f"{root}/{rel}" for rel in parts]


#: ``key=value`` folders of a part path from a manifest (checked by
#: :data:`pipeline.dataset.store.PART_PATH`: values are names, never ``/``).
_PARTITION = re.compile(r"(\w+)=([^/]*)/")


def partition_values(rel: str) -> tuple[tuple[str, str], ...]:
    """The partition columns and values of part ``rel``, a path from the manifest: its own
    ``key=value`` folders, never a folder above the dataset."""
    return tuple(_PARTITION.findall(rel))


def local_text(text: str) -> str:
    """``text`` (a DuckDB message) with each folder a connection read a dataset through
    written as the dataset's own path."""
    for root, dataset in _DATASET_OF.items():
        text = text.replace(root + "/", dataset + "/")
    return text


_PART_IN = re.compile(r"/([a-z][a-z0-9_]*/job=[^/\"' ]+(?:/rank=-?\d+)?/part-[0-9a-z-]+\.parquet)")


def part_error(exc: BaseException) -> DatasetError | None:
    """A DuckDB error that names a part of a dataset (a Parquet page it cannot decode, text
    that is not UTF-8) as the one line of bad input it is: the dataset, the part, the column
    where pyarrow finds the damage, and DuckDB's reason. None for any other error."""
    text = (str(exc).splitlines() or [""])[0]
    for root, dataset in _DATASET_OF.items():
        found = re.search(re.escape(root) + _PART_IN.pattern, text)
        if found:
            rel = found.group(1)
            column = damaged_column(Path(dataset) / rel)
            where = f"column {shown(column, 60)}: " if column else ""
            reason = one_line(local_text(text), 300)
            return DatasetError(f"{dataset}: {rel}: {where}unreadable Parquet part: {reason}")
    return None


def damaged_column(path: Path) -> str | None:
    """The first column of the Parquet file at ``path`` whose values pyarrow finds invalid
    (text that is not UTF-8 included), reading it a row group at a time; None when none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as f:
            for batch in f.iter_batches(64 * 1024):
                for name, column in zip(batch.schema.names, batch.columns, strict=True):
                    try:
                        column.validate(full=True)
                    except pa.ArrowInvalid:
                        return name
    except (OSError, ValueError, pa.ArrowException):
        return None
    return None


def overflow_error(dataset: Path, step: str, exc: BaseException) -> None:
    """Raise a DuckDB error that says a sum or product of the dataset's values went past
    64-bit integers as the bad input it is: values each within their schema's range (at
    most 2**62) can still add up past int64 (two of them do).

    Raises
    ------
    DatasetError
        ``DS: STEP: values of the dataset add up past 64-bit integers (...)``, naming the
        column DuckDB names.
    """
    if not isinstance(exc, (duckdb.ConversionException, duckdb.OutOfRangeException)):
        return
    text = (str(exc).splitlines() or [""])[0]
    column = re.search(r"from source column (\w+)", text)
    where = f" (column {column.group(1)})" if column else ""
    raise DatasetError(
        f"{dataset}: {step}: values of the dataset add up past 64-bit integers{where}; "
        f"its parts hold values near that limit: {one_line(local_text(text), 200)}"
    ) from None
