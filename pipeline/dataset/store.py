"""The dataset on disk: how parts are named, the manifest that lists them, and its checks.

A dataset is a folder holding ``manifest.json`` and parts Hive-partitioned by job,
``<table>/job=<job>/part-<id>.parquet``: one per table and input file (``id`` the file's)
for a table of many rows, one per table and job for the small tables of an ingest's files
(:mod:`pipeline.ingest.run`), small parts of earlier ingests merged into one at commit
(:mod:`pipeline.dataset.compact`), and one per derived table and job (``link-<stamp>``).
``rank`` is a column inside the parts (datasets of version 2 and older had a
``rank=<rank>`` folder instead). The manifest is the commit point: a part that is not
listed in it is not part of the dataset (a crash leaves, at worst, an unlisted part that
the next ingest removes). Every write goes through :mod:`pipeline.dataset.commit`.

A manifest may come from anyone (datasets are copied between clusters and unpacked from
tarballs): every value in it is checked when it is read, and a part path must have the
shape tokenwire writes (:data:`PART_PATH`), so no entry can name a file outside the
dataset; :func:`require_inside` refuses parts reached through a link.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from ..dataset import rank_sets
from ..dataset.schema import table_schema
from ..errors import DatasetError, shown
from ..gcpause import gc_paused

if TYPE_CHECKING:
    pass

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

    def add(self, entry: FileEntry) -> None:
        """List ``entry``: an ingested file, under its job and file id."""
        self.files[file_key(entry.job, entry.file_id)] = entry

    def sha256s(self) -> set[tuple[str, str]]:
        """(job, sha256) of every file in the dataset (a set: an ingest looks up each
        input). Dedup is per job: the same bytes may belong to two jobs."""
        return {(e.job, e.sha256) for e in self.files.values()}


def file_key(job: str, file_id: str) -> str:
    """The manifest's key of one file of one job: ``<job>/<file_id>`` (a file's bytes give
    its file_id, and the same bytes may be ingested under two jobs)."""
    return f"{job}/{file_id}"


def read_manifest(dataset: Path) -> Manifest:
    """The manifest of ``dataset``; an empty one when the folder holds no dataset yet."""
    path = dataset / MANIFEST
    if not os.path.lexists(path):
        return Manifest()
    doc = _read_doc(path)
    _parts_index(path, doc)  # (a broken one is named by every command, writers included)
    return _manifest_of(path, doc)


def read_parts_by_table(dataset: Path) -> dict[str, list[str]]:
    """:meth:`Manifest.parts_by_table` of ``dataset``'s manifest, for a reader: the index of
    them that the manifest holds, or (written by a tokenwire before the index) worked out
    from its files. Empty when the folder holds no dataset yet."""
    path = dataset / MANIFEST
    if not os.path.lexists(path):
        return {}
    doc = _read_doc(path)
    tables = _parts_index(path, doc)
    manifest = _manifest_of(path, doc)  # (checked whole all the same: a damaged one is named)
    return tables if tables is not None else manifest.parts_by_table()


def _parts_index(path: Path, doc: dict[str, Any]) -> dict[str, list[str]] | None:
    """The manifest's index of parts by table (``tables``), checked; None when it has none."""
    if "tables" not in doc:
        return None
    return _table_parts(path, "tables", doc["tables"])


#: A manifest larger than this is refused before it is parsed: a 16,384-rank job's is
#: 28 MB, so this holds a job of some 150,000 ranks, and memory stays bounded.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


def _read_doc(path: Path) -> dict[str, Any]:
    """The manifest's JSON, checked to be a tokenwire manifest of a version this reads."""
    data = _manifest_bytes(path)
    try:
        with gc_paused():
            doc = orjson.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise ValueError("not a tokenwire manifest")
        version = doc.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"version {shown(version)} is not a dataset version")
    except ValueError as exc:
        raise DatasetError(f"{path}: unreadable manifest: {_first_line(exc)}") from exc
    if version > FORMAT_VERSION:
        raise DatasetError(
            f"{path}: dataset version {version} was written by a newer tokenwire "
            f"(this one reads up to {FORMAT_VERSION}); upgrade tokenwire"
        )
    return doc


def _manifest_bytes(path: Path) -> bytes:
    """The manifest file's bytes: a regular file (not a link) of a bounded size."""
    try:
        # (without blocking: a FIFO planted as the manifest would wait for a writer)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise DatasetError(f"{path}: cannot read the manifest: {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # (before fdopen, which refuses a folder itself)
        os.close(fd)
        raise DatasetError(f"{path}: the manifest is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_MANIFEST_BYTES:
            raise DatasetError(
                f"{path}: the manifest is {st.st_size:,} bytes, more than any dataset's "
                f"({MAX_MANIFEST_BYTES:,} at most)"
            )
        try:
            # (its size, not the limit: a read of the limit reserves 256 MiB up front)
            return f.read(st.st_size + 1)
        except OSError as exc:
            raise DatasetError(f"{path}: cannot read the manifest: {exc.strerror}") from None


def _manifest_of(path: Path, doc: dict[str, Any]) -> Manifest:
    """The :class:`Manifest` of a manifest's JSON (``path``: named in errors), every value
    checked: a manifest may come from anyone, and its paths must name parts of this
    dataset."""
    files_doc = doc.get("files")
    if not isinstance(files_doc, dict):
        raise _bad(path, "files", f"expected an object, found {_kind(files_doc)}")
    with gc_paused():
        files = {key: _file_entry(path, key, e) for key, e in files_doc.items()}
        rels = {rel for e in files.values() for ps in e.parts.values() for rel in ps}
        bad = next((rel for rel in rels if not _is_part_path(rel)), None)
    if bad is not None:
        _check_paths(path, _entry_holding(files, bad), [bad])
    derived = _table_parts(path, "derived", doc.get("derived", {}))
    return Manifest(files=files, derived=derived, version=doc.get("version", 1))


def _file_entry(path: Path, key: str, e: Any) -> FileEntry:
    """One entry of the manifest's ``files`` (keyed ``<job>/<file_id>``, :func:`file_key`;
    a bare file id in datasets written before dedup was per job), its values checked (its
    parts' paths are checked by the caller, once each)."""
    where = f"files.{shown(key, 40)}"
    key_job, _, fid = key.rpartition("/")
    if not FILE_ID.fullmatch(fid):
        raise _bad(path, where, "not a file id")
    if not isinstance(e, dict):
        raise _bad(path, where, f"expected an object, found {_kind(e)}")
    for key in ("sha256", "path", "job", "format"):
        if not isinstance(e.get(key), str):
            raise _bad(path, f"{where}.{key}", f"expected a string, found {_kind(e.get(key))}")
    if not JOB_NAME.fullmatch(e["job"]):
        raise _bad(path, f"{where}.job", f"{shown(e['job'])} is not a job name")
    if key_job and key_job != e["job"]:
        raise _bad(path, f"{where}.job", f"{shown(e['job'])} is not the job of its key")
    ranks = e.get("ranks")
    if not isinstance(ranks, list) or not all(_is_int(r) for r in ranks):
        raise _bad(path, f"{where}.ranks", "expected a list of integers")
    parts = e.get("parts")
    if not isinstance(parts, dict) or not all(
        isinstance(rels, list) and all(isinstance(rel, str) for rel in rels)
        for rels in parts.values()
    ):
        raise _bad(path, f"{where}.parts", "expected lists of part paths by table")
    return FileEntry(fid, e["sha256"], e["path"], e["job"], e["format"], ranks, parts)


def _table_parts(path: Path, key: str, value: Any) -> dict[str, list[str]]:
    """``derived`` or ``tables`` of a manifest: part paths by table, checked."""
    if not isinstance(value, dict):
        raise _bad(path, key, f"expected an object, found {_kind(value)}")
    for table, rels in value.items():
        if not isinstance(rels, list):
            raise _bad(path, f"{key}.{shown(table, 40)}", "expected a list of parts")
        _check_paths(path, f"{key}.{shown(table, 40)}", rels)
        if len(set(rels)) < len(rels):  # (its rows would be read twice)
            twice = next(rel for i, rel in enumerate(rels) if rel in rels[:i])
            raise _bad(path, f"{key}.{shown(table, 40)}", f"{shown(twice)} is listed twice")
    return value


def _entry_holding(files: dict[str, FileEntry], rel: str) -> str:
    """The place in ``files`` of the first entry listing part ``rel``, for its error line
    (paths are checked once each, as a set, so the entry is found only on error)."""
    for key, e in files.items():
        for table, rels in e.parts.items():
            if rel in rels:
                return f"files.{shown(key, 40)}.parts.{shown(table, 40)}"
    return "files"


def _is_part_path(rel: object) -> bool:
    return isinstance(rel, str) and PART_PATH.fullmatch(rel) is not None


def _check_paths(path: Path, where: str, rels: Iterable[Any]) -> None:
    for rel in rels:
        check_part_path(rel, where=f"{path}: {where}: unreadable manifest")


#: A file's id in the manifest: the first 16 hex digits of its sha256.
FILE_ID = re.compile(r"[0-9a-z-]{1,64}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _kind(value: Any) -> str:
    name = type(value).__name__
    return "null" if value is None else f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _bad(path: Path, place: str, what: str) -> DatasetError:
    return DatasetError(f"{path}: {place}: unreadable manifest: {what}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


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
    away by an ingest that committed after this process read the manifest), or that is not
    a regular file in a real folder of the dataset (:func:`require_inside`).

    Raises
    ------
    MissingPartError
        Naming the first missing part.
    DatasetError
        A part that is a link, or under one.
    """
    missing = require_inside(dataset, parts)
    if missing:
        raise MissingPartError(_missing(dataset, missing[0], len(missing)))


def _missing(dataset: Path, rel: str, count: int) -> str:
    more = f" (and {count - 1} more)" if count > 1 else ""
    return (
        f"{dataset}: {rel}{more} is listed in the manifest but missing; if an ingest or "
        "link was writing the dataset, run this again"
    )


def manifest_doc(manifest: Manifest) -> dict[str, Any]:
    """The manifest's JSON document (:func:`pipeline.dataset.commit.write_manifest` writes
    it)."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "files": {
            file_key(e.job, e.file_id): e.to_json()
            for e in sorted(manifest.files.values(), key=lambda e: (e.job, e.file_id))
        },
        "derived": manifest.derived,
        # Readers take their parts from here instead of every file's lists: at 16,384
        # ranks, 0.2 s of each command. A tokenwire before it drops the key when it
        # writes, so an index is never older than the files it sits beside.
        "tables": manifest.parts_by_table(),
    }


class DatasetWriteError(DatasetError):
    """The dataset's disk refused a write (full, quota, read-only): no part of it is committed."""


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
    merged small parts (:func:`part_id`), or one link run's derived rows (``link-<stamp>``).
    Checked like a path read from a manifest: a job name is a name, never a path."""
    return check_part_path(f"{table}/job={job}/part-{part_id}.parquet")


#: A part's path inside a dataset, as tokenwire writes it (``rank=`` folders: version 2).
#: Names only: no ``..``, no absolute path, no character a partition value could use to
#: climb out of its folder (``%2F`` included).
PART_PATH = re.compile(
    r"[a-z][a-z0-9_]{0,63}/job=[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/rank=-?[0-9]{1,10})?"
    r"/part-[0-9a-z-]{1,64}\.parquet"
)
#: The file names of parts and of their staging files (written, not yet renamed).
PART_NAME = re.compile(r"\.?part-[0-9a-z-]{1,64}\.parquet(\.tmp-\d+)?")


def check_part_path(rel: object, *, where: str = "part path") -> str:
    """``rel`` if it is a part path of the shape :data:`PART_PATH`, else a DatasetError
    naming ``where`` (the manifest and its entry) and the value, cut short."""
    if _is_part_path(rel):
        return rel
    raise DatasetError(f"{where}: {shown(rel)} is not a part path of a tokenwire dataset")


def require_inside(dataset: Path, parts: Iterable[str]) -> list[str]:
    """Refuse parts that are not regular files in real folders of ``dataset`` (a link in
    the dataset could lead a read, a write or a delete out of it); the parts that are not
    there are returned (a reader refuses them, a writer may be about to make them).

    Raises
    ------
    DatasetError
        Naming the part and what is wrong with it.
    """
    folders: dict[str, bool] = {}
    missing = []
    for rel in parts:
        folder = rel.rsplit("/", 1)[0]
        if folder not in folders:
            folders[folder] = _real_folders(dataset, folder)
        if not folders[folder]:
            raise DatasetError(
                f"{dataset}: {rel}: a folder on its path is a symbolic link or not a folder; "
                "tokenwire never makes one, and will not follow it out of the dataset"
            )
        try:
            mode = os.lstat(dataset / rel).st_mode
        except FileNotFoundError:
            missing.append(rel)
            continue
        except OSError as exc:
            raise DatasetError(f"{dataset}: {rel}: cannot read: {exc.strerror}") from None
        if not stat.S_ISREG(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise DatasetError(f"{dataset}: {rel}: the part is {what}")
    return missing


def _real_folders(dataset: Path, folder: str) -> bool:
    """Whether every folder of ``folder`` (relative) under ``dataset`` is a real folder or
    missing (a writer makes it)."""
    path = dataset
    for name in folder.split("/"):
        path = path / name
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except FileNotFoundError:
            return True
    return True


def check_dataset_folder(dataset: Path, *, must_exist: bool) -> None:
    """Refuse a dataset path that is not a folder (a file, a FIFO) or, with ``must_exist``,
    is missing."""
    try:
        mode = os.stat(dataset).st_mode
    except FileNotFoundError:
        if must_exist:
            raise DatasetError(f"{dataset}: does not exist") from None
        return
    except OSError as exc:
        raise DatasetError(f"{dataset}: cannot open the dataset folder: {exc.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise DatasetError(f"{dataset}: not a folder, so not a tokenwire dataset")


def require_dataset(dataset: Path) -> None:
    """Refuse ``dataset`` unless it is a tokenwire dataset, saying why: it does not exist,
    is not a folder, or is a folder without a manifest."""
    check_dataset_folder(dataset, must_exist=True)
    # (lexists: a FIFO or folder planted as the manifest is named when it is read)
    if not os.path.lexists(dataset / MANIFEST):
        raise DatasetError(not_a_dataset(dataset))


def not_a_dataset(dataset: Path) -> str:
    """What to say of an existing folder that holds no manifest."""
    return f"{dataset}: not a tokenwire dataset (no {MANIFEST})"


def part_id(names: Iterable[str]) -> str:
    """The id of a part that holds the rows of several files or parts (hex, like a file's
    id): the same ``names`` always give the same id."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]


def row_groups(
    pieces: Iterable[pa.Table | pa.RecordBatch], sizes: Iterable[int] | None = None
) -> Iterator[list]:
    """Small tables or batches gathered into lists of about a row group each: until
    :data:`ROW_GROUP_ROWS` rows or :data:`ROW_GROUP_BYTES`, whichever comes first.
    ``sizes``: each piece's bytes where the caller knows them (a slice's ``nbytes`` takes a
    pass over its columns: 1.2 s for the 32,000 small tables of 2,048 ranks)."""
    pending: list = []
    rows = size = 0
    known = iter(sizes) if sizes is not None else None
    for piece in pieces:
        pending.append(piece)
        rows += piece.num_rows
        size += next(known) if known is not None else piece.nbytes
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
