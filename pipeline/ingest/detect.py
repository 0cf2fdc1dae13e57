"""Which source format a file holds, decided from its content (the name is only a hint).

Each format module offers ``sniff(path, head) -> bool`` over the first 64 KiB of the file
(gunzipped when the file is gzip) and ``parse(path) -> ParseResult``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from ..errors import TraceFormatError
from ..ingest.gz import GzipStream, gunzip

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"

#: Format name -> module under this package (``.kineto.parse``: relative, so that the
#: package works under the name it was imported as), in the order they are tried.
FORMATS: dict[str, str] = {
    "flight_recorder": ".flight_recorder.parse",
    # (a JAX profiler trace is trace-event JSON too: its own sniff is the stricter)
    "jax_trace": ".jax_trace.parse",
    "kineto": ".kineto.parse",
    "rocprof": ".rocprof.parse",
    "nsys": ".nsys.parse",
    "nsys_jax": ".nsys_jax.parse",
    # nccl-tests output often carries NCCL INFO lines too: its table is what makes it special.
    "nccl_tests": ".nccl.nccl_tests",
    "nccl_log": ".nccl.log",
}


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path``, decompressed when it is gzip.

    Raises
    ------
    TraceFormatError
        When the file cannot be read or its gzip header is broken.
    """
    try:
        with open(path, "rb") as f:
            # Compressed data is never much larger than what it holds: 4x the head is plenty.
            raw = f.read(4 * size)
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from exc
    if not raw.startswith(GZIP_MAGIC):
        return raw[:size]
    if len(raw) == 4 * size:
        # more may follow: inflate from the file, a chunk at a time (a header whose name or
        # comment field is longer than the read is valid gzip)
        with GzipStream(path, partial=True) as stream:
            return stream.read(size)
    head = gunzip(path, raw, limit=size)
    if len(head) < size and len(raw) < 4 * size:
        # The whole (small) file is in ``raw``: a cut-off or damaged stream is reported here,
        # where a partial head could otherwise pass for "not a trace".
        gunzip(path, raw)
    return head


def module_for(name: str) -> ModuleType:
    """The parser module of format ``name``."""
    return importlib.import_module(FORMATS[name], __package__)


def detect(path: Path) -> str | None:
    """The format of ``path``, or None when no parser recognises its content."""
    head = read_head(path)
    if not head:
        raise TraceFormatError(path, "file is empty", offset=0)
    for name in FORMATS:
        if module_for(name).sniff(path, head):
            return name
    return None
