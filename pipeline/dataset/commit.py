"""The one way a write reaches a dataset: lock, checked paths, parts, manifest swap, clean-up.

Every file tokenwire creates, replaces or deletes inside a dataset goes through this
module, so "how does a write become visible" has one answer:

1. :class:`Transaction` takes the writer lock (an ``flock`` on ``.lock``, opened without
   following a symbolic link), reads the manifest and checks every path it lists
   (:func:`pipeline.dataset.store.check_part_path`; their folders must be real folders of
   the dataset), and refuses a folder that holds other files but no manifest: it is not a
   dataset, and nothing in it is tokenwire's to delete.
2. Parts are written by :class:`PartWriter` to a temporary name in their own folder (the
   staging name, opened with ``O_EXCL | O_NOFOLLOW``) and renamed into place; a part is
   not in the dataset until the manifest lists it.
3. :meth:`Transaction.commit` replaces the manifest atomically (temporary file, fsync,
   rename), then deletes the parts the new manifest no longer lists.
4. When the block fails, every part the manifest does not list is deleted (by walking the
   dataset without following links), and a dataset the transaction created is removed if
   nothing was committed, while the lock is still held.

Ingest's worker processes write their parts with :class:`PartWriter` too; the main process's
transaction lists or deletes them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa

from ..dataset.store import (
    LOCK,
    MANIFEST,
    PART_NAME,
    ROW_GROUP_ROWS,
    DatasetWriteError,
    Manifest,
    check_dataset_folder,
    check_part_path,
    manifest_doc,
    not_a_dataset,
    read_manifest,
    require_current,
    require_inside,
)
from ..errors import DatasetError
from ..gcpause import gc_paused

if TYPE_CHECKING:
    import pyarrow.parquet as pq

#: Folder under the dataset where link's DuckDB spills what does not fit in memory.
SPILL = ".link-spill"


class Transaction:
    """One write to ``dataset``: ``with Transaction(ds) as txn:`` ... ``txn.commit()``.

    Parameters
    ----------
    dataset
        The dataset folder; created when missing (``create``), else it must exist.
    create
        Make the folder when it is missing (ingest); a reader of an existing dataset
        (link) passes False.
    """

    def __init__(self, dataset: Path, *, create: bool = True) -> None:
        self.dataset = Path(dataset)
        self.create = create
        self.manifest = Manifest()
        self.created = False  # no manifest before: this transaction makes the dataset
        self._made_folder = False
        self._lock: _Lock | None = None

    def __enter__(self) -> Transaction:
        check_dataset_folder(self.dataset, must_exist=not self.create)
        if self.create:
            self._made_folder = _make_folder(self.dataset)
        self._lock = _Lock(self.dataset)
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise
        return self

    def _open(self) -> None:
        """Read and check the manifest; clear what a killed writer left behind."""
        if not (self.dataset / MANIFEST).exists():
            if not self.create:  # (link: a folder of anything else is not a dataset to write)
                raise DatasetError(not_a_dataset(self.dataset))
            others = [name for name in os.listdir(self.dataset) if not _own_leftover(name)]
            if others:
                raise DatasetError(
                    f"{self.dataset}: not a tokenwire dataset (no {MANIFEST}) and not empty "
                    f"(holds {others[0]!r}); give a new or empty folder"
                )
            # an empty folder is the start of a dataset; the manifest makes it one
            self.created = True
            write_manifest(self.dataset, Manifest())
        self.manifest = read_manifest(self.dataset)
        require_current(self.dataset, self.manifest)
        require_inside(self.dataset, self.manifest.all_parts())
        remove_unlisted(self.dataset, self.manifest)

    def commit(self, removed: Iterable[str] = ()) -> None:
        """Make :attr:`manifest` the dataset's, then delete ``removed`` (parts it no longer
        lists: merged away, or derived parts a new link replaced)."""
        write_manifest(self.dataset, self.manifest)
        listed = set(self.manifest.all_parts())
        for rel in removed:
            if rel not in listed:
                _unlink_part(self.dataset, rel)

    def discard(self, rel: str) -> None:
        """Delete part ``rel``, written in this transaction and never committed."""
        if rel in set(self.manifest.all_parts()):
            raise AssertionError(f"{rel} is listed in the manifest; it is not this write's")
        _unlink_part(self.dataset, rel)

    def __exit__(self, kind: type | None, *_: object) -> None:
        assert self._lock is not None
        empty = False
        try:
            _remove_spill(self.dataset)
            if kind is not None:
                # whatever the failure, the dataset is its last committed manifest
                with contextlib.suppress(DatasetError, OSError):
                    remove_unlisted(self.dataset, read_manifest(self.dataset))
            if self.created and not self._holds_rows():
                self._remove_new_dataset()
                empty = True
        finally:
            self._lock.release()
        if empty and self._made_folder:
            # (empty now; if another writer has begun in it since, it is not and stays)
            with contextlib.suppress(OSError):
                os.rmdir(self.dataset)

    def _holds_rows(self) -> bool:
        try:
            return bool(read_manifest(self.dataset).files)
        except DatasetError:
            return True  # not ours to judge: leave it

    def _remove_new_dataset(self) -> None:
        """Remove the folder this transaction made (nothing committed into it), while the
        lock is held: a second writer cannot have committed meanwhile. Only tokenwire's own
        files go, and folders only when empty."""
        remove_unlisted(self.dataset, Manifest())
        with contextlib.suppress(FileNotFoundError):
            (self.dataset / MANIFEST).unlink()
        for root, dirs, _files in os.walk(self.dataset, topdown=False):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, name))  # (a link or a non-empty one stays)


def _make_folder(dataset: Path) -> bool:
    """Make the dataset folder; False when it is there already. Two writers started together
    may both find it missing: the second ``mkdir`` then fails, and both go on to the lock."""
    try:
        dataset.mkdir(parents=True)
    except FileExistsError:
        check_dataset_folder(dataset, must_exist=True)  # (a file made meanwhile is refused)
        return False
    except OSError as exc:  # (a read-only file system, no permission, a full disk)
        reason = exc.strerror or (str(exc).splitlines() or ["unknown error"])[0]
        raise DatasetWriteError(f"{dataset}: cannot make the dataset folder: {reason}") from exc
    return True


def _own_leftover(name: str) -> bool:
    """Whether ``name`` in a folder without a manifest is what a writer killed while it made
    the dataset left there (its lock, its first manifest half-written)."""
    return name == LOCK or name.startswith(f".{MANIFEST}.tmp-")


class _Lock:
    """The writer lock: one writer at a time, a clear error for the second.

    An ``flock`` on ``.lock``, which holds the holder's pid. The kernel drops the flock when
    its process dies, so a lock file left by a killed writer is simply taken over; a live
    holder makes the second writer stop at once, naming its pid. The file is opened without
    following a link: a ``.lock`` pointing elsewhere is refused, never truncated.
    """

    def __init__(self, dataset: Path) -> None:
        self.dataset = dataset
        self.path = dataset / LOCK
        self.fd = self._take()
        with contextlib.suppress(OSError):  # a full disk: the lock holds, its pid is unknown
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()} {time.time():.0f}\n".encode(), 0)

    def _take(self) -> int:
        for _ in range(10):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = _lock_holder(self.path)
                who = f"pid {holder}" if holder is not None else "pid unknown"
                raise DatasetError(
                    f"{self.dataset}: another tokenwire process ({who}) is writing this "
                    "dataset; run again when it has finished"
                ) from None
            # The previous holder may have unlinked the file between our open and our flock.
            if _same_file(fd, self.path):
                return fd
            os.close(fd)
        raise DatasetError(f"{self.dataset}: could not take the writer lock {self.path}")

    def _open(self) -> int:
        # Looked at before it is opened, and opened without blocking (a FIFO) or following a
        # link: a device would act on the open. A hard link to a file elsewhere (more than
        # one name) is refused before the truncation that writes the pid.
        with contextlib.suppress(FileNotFoundError):
            self._refuse_odd(os.lstat(self.path))
        try:
            fd = os.open(
                self.path,
                os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o644,
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise DatasetError(
                    f"{self.path}: the lock file is a symbolic link; tokenwire never makes "
                    "one (remove it if nothing is writing the dataset)"
                ) from None
            with _write_errors(self.dataset, LOCK):
                raise
        try:
            self._refuse_odd(os.fstat(fd))
        except DatasetError:
            os.close(fd)
            raise
        return fd

    def _refuse_odd(self, st: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise DatasetError(
                f"{self.path}: the lock file is a symbolic link; tokenwire never makes "
                "one (remove it if nothing is writing the dataset)"
            )
        if not stat.S_ISREG(st.st_mode):
            raise DatasetError(f"{self.path}: the lock file is not a regular file")
        if st.st_nlink > 1:
            raise DatasetError(
                f"{self.path}: the lock file has {st.st_nlink} names (a hard link to a file "
                "elsewhere); tokenwire never makes one and will not write it (remove it if "
                "nothing is writing the dataset)"
            )

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)


@contextlib.contextmanager
def writer_lock(dataset: Path) -> Iterator[None]:
    """Hold ``dataset``'s writer lock for the block (see :class:`_Lock`), nothing more."""
    check_dataset_folder(dataset, must_exist=False)
    dataset.mkdir(parents=True, exist_ok=True)
    lock = _Lock(dataset)
    try:
        yield
    finally:
        lock.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)


def _lock_holder(path: Path) -> int | None:
    # The holder writes its pid just after taking the flock: give it a moment.
    for _ in range(20):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:
            return None
        try:
            return int(os.read(fd, 64).split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.01)
        finally:
            os.close(fd)
    return None


@contextlib.contextmanager
def _write_errors(dataset: Path, rel: str) -> Iterator[None]:
    """Turn an OSError while writing ``rel`` into one line that names the dataset."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded"
            raise DatasetWriteError(f"{dataset}: {what} while writing {rel}") from exc
        reason = exc.strerror or (str(exc).splitlines() or ["unknown error"])[0]
        raise DatasetWriteError(f"{dataset}: cannot write {rel}: {reason}") from exc


def write_manifest(dataset: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically (the commit point of every write)."""
    with gc_paused():
        doc = manifest_doc(manifest)
    # orjson: the standard encoder with an indent is pure Python (42 ms against 2 ms for the
    # 1.6 MB manifest of a 1,024-rank job, and every ingest and link writes it)
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    tmp = dataset / f".{MANIFEST}.tmp-{os.getpid()}"
    try:
        with _write_errors(dataset, MANIFEST):
            with _staged(tmp) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dataset / MANIFEST)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def _staged(tmp: Path) -> Iterator:
    """A new file at ``tmp`` for writing: one left by a dead writer of the same pid is
    removed first, and a link planted there is never followed."""
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        yield f


def write_part(dataset: Path, rel: str, table: pa.Table) -> None:
    """Write one Parquet part atomically (temporary name in the same folder, then rename)."""
    with PartWriter(dataset, rel) as part:
        part.write(table)


class PartWriter:
    """One Parquet part written piece by piece (a row group or more each), atomically: to a
    staging name in the same folder, renamed into place when the block ends without error
    and removed when it does not.

    The part's path is checked first (:func:`check_part_path`), and its folders are made one
    at a time and must be real folders: a link in the dataset never leads a write out of it.
    Writing a big table piece by piece keeps what each piece costs to convert and encode to
    that piece.
    """

    def __init__(self, dataset: Path, rel: str) -> None:
        check_part_path(rel, where=str(dataset))
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

                _make_folders(self.dataset, self.rel)
                # made here, never through a link; then written by Arrow's own file (a
                # Python file object would take the GIL for every page)
                with _staged(self._tmp):
                    pass
                self._writer = pq.ParquetWriter(self._tmp, table.schema, compression="zstd")
            self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        try:
            if self._writer is not None and kind is None:
                with _write_errors(self.dataset, self.rel):
                    self._writer.close()
                    fd = os.open(self._tmp, os.O_RDONLY | os.O_NOFOLLOW)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    os.replace(self._tmp, self.path)
            elif self._writer is not None:  # the error that stopped the block is the one to see
                with contextlib.suppress(Exception):
                    self._writer.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                self._tmp.unlink()


def _make_folders(dataset: Path, rel: str) -> None:
    """Make the folders of part ``rel`` one by one; each must be a real folder (a link there
    could lead the write out of the dataset)."""
    folder = dataset
    for name in Path(rel).parts[:-1]:
        folder = folder / name
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            raise DatasetError(f"{dataset}: {folder.relative_to(dataset)} is not a folder")


def discard_parts(dataset: Path, rels: Iterable[str]) -> None:
    """Delete parts this process wrote and no manifest lists (a file that failed after its
    first part was written; an ingest worker has no transaction of its own)."""
    for rel in rels:
        _unlink_part(dataset, rel)


def _unlink_part(dataset: Path, rel: str) -> None:
    """Delete part ``rel`` (checked: a part path inside ``dataset``, not through a link)."""
    check_part_path(rel, where=str(dataset))
    require_inside(dataset, [rel])
    with contextlib.suppress(FileNotFoundError):
        (dataset / rel).unlink()


def remove_unlisted(dataset: Path, manifest: Manifest) -> None:
    """Delete parts and staging files ``manifest`` does not list (left by a crash, a failed
    write or a refused file). Call only while holding the writer lock. The walk never
    follows a link, and only files named as tokenwire names its parts are touched."""
    listed = set(manifest.all_parts())
    for name in os.listdir(dataset):
        if name.startswith(f".{MANIFEST}.tmp-"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dataset / name)
    for root, _dirs, files in os.walk(dataset):  # (followlinks=False: links are not entered)
        for name in files:
            path = Path(root) / name
            rel = path.relative_to(dataset).as_posix()
            if PART_NAME.fullmatch(name) and "/" in rel and rel not in listed:
                if stat.S_ISREG(os.lstat(path).st_mode) or path.is_symlink():
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
    _remove_spill(dataset)


def _remove_spill(dataset: Path) -> None:
    """Remove link's spill folder (a link planted there is removed, never followed:
    ``shutil.rmtree`` removes links inside without following them)."""
    spill = dataset / SPILL
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(spill).st_mode):
            shutil.rmtree(spill, ignore_errors=True)
        else:
            os.unlink(spill)
