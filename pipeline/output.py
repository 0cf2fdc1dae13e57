"""The files a command writes for its user (a query result, a report, chart images).

Each is written whole or not at all (a temporary name beside it, fsync, rename), so a failed
run leaves no partial file and a reader never sees half a report; and none lands inside a
dataset unless the user asked for that (``tokenwire sql --allow-writes``): an output named
like a part or the manifest would replace it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import TokenwireError


class OutputError(TokenwireError):
    """An output file that cannot be written where it was asked for."""


def refuse_inside(dataset: Path, output: Path, option: str = "-o") -> None:
    """Refuse ``output`` when it is ``dataset`` or lies inside it (links resolved, but not
    a link at ``output`` itself, which a rename replaces instead of following)."""
    inside = _resolved(dataset)
    target = _resolved(output.parent) / output.name
    if target == inside or inside in target.parents:
        raise OutputError(
            f"{output}: {option} is inside the dataset {dataset}; tokenwire writes a dataset "
            "only through ingest and link (write the output elsewhere)"
        )


def make_folder(path: Path) -> None:
    """Make output folder ``path`` (and its parents) if missing."""
    with _errors(path):
        path.mkdir(parents=True, exist_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed to ``path`` (after an fsync)
    when the block ends without error, removed when it does not.

    Raises
    ------
    OutputError
        ``path`` is a folder, its folder is missing, or the disk refused the write.
    """
    path = Path(path)
    with _errors(path):  # (a name too long, a folder on the way that is a file)
        is_folder = path.is_dir()
    if is_folder:
        raise OutputError(f"{path}: is a folder; give a file name")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with _errors(path):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        with _errors(path):  # (a write in the block that the disk refuses, too)
            yield tmp
        with _errors(path):
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    finally:
        # (OSError: a folder on the way that is a file, a name too long; the error that
        # stopped the write is the one to report)
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def _errors(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputError(f"{path}: disk full while writing it") from exc
        reason = exc.strerror or (str(exc).splitlines() or ["unknown error"])[0]
        raise OutputError(f"{path}: cannot write: {reason}") from exc


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()
