"""The dataset on disk: Parquet parts, the manifest that lists them, and the writer's lock.

A dataset is a folder holding ``manifest.json`` and Hive-partitioned parts
``<table>/job=<job>/rank=<rank>/part-<file_id>.parquet``. The manifest is the commit point:
a part that is not listed in it is not part of the dataset (a crash leaves, at worst, an
unlisted part that the next ingest of the same file overwrites). Every file write is atomic:
write to a temporary name in the same folder, fsync, then ``os.replace``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dataset.schema import table_schema
from pipeline.errors import DatasetError

MANIFEST = "manifest.json"
LOCK = ".lock"
FORMAT_NAME = "tokenwire-dataset"
FORMAT_VERSION = 1


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

    def parts(self, table: str) -> list[str]:
        """Relative paths of every part of ``table``, raw and derived."""
        out = [p for e in self.files.values() for p in e.parts.get(table, [])]
        return out + self.derived.get(table, [])

    def has_sha256(self, sha256: str) -> bool:
        """Whether a file with these bytes is already in the dataset."""
        return any(e.sha256 == sha256 for e in self.files.values())


def read_manifest(dataset: Path) -> Manifest:
    """The manifest of ``dataset``; an empty one when the folder holds no dataset yet."""
    path = dataset / MANIFEST
    if not path.exists():
        return Manifest()
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != FORMAT_NAME:
            raise ValueError("not a tokenwire manifest")
        files = {
            fid: FileEntry(
                file_id=fid,
                sha256=e["sha256"],
                path=e["path"],
                job=e["job"],
                format=e["format"],
                ranks=list(e["ranks"]),
                parts={t: list(p) for t, p in e["parts"].items()},
            )
            for fid, e in doc["files"].items()
        }
        derived = {t: list(p) for t, p in doc.get("derived", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(f"{path}: unreadable manifest: {exc}") from exc
    return Manifest(files=files, derived=derived)


def write_manifest(dataset: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically."""
    doc = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "files": {fid: e.to_json() for fid, e in sorted(manifest.files.items())},
        "derived": manifest.derived,
    }
    atomic_write_bytes(dataset / MANIFEST, json.dumps(doc, indent=1).encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
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


def part_path(table: str, job: str, rank: int | None, file_id: str) -> str:
    """Relative path of the part of ``table`` that holds one file's rows for one rank."""
    rank_dir = f"/rank={rank}" if rank is not None else ""
    return f"{table}/job={job}{rank_dir}/part-{file_id}.parquet"


def write_part(dataset: Path, rel: str, table: pa.Table) -> None:
    """Write one Parquet part atomically (temporary name in the same folder, then rename)."""
    path = dataset / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def split_by_rank(name: str, table: pa.Table) -> Iterator[tuple[int | None, pa.Table]]:
    """Yield (rank, rows without partition columns) for each rank present in ``table``."""
    schema = table_schema(name)
    keep = [c for c in table.column_names if c not in schema.partition]
    if "rank" not in schema.partition:
        yield None, table.select(keep)
        return
    ranks = table.column("rank").unique().to_pylist()
    for rank in sorted(ranks):
        rows = table.filter(pa.compute.equal(table.column("rank"), rank))
        yield rank, rows.select(keep)


@contextlib.contextmanager
def writer_lock(dataset: Path) -> Iterator[None]:
    """Hold the dataset's writer lock: one ingest at a time, a clear error for the second.

    The lock file holds the holder's pid; a lock whose process is gone is taken over.
    """
    dataset.mkdir(parents=True, exist_ok=True)
    path = dataset / LOCK
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is not None and _pid_alive(holder):
                raise DatasetError(
                    f"{dataset}: another tokenwire process (pid {holder}) is writing this dataset"
                ) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()} {time.time():.0f}\n")
        break
    else:
        raise DatasetError(f"{dataset}: could not take the writer lock {path}")
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _lock_holder(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
