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

from pipeline.errors import DatasetError

_PROC_FD = Path("/proc/self/fd")
_GLOB = re.compile(r"[*?\[\]{}]")
#: The folder that holds a connection's open dataset, by (connection id, dataset path).
_ROOTS: dict[tuple[int, str], str] = {}


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


def local_text(con: duckdb.DuckDBPyConnection, dataset: Path, text: str) -> str:
    """``text`` (a DuckDB message) with the folder ``con`` reads ``dataset`` through written
    as the dataset's own path."""
    root = _ROOTS.get((id(con), str(dataset)))
    return text.replace(root, str(dataset)) if root else text
