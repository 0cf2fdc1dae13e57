"""The dataset on disk: Parquet parts, the manifest that lists them, and the writer's lock.

A dataset is a folder holding ``manifest.json`` and parts Hive-partitioned by job,
``<table>/job=<job>/part-<id>.parquet``: one per table and input file (``id`` the file's)
for a table of many rows, one per table and job for the small tables of an ingest's files
(:mod:`pipeline.ingest.run`), small parts of earlier ingests merged into one at commit
(:mod:`pipeline.dataset.compact`), and one per derived table and job (``link-<stamp>``).
``rank`` is a column inside the parts (datasets of version 2 and older had a
``rank=<rank>`` folder instead). The manifest is the commit point: a part that is not
listed in it is not part of the dataset (a crash leaves, at worst, an unlisted part that
the next ingest removes). Every file write is atomic: write to a temporary name in the
same folder, fsync, then ``os.replace``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from pipeline.dataset import rank_sets
from pipeline.dataset.schema import table_schema
from pipeline.errors import DatasetError
from pipeline.gcpause import gc_paused

if TYPE_CHECKING:
    import pyarrow.parquet as pq

MANIFEST = "manifest.json"
LOCK = ".lock"
FORMAT_NAME = "tokenwire-dataset"
#: 2: collectives carry their launch op, phase and layer from ingest (tokenwire link does
#: not read the ops), so a version 1 dataset can be read but not linked or added to.
#: 3: ``rank`` is a column of every part, not a folder, and a part may hold the rows
#: of several files (merged small parts, listed under each of them). A version 2 dataset can
#: be read but not linked or added to: its rank folders beside version 3's parts would be a
#: layout other engines cannot read as one table.
FORMAT_VERSION = 3

#: Rows per Parquet row group. The writer encodes a whole row group in memory: at pyarrow's
#: default (1 Mi rows) writing a big trace's ops table rose above the parse's own peak.
ROW_GROUP_ROWS = 256 * 1024
#: Bytes of Arrow data gathered for one row group at most, when its rows are wide: a row of
#: a world-sized communicator lists every rank (at 4,096 ranks, 32 KB a row). The main
#: process gathers a row group per table in each of its writer threads: on a 4,096-rank job
#: its peak is 979 MB at 64 MB, 617 MB at 16 MB, in the same time (141 and 137 s) and with
#: the same query times on the dataset.
ROW_GROUP_BYTES = 16 * 1024 * 1024


@dataclass
class FileEntry:
    """What the manifest records about one ingested input file."""

    file_id: str
    sha256: str
    path: str
    job: str
    format: str
    ranks: list[int]
    parts: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The entry as manifest JSON."""
        return {
            "sha256": self.sha256,
            "path": self.path,
            "job": self.job,
            "format": self.format,
            "ranks": self.ranks,
            "parts": self.parts,
        }


@dataclass
class Manifest:
    """The list of ingested files and of the Parquet parts that hold their rows."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    derived: dict[str, list[str]] = field(default_factory=dict)
    version: int = FORMAT_VERSION

    def parts(self, table: str) -> list[str]:
        """Relative paths of every part of ``table``, raw and derived, each once (a merged
        part is listed under each file whose rows it holds)."""
        out = [p for e in self.files.values() for p in e.parts.get(table, [])]
        return list(dict.fromkeys(out)) + self.derived.get(table, [])

    def parts_by_table(self) -> dict[str, list[str]]:
        """:meth:`parts` of every table that has one, in one pass over the files (a
        dataset of 4,096 ranks lists 8,192 of them)."""
        # (the lists gathered first, made unique once: a dict per file and table would take
        # 0.2 s for the 213,000 of a 16,384-rank job, most of them naming the same merged part)
        lists: dict[str, list[list[str]]] = {}
        for entry in self.files.values():
            for table, rels in entry.parts.items():
                lists.setdefault(table, []).append(rels)
        tables = {
            table: list(dict.fromkeys(itertools.chain.from_iterable(rels)))
            for table, rels in lists.items()
        }
        for table, rels in self.derived.items():
            tables[table] = tables.get(table, []) + rels
        return tables

    def all_parts(self) -> list[str]:
        """Relative paths of every part of every table, each once."""
        return [rel for rels in self.parts_by_table().values() for rel in rels]

    def sha256s(self) -> set[str]:
        """The sha256 of every file in the dataset (a set: an ingest looks up each input)."""
        return {e.sha256 for e in self.files.values()}


def read_manifest(dataset: Path) -> Manifest:
    """The manifest of ``dataset``; an empty one when the folder holds no dataset yet."""
    path = dataset / MANIFEST
    if not path.exists():
        return Manifest()
    doc = _read_doc(path)
    _parts_index(path, doc)  # (a broken one is named by every command, writers included)
    return _manifest_of(path, doc)


def read_parts_by_table(dataset: Path) -> dict[str, list[str]]:
    """:meth:`Manifest.parts_by_table` of ``dataset``'s manifest, for a reader: the index of
    them that the manifest holds, or (written by a tokenwire before the index) worked out
    from its files. Empty when the folder holds no dataset yet."""
    path = dataset / MANIFEST
    if not path.exists():
        return {}
    doc = _read_doc(path)
    tables = _parts_index(path, doc)
    manifest = _manifest_of(path, doc)  # (checked whole all the same: a damaged one is named)
    return tables if tables is not None else manifest.parts_by_table()


def _parts_index(path: Path, doc: dict[str, Any]) -> dict[str, list[str]] | None:
    """The manifest's index of parts by table (``tables``), checked; None when it has none."""
    if "tables" not in doc:
        return None
    try:
        tables = _checked(doc["tables"], dict)
        for rels in tables.values():
            if not all(isinstance(rel, str) for rel in _checked(rels, list)):
                raise TypeError("a part that is not a path")
    except TypeError as exc:
        raise DatasetError(f"{path}: unreadable manifest: {exc}") from exc
    return tables


def _read_doc(path: Path) -> dict[str, Any]:
    """The manifest's JSON, checked to be a tokenwire manifest of a version this reads."""
    try:
        with gc_paused():
            doc = orjson.loads(path.read_bytes())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise ValueError("not a tokenwire manifest")
        version = int(doc.get("version", 1))
    except (ValueError, TypeError) as exc:
        raise DatasetError(f"{path}: unreadable manifest: {exc}") from exc
    if version > FORMAT_VERSION:
        raise DatasetError(
            f"{path}: dataset version {version} was written by a newer tokenwire "
            f"(this one reads up to {FORMAT_VERSION}); upgrade tokenwire"
        )
    return doc


def _manifest_of(path: Path, doc: dict[str, Any]) -> Manifest:
    """The :class:`Manifest` of a manifest's JSON (``path``: named in errors)."""
    try:
        with gc_paused():
            # (orjson made every list and dict afresh: they are taken as they are)
            files = {
                fid: FileEntry(
                    file_id=fid,
                    sha256=e["sha256"],
                    path=e["path"],
                    job=e["job"],
                    format=e["format"],
                    ranks=_checked(e["ranks"], list),
                    parts=_checked(e["parts"], dict),
                )
                for fid, e in _checked(doc["files"], dict).items()
            }
            derived = _checked(doc.get("derived", {}), dict)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(f"{path}: unreadable manifest: {exc}") from exc
    return Manifest(files=files, derived=derived, version=int(doc.get("version", 1)))


def _checked(value: Any, kind: type) -> Any:
    """``value``, if it is a ``kind``."""
    if not isinstance(value, kind):
        raise TypeError(f"expected a {kind.__name__}, found {type(value).__name__}")
    return value


def require_current(dataset: Path, manifest: Manifest) -> None:
    """Refuse to write to a dataset an older tokenwire made (it can still be queried).

    Raises
    ------
    DatasetError
        When ``manifest`` lists files and is older than :data:`FORMAT_VERSION`.
    """
    if manifest.files and manifest.version < FORMAT_VERSION:
        raise DatasetError(
            f"{dataset}: dataset version {manifest.version} was written by an older tokenwire "
            f"(now {FORMAT_VERSION}); ingest its traces again into a new folder to link it "
            "or add to it"
        )


class MissingPartError(DatasetError):
    """A part the manifest lists is not on disk."""


def require_parts(dataset: Path, parts: Iterable[str]) -> None:
    """Refuse a dataset whose manifest lists a part that is gone (deleted by hand, or merged
    away by an ingest that committed after this process read the manifest).

    Raises
    ------
    MissingPartError
        Naming the first missing part.
    """
    missing = [rel for rel in parts if not (dataset / rel).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise MissingPartError(
            f"{dataset}: {missing[0]}{more} is listed in the manifest but missing; if an "
            "ingest or link was writing the dataset, run this again"
        )


def write_manifest(dataset: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically."""
    with gc_paused():
        doc = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "files": {fid: e.to_json() for fid, e in sorted(manifest.files.items())},
            "derived": manifest.derived,
            # Readers take their parts from here instead of every file's lists: at 16,384
            # ranks, 0.2 s of each command. A tokenwire before it drops the key when it
            # writes, so an index is never older than the files it sits beside.
            "tables": manifest.parts_by_table(),
        }
    # orjson: the standard encoder with an indent is pure Python (42 ms against 2 ms for the
    # 1.6 MB manifest of a 1,024-rank job, and every ingest and link writes it)
    atomic_write_bytes(dataset / MANIFEST, orjson.dumps(doc, option=orjson.OPT_INDENT_2))


class DatasetWriteError(DatasetError):
    """The dataset's disk refused a write (full, quota, read-only): no part of it is committed."""


@contextlib.contextmanager
def _write_errors(dataset: Path, rel: str) -> Iterator[None]:
    """Turn an OSError while writing ``rel`` into one line that names the dataset."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded"
            raise DatasetWriteError(f"{dataset}: {what} while writing {rel}") from exc
        reason = exc.strerror or str(exc).splitlines()[0]
        raise DatasetWriteError(f"{dataset}: cannot write {rel}: {reason}") from exc


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with _write_errors(path.parent, path.name):
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def job_name_from(text: str) -> str:
    """A valid job name made from ``text`` (a folder name): unsafe characters become ``_``."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip("._-")[:128]
    return name or "job"


def check_job_name(name: str) -> str:
    """``name`` if it can be a partition folder name, else a DatasetError saying what is allowed."""
    if not JOB_NAME.fullmatch(name):
        raise DatasetError(
            f"invalid job name {name!r}: use letters, digits, '.', '_' and '-' (at most 128)"
        )
    return name


def part_path(table: str, job: str, part_id: str) -> str:
    """Relative path of one part of ``table``: one file's rows (``part_id`` is the file's id),
    merged small parts (:func:`part_id`), or one link run's derived rows (``link-<stamp>``)."""
    return f"{table}/job={job}/part-{part_id}.parquet"


def part_id(names: Iterable[str]) -> str:
    """The id of a part that holds the rows of several files or parts (hex, like a file's
    id): the same ``names`` always give the same id."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]


def write_part(dataset: Path, rel: str, table: pa.Table) -> None:
    """Write one Parquet part atomically (temporary name in the same folder, then rename)."""
    with PartWriter(dataset, rel) as part:
        part.write(table)


class PartWriter:
    """One Parquet part written piece by piece (a row group or more each), atomically: to a
    temporary name in the same folder, renamed into place when the block ends without error
    and removed when it does not.

    Writing a big table piece by piece keeps what each piece costs to convert and encode to
    that piece.
    """

    def __init__(self, dataset: Path, rel: str) -> None:
        self.dataset, self.rel = dataset, rel
        self.path = dataset / rel
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        """Append ``table`` (the first piece sets the part's schema)."""
        with _write_errors(self.dataset, self.rel):
            if self._writer is None:
                # (imported here: 45 ms that the commands which only read never need)
                import pyarrow.parquet as pq

                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._writer = pq.ParquetWriter(self._tmp, table.schema, compression="zstd")
            self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        try:
            if self._writer is not None and kind is None:
                with _write_errors(self.dataset, self.rel):
                    self._writer.close()
                    with open(self._tmp, "rb+") as f:
                        os.fsync(f.fileno())
                    os.replace(self._tmp, self.path)
            elif self._writer is not None:  # the error that stopped the block is the one to see
                with contextlib.suppress(Exception):
                    self._writer.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                self._tmp.unlink()


def row_groups(pieces: Iterable[pa.Table | pa.RecordBatch]) -> Iterator[list]:
    """Small tables or batches gathered into lists of about a row group each: until
    :data:`ROW_GROUP_ROWS` rows or :data:`ROW_GROUP_BYTES`, whichever comes first."""
    pending: list = []
    rows = size = 0
    for piece in pieces:
        pending.append(piece)
        rows += piece.num_rows
        size += piece.nbytes
        if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
            yield pending
            pending, rows, size = [], 0, 0
    if pending:
        yield pending


def part_columns(name: str, table: pa.Table) -> pa.Table:
    """``table`` (conformed to its schema) as a part of it holds it: without the partition
    columns, which are folders, and with communicators' rank lists stored as sequences where
    they are (:mod:`pipeline.dataset.rank_sets`)."""
    if name == rank_sets.TABLE:
        table = rank_sets.encode(table)
    return table.drop_columns(list(table_schema(name).partition))


_PART_NAME = re.compile(r"\.?part-[0-9a-f]+\.parquet(\.tmp-\d+)?")


def remove_unlisted(dataset: Path, manifest: Manifest) -> None:
    """Delete parts and temporary files the manifest does not list (left by a crash or a
    failed write). Call only while holding the writer lock; other files are never touched."""
    listed = set(manifest.all_parts())
    for path in dataset.glob(".manifest.json.tmp-*"):
        path.unlink(missing_ok=True)
    for path in dataset.glob("*/**/*part-*"):
        rel = path.relative_to(dataset).as_posix()
        if path.is_file() and _PART_NAME.fullmatch(path.name) and rel not in listed:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def writer_lock(dataset: Path) -> Iterator[None]:
    """Hold the dataset's writer lock: one ingest at a time, a clear error for the second.

    The lock is an ``flock`` on ``.lock``, which holds the holder's pid. The kernel drops the
    flock when its process dies, so a lock file left by a killed ingest (its pid dead) is
    simply taken over; a live holder makes the second writer stop at once, naming its pid.
    """
    dataset.mkdir(parents=True, exist_ok=True)
    path = dataset / LOCK
    for _ in range(10):
        with _write_errors(dataset, LOCK):
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _lock_holder(path)
            who = f"pid {holder}" if holder is not None else "pid unknown"
            raise DatasetError(
                f"{dataset}: another tokenwire process ({who}) is writing this dataset; "
                "run again when it has finished"
            ) from None
        # The previous holder may have unlinked the file between our open and our flock.
        if _same_file(fd, path):
            break
        os.close(fd)
    else:
        raise DatasetError(f"{dataset}: could not take the writer lock {path}")
    try:
        with contextlib.suppress(OSError):  # a full disk: the lock holds, its pid is unknown
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {time.time():.0f}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)


def _lock_holder(path: Path) -> int | None:
    # The holder writes its pid just after taking the flock: give it a moment.
    for _ in range(20):
        try:
            return int(path.read_text().split()[0])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, IndexError):
            time.sleep(0.01)
    return None
