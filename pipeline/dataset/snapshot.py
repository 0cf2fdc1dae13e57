"""Reading one committed state of a dataset while a writer may be committing another.

A reader lists the manifest's parts and then opens them; an ingest's commit (which merges a
job's small parts and deletes the ones it merged) or a link (which replaces the derived
parts) can delete a part between the two, or while a query reads it. The writer replaces
the manifest before it deletes anything, so a reader that finds a part gone and sees a new
manifest has only to read again: the new manifest lists parts that are all there.
:func:`read_snapshot` does that for tokenwire's own readers (``sql``, ``tables``, ``report``,
``hang``). A part gone while the manifest stayed the same was deleted by something else
(by hand): that is reported, naming the part, not retried.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from ..dataset.location import overflow_error
from ..dataset.store import MANIFEST, MissingPartError, read_parts_by_table, require_parts

T = TypeVar("T")

#: Reads of one request at most: each retry follows a commit that replaced the manifest
#: while the read ran, and commits of one dataset are seconds apart at the least.
ATTEMPTS = 3


def read_snapshot(
    dataset: Path, read: Callable[[], T], *, attempts: int = ATTEMPTS, place: str | None = None
) -> T:
    """Run ``read`` (which opens ``dataset`` and reads it); run it again when a part it
    needed was deleted because a writer committed meanwhile.

    With ``place`` (the command's SQL file or step), a DuckDB error of a sum or product of
    the dataset's values past 64-bit integers is the dataset's bad input, named there
    (:func:`~pipeline.dataset.location.overflow_error`); ``sql`` leaves it out, as its
    queries are the user's own.

    Raises
    ------
    MissingPartError
        A part the manifest lists is gone and no commit explains it (or commits went on
        replacing the manifest for ``attempts`` reads, and the last one left a part missing).
        Any other error of ``read`` is raised as it is.
    DatasetError
        With ``place``: values of the dataset add up past 64-bit integers.
    """
    dataset = Path(dataset)
    for attempt in range(1, attempts + 1):
        before = _manifest_stamp(dataset)
        try:
            return read()
        except (duckdb.ConversionException, duckdb.OutOfRangeException) as exc:
            if place is not None:
                overflow_error(dataset, place, exc)
            raise
        # (a read-only connection reports a missing part as a PermissionException: DuckDB
        # then looks for a folder of that name, outside its allowed paths)
        # (Parquet decoding errors, and a file gone, come as the last two)
        except (
            MissingPartError,
            duckdb.IOException,
            duckdb.PermissionException,
            OSError,
            duckdb.InvalidInputException,
            pa.ArrowException,
        ):
            if attempt < attempts and _manifest_stamp(dataset) != before:
                continue
            # A part gone under a manifest that lists it, or damaged: say which.
            _require_whole(dataset)
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _require_whole(dataset: Path) -> None:
    """Name a listed part that is missing, a link, or not whole Parquet (see
    :func:`pipeline.dataset.views.require_readable`)."""
    from ..dataset.views import require_readable

    parts = [p for ps in read_parts_by_table(dataset).values() for p in ps]
    require_parts(dataset, parts)
    require_readable(dataset, parts)


def _manifest_stamp(dataset: Path) -> tuple[int, int] | None:
    """Identifies one manifest: each commit writes a new file and renames it into place."""
    try:
        st = os.stat(dataset / MANIFEST)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns
