"""Gunzip a trace held in memory, naming the compressed byte where the data breaks.

``gzip.decompress`` says only *that* a stream is broken; a user with a 2 GB ``.json.gz``
wants to know *where* (a cut-off copy ends early; a flipped bit fails a block or the CRC).
Decompressing in small input chunks gives that place to within :data:`CHUNK` bytes.
Multi-member files (``cat a.gz b.gz``) and zero padding after the last member are read as
``gzip`` reads them.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from pipeline.errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 4096


def gunzip(path: Path, raw: bytes, limit: int | None = None) -> bytes:
    """The decompressed bytes of ``raw`` (a gzip file's content).

    With ``limit``, stop once that many bytes are out; input that ends before then is not an
    error (``raw`` may be only the start of the file).

    Raises
    ------
    TraceFormatError
        A broken header, block or CRC (``byte N`` near the place), or a stream that ends
        early (``byte`` = the file's size).
    """
    out: list[bytes] = []
    size = 0
    pos = 0
    while pos < len(raw):
        if not raw.startswith(GZIP_MAGIC, pos):
            if pos and not raw[pos:].strip(b"\x00"):
                break  # zero padding after the last member, as gzip allows
            raise TraceFormatError(path, "broken gzip data: not a gzip member here", offset=pos)
        start = pos
        member = zlib.decompressobj(wbits=31)
        while not member.eof:
            if pos >= len(raw):
                if limit is not None:
                    return b"".join(out)
                raise TraceFormatError(
                    path, "truncated gzip data (the file ends early)", offset=len(raw)
                )
            chunk = raw[pos : pos + CHUNK]
            try:
                piece = member.decompress(chunk)
            except zlib.error as exc:
                where = _failing_byte(raw, start, pos)
                raise TraceFormatError(path, f"broken gzip data: {exc}", offset=where) from None
            pos += len(chunk) - len(member.unused_data)
            out.append(piece)
            size += len(piece)
            if limit is not None and size >= limit:
                return b"".join(out)[:limit]
    return b"".join(out)


def _failing_byte(raw: bytes, start: int, pos: int) -> int:
    """The byte in the chunk at ``pos`` where the member starting at ``start`` breaks.

    Runs only after an error: replays the member up to ``pos`` (known good), then feeds the
    failing chunk a byte at a time.
    """
    member = zlib.decompressobj(wbits=31)
    for at in range(start, pos, 1 << 20):
        member.decompress(raw[at : min(pos, at + (1 << 20))])
    for at in range(pos, min(len(raw), pos + CHUNK)):
        try:
            member.decompress(raw[at : at + 1])
        except zlib.error:
            return at
    return pos
