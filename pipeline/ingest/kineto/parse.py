"""PyTorch profiler (Kineto) traces: ``.json`` / ``.json.gz`` into ops, kernels, steps and more.

The file is read once, as a stream (:mod:`pipeline.ingest.kineto.stream`): ``traceEvents`` is
decoded with msgspec into typed structs one batch at a time (times kept as their JSON text so
they become integer nanoseconds without passing through float), and each batch becomes a small
Polars frame at once, so memory follows a batch and the columnar result, never the file.
Everything after that is columnar Polars. Collectives are extracted in
:mod:`pipeline.ingest.kineto.comms`.

Times: ``ts``/``dur`` are microseconds with up to 3 decimals. PyTorch 2.x writes ``ts``
relative to ``baseTimeNanoseconds``; older traces write unix-epoch microseconds. Both become
unix-epoch nanoseconds (``start_ns``), so all ranks of a job share one clock when their
hosts did.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

from ...allocators import trim_heap
from ...dataset.schema import conform
from ...errors import TokenwireError, TraceFormatError
from ...ingest.derive.attribution import attribute_collectives
from ...ingest.derive.nesting import add_nesting, add_scope_path
from ...ingest.derive.time_breakdown import add_time_breakdown
from ...ingest.kineto.comms import (
    collectives_table,
    comm_by_launch,
    communicators_table,
    json_value,
    process_groups,
)
from ...ingest.kineto.stream import BATCH_BYTES, EventStream
from ...ingest.result import ENGINE, ParseResult, Warnings, parser_columns
from ...ingest.values import (
    MAX_NAME_CHARS,
    fits_int64,
    int64_or_none,
    rank_from_file_name,
    str_or_none,
)
from ...vocab import COMM_KERNEL, kernel_kind_expr, per_distinct

HOST_KINDS = (
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "gpu_user_annotation",
)
GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
#: Args copied as they are, by Args field name -> column type ("raw": the JSON text), by the
#: events that keep them: all, GPU activity, host ranges, and the collective metadata (NCCL
#: kernels and ``record_param_comms`` ops).
_COMMON_ARGS = {"external_id": pl.Int64, "correlation": pl.Int64}
_GPU_ONLY_ARGS = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "bytes": pl.Int64,
    "grid": "raw",
    "block": "raw",
}
_HOST_ONLY_ARGS = {
    "input_dims": "raw",
    "input_type": "raw",
    "concrete_inputs": "raw",
    "seq_nr": pl.Int64,
    "fwd_tid": pl.Int64,
}
_META_ARGS = {
    "collective_name": pl.String,
    "in_nelems": pl.Int64,
    "out_nelems": pl.Int64,
    "group_size": pl.Int64,
    "dtype": pl.String,
    "in_split": pl.String,
    "out_split": pl.String,
    "pg_name": pl.String,
    "pg_desc": pl.String,
    "pg_ranks": pl.String,
    "seq": pl.Int64,
}
_ARG_COLUMNS = {  # the scalar ones (raw JSON text is turned into columns by its own rules)
    name: dtype
    for group in (_COMMON_ARGS, _GPU_ONLY_ARGS, _HOST_ONLY_ARGS, _META_ARGS)
    for name, dtype in group.items()
    if dtype != "raw"
}
#: The ops columns a trace gives: every one but the rank (each file's, added after) and
#: the NVTX domain (Nsight's).
OPS_COLUMNS = parser_columns("ops", without=("rank", "domain"))
#: Times beyond this many microseconds (about 95 years from the epoch) are not times.
MAX_ABS_US = 3 * 10**15
#: An event's name or category (:data:`~pipeline.ingest.values.MAX_NAME_CHARS`).
_Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)]
#: Longest ``args`` value kept as JSON text (``Input Dims``, ``Concrete Inputs``, grid and
#: block): the longest real ones, ops with thousands of inputs, are some 100 KB.
MAX_ARG_BYTES = 4 * 1024 * 1024
#: A raw field the event did not have (msgspec cannot make a Raw field optional).
_NO_VALUE = msgspec.Raw(b"")


class Args(
    msgspec.Struct,
    gc=False,  # see Event
    rename={
        "external_id": "External id",
        "input_dims": "Input Dims",
        "input_type": "Input type",
        "concrete_inputs": "Concrete Inputs",
        "collective_name": "Collective name",
        "in_nelems": "In msg nelems",
        "out_nelems": "Out msg nelems",
        "group_size": "Group size",
        "in_split": "In split size",
        "out_split": "Out split size",
        "pg_name": "Process Group Name",
        "pg_desc": "Process Group Description",
        "pg_ranks": "Process Group Ranks",
        "seq": "Seq",
        "seq_nr": "Sequence number",
        "fwd_tid": "Fwd thread id",
    },
):
    """The ``args`` keys tokenwire reads; volatile ones stay raw JSON or loosely typed."""

    external_id: Any = None
    correlation: Any = None
    device: Any = None
    stream: Any = None
    grid: msgspec.Raw = _NO_VALUE
    block: msgspec.Raw = _NO_VALUE
    bytes: Any = None
    input_dims: msgspec.Raw = _NO_VALUE
    input_type: msgspec.Raw = _NO_VALUE
    concrete_inputs: msgspec.Raw = _NO_VALUE
    collective_name: Any = None
    in_nelems: Any = None
    out_nelems: Any = None
    group_size: Any = None
    dtype: Any = None
    in_split: Any = None
    out_split: Any = None
    pg_name: Any = None
    pg_desc: Any = None
    pg_ranks: Any = None
    seq: Any = None
    seq_nr: Any = None
    fwd_tid: Any = None


class Event(msgspec.Struct, gc=False):
    """One trace event; ``ts``/``dur`` kept as JSON text for exact conversion.

    ``gc=False``: an event holds only strings, numbers and raw bytes, so it can never be in
    a reference cycle; untracked, the millions of them created per file do not set off the
    cyclic garbage collector (measured: decode 2x faster, 250 -> 480 MB/s).
    """

    ph: _Name = ""
    cat: _Name = ""
    name: _Name = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: msgspec.Raw = _NO_VALUE
    dur: msgspec.Raw = _NO_VALUE
    args: Args | None = None


class Trace(msgspec.Struct):
    """The top level of a Kineto trace."""

    traceEvents: list[Event]  # noqa: N815 - the trace's own key
    schemaVersion: Any = None  # noqa: N815
    distributedInfo: dict[str, Any] | None = None  # noqa: N815
    deviceProperties: list[dict[str, Any]] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    host_name: str | None = None


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` starts a JSON object with a key only Kineto traces have up front."""
    text = head.lstrip()
    keys = (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"', b'"deviceProperties"')
    return text.startswith(b"{") and any(key in text for key in keys)


def parse(
    path: Path, *, batch_bytes: int = BATCH_BYTES, step_marker: str | None = None
) -> ParseResult:
    """Parse one Kineto trace into the dataset's tables (a batch of one, see
    :func:`parse_batch`).

    ``batch_bytes`` is how much JSON is decoded into Python objects at a time; it bounds the
    parser's memory beyond the columnar result and does not change the tables.
    ``step_marker``: a regular expression matching the whole name of the user annotations
    that bound steps where the trace has no ``ProfilerStep#N`` (see :func:`_marked_steps`).

    Raises
    ------
    TraceFormatError
        Broken gzip, malformed or truncated JSON (with the byte offset), or JSON that is
        not a trace.
    """
    (result,) = parse_batch([path], batch_bytes=batch_bytes, step_marker=step_marker)
    if isinstance(result, Exception):
        raise result
    return result


def parse_batch(
    paths: list[Path],
    *,
    batch_bytes: int = BATCH_BYTES,
    step_marker: str | None = None,
    derive: bool = False,
) -> list[ParseResult | TokenwireError]:
    """Parse several Kineto traces at once: a result per path, in order, each the tables
    :func:`parse` gives for that file alone, or the error that file alone raises (bad
    JSON, bad times, ...: it fails alone).

    Each file is decoded with its own :class:`EventStream` into frames keyed by ``file``
    (its place among the files read) whose ``event_id`` runs on from the previous file's;
    every later step (steps, nesting, kernels, collectives, the small tables) is one plan
    over the whole batch with ``file`` in every join, group and window, and the tables are
    cut by file at the end. On many small files this spreads the fixed cost of each Polars
    query (most of a small file's time) over the batch. ``derive``: also set each
    collective's launch op, phase and layer and add ``time_breakdown``
    (:func:`pipeline.ingest.derive.attribution.attribute_collectives`,
    :func:`pipeline.ingest.derive.time_breakdown.add_time_breakdown`) over the batch, as
    ingest would per file (the results say so in ``derived``).

    An unexpected error in a step over the whole batch is raised: the caller parses the
    files one by one instead, so that only the bad file fails.
    """
    batches = _Batches()
    read: list[_File] = []
    out: list[ParseResult | TokenwireError | None] = [None] * len(paths)
    for i, path in enumerate(paths):
        batches.start(len(read), Path(path))
        try:
            read.append(_read(Path(path), i, batches, batch_bytes))
        except TokenwireError as exc:
            out[i] = batches.drop() or exc  # (a bad time in what was read comes first)
    batches.flush()
    failed = batches.failed
    for key, exc in failed.items():
        out[read[key].index] = exc
    for key, f in enumerate(read):
        f.first_id = batches.first_ids.get(key, 0)
        f.warnings.extend(f.later)
    keys = [key for key in range(len(read)) if key not in failed]
    files = [read[key] for key in keys]
    if files:
        results = _parse_read(files, batches, keys, step_marker, derive)
        for file, result in zip(files, results, strict=True):
            out[file.index] = result
    return out  # type: ignore[return-value]  # (every slot is filled)


@dataclass
class _File:
    """One file of a batch: its header, rank and warnings (``later``: those found after its
    events, added after them), and its first ``event_id``."""

    path: Path
    index: int
    trace: Trace
    rank: int
    rank_source: str
    warnings: Warnings
    later: Warnings
    first_id: int = 0


def _read(path: Path, index: int, batches: _Batches, batch_bytes: int) -> _File:
    """Decode one file into ``batches`` (its frames keyed by the file's place in them)."""
    warnings = Warnings()
    stream = EventStream(path, Event, Trace, batch_bytes)
    for batch in stream:
        first = stream.events_seen - len(batch)
        _check_arg_sizes(path, batch, first)
        batches.add(batch, warnings, first=first)
    trace: Trace = stream.header
    base = trace.baseTimeNanoseconds or 0
    if abs(base) > MAX_ABS_US * 1000:
        raise TraceFormatError(path, f"$.baseTimeNanoseconds: {base} is out of range")
    later = Warnings()
    rank, rank_source = _rank(path, trace, later)
    return _File(path, index, trace, rank, rank_source, warnings, later)


#: Host ranges from which a parse gives the C heap's free pages back after its big steps
#: (:func:`~pipeline.allocators.trim_heap`; a trace of a few hundred MB).
TRIM_EVENTS = 1_000_000


#: The args kept as JSON text (raw), with their keys in the trace.
_RAW_ARGS = {f.name: f.encode_name for f in msgspec.structs.fields(Args) if f.type is msgspec.Raw}


def _check_arg_sizes(path: Path, batch: list[Event], first: int) -> None:
    """Refuse an args value kept as JSON text that is longer than :data:`MAX_ARG_BYTES`,
    at its place, before a frame copies it (C loops over the batch, no Python per event)."""
    present = list(filter(None, map(attrgetter("args"), batch)))
    for field, key in _RAW_ARGS.items():
        longest = max(map(len, _values(present, field)), default=0)
        if longest > MAX_ARG_BYTES:
            at = next(
                i for i, e in enumerate(batch) if e.args and len(getattr(e.args, field)) == longest
            )
            raise TraceFormatError(
                path,
                f"$.traceEvents[{first + at}].args.{key}: {longest:,} bytes of JSON, more "
                f"than the {MAX_ARG_BYTES:,} an args value may have",
            )


def _parse_read(
    files: list[_File], batches: _Batches, keys: list[int], step_marker: str | None, derive: bool
) -> list[ParseResult]:
    """The tables of the files read into ``batches`` (under ``keys``), worked out over all
    of them at once."""
    host, gpu, meta = batches.frames([f.trace.baseTimeNanoseconds or 0 for f in files], keys)
    steps = _steps(host, gpu, len(files), step_marker)
    # (a heap given back is faulted in again by the next batch: worth it for big frames only)
    trim = host.height >= TRIM_EVENTS
    ops = _ops(host, steps)
    del host
    if trim:
        trim_heap()  # (the nesting's arrays, a few of the ops' length, freed)
    kernels = comm_by_launch(_kernels(gpu, ops, steps), ops)
    if trim:
        trim_heap()  # (the kernels' steps, searched on arrays of their length)
    groups = [process_groups(f.trace) for f in files]
    warnings = [f.warnings for f in files]
    comms = collectives_table(groups, gpu, ops, meta, kernels, warnings)
    tables = {
        "ranks": _ranks_table([f.trace for f in files], ops, gpu),
        "communicators": communicators_table(groups, [f.rank for f in files], comms),
        "steps": _steps_table(steps, ops),
        "ops": ops[["file", *OPS_COLUMNS]],  # (columns picked by name: no query)
        "kernels": kernels,
        "collectives": comms[[c for c in comms.columns if c not in ("_pg_desc", "_pg_ranks")]],
    }
    per_file = split_tables(tables, [f.rank for f in files], [f.first_id for f in files], derive)
    return [
        ParseResult(
            format="kineto",
            tables=file_tables,
            format_version=(
                f"schema {f.trace.schemaVersion}" if f.trace.schemaVersion is not None else None
            ),
            rank_source=f.rank_source,
            warnings=f.warnings,
            derived=derive,
        )
        for f, file_tables in zip(files, per_file, strict=True)
    ]


def _rank(path: Path, trace: Trace, warnings: Warnings) -> tuple[int, str]:
    info = trace.distributedInfo or {}
    from_name = rank_from_file_name(path.name)
    rank = int64_or_none(info.get("rank"))  # (another type or beyond int64: unknown)
    if rank is not None:
        if from_name is not None and from_name != rank:
            warnings.add(
                f"file name says rank {from_name}, distributedInfo says {rank}: "
                "using distributedInfo"
            )
        return rank, "distributedInfo"
    if from_name is not None:
        return from_name, "file_name"
    warnings.add("no rank in distributedInfo or the file name: assuming rank 0")
    return 0, "default"


_HOST = frozenset(HOST_KINDS)
_GPU = frozenset(GPU_KINDS)
#: Categories as an enum: one small integer per event instead of a string.
CAT = pl.Enum([*HOST_KINDS, *GPU_KINDS])
#: Collective metadata: on a few events only, so kept apart, keyed by ``event_id``.
_META_COLUMNS = tuple(_META_ARGS)
_HOST_ARGS = tuple(n for n in (*_COMMON_ARGS, *_HOST_ONLY_ARGS) if n in _ARG_COLUMNS)
_GPU_ARGS = tuple(n for n in (*_COMMON_ARGS, *_GPU_ONLY_ARGS) if n in _ARG_COLUMNS)


@dataclass
class _Pending:
    """A file's decoded events (those kept, with their index in ``traceEvents``) whose frames
    are yet to be built."""

    file: int
    path: Path
    warnings: Warnings
    events: list[Event]
    index: list[int]


class _Batches:
    """Columnar frames built batch by batch: host ranges, GPU activity, collective metadata.

    Each event keeps ``event_id``, its index among the events read (file order, running on
    from one file to the next), whichever frame it lands in, and ``file``, the place of its
    file among those read (:meth:`start`). A file decoded in one batch of JSON (a small
    file) waits for the next ones: the frames of many such files are built at once
    (:meth:`flush`), each query's fixed cost paid once for all of them; a file of several
    batches has each built as it is decoded, as memory would otherwise hold its events.
    """

    def __init__(self) -> None:
        self.host: list[pl.DataFrame] = []
        self.gpu: list[pl.DataFrame] = []
        self.meta: list[pl.DataFrame] = []
        self.count = 0
        #: The first event id of each file (by its place) with events.
        self.first_ids: dict[int, int] = {}
        #: The files (by place) whose events' times are bad, with their error.
        self.failed: dict[int, TraceFormatError] = {}
        self._file = 0
        self._path = Path()
        self._pending: list[_Pending] = []
        self._waiting = 0
        self._mark = (0, 0, 0, 0)

    def start(self, file: int, path: Path) -> None:
        """The events added next are those of file ``file``, at ``path``."""
        self._file, self._path = file, path
        self._set_mark()

    def _set_mark(self) -> None:
        """What :meth:`drop` goes back to: the frames built before the file's own."""
        self._mark = (len(self.host), len(self.gpu), len(self.meta), self.count)

    def drop(self) -> TraceFormatError | None:
        """Forget what the file begun by the last :meth:`start` added (it failed); the error
        its events' times give, if any (the one the file fails with: found as each batch is
        read, before anything after it)."""
        error = None
        if self._pending and self._pending[-1].file == self._file:
            own = self._pending.pop()
            self._waiting -= len(own.events)
            error = self._build([own]).get(self._file)
        host, gpu, meta, self.count = self._mark
        del self.host[host:], self.gpu[gpu:], self.meta[meta:]
        self.first_ids.pop(self._file, None)
        return error

    def add(self, batch: list[Event], warnings: Warnings, *, first: int) -> None:
        """Take one batch of decoded events; the structs can be freed once it is built.

        ``first`` is the index of the batch's first event in ``traceEvents``, for errors.
        """
        kept = [i for i, e in enumerate(batch) if e.ph == "X" and (e.cat in _HOST or e.cat in _GPU)]
        if not kept:
            return
        pending = _Pending(
            self._file, self._path, warnings, [batch[i] for i in kept], [first + i for i in kept]
        )
        if not self._pending or self._pending[-1].file != self._file:
            if self._pending and self._waiting + len(kept) > WAITING_EVENTS:
                self.flush()  # (the files before: their structs are held until then)
                self._set_mark()
            self._pending.append(pending)  # (the file's first batch: it waits)
            self._waiting += len(kept)
            return
        # a file of several batches: the other files first, then each of its batches at once
        own = self._pending.pop()
        self._waiting -= len(own.events)
        self.flush()
        self._set_mark()
        for part in (own, pending):
            error = self._build([part]).get(self._file)
            if error is not None:
                raise error

    def flush(self) -> None:
        """Build the frames of the events waiting; the files whose times are bad go to
        :attr:`failed` (their events left out)."""
        pending, self._pending, self._waiting = self._pending, [], 0
        if pending:
            self.failed.update(self._build(pending))

    def _build(self, pending: list[_Pending]) -> dict[int, TraceFormatError]:
        """The frames of ``pending``'s events; the files whose times are bad, with their
        error (their events left out)."""
        evs = [e for p in pending for e in p.events]
        index = [i for p in pending for i in p.index]
        files = np.repeat([p.file for p in pending], [len(p.events) for p in pending])
        frame, skipped = _batch_frame(evs, index, files, self.count)
        self.count += len(evs)
        by_file = {p.file: p for p in pending}
        for file, count in skipped.items():
            by_file[file].warnings.add(
                "events without a time or with a non-numeric pid were skipped", count
            )
        errors = _time_errors(frame, {p.file: p.path for p in pending})
        if errors:
            frame = frame.filter(~pl.col("file").is_in(list(errors)))
        keys, at = np.unique(frame.get_column("file").to_numpy(), return_index=True)
        ids = frame.get_column("event_id").to_numpy()[at]
        for key, first_id in zip(keys.tolist(), ids.tolist(), strict=True):
            self.first_ids.setdefault(key, first_id)
        self._split(frame, [e.args or _NO_ARGS for e in evs])
        return errors

    def _split(self, frame: pl.DataFrame, args: list[Args]) -> None:
        """Host ranges, GPU activity and collective metadata of ``frame``, with their args."""
        parts = frame.partition_by("_gpu", as_dict=True, include_key=False)
        if (False,) in parts:
            self.host.append(_with_args(parts[False,], args, _HOST_ONLY_ARGS, _HOST_FRAME))
        if (True,) in parts:
            self.gpu.append(_with_args(parts[True,], args, _GPU_ONLY_ARGS, _GPU_FRAME))
        meta = _meta_frame(frame, args)
        if meta.height:  # (an event skipped for its time or pid is not in ``frame``)
            self.meta.append(meta)

    def frames(
        self, bases: list[int], keys: list[int]
    ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """(host, gpu, meta) of the files under ``keys`` (the others failed: none of their
        events is left), each file's ``file`` its place in ``keys``, times made unix-epoch
        with each one's ``bases`` and ``end_ns`` added."""
        place = np.zeros(max(keys) + 1, dtype=np.int64)
        place[keys] = np.arange(len(keys))
        file = pl.lit(pl.Series(place)).gather(pl.col("file"))
        base = pl.lit(pl.Series(bases, dtype=pl.Int64)).gather(file)

        def whole(parts: list[pl.DataFrame], columns: list[str]) -> pl.DataFrame:
            if not parts:
                return _EMPTY_BATCH.select(columns).with_columns(pl.col("start_ns").alias("end_ns"))
            columns = pl.concat(parts, how="vertical").get_columns()
            parts.clear()
            # one chunk per column, a column at a time: a frame whose columns are cut in
            # different places (the batches', and those added whole later) is copied whole,
            # to one chunk each, by every query that filters or joins it (measured: 236 MB
            # at each of four steps of a 1 GB trace)
            frame = pl.DataFrame([columns.pop(0).rechunk() for _ in range(len(columns))])
            start = pl.col("start_ns") + base
            return frame.with_columns(
                file.alias("file"),
                start.alias("start_ns"),
                (start + pl.col("dur_ns")).alias("end_ns"),
            )

        meta = pl.concat(self.meta, how="vertical") if self.meta else None
        self.meta.clear()
        return (
            whole(self.host, _HOST_FRAME),
            whole(self.gpu, _GPU_FRAME),
            meta if meta is not None else _EMPTY_BATCH.select("event_id", *_META_COLUMNS),
        )


#: Events of files decoded in one batch of JSON that wait for the next files before their
#: frames are built, at most (about 32 MB of JSON): their structs are held until then.
WAITING_EVENTS = 128 * 1024

#: The args of an event that has none.
_NO_ARGS = Args()


def _batch_frame(
    evs: list[Event], index: list[int], files: np.ndarray, first_id: int
) -> tuple[pl.DataFrame, dict[int, int]]:
    """The events' own columns (their args come after, on the rows that keep them), with
    ``start_ns`` still relative to ``baseTimeNanoseconds`` (which may come after the events
    in the file), and how many events of each file were skipped (no time, or a pid that is
    no number). ``event_id`` numbers the events kept from ``first_id``, ``file`` is each
    one's file (``files``), ``_pos`` its place in ``evs``, ``_index`` in ``traceEvents``;
    ``_gpu`` and ``_meta`` say whether it is GPU activity and whether it may carry
    collective metadata, ``_bad_ts`` and ``_bad_dur`` whether those times are no times
    (:func:`_time_errors`).

    Each column is one ``map(attrgetter)`` over the structs (C loops, no Python frame per
    event), and the rest two lazy plans: on a small file the fixed cost of each query
    outweighs its rows.
    """
    frame = pl.DataFrame(
        [
            pl.Series("file", files, dtype=pl.Int64),
            pl.Series("cat", _values(evs, "cat"), dtype=CAT),
            _distinct_once("name", _values(evs, "name")),
            # strict=False turns a value of another type (a string where an int belongs) into null.
            pl.Series("pid", _values(evs, "pid"), dtype=pl.Int64, strict=False),
            pl.Series("tid", _values(evs, "tid"), dtype=pl.Int64, strict=False),
            *_raw_columns({"ts": _values(evs, "ts"), "dur": _values(evs, "dur")}),
            pl.Series("_index", index, dtype=pl.Int64),
        ]
    )
    # pid: an int where the trace has one (null marks a string pid, never a default)
    bad = pl.col("pid").is_null() | (pl.col("ts") == "")
    limit = MAX_ABS_US * 1000
    # (only communication kernels and record_param_comms become collectives)
    kernels = pl.Series(list({e.name for e in evs if e.cat == "kernel"}), dtype=pl.String)
    comm = kernels.filter(kernels.str.contains(f"(?i){COMM_KERNEL}"))
    carries_meta = pl.col("name").is_in(comm.to_list()) & (pl.col("cat") == "kernel")
    event_id = (pl.int_range(pl.len(), dtype=pl.Int64) + first_id).alias("event_id")
    frame = (
        frame.lazy()
        .select(
            event_id,
            "file",
            "cat",
            "name",
            "pid",
            "tid",
            us_text_to_ns(pl.col("ts")).alias("start_ns"),
            us_text_to_ns(pl.col("dur")).alias("_dur_ns"),
            pl.int_range(pl.len(), dtype=pl.Int64).alias("_pos"),
            "_index",
            "ts",
            "dur",
            pl.col("cat").is_in(GPU_KINDS).alias("_gpu"),
            (carries_meta | (pl.col("name") == "record_param_comms")).alias("_meta"),
            bad.alias("_skip"),
        )
        .with_columns(
            (~pl.col(ns).is_between(-limit, limit).fill_null(False) & (pl.col(text) != "")).alias(
                f"_bad_{text}"
            )
            for text, ns in _TIMES
        )
        .with_columns(
            pl.col("_dur_ns").fill_null(0).clip(lower_bound=0).alias("dur_ns")
        )  # (none: 0)
        .collect(engine=ENGINE)
    )
    skip = frame.get_column("_skip")
    if not skip.any():
        return frame, {}
    skipped = np.bincount(files[skip.to_numpy()])
    frame = frame.filter(~pl.col("_skip")).with_columns(event_id)
    return frame, {file: int(n) for file, n in enumerate(skipped.tolist()) if n}


#: The time fields of an event (JSON text) and the columns they are read into.
_TIMES = (("ts", "start_ns"), ("dur", "_dur_ns"))


def _time_errors(frame: pl.DataFrame, paths: dict[int, Path]) -> dict[int, TraceFormatError]:
    """Every ``ts`` (and ``dur``, where given) must be a number within :data:`MAX_ABS_US`:
    the texts as read into ``start_ns`` and ``_dur_ns`` (:func:`us_text_to_ns`), flagged
    ``_bad_ts`` and ``_bad_dur`` by :func:`_batch_frame`. The error of each file (by its
    place; ``paths``) with a bad one: its first bad ``ts``, else its first bad ``dur``."""
    errors: dict[int, TraceFormatError] = {}
    for col, _ in _TIMES:
        if not frame.get_column(f"_bad_{col}").any():
            continue
        bad = frame.filter(pl.col(f"_bad_{col}")).select("file", "_index", col)
        for file, index, value in bad.unique("file", keep="first", maintain_order=True).iter_rows():
            errors.setdefault(
                file,
                TraceFormatError(
                    paths[file],
                    f"$.traceEvents[{index}].{col}: {value} is not a time in microseconds "
                    f"(a number within +-{MAX_ABS_US:.0e})",
                ),
            )
    return errors


def _with_args(
    part: pl.DataFrame, args: list[Args], only: dict[str, Any], columns: list[str]
) -> pl.DataFrame:
    """The host or GPU events of a batch (``part``) with the args their table keeps (the
    common ones and ``only``), as ``columns``.

    Args are read only on the events whose tables keep them (measured: reading every field
    of every event would be the largest part of the time spent here).
    """
    picked = list(map(args.__getitem__, part.get_column("_pos").to_list()))
    fields = {**_COMMON_ARGS, **only}
    raws = {f: _values(picked, f) for f, kind in fields.items() if kind == "raw"}
    read = [_arg_column(f, kind, _values(picked, f)) for f, kind in fields.items() if f not in raws]
    read += _raw_columns(raws, stored_once=True)
    out = [_ARG_TEXTS.get(c, pl.col(c)).alias(c) for c in columns]
    return part.hstack(read).lazy().select(out).collect(engine=ENGINE)


def _meta_frame(frame: pl.DataFrame, args: list[Args]) -> pl.DataFrame:
    """``event_id`` and the collective metadata of the events of ``frame`` that may carry
    some (``_meta``) and do: few events, so the columns are built at their length, not the
    batch's."""
    rows = np.flatnonzero(frame.get_column("_meta").to_numpy())
    if not len(rows):
        return frame.select("event_id").clear()
    picked = list(map(args.__getitem__, frame.get_column("_pos").to_numpy()[rows].tolist()))
    meta = pl.DataFrame(
        [
            pl.Series("event_id", frame.get_column("event_id").to_numpy()[rows]),
            *(_arg_column(f, kind, _values(picked, f)) for f, kind in _META_ARGS.items()),
        ]
    )
    return meta.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in _META_COLUMNS))


#: A JSON list of integers, nothing else (what :func:`int_list` accepts).
_INT_LIST = r"^\[\s*(-?\d+(\s*,\s*-?\d+)*)?\s*\]$"


def _values(objs: list, field: str) -> list:
    """One field of every struct: a C loop, no Python frame per struct."""
    return list(map(attrgetter(field), objs))


def _arg_column(field: str, kind: Any, values: list) -> pl.Series:
    if kind == "raw":
        return _raw_columns({field: values})[0]
    return pl.Series(field, values, dtype=kind, strict=False)


def _raw_columns(raws: dict[str, list[msgspec.Raw]], stored_once: bool = False) -> list[pl.Series]:
    """Raw JSON values as text columns, one per name of ``raws``, ``""`` where the event had
    none; with ``stored_once``, each distinct value of a column stored once
    (:func:`_stored_once`: for the args' texts, which the tables keep, not the times).

    One join and one split in Rust for all the columns instead of a Python ``bytes`` per
    value (measured: the per-value copies were a third of building a batch's frame), the
    columns then slices of one. NUL cannot occur in JSON text (a control character in a
    string must be escaped), so it can separate the values.
    """
    if not any(raws.values()):  # an empty text would split into one empty value
        return [pl.Series(name, [], dtype=pl.String) for name in raws]
    # msgspec does not check UTF-8 inside a raw value: a bad byte becomes U+FFFD, not an error
    text = b"\0".join(itertools.chain.from_iterable(raws.values())).decode(errors="replace")
    # (a column, not a literal: a query copies its literals, the text a few times over)
    values = pl.Series([text], dtype=pl.String).str.split("\0").explode()
    out, at = [], 0
    for name, column in raws.items():
        piece = values.slice(at, len(column)).alias(name)
        out.append(_stored_once(piece) if stored_once else piece)
        at += len(column)
    return out


def _distinct_once(name: str, values: list[str]) -> pl.Series:
    """Column ``name`` of ``values`` (Python strings), each distinct one stored once (see
    :func:`_stored_once`), found by a dict (C loops) before any string is copied."""
    place = {v: i for i, v in enumerate(dict.fromkeys(values))}
    distinct = pl.Series(name, list(place), dtype=pl.String)
    return distinct.gather(pl.Series(list(map(place.__getitem__, values)), dtype=pl.UInt32))


def _stored_once(values: pl.Series) -> pl.Series:
    """The same strings (none null), each distinct one stored once, every row a view of it.

    An event's name and its args' JSON texts repeat from event to event (kernel names of
    some 200 characters, the shapes of each layer's ops); stored once per row, they were
    most of a big trace's columns (measured: a 1 GB trace's names 200 MB, its args' texts
    120 MB; 36 MB and 10 MB stored once), and the tables keep them to the end of the parse.
    """
    distinct = values.unique()
    return distinct.gather(values.cast(pl.Enum(distinct)).to_physical()).alias(values.name)


def _int_list(text: pl.Expr) -> pl.Expr:
    """Raw JSON text -> list of int64 when it is a list of integers, else null."""
    return pl.when(text.str.contains(_INT_LIST)).then(text.str.json_decode(pl.List(pl.Int64)))


def _raw_text(text: pl.Expr) -> pl.Expr:
    """Raw JSON text; an absent value (empty) -> null."""
    return pl.when(text != "").then(text)


#: The args kept as JSON text, as their columns hold them: lists of integers, or the text.
_ARG_TEXTS = {
    "grid": _int_list(pl.col("grid")),
    "block": _int_list(pl.col("block")),
    "input_dims": _raw_text(pl.col("input_dims")),
    "input_types": _raw_text(pl.col("input_type")),
    "concrete_inputs": _raw_text(pl.col("concrete_inputs")),
}


def us_text_to_ns(text: pl.Expr) -> pl.Expr:
    """Microseconds written as JSON number text -> integer nanoseconds, without float; null
    where the text is no number, or its nanoseconds do not fit an Int64.

    The text is read as a decimal of three places, whose integer is the nanoseconds: exact,
    exponent forms too, and digits beyond the third (sub-nanosecond; PyTorch writes three)
    rounded half to even. This is Polars 2's reading of a decimal; Polars 1.30 read no
    exponent and cut the digits instead. (Four times faster than splitting the text at its
    point and reading both halves as integers, which this replaced.)
    """
    return text.cast(pl.Decimal(38, 3), strict=False).to_physical().cast(pl.Int64, strict=False)


def _steps(
    events: pl.DataFrame, gpu: pl.DataFrame, files: int, step_marker: str | None = None
) -> pl.DataFrame:
    """``ProfilerStep#N`` ranges on the host: file, step number, start, end, marker (by
    file, then start).

    A file without them takes the ranges of the user's ``step_marker``
    (:func:`_marked_steps`) where it names one and the file has some; else (inference, a
    profiler run with no schedule) it is one step, 0, spanning every host and GPU event of
    the file (``marker`` ``whole_trace``), so that it still gets a time breakdown and its
    collectives a step. ``files``: how many files ``events`` and ``gpu`` hold.
    """
    steps = (
        events.lazy()
        .filter(
            (pl.col("cat") == "user_annotation") & pl.col("name").str.starts_with("ProfilerStep#")
        )
        .select(
            "file",
            pl.col("name").str.extract(r"#(\d+)").cast(pl.Int64).alias("step"),
            "start_ns",
            "end_ns",
            pl.lit("ProfilerStep", pl.String).alias("marker"),
        )
        .drop_nulls("step")
        .unique(["file", "step"], keep="first")
        .sort("file", "start_ns", maintain_order=True)
        .collect(engine=ENGINE)
    )
    found = set(steps.get_column("file").unique().to_list())
    if len(found) == files:
        return steps
    pieces = [steps]
    if step_marker is not None:
        unmarked = events.filter(~pl.col("file").is_in(list(found)))
        marked = _marked_steps(unmarked, step_marker).cast(steps.schema)
        pieces.append(marked)
        found.update(marked.get_column("file").unique().to_list())
    if len(found) < files:
        pieces.append(_whole_trace_steps(events, gpu, found).cast(steps.schema))
    return pl.concat(pieces).sort("file", maintain_order=True)


def _whole_trace_steps(events: pl.DataFrame, gpu: pl.DataFrame, found: set[int]) -> pl.DataFrame:
    """Step 0 of each file not in ``found``, from its first host or GPU event's start to its
    last one's end (no step for a file without any)."""
    spans = pl.concat([f.select("file", "start_ns", "end_ns") for f in (events, gpu)])
    return (
        spans.lazy()
        .filter(~pl.col("file").is_in(list(found)))
        .group_by("file")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop_nulls(["start_ns", "end_ns"])
        .select(
            "file",
            pl.lit(0, pl.Int64).alias("step"),
            "start_ns",
            "end_ns",
            pl.lit("whole_trace", pl.String).alias("marker"),
        )
        .collect(engine=ENGINE)
    )


def _marked_steps(events: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """Steps from the user annotations (``record_function`` ranges) whose whole name matches
    ``pattern``, a regular expression (an exact name is one): ``marker`` is the pattern.

    The step number is the pattern's first capture group where it has one (``step (\\d+)``),
    else the range's place in its file from 0. A range inside an earlier one (a marker
    nested in a marker) is part of that step, not a step of its own; a range whose group
    holds no number is left out.
    """
    anchored = f"^(?:{pattern})$"
    marked = events.filter(
        (pl.col("cat") == "user_annotation") & pl.col("name").str.contains(anchored)
    ).sort("file", "start_ns", "end_ns", maintain_order=True)
    ends_before = pl.col("end_ns").cum_max().shift(1).over("file")
    marked = marked.filter(ends_before.is_null() | (pl.col("start_ns") >= ends_before))
    if re.compile(pattern).groups:
        number = pl.col("name").str.extract(anchored, 1).cast(pl.Int64, strict=False)
    else:
        number = pl.int_range(pl.len(), dtype=pl.Int64).over("file")
    return (
        marked.select(
            "file",
            number.alias("step"),
            "start_ns",
            "end_ns",
            pl.lit(pattern, pl.String).alias("marker"),
        )
        .drop_nulls("step")
        .unique(["file", "step"], keep="first", maintain_order=True)
    )


def step_of(frame: pl.DataFrame, steps: pl.DataFrame, at: str = "start_ns") -> pl.DataFrame:
    """Add ``step``: the step of the row's ``file`` whose host range holds ``frame[at]``,
    else null.

    A sorted search of the (few) step starts of each file, on numpy arrays; the rows keep
    their order, so a wide frame is never sorted or joined (each would be another copy of
    it).
    """
    if steps.is_empty():
        return frame.with_columns(pl.lit(None, pl.Int64).alias("step"))
    step_file = steps.get_column("file").to_numpy()
    order = np.lexsort((steps.get_column("start_ns").to_numpy(), step_file))
    starts = steps.get_column("start_ns").to_numpy()[order]
    times = frame.get_column(at)
    if times.null_count():
        known = times.is_not_null().to_numpy()
        t = times.fill_null(0).to_numpy()
    else:  # (no query for what every row has)
        known = np.ones(len(times), dtype=bool)
        t = times.to_numpy()
    # the last step of the row's file that starts at or before each time (none: below lo)
    files = frame.get_column("file").to_numpy()
    lo = np.searchsorted(step_file[order], files, side="left")
    i = _search_within(starts, lo, np.searchsorted(step_file[order], files, side="right"), t) - 1
    found = np.maximum(i, 0)
    ends = steps.get_column("end_ns").to_numpy()[order]
    inside = known & (i >= lo) & (t <= ends[found])
    step = pl.Series("step", steps.get_column("step").to_numpy()[order][found], dtype=pl.Int64)
    step = step.set(pl.Series(~inside), None)
    if "step" in frame.columns:
        return frame.with_columns(step)
    return frame.hstack([step])


def _search_within(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each ``t``, the first position in ``values[lo:hi]`` (sorted) whose value is
    greater (``searchsorted(side="right")`` within each row's own range), all rows at once:
    a bisection of about log2(hi - lo) rounds of numpy steps."""
    lo, hi = lo.copy(), hi.copy()
    active = lo < hi
    while active.any():
        mid = (lo + hi) // 2
        right = active & (values[np.minimum(mid, len(values) - 1)] <= t)
        lo = np.where(right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)
        active = lo < hi
    return lo


def _ops(host: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Host ranges with nesting, module path and step (``file`` kept: every file's own).

    Nesting, scopes and steps are worked out on a narrow frame (ids, thread, times) and put
    back beside the wide one in ``op_id`` order, so the wide columns are never copied.
    """
    is_module = (pl.col("cat") == "python_function") & pl.col("name").str.starts_with("nn.Module: ")
    narrow = host.select(
        pl.col("event_id").alias("op_id"), "file", "pid", "tid", "start_ns", "end_ns", "name",
        "cat", is_module.alias("is_module"),
    )  # fmt: skip
    narrow = add_nesting(narrow)
    narrow = add_scope_path(
        narrow,
        scope=pl.col("is_module"),
        label=pl.col("name").str.strip_prefix("nn.Module: "),
        out="module_path",
    )
    narrow = step_of(narrow, steps)
    ids = narrow.get_column("op_id").to_numpy()
    if not np.all(ids[1:] > ids[:-1]):
        narrow = narrow.sort("op_id")
    return (
        host.lazy()
        .rename({"event_id": "op_id"})
        .with_columns(
            pl.when(narrow.get_column("is_module"))
            .then(pl.lit("module"))
            .otherwise(pl.col("cat").cast(pl.String))
            .alias("kind"),
            narrow.get_column("depth"),
            narrow.get_column("parent_id"),
            narrow.get_column("module_path"),
            narrow.get_column("step"),
            narrow.get_column("is_module"),
        )
        .select("file", *OPS_COLUMNS, "is_module", "concrete_inputs")
        .collect(engine=ENGINE)
    )


def kernel_kind(cat: pl.Expr, by_name: pl.Expr) -> pl.Expr:
    """Classify a GPU activity: memcpy and memset by category, kernels by name (``by_name``:
    :func:`~pipeline.vocab.kernel_kind_expr` of it)."""
    return (
        pl.when(cat == "gpu_memcpy")
        .then(pl.lit("memcpy"))
        .when(cat == "gpu_memset")
        .then(pl.lit("memset"))
        .otherwise(by_name)
    )


def _kernels(gpu: pl.DataFrame, ops: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """GPU activity, each with the step of the runtime call that launched it.

    The launch's step is joined on a narrow frame (file, correlation) and put beside the
    wide one, which keeps its rows in ``event_id`` order: the wide columns are never
    copied (a join or a sort of the whole frame would copy each once more).
    """
    launches = (
        ops.lazy()
        .filter(pl.col("kind").is_in(["cuda_runtime", "cuda_driver"]))
        .select("file", "correlation", pl.col("step").alias("launch_step"))
        .drop_nulls("correlation")
        .unique(["file", "correlation"], keep="first")
        .collect(engine=ENGINE)
    )
    launch_step = (
        gpu.lazy()
        .select("file", "correlation")
        .join(launches.lazy(), on=["file", "correlation"], how="left", maintain_order="left")
        .collect(engine=ENGINE)
        .get_column("launch_step")
    )
    # by name alone: a join on (name, cat) would copy every row's name (its row encoding)
    by_name = per_distinct(gpu, ["name"], kernel_kind_expr(pl.col("name")))
    kind = gpu.select(kernel_kind(pl.col("cat"), pl.lit(by_name))).to_series()
    # (one chunk each, as the frame's columns: a query over columns cut in different places
    # copies every column of the frame to one chunk first)
    gpu = step_of(gpu, steps).hstack([kind.alias("kind").rechunk(), launch_step.rechunk()])
    ids = gpu.get_column("event_id").to_numpy()
    if not np.all(ids[1:] > ids[:-1]):
        gpu = gpu.sort("event_id")
    return gpu.select(
        "file",
        pl.col("event_id").alias("kernel_id"),
        "device",
        pl.col("stream").fill_null(pl.col("tid")).alias("stream"),
        "name",
        "kind",
        "start_ns",
        "end_ns",
        "dur_ns",
        "correlation",
        "external_id",
        "bytes",
        "grid",
        "block",
        pl.coalesce("launch_step", "step").alias("step"),
    )


def _steps_table(steps: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Steps with the tokens the rank's token embedding saw in each (by file, then step)."""
    if steps.is_empty():
        return steps.select(
            "file",
            "step",
            "start_ns",
            "end_ns",
            (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
            "marker",
        )
    tokens = embedding_tokens(ops)
    return (
        steps.lazy()
        .join(tokens.lazy(), on=["file", "step"], how="left")
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
        .select("file", "step", "start_ns", "end_ns", "dur_ns", "tokens", "tokens_source", "marker")
        .sort("file", "step")
        .collect(engine=ENGINE)
    )


def embedding_tokens(ops: pl.DataFrame) -> pl.DataFrame:
    """Tokens per file and step from ``aten::embedding`` calls whose indices are [batch,
    sequence].

    The token embedding is the one with the largest table (weight rows) among those with
    2-D indices; positional embeddings take 1-D indices. Every call of it in a step counts
    (one per micro-batch).
    """
    emb = ops.filter((pl.col("name") == "aten::embedding") & pl.col("step").is_not_null())
    rows = []
    for file, step, dims_text in emb.select("file", "step", "input_dims").iter_rows():
        dims = json_value(dims_text)
        if not _embedding_dims(dims):
            continue
        rows.append((file, step, dims[0][0], dims[1][0], dims[1][1]))
    empty = pl.DataFrame(
        schema={"file": pl.Int64, "step": pl.Int64, "tokens": pl.Int64, "tokens_source": pl.String}
    )
    if not rows:
        return empty
    calls = pl.DataFrame(rows, schema=["file", "step", "vocab", "batch", "seq"], orient="row")
    token_table = calls.filter(pl.col("vocab") == pl.col("vocab").max().over("file", "step"))
    return token_table.group_by("file", "step").agg(
        (pl.col("batch") * pl.col("seq")).sum().alias("tokens"),
        pl.format(
            "aten::embedding [{}, {}] x {}",
            pl.col("batch").first(),
            pl.col("seq").first(),
            pl.len(),
        ).alias("tokens_source"),
    )


def _embedding_dims(dims: Any) -> bool:
    """Whether ``dims`` is [[vocab, width], [batch, seq], ...] of int64s whose batch x seq
    fits int64 (the tokens are summed as int64; other values read as unknown)."""
    if not isinstance(dims, list) or len(dims) < 2:
        return False
    pairs = dims[:2]
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        return False
    values = [int64_or_none(v) for p in pairs for v in p]
    if None in values or min(values) < 0:  # type: ignore[type-var]
        return False
    return fits_int64(values[2] * values[3])  # type: ignore[operator]


def _ranks_table(traces: list[Trace], ops: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """A row per file (``traces``, in order): its process, device and distributed setup."""
    files = pl.DataFrame({"file": range(len(traces))}, schema={"file": pl.Int64})
    # one column at a time: filtering the whole frame would copy its strings (GBs for a big trace)
    pids = (
        ops.lazy()
        .group_by("file")
        .agg(pl.col("pid").filter(pl.col("kind") == "cpu_op").mode().min())
    )
    kernel_devices = pl.col("device").filter(pl.col("cat") == "kernel").drop_nulls()
    devices = gpu.lazy().group_by("file").agg(kernel_devices.mode().min())
    found = (
        files.lazy()
        .join(pids, on="file", how="left")
        .join(devices, on="file", how="left")
        .sort("file")
        .collect(engine=ENGINE)
    )
    rows = []
    for trace, pid, device in zip(traces, found["pid"], found["device"], strict=True):
        info = trace.distributedInfo or {}
        device = int(device) if device is not None else None
        gpu_name = None
        for props in trace.deviceProperties or []:
            if isinstance(props, dict) and device is not None and props.get("id") == device:
                gpu_name = str_or_none(props.get("name"))
        rows.append({
            "world_size": int64_or_none(info.get("world_size")),
            "host": trace.host_name,
            "pid": pid,
            "device": f"cuda:{device}" if device is not None else "cpu",
            "gpu_name": gpu_name,
            "backend": _str(info.get("backend")),
            "comm_lib_version": _str(info.get("nccl_version")),
            "base_time_ns": trace.baseTimeNanoseconds,
        })  # fmt: skip
    return (
        pl.DataFrame(rows, schema=_RANKS)
        .with_columns(files.get_column("file"))
        .select("file", *_RANKS)
    )


_RANKS = {
    "world_size": pl.Int64,
    "host": pl.String,
    "pid": pl.Int64,
    "device": pl.String,
    "gpu_name": pl.String,
    "backend": pl.String,
    "comm_lib_version": pl.String,
    "base_time_ns": pl.Int64,
}


#: The columns that hold event ids (``event_id`` runs on across a batch's files): table ->
#: columns.
_ID_COLUMNS = {
    "ops": ("op_id", "parent_id"),
    "kernels": ("kernel_id",),
    "collectives": ("collective_id", "launch_op_id"),
}


def split_tables(
    tables: dict[str, pl.DataFrame], ranks: list[int], first_ids: list[int], derive: bool
) -> list[dict[str, pa.Table]]:
    """A batch's tables (each sorted by its ``file`` column) cut into each file's own: its
    ``rank`` first, event ids counted from the file's first (``first_ids``), ``file`` gone.

    With ``derive``, the collectives' attribution and the time breakdown are worked out
    first, over the whole batch, with ``file`` standing in as ``rank`` (their key for what
    belongs together); each file then gets a ``time_breakdown`` only where it has rows, as
    :func:`~pipeline.ingest.derive.time_breakdown.add_time_breakdown` adds it. Each table is
    then conformed to its schema (:func:`~pipeline.dataset.schema.conform`; the writer's
    ``job`` and ``file_id`` left blank for it to fill), so that the writer's conform of each
    file's part casts nothing: a cast of each column of a batch, not of each file's.
    """
    keyed = {name: _file_as_rank(frame) for name, frame in tables.items()}
    if derive:
        attribute_collectives(keyed)
        add_time_breakdown(keyed)
    rank_of = pl.Series(ranks, dtype=pl.Int64)
    offset_of = pl.Series(first_ids, dtype=pl.Int64)
    out: list[dict[str, pa.Table]] = [{} for _ in ranks]
    for name, table in keyed.items():
        frame = pl.from_arrow(table)
        # (through Polars: Arrow's to_numpy would import pandas, which tokenwire never uses)
        file = frame.get_column("rank").to_numpy()
        bounds = np.searchsorted(file, np.arange(len(ranks) + 1), side="left")
        ids = [c for c in _ID_COLUMNS.get(name, ()) if c in table.column_names]
        frame = frame.with_columns(
            pl.lit(rank_of).gather(pl.col("rank")).alias("rank"),
            *((pl.col(c) - pl.lit(offset_of).gather(pl.col("rank"))).alias(c) for c in ids),
        )
        whole = frame.to_arrow(compat_level=pl.CompatLevel.newest())
        if derive:
            whole = conform(name, whole, job="", source="kineto", file_id="")
        for k, (start, end) in enumerate(itertools.pairwise(bounds.tolist())):
            if end > start or name != "time_breakdown":
                out[k][name] = whole.slice(start, end - start)
    return out


def _file_as_rank(frame: pl.DataFrame) -> pa.Table:
    """``frame`` as Arrow with its ``file`` column first, named ``rank``."""
    keep = [frame.get_column(c) for c in frame.columns if c not in ("rank", "file")]
    # Arrow's string views share Polars' buffers; the default export copies every string of
    # every table at once (the writer casts one table at a time instead)
    framed = pl.DataFrame([frame.get_column("file").alias("rank"), *keep])  # (no query)
    return framed.to_arrow(compat_level=pl.CompatLevel.newest())


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_EMPTY_BATCH = pl.DataFrame(
    schema={
        "event_id": pl.Int64,
        "file": pl.Int64,
        "cat": CAT,
        "name": pl.String,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "grid": pl.List(pl.Int64),
        "block": pl.List(pl.Int64),
        "input_dims": pl.String,
        "input_types": pl.String,
        "concrete_inputs": pl.String,
        **_ARG_COLUMNS,
        "start_ns": pl.Int64,
        "dur_ns": pl.Int64,
    }
)

#: The columns every event's frame starts with, host range or GPU activity.
_EVENT_FRAME = ["event_id", "file", "cat", "name", "pid", "tid", "start_ns", "dur_ns"]
_HOST_FRAME = [*_EVENT_FRAME, "input_dims", "input_types", "concrete_inputs", *_HOST_ARGS]
_GPU_FRAME = [*_EVENT_FRAME, "grid", "block", *_GPU_ARGS]
