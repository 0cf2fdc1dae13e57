"""Gunzip a trace, once and as a stream, naming the compressed byte where the data breaks.

``gzip`` says only *that* a stream is broken; a user with a 2 GB ``.json.gz`` wants to know
*where* (a cut-off copy ends early; a flipped bit fails a block or the CRC). Decompressing
in small input chunks gives that place to within :data:`CHUNK` bytes, and replaying the
failing chunk a byte at a time gives the byte. Multi-member files (``cat a.gz b.gz``) and
zero padding after the last member are read as ``gzip`` reads them.

A gzip file is untrusted: a few hundred kilobytes of deflate data can inflate to gigabytes
(a decompression bomb). Every reader here stops, with a located error, once the inflated
size passes :func:`inflated_limit` of the file's compressed size, and inflates the data
once, at most ``size`` bytes per read, so neither memory nor time follows the bomb.
"""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path
from typing import IO

from ..errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
#: Compressed bytes fed to zlib at a time: errors are placed within this, then to the byte.
CHUNK = 64 * 1024
#: Inflated bytes per compressed byte beyond which a file is refused. Traces compress about
#: 10-25 times (JSON of distinct timestamps and ids: the real Kineto traces and flight
#: recorder dumps tokenwire is tested on reach 22x, synthetic ones 13x); deflate's own
#: maximum is 1032x, which is what a bomb uses.
MAX_RATIO = 100
#: Inflated size always allowed, whatever the ratio: a small file of repetitive text (a
#: test trace of identical events) may compress beyond :data:`MAX_RATIO` and still is no
#: threat at this size.
MIN_LIMIT_BYTES = 256 * 1024 * 1024


def inflated_limit(compressed_size: int) -> int:
    """Most bytes a gzip file of ``compressed_size`` bytes may inflate to."""
    return max(MIN_LIMIT_BYTES, MAX_RATIO * compressed_size)


class GzipStream(io.RawIOBase):
    """A gzip file's inflated bytes, read once; broken or oversized data is a TraceFormatError.

    Parameters
    ----------
    path
        The file (named in errors; opened when ``fileobj`` is None).
    fileobj
        Compressed bytes to read instead of ``path``, from their start.
    size
        Compressed size; default: the file's size.
    partial
        The bytes may be only the start of the file: running out of them ends the stream
        instead of being an error.
    """

    def __init__(
        self,
        path: str | Path,
        fileobj: IO[bytes] | None = None,
        *,
        size: int | None = None,
        partial: bool = False,
    ) -> None:
        super().__init__()
        self.path = path
        self._own = fileobj is None
        try:
            self._raw: IO[bytes] = open(path, "rb") if fileobj is None else fileobj  # noqa: SIM115
            self.size = os.fstat(self._raw.fileno()).st_size if size is None else size
        except OSError as exc:
            raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from exc
        self.limit = inflated_limit(self.size)
        self.inflated = 0
        self._partial = partial
        self._member: zlib._Decompress | None = None
        self._member_start = 0
        self._in = b""  # compressed bytes read, not yet consumed by zlib
        self._in_at = 0  # file offset of self._in[0]
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` inflated bytes, fewer only at the end (all the rest when negative)."""
        want = size if size is not None and size >= 0 else None
        out: list[bytes] = []
        got = 0
        while not self._done and (want is None or got < want):
            # (bounded output per call: a bomb's megabytes per input byte never pile up)
            piece = self._inflate(1 << 20 if want is None else min(want - got, 1 << 24))
            if piece:
                self.inflated += len(piece)
                if self.inflated > self.limit:
                    raise self._bomb()
                out.append(piece)
                got += len(piece)
        return b"".join(out)

    def close(self) -> None:
        if self._own and not self._raw.closed:
            self._raw.close()
        super().close()

    # -- inflating ---------------------------------------------------------------------------
    def _fill(self) -> bool:
        """Read more compressed bytes into ``self._in``; False at the end of the file."""
        if self._in:
            return True
        try:
            self._in = self._raw.read(CHUNK)
        except OSError as exc:
            raise TraceFormatError(self.path, f"cannot read file: {exc.strerror}") from exc
        return bool(self._in)

    def _inflate(self, size: int) -> bytes:
        """Inflate at most ``size`` bytes (possibly none, when a member header was read)."""
        if self._member is None and not self._next_member():
            self._done = True
            return b""
        member = self._member
        assert member is not None
        if not member.unconsumed_tail and not self._fill():
            if self._partial:
                self._done = True
                return b""
            raise TraceFormatError(
                self.path, "truncated gzip data (the file ends early)", offset=self.size
            )
        data = member.unconsumed_tail or self._in
        try:
            out = member.decompress(data, size)
        except zlib.error as exc:
            where = self._failing_byte(data)
            raise TraceFormatError(self.path, f"broken gzip data: {exc}", offset=where) from None
        # self._in_at stays the offset of the first byte zlib has not consumed
        rest = member.unused_data if member.eof else member.unconsumed_tail
        self._in_at += len(data) - len(rest)
        self._in = rest if member.eof else b""
        if member.eof:
            self._member = None
        return out

    def _next_member(self) -> bool:
        """Start the next member; False after the last (zero padding may follow it)."""
        while len(self._in) < 2 and self._read_more():
            pass
        if not self._in:
            return False
        if not self._in.startswith(GZIP_MAGIC):
            if self._in_at and self._only_zeros():
                return False  # zero padding after the last member, as gzip allows
            raise TraceFormatError(
                self.path, "broken gzip data: not a gzip member here", offset=self._in_at
            )
        self._member = zlib.decompressobj(wbits=31)
        self._member_start = self._in_at
        return True

    def _read_more(self) -> bool:
        try:
            more = self._raw.read(CHUNK)
        except OSError as exc:
            raise TraceFormatError(self.path, f"cannot read file: {exc.strerror}") from exc
        self._in += more
        return bool(more)

    def _only_zeros(self) -> bool:
        """Whether the rest of the file is zero bytes (read through, a chunk at a time)."""
        while True:
            if self._in.strip(b"\x00"):
                return False
            self._in_at += len(self._in)
            self._in = b""
            if not self._read_more():
                return True

    # -- errors ------------------------------------------------------------------------------
    def _failing_byte(self, failing: bytes) -> int:
        """The byte where the current member breaks in ``failing`` (the input at
        ``self._in_at``): the member is replayed up to there (known good, output thrown
        away), then ``failing`` is fed a byte at a time."""
        start = self._in_at
        member = zlib.decompressobj(wbits=31)
        try:
            self._raw.seek(self._member_start)
            left = start - self._member_start
            while left > 0:
                piece = self._raw.read(min(left, 1 << 20))
                if not piece:
                    return start
                left -= len(piece)
                _drain(member, piece)
        except (OSError, zlib.error):
            return start
        for i in range(len(failing)):
            try:
                _drain(member, failing[i : i + 1])
            except zlib.error:
                return start + i
        return start

    def _bomb(self) -> TraceFormatError:
        return TraceFormatError(
            self.path,
            f"gzip data inflates past {_mib(self.limit)}, the limit for {self.size:,} compressed "
            f"bytes ({MAX_RATIO}x, at least {_mib(MIN_LIMIT_BYTES)}): refused as a "
            "decompression bomb (traces compress 10-25x)",
            offset=self._in_at,
        )


def _drain(member: zlib._Decompress, data: bytes) -> None:
    """Feed ``data`` to ``member``, throwing the output away a MiB at a time."""
    member.decompress(data, 1 << 20)
    while member.unconsumed_tail:
        member.decompress(member.unconsumed_tail, 1 << 20)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def gunzip(path: str | Path, raw: bytes, limit: int | None = None) -> bytes:
    """The decompressed bytes of ``raw`` (a gzip file's content).

    With ``limit``, stop once that many bytes are out; input that ends before then is not an
    error (``raw`` may be only the start of the file).

    Raises
    ------
    TraceFormatError
        A broken header, block or CRC (``byte N`` near the place), a stream that ends
        early (``byte`` = the file's size), or data inflating past :func:`inflated_limit`.
    """
    stream = GzipStream(path, io.BytesIO(raw), size=len(raw), partial=limit is not None)
    if limit is None:
        return stream.read()
    out: list[bytes] = []
    size = 0
    while size < limit and (piece := stream.read(limit - size)):
        out.append(piece)
        size += len(piece)
    return b"".join(out)
