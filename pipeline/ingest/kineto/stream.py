"""Streaming decode of a Kineto trace: ``traceEvents`` in batches, memory bounded by a batch.

A trace is one JSON object whose ``traceEvents`` array holds almost all of its bytes; the
other top-level keys (``distributedInfo``, ``deviceProperties``, ``baseTimeNanoseconds``...)
are small and may come before or after the array. The file (plain or gzip, decompressed
chunk by chunk) is read once:

- the bytes before the ``"traceEvents"`` key (the *head*) and after the array (the *tail*)
  are kept and decoded together, with an empty array in between, as the trace's header;
- the array is cut into pieces of about ``batch_bytes`` at ``}, {`` boundaries and each
  piece is decoded with msgspec as a list of events.

A boundary is only a candidate (``}, {`` can occur inside a string or a nested list); msgspec
is the judge: ``[`` + piece + ``]`` decodes only when every cut is at the array's own level.
A piece that fails at its very end (or as truncated) was cut at a wrong place and is cut
elsewhere; a failure inside it is bad input, reported with its byte offset in the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from ...errors import TraceFormatError
from ...ingest.gz import GZIP_MAGIC, GzipStream

#: Bytes of JSON per decoded batch of events. Measured on a 33 MB trace: 4 MB parses as fast
#: as 16 MB (fewer cache misses make up for more batches) with 110 MB less peak RSS; 2 MB is
#: 10 % slower.
BATCH_BYTES = 4 * 1024 * 1024
_KEY = b'"traceEvents"'
_KEY_ARRAY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_BYTE = re.compile(r"\s*\(byte (\d+)\)")
_EVENT_PATH = re.compile(r"`\$\[(\d+)\]")
_EMPTY_EVENTS = b'"traceEvents": []'
#: Longest stretch of the event array without an event boundary: one event's JSON. Kineto
#: events are small (the longest real ones, ops with the shapes of thousands of inputs, are
#: some 100 KB); a file beyond this is refused instead of buffered (a gzip bomb of spaces).
MAX_EVENT_BYTES = 64 * 1024 * 1024
#: Candidate boundaries that may turn out to be inside a string (``"}, {"`` in a name) before
#: the boundary is found by scanning strings and brackets instead: each failed candidate
#: costs a decode of the batch, so a name made of ``}, {`` must not cost one per repeat.
MAX_BAD_CUTS = 16
#: A JSON string (escapes included) or a bracket: what the bracket scan looks at.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[][{}]')


class _Source:
    """The file's bytes, inflated once when gzip (:class:`~pipeline.ingest.gz.GzipStream`:
    located errors, bomb limit), read in chunks; errors become TraceFormatError."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise TraceFormatError(path, f"cannot read file: {exc.strerror}") from exc
        try:
            gz = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
        except OSError as exc:
            raw.close()
            raise TraceFormatError(path, f"cannot read file: {exc.strerror}") from exc
        self._file: IO[bytes] = GzipStream(path, raw) if gz else raw
        self._raw = raw
        self.eof = False

    def read(self, size: int) -> bytes:
        if self.eof:
            return b""
        try:
            data = self._file.read(size)
        except OSError as exc:
            raise TraceFormatError(self.path, f"cannot read file: {exc.strerror}") from exc
        if not data:
            self.eof = True
        return data

    def close(self) -> None:
        self._file.close()
        self._raw.close()


class EventStream:
    """Iterate over a trace's events in batches; afterwards ``header`` holds the other keys.

    ``event_type`` and ``header_type`` are msgspec types: one event, and the top-level
    object (whose ``traceEvents`` decodes as an empty list).
    """

    def __init__(
        self,
        path: Path,
        event_type: Any,
        header_type: Any,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        self.path = path
        self.header: Any = None
        self.events_seen = 0
        self._batch_bytes = max(1, batch_bytes)
        self._list = msgspec.json.Decoder(list[event_type])
        self._header_type = header_type
        self._buf = b""
        self._base = 0  # file offset of self._buf[0]
        self._bad_cuts: set[int] = set()  # candidate boundaries (in _buf) that were not
        self._head = b""  # the bytes before the "traceEvents" key
        self._header_decoder = msgspec.json.Decoder(header_type)

    def __iter__(self) -> Iterator[list[Any]]:
        self._src = _Source(self.path)
        try:
            yield from self._run()
        except RecursionError:  # msgspec's nesting limit: within the piece at self._base
            raise TraceFormatError(
                self.path,
                "malformed JSON: nested deeper than the decoder allows (in the events from here)",
                offset=self._base,
            ) from None
        finally:
            self._src.close()
            self._buf = b""

    # -- reading -----------------------------------------------------------------------------
    def _more(self) -> bool:
        # one read per batch, or as much as the buffer holds when it grows past that: every
        # read appends to (copies) the buffer, so it must double to keep copying linear
        size = max(min(max(4096, self._batch_bytes), 64 << 20), len(self._buf))
        data = self._src.read(size)
        if data:
            self._buf += data
        return bool(data)

    def _drop(self, upto: int) -> None:
        self._buf = self._buf[upto:]
        self._base += upto
        self._bad_cuts.clear()

    def _refill(self, upto: int) -> None:
        """``_drop(upto)``, then read until two batches are buffered, all in one copy."""
        parts = [memoryview(self._buf)[upto:]]
        size = len(parts[0])
        while size < 2 * self._batch_bytes:
            data = self._src.read(min(max(4096, self._batch_bytes), 64 << 20))
            if not data:
                break
            parts.append(data)
            size += len(data)
        self._buf = b"".join(parts)
        self._base += upto
        self._bad_cuts.clear()

    def _read_rest(self) -> None:
        while self._more():
            pass

    # -- the parts of the document -----------------------------------------------------------
    def _run(self) -> Iterator[list[Any]]:
        head, pos = self._find_array()
        if head is None:  # no top-level traceEvents array: decode the whole (broken) file
            self._read_rest()
            trace = self._decode_header(self._buf, len(self._buf))
            events, trace.traceEvents = trace.traceEvents, []
            self.header = trace
            if events:
                yield self._count(events)
            return
        self._drop(pos)
        self._head = head
        tail_at = yield from self._events()
        if self.header is not None:  # the last piece came with the tail (_last)
            return
        self._drop(tail_at)
        self._read_rest()
        self.header = self._decode_header(head + _EMPTY_EVENTS + self._buf, len(head))

    def _find_array(self) -> tuple[bytes | None, int]:
        """(bytes before the top-level ``"traceEvents"`` key, index just past its ``[``), or
        (None, 0) when there is no such array."""
        start = 0
        while True:
            i = self._buf.find(_KEY, start)
            if (i < 0 or len(self._buf) - i < 64) and self._more():
                continue
            if i < 0:
                return None, 0
            head = self._buf[:i]
            error = _error_at(head + _EMPTY_EVENTS + b"}", len(head))
            if error is None:
                found = _KEY_ARRAY.match(self._buf, i)
                return (head, found.end()) if found else (None, 0)
            if error >= 0:
                raise _malformed(self.path, error, "")
            start = i + 1  # the key inside a string or a nested object

    def _events(self) -> Iterator[list[Any]]:
        """Yield batches of the array that starts at ``self._buf[0]``; return the index in
        ``self._buf`` where the tail (after the array's ``]``) starts."""
        while True:
            while len(self._buf) < 2 * self._batch_bytes and self._more():
                pass
            if self._src.eof and len(self._buf) <= self._batch_bytes:
                return (yield from self._last())
            cut = self._cut()
            if cut is None:
                if len(self._buf) > MAX_EVENT_BYTES:
                    raise TraceFormatError(
                        self.path,
                        f"no end of an event within {MAX_EVENT_BYTES:,} bytes of the event "
                        "array: not a Kineto trace this reader takes (events are small)",
                        offset=self._base,
                    )
                if not self._more():
                    return (yield from self._last())
                continue
            # one copy of the batch (slicing and two concatenations made three)
            piece = b"".join((b"[", memoryview(self._buf)[:cut], b"]"))
            try:
                events = self._list.decode(piece)
            except msgspec.ValidationError as exc:
                raise self._invalid(exc) from exc
            except msgspec.DecodeError as exc:
                ended = _trailing(exc)
                if ended is not None:  # the array ended inside the piece
                    yield self._count(self._decode_events(piece[:ended]))
                    return ended - 1
                if _at_end(exc, len(piece)) and len(self._bad_cuts) < MAX_BAD_CUTS:
                    self._bad_cuts.add(cut)
                    continue
                raise self._error(exc, piece) from exc
            yield self._count(events)
            self._refill(self._buf.index(b",", cut) + 1)

    def _cut(self) -> int | None:
        """Index just past the ``}`` of the last candidate boundary within one batch, else of
        the first one after it; None when the buffer holds none."""
        if len(self._bad_cuts) >= MAX_BAD_CUTS:
            return self._bracket_cut()
        end = min(len(self._buf), self._batch_bytes)
        while (j := self._buf.rfind(b"}", 0, end)) > 0:
            if j + 1 not in self._bad_cuts and _SEPARATOR.match(self._buf, j):
                return j + 1
            end = j
        for found in _SEPARATOR.finditer(self._buf, self._batch_bytes):
            if found.start() + 1 not in self._bad_cuts:
                return found.start() + 1
        return None

    def _bracket_cut(self) -> int | None:
        """Like :meth:`_cut`, but the boundary is found by following strings and brackets
        from the event at ``self._buf[0]``: one pass, whatever the strings hold."""
        depth = 0
        found = None
        for token in _TOKEN.finditer(self._buf):
            t = token.group()
            if t in (b"{", b"["):
                depth += 1
            elif t in (b"}", b"]"):
                depth -= 1
                if depth < 0:
                    return found  # the array's own "]": the rest is for _last
                if depth == 0 and t == b"}" and _SEPARATOR.match(self._buf, token.start()):
                    if token.end() > self._batch_bytes:
                        return found if found is not None else token.end()
                    found = token.end()
        return found

    def _last(self) -> Iterator[list[Any]]:
        """The rest of the array, up to its ``]``; returns where the tail starts.

        The buffer then holds the rest of the file, so head + array + tail is the whole
        document minus the events already decoded: one decode gives the last events and the
        header. Only when that fails is the array's end looked for (a second decode that
        places the error)."""
        try:
            trace = self._header_decoder.decode(self._head + _KEY + b": [" + self._buf)
        except msgspec.DecodeError:  # also ValidationError: placed by the slow path below
            pass
        else:
            events, trace.traceEvents = trace.traceEvents, []
            self.header = trace
            yield self._count(events)
            return len(self._buf)
        piece = b"[" + self._buf
        try:
            self._list.decode(piece)
        except msgspec.ValidationError as exc:
            raise self._invalid(exc) from exc
        except msgspec.DecodeError as exc:
            ended = _trailing(exc)
            if ended is None:
                raise self._error(exc, piece) from exc
            yield self._count(self._decode_events(piece[:ended]))
            return ended - 1
        # the rest is exactly an array: the top-level object never closes
        raise self._truncated()

    def _decode_events(self, piece: bytes) -> list[Any]:
        try:
            return self._list.decode(piece)
        except msgspec.ValidationError as exc:
            raise self._invalid(exc) from exc
        except msgspec.DecodeError as exc:
            raise self._error(exc, piece) from exc

    def _count(self, events: list[Any]) -> list[Any]:
        self.events_seen += len(events)
        return events

    def _decode_header(self, doc: bytes, head_len: int) -> Any:
        """Decode head + empty array + tail (the tail is ``self._buf``)."""
        try:
            return msgspec.json.decode(doc, type=self._header_type)
        except msgspec.ValidationError as exc:
            raise TraceFormatError(self.path, f"not a Kineto trace: {exc}") from exc
        except msgspec.DecodeError as exc:
            found = _BYTE.search(str(exc))
            if found is None:
                raise self._truncated() from exc
            at = int(found.group(1))
            if at >= head_len:
                at = self._base + at - head_len - len(_EMPTY_EVENTS)
            raise _malformed(self.path, at, _BYTE.sub("", str(exc))) from exc

    # -- errors ------------------------------------------------------------------------------
    def _truncated(self) -> TraceFormatError:
        offset = self._base + len(self._buf)
        return TraceFormatError(self.path, "JSON ends early (truncated file)", offset=offset)

    def _error(self, exc: msgspec.DecodeError, piece: bytes = b"") -> TraceFormatError:
        """A decode error in a piece of ``self._buf`` that starts with an added ``[``."""
        found = _BYTE.search(str(exc))
        if found is None and "utf-8" in str(exc).lower():
            # msgspec does not say where the bytes stop being UTF-8; the bytes do.
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError as bad:
                return _malformed(self.path, self._base + bad.start - 1, str(exc))
        if found is None:
            return self._truncated()
        at = self._base + int(found.group(1)) - 1
        return _malformed(self.path, at, _BYTE.sub("", str(exc)))

    def _invalid(self, exc: msgspec.ValidationError) -> TraceFormatError:
        def shift(m: re.Match) -> str:
            return f"`$.traceEvents[{int(m.group(1)) + self.events_seen}]"

        return TraceFormatError(
            self.path, f"not a Kineto trace: {_EVENT_PATH.sub(shift, str(exc))}"
        )


def _malformed(path: Path, offset: int, detail: str) -> TraceFormatError:
    message = f"malformed JSON: {detail}" if detail else "malformed JSON"
    return TraceFormatError(path, message, offset=offset)


def _error_at(doc: bytes, valid_len: int) -> int | None:
    """None when ``doc`` decodes; -1 when it fails at or after ``valid_len`` (the added end);
    else the offset of the failure."""
    try:
        msgspec.json.decode(doc)
    except msgspec.DecodeError as exc:
        found = _BYTE.search(str(exc))
        if found is None or int(found.group(1)) >= valid_len:
            return -1
        return int(found.group(1))
    return None


def _trailing(exc: msgspec.DecodeError) -> int | None:
    """Index of the first character after the array, when the error says characters follow
    it (msgspec reports the index one past that character)."""
    text = str(exc)
    if "trailing characters" not in text:
        return None
    found = _BYTE.search(text)
    return int(found.group(1)) - 1 if found else None


def _at_end(exc: msgspec.DecodeError, size: int) -> bool:
    """Whether a decode error is at the added ``]`` (or the piece ran out): a wrong cut."""
    text = str(exc)
    if "truncated" in text.lower():
        return True
    found = _BYTE.search(text)
    return found is not None and int(found.group(1)) >= size - 1
