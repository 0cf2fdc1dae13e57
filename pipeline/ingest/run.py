"""Ingest a job's trace files into a dataset: find, hash, parse (in parallel), write, commit.

Each file is parsed on its own, or with other small files of its format where the format
parses several at once (:data:`BATCHED_FORMATS`), in a worker process when there are
several; each file's tables are conformed to ``schemas/`` and written as Parquet parts,
except the small ones (most tables of most files of a many-rank job), which come back to the
main process. That process then checks the run as a whole (two files claiming one rank of
one job), writes the small tables and the ``files`` rows as one part per table and job, and
commits the manifest. A file whose bytes are already in the dataset under the same job is
skipped (the same bytes under another job are that job's file), unless its rank comes from
its file name and that names another rank (:func:`_plan`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import os
import stat
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ..allocators import GIVE_BACK_FILE_BYTES, JEMALLOC_ENV, set_here
from ..dataset.arrow_convert import string_scalar
from ..dataset.commit import PartWriter, Transaction, discard_parts, write_part
from ..dataset.schema import conform
from ..dataset.small_parts import (
    SmallRows,
    copy_part_without,
    files_part,
    pack_table,
    packed_rows,
    unpacked_size,
    write_shared_parts,
)
from ..dataset.store import (
    ROW_GROUP_ROWS,
    DatasetWriteError,
    FileEntry,
    check_job_name,
    job_name_from,
    part_columns,
    part_id,
    part_path,
)
from ..errors import TokenwireError, TraceFormatError
from ..guards import die_with_parent, limit_message
from ..ingest.derive.attribution import attribute_collectives
from ..ingest.derive.time_breakdown import add_time_breakdown
from ..ingest.detect import detect, module_for
from ..ingest.result import ParseResult
from ..ingest.values import rank_from_file_name

if TYPE_CHECKING:  # (Dask is an optional extra, imported only for --scheduler)
    from ..ingest.distributed import Cluster

#: Files whose total size is below this are parsed in-process: a pool costs seconds to start.
POOL_MIN_BYTES = 64 * 1024 * 1024
#: A file smaller than this (on disk) of a format of :data:`BATCHED_FORMATS` is parsed in a
#: batch with others (:func:`parse_files`).
BATCH_FILE_BYTES = 2 * 1024 * 1024
#: A batch holds up to this many files ...
BATCH_FILES = 64
#: ... and this many bytes (on disk); a larger file is a task alone.
BATCH_BYTES = 32 * 1024 * 1024
#: The small tables of parsed files wait in the main process until the commit writes them
#: (packed, :class:`~pipeline.dataset.small_parts.SmallRows`), up to this many bytes in all
#: as tables; past it, those held are written at once, one part per table and job shared by
#: their files. A table is unpacked whole to be written (each of a batch's files holds a
#: slice of it), so this bounds the main process's memory. Measured on a generated job of
#: 1,024 ranks: 2,048 files held 504 MB as tables, some 90 MB packed; on docs/scale.md's
#: 16,384-rank job the main process peaked at 0.92 GB with this bound, at 1.43 GB with
#: twice it, for no less CPU.
SMALL_TABLES_BYTES = 256 * 1024 * 1024


@dataclass
class InputFile:
    """One file found for ingest, with the job it belongs to."""

    path: Path
    job: str
    explicit: bool


@dataclass
class FileOutcome:
    """What happened to one input file."""

    path: Path
    job: str
    status: str  # ingested, skipped, unrecognised, failed
    file_id: str | None = None
    sha256: str | None = None
    format: str | None = None
    format_version: str | None = None
    rank_source: str | None = None
    ranks: list[int] = field(default_factory=list)
    parts: dict[str, list[str]] = field(default_factory=dict)
    #: Tables too small for a part of their own (conformed, as a part holds them, packed
    #: with those of the other files of its batch): written at commit with those of the
    #: other files of the job.
    small: dict[str, SmallRows] = field(default_factory=dict, repr=False)
    rows: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0
    error: str | None = None
    internal: bool = False
    #: Skipped as bytes the dataset held before the run (not as a copy of another input).
    held: bool = False
    #: The traceback of an internal error, kept when ``TOKENWIRE_DEBUG`` is set.
    traceback: str | None = None


@dataclass
class IngestSummary:
    """The outcome of one ingest run."""

    outcomes: list[FileOutcome]
    #: Folders under the inputs that could not be read (their files were not found).
    unreadable: list[str] = field(default_factory=list)
    #: What the walk of the folders left out, and why (:func:`find_inputs`).
    passed_over: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        """Number of files with ``status``."""
        return sum(o.status == status for o in self.outcomes)

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per table, over the files ingested in this run."""
        out: dict[str, int] = {}
        for o in self.outcomes:
            if o.status == "ingested":
                for t, n in o.rows.items():
                    out[t] = out.get(t, 0) + n
        return dict(sorted(out.items()))

    @property
    def nothing_ingested(self) -> bool:
        """No file of the run is in the dataset: none ingested now, none there before."""
        return not any(o.status == "ingested" or o.held for o in self.outcomes)

    @property
    def errors(self) -> list[FileOutcome]:
        """The files that failed."""
        return [o for o in self.outcomes if o.status == "failed"]


@dataclass
class Inputs:
    """The files found for an ingest, the folders under the inputs that could not be
    listed, and the hidden files and folders and links to folders the walk passed over
    (both reported, never skipped in silence)."""

    files: list[InputFile]
    unreadable: list[str]
    passed_over: list[str] = field(default_factory=list)


def find_inputs(paths: Iterable[Path], job: str | None) -> Inputs:
    """Expand folders (recursively, sorted, links to folders not followed) into files, each
    with its job name.

    Without ``job``, a file's job is the name of the folder given on the command line (or,
    for a file given directly, of the folder holding it). Inside a folder, hidden files and
    folders (``.cache/``) and links to folders are passed over (named on the command line,
    they are read).
    """
    if job is not None:
        check_job_name(job)
    found = Inputs([], [])
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            name = job or job_name_from(path.resolve().name)
            passed_over: list[str] = []
            files = _walk(path, found.unreadable, passed_over)
            if not files and not found.unreadable:
                raise TraceFormatError(path, _no_files(passed_over))
            found.passed_over.extend(passed_over)
            found.files.extend(InputFile(p, name, explicit=False) for p in files)
        elif path.exists() or path.is_symlink():
            name = job or job_name_from(_resolved(path).parent.name)
            found.files.append(InputFile(path, name, explicit=True))
        else:
            raise TraceFormatError(path, "no such file or folder")
    if not found.files and found.unreadable:
        raise TraceFormatError(found.unreadable[0], "cannot read folder: no file could be found")
    return found


def _walk(root: Path, unreadable: list[str], passed_over: list[str]) -> list[Path]:
    """Every file under ``root`` but hidden ones, sorted; a folder that cannot be listed is
    added to ``unreadable`` with the reason, a hidden file or folder or a link to a folder
    to ``passed_over`` (its path; a folder's ends in ``/``). Anything else that is not a
    folder is a file here: a broken link, a loop or a FIFO is reported when it is read, not
    skipped."""

    def refused(exc: OSError) -> None:
        unreadable.append(f"{exc.filename}: cannot read folder: {exc.strerror}")

    files = []
    for folder, dirs, names in os.walk(root, onerror=refused):
        # (os.walk lists a link to a folder among the folders and does not enter it)
        passed_over.extend(
            f"{Path(folder, d)}/"
            for d in sorted(dirs)
            if d.startswith(".") or Path(folder, d).is_symlink()
        )
        passed_over.extend(str(Path(folder, n)) for n in sorted(names) if n.startswith("."))
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        files.extend(Path(folder, n) for n in names if not n.startswith("."))
    return sorted(files)


def _no_files(passed_over: list[str]) -> str:
    """Why a folder gave no file: none at all, or only hidden ones and links."""
    if not passed_over:
        return "no files in this folder"
    return (
        f"no files in this folder but hidden ones or links to folders ({passed(passed_over)}); "
        "the walk passes over those: name one to ingest it"
    )


def passed(paths: list[str], shown: int = 3) -> str:
    """The first ``shown`` of ``paths`` and how many more, for one line."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def ingest(
    paths: Iterable[Path],
    dataset: Path,
    *,
    job: str | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[FileOutcome], None] | None = None,
    step_marker: str | None = None,
    fmt: str | None = None,
) -> IngestSummary:
    """Parse ``paths`` into ``dataset``.

    Parameters
    ----------
    paths
        Trace files and folders of one or more jobs.
    dataset
        The dataset folder (created when missing).
    job
        Job name for every file; default: the folder name (see :func:`find_inputs`).
    jobs
        Worker processes; default: one per core when the input is large, else in-process.
    scheduler
        Address of a Dask scheduler: hash and parse there instead (see
        :mod:`pipeline.ingest.distributed`).
    on_start
        Called once with the number of input files, for progress display.
    on_file
        Called after each file, for progress display.
    step_marker
        A regular expression matching the whole name of the user annotations that bound
        steps in Kineto traces without ``ProfilerStep#N`` ranges (see
        :func:`pipeline.ingest.kineto.parse.parse`).
    fmt
        The format of every file (:mod:`pipeline.ingest.detect`'s name), not detected: a
        file that is not one fails with the parser's error (``tokenwire hang`` reads
        flight recorder dumps only).

    Returns
    -------
    IngestSummary
        One outcome per input file; bad files are reported there, never raised.
    """
    found = find_inputs(paths, job)
    inputs = found.files
    if on_start is not None:
        on_start(len(inputs))
    outcomes: list[FileOutcome] = []
    # (connect first: an unreachable scheduler is reported before the dataset is touched)
    with _cluster(scheduler) as cluster, Transaction(Path(dataset)) as txn:
        sizes = [_size(inp.path) for inp in inputs]
        # (the parsing workers import this module and never need DuckDB, which compact does)
        from ..dataset.compact import SMALL_PART_ROWS

        finished = functools.partial(_finished, _SmallTables(txn.dataset), on_file)
        planned = _plan(inputs, sizes, txn, finished, outcomes, SMALL_PART_ROWS, cluster)
        planned = ((i, (*a, step_marker, file_id, fmt)) for i, a, file_id in planned)
        results = _parse_all(planned, sizes, jobs, finished, cluster)
        accepted = _check_ranks(results, txn)
        _commit(txn, accepted)
        outcomes.extend(results)
    order = {inp.path: i for i, inp in enumerate(inputs)}
    outcomes.sort(key=lambda o: order.get(o.path, 0))
    return IngestSummary(outcomes, found.unreadable, found.passed_over)


def _plan(
    inputs: list[InputFile],
    sizes: list[int],
    txn: Transaction,
    on_file,
    done: list[FileOutcome],
    small_rows: int,
    cluster: Cluster | None = None,
) -> Iterator[tuple[int, tuple, str]]:
    """Hash the inputs, largest first (here, or on the Dask ``cluster``), and yield (input
    index, :func:`parse_file` arguments, file id) for each file to parse as soon as its hash
    is known, so that parsing starts while the rest are hashed. Files already ingested (or
    repeated in this run) and unreadable ones go to ``done`` instead.

    A file is its bytes and the rank its file name gives (:func:`rank_from_file_name`): the
    dumps of pipeline stages that ran no collective are the same bytes, each rank's told by
    its name alone. Its id is its sha256's first 16 hex digits; a file of the same bytes as
    one before it under another name's rank takes :func:`_named_file_id` (and is skipped
    after all if its trace states its rank: :func:`_check_ranks`).
    """
    # Largest first: no worker is left with a big file at the end. sorted() is stable, so of
    # two copies of a file (same size) the first given is the one parsed.
    order = sorted(range(len(inputs)), key=lambda i: -sizes[i])
    # files already ingested, then those planned in this run, per job: either way the file is
    # skipped
    # (a set: checked against every manifest entry instead, re-ingesting 32,768 files would
    # take 28.7 s, not 5.7 s)
    seen = txn.manifest.sha256s()
    known = {
        (e.job, e.sha256, rank_from_file_name(Path(e.path).name))
        for e in txn.manifest.files.values()
    }
    held = set(known)  # (a file skipped for bytes held before the run is in the dataset)
    with _hashing(cluster) as hashes:
        found = hashes([inputs[i].path for i in order], [sizes[i] for i in order])
        for i, sha in zip(order, found, strict=True):
            inp = inputs[i]
            if isinstance(sha, OSError):
                error = f"{inp.path}: cannot read file: {_read_error(sha, inp.path, cluster)}"
                out = FileOutcome(inp.path, inp.job, "failed", error=error)
            elif not _utf8(inp.path):
                # (the files table and the manifest hold paths as UTF-8 text)
                error = f"{inp.path}: the file name is not valid UTF-8; rename it to ingest it"
                out = FileOutcome(inp.path, inp.job, "failed", error=error)
            elif (key := (inp.job, sha, rank_from_file_name(inp.path.name))) in known:
                out = FileOutcome(inp.path, inp.job, "skipped", file_id=sha[:16], sha256=sha)
                out.held = key in held
            else:
                file_id = sha[:16] if (inp.job, sha) not in seen else _named_file_id(sha, key[2])
                seen.add((inp.job, sha))
                known.add(key)
                yield i, (inp.path, inp.job, inp.explicit, sha, txn.dataset, small_rows), file_id
                continue
            done.append(out)
            _notify(on_file, out)


def _named_file_id(sha256: str, rank: int | None) -> str:
    """The id of a file whose bytes another file of its job has, its name giving ``rank``."""
    return hashlib.sha256(f"{sha256}:rank{rank}".encode()).hexdigest()[:16]


def _parse_all(
    planned: Iterator[tuple[int, tuple]],
    sizes: list[int],
    jobs: int | None,
    on_file,
    cluster: Cluster | None = None,
) -> list[FileOutcome]:
    """Parse the files of ``planned`` (see :func:`_plan`; ``sizes`` are the inputs' sizes)
    in-process, in a local pool or on Dask; the outcomes come back in input order (the rank
    checks keep the first file that claims a rank)."""
    if jobs is None:
        jobs = min(os.cpu_count() or 1, len(sizes)) if sum(sizes) >= POOL_MIN_BYTES else 1
    slots: list[FileOutcome | None] = [None] * len(sizes)
    first = next(planned, None)
    if first is None:  # nothing new: no pool
        return []
    planned = itertools.chain([first], planned)
    if cluster is not None:
        index: list[int] = []

        def tasks() -> Iterator[tuple[int, tuple]]:
            for i, a in planned:
                index.append(i)
                yield sizes[i], a

        notify = functools.partial(_notify, on_file)
        outs = cluster.parse(parse_files, tasks(), notify)
        for i, out in zip(index, outs, strict=True):
            slots[i] = out
    elif jobs <= 1:
        for batch in _tasks(planned, sizes, BATCH_FILES):
            for (i, _), out in zip(batch, parse_files([a for _, a in batch]), strict=True):
                slots[i] = out
                _notify(on_file, out)
    else:
        # (at least 4 tasks a worker, so that none waits on the last one for long)
        files = max(1, min(BATCH_FILES, len(sizes) // (4 * jobs)))
        big = max(sizes, default=0) >= GIVE_BACK_FILE_BYTES
        _parse_in_pool(_tasks(planned, sizes, files), jobs, slots, on_file, big)
    return [out for out in slots if out is not None]


def _tasks(
    planned: Iterator[tuple[int, tuple]], sizes: list[int], files: int
) -> Iterator[list[tuple[int, tuple]]]:
    """``planned`` cut into tasks (:func:`parse_files`): a file of :data:`BATCH_FILE_BYTES`
    or more alone, smaller ones together, up to ``files`` files and :data:`BATCH_BYTES`."""
    batch: list[tuple[int, tuple]] = []
    held = 0
    for i, a in planned:
        if sizes[i] >= BATCH_FILE_BYTES:
            yield [(i, a)]
            continue
        batch.append((i, a))
        held += sizes[i]
        if len(batch) >= files or held >= BATCH_BYTES:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def _parse_in_pool(
    tasks: Iterator[list[tuple[int, tuple]]], jobs: int, slots: list, on_file, big: bool
) -> None:
    """Parse in ``jobs`` spawned processes, each task (a batch of files, see
    :func:`parse_files`) submitted as soon as it is planned; ``big``: some file is of
    :data:`~pipeline.allocators.GIVE_BACK_FILE_BYTES` or more."""
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=die_with_parent,  # (a killed ingest leaves no worker behind)
        initargs=(os.getpid(),),
    )
    with pool:
        # (the workers start while their tasks are submitted)
        with _worker_environment(jobs, big):
            futures = {pool.submit(parse_files, [a for _, a in t]): t for t in tasks}
        try:
            for future in as_completed(futures):
                try:
                    results = future.result()
                except BrokenProcessPool:
                    path = futures[future][0][1][0]
                    raise TraceFormatError(
                        path,
                        "the worker process parsing it died (killed, or out of memory); "
                        "nothing of this run was committed",
                    ) from None
                for (i, _), out in zip(futures[future], results, strict=True):
                    slots[i] = out
                    _notify(on_file, out)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # reported when it is hashed


@contextmanager
def _worker_environment(jobs: int, big: bool) -> Iterator[None]:
    """Start each of ``jobs`` worker processes with its share of the cores for Polars' thread
    pool, and Arrow's buffers from the system allocator; jemalloc's setting that gives pages
    back at once only where some file is big (``big``; see
    :func:`~pipeline.allocators.set_here`).

    Every process would otherwise size its pool to the whole machine: ``jobs`` x cores
    threads on ``cores`` cores (measured: 2 workers on 2 cores 6 % slower). Arrow's default
    allocator (mimalloc) keeps the memory of a file's tables for the next one; glibc's gives
    large buffers back when they are freed: 2 workers on the 1 GB job peaked at 770 MB in all
    instead of 872 MB, in the same time. Spawned workers inherit the environment they start
    with; a value the user set is kept.
    """
    settings = {
        "POLARS_MAX_THREADS": str(max(1, (os.cpu_count() or 1) // jobs)),
        "ARROW_DEFAULT_MEMORY_POOL": "system",
    }
    added = [key for key in settings if key not in os.environ]
    os.environ.update({key: settings[key] for key in added})
    removed = {}
    if not big and set_here() and JEMALLOC_ENV in os.environ:
        removed[JEMALLOC_ENV] = os.environ.pop(JEMALLOC_ENV)
    try:
        yield
    finally:
        for key in added:
            del os.environ[key]
        os.environ.update(removed)


def parse_file(
    path: Path,
    job: str,
    explicit: bool,
    sha256: str,
    dataset: Path,
    small_rows: int = 0,
    step_marker: str | None = None,
    file_id: str | None = None,
    given: str | None = None,
) -> FileOutcome:
    """Detect, parse and write the parts of one file (runs in a worker process); tables of
    fewer than ``small_rows`` rows come back in the outcome instead. ``step_marker``: see
    :func:`ingest` (Kineto traces only); ``file_id``: the file's (default: its sha256's
    first 16 hex digits, :func:`_plan`); ``given``: its format, not detected.

    Never raises: bad input and internal errors come back as a failed outcome.
    """

    def parsed() -> tuple[str, ParseResult] | None:
        fmt = given or detect(path)
        if fmt is None:
            if explicit:
                raise TraceFormatError(path, "not a trace format tokenwire reads")
            return None
        options = {"step_marker": step_marker} if step_marker and fmt == "kineto" else {}
        return fmt, module_for(fmt).parse(path, **options)

    out = FileOutcome(path, job, "failed", file_id=file_id or sha256[:16], sha256=sha256)
    return _outcome(out, parsed, dataset, small_rows)


def _outcome(
    out: FileOutcome,
    parsed: Callable[[], tuple[str, ParseResult] | None],
    dataset: Path,
    small_rows: int,
    together: bool = False,
) -> FileOutcome:
    """``out`` (failed until it is written) once the format and tables that ``parsed``
    gives (None: a format tokenwire does not read) are worked out and written. With
    ``together``, its small tables are left as parsed, for :func:`_conform_small` to conform
    and pack with those of the other files of its batch."""
    try:
        found = parsed()
        if found is None:
            out.status = "unrecognised"
            return out
        fmt, result = found
        out.format = fmt
        out.format_version = result.format_version
        out.rank_source = result.rank_source
        out.warnings = result.warnings.messages()
        out.warning_count = result.warnings.total
        if not result.derived:
            attribute_collectives(result.tables)
            add_time_breakdown(result.tables)
        _write_tables(out, result.tables, dataset, small_rows, pack=not together)
        out.status = "ingested"
    except DatasetWriteError:
        _remove_parts(dataset, out)
        raise  # the disk, not this file: stop the whole run
    except Exception as exc:
        _fail(out, exc)
    if out.status == "failed":
        _remove_parts(dataset, out)
    return out


def _fail(out: FileOutcome, exc: Exception) -> None:
    """``out`` failed with ``exc``: its one-line error (bad input names the file; anything
    else is a bug in tokenwire, or a limit of the machine)."""
    path = out.path
    out.status = "failed"
    if isinstance(exc, TraceFormatError):
        out.error = str(exc)
    elif isinstance(exc, TokenwireError):
        out.error = f"{path}: {exc}"
    else:  # a parser bug must not take the other files down with it
        first = (str(exc).splitlines() or [""])[0]
        limit = limit_message(exc)  # (memory or open files: the limit, not a bug)
        out.error = (
            f"{path}: {limit}"
            if limit
            else f"{path}: internal error: {type(exc).__name__}: {first}"
        )
        out.internal = limit is None
        if os.environ.get("TOKENWIRE_DEBUG"):
            out.traceback = traceback.format_exc()


def parse_files(batch: list[tuple]) -> list[FileOutcome]:
    """:func:`parse_file` of each argument tuple of ``batch``, in order (a Dask task, a
    pool task): its small files (under :data:`BATCH_FILE_BYTES`) of a format of
    :data:`BATCHED_FORMATS` are parsed together, a format at a time (:func:`parse_together`),
    the others one by one."""
    outs: list[FileOutcome | None] = [None] * len(batch)
    formats: dict[str, list[int]] = {}
    for i, a in enumerate(batch):
        given = a[8] if len(a) > 8 else None  # (a format given is parsed file by file)
        if given is None and (fmt := _batch_format(a[0])) is not None:
            formats.setdefault(fmt, []).append(i)
    for fmt, members in formats.items():
        parsed = parse_together(fmt, [batch[i] for i in members])
        for i, out in zip(members, parsed, strict=True):
            outs[i] = out
    for i, a in enumerate(batch):
        if outs[i] is None:
            outs[i] = parse_file(*a)
    return outs  # type: ignore[return-value]  # (every slot is filled)


#: The formats whose small files are parsed several at once, by their module's
#: ``parse_batch`` (a list of paths -> a ParseResult or the exception of each): a small file's
#: time goes mostly to the fixed cost of each Polars query, whatever its rows, which a batch
#: pays once for all its files.
BATCHED_FORMATS = ("kineto", "nccl_log")


def _batch_format(path: Path) -> str | None:
    """The format of ``path`` when it is one of :data:`BATCHED_FORMATS` and the file is small
    enough to be parsed in a batch; else None."""
    try:
        if path.stat().st_size >= BATCH_FILE_BYTES:
            return None
        fmt = detect(path)
    except Exception:  # (parse_file reports it)
        return None
    return fmt if fmt in BATCHED_FORMATS else None


def parse_together(fmt: str, batch: list[tuple]) -> list[FileOutcome]:
    """:func:`parse_file` of each file of ``batch`` (all of format ``fmt``), all parsed at
    once; where the batch fails as a whole, each file is parsed again alone, so that only
    the file that makes it fail fails."""
    if len(batch) <= 1:
        return [parse_file(*a) for a in batch]
    try:
        results = module_for(fmt).parse_batch([a[0] for a in batch], **_batch_options(fmt, batch))
    except Exception:
        return [parse_file(*a) for a in batch]
    outs = []
    for (path, job, _, sha256, dataset, *rest), result in zip(batch, results, strict=True):
        file_id = (rest[2] if len(rest) > 2 else None) or sha256[:16]
        out = FileOutcome(path, job, "failed", file_id=file_id, sha256=sha256)
        small_rows = rest[0] if rest else 0
        parsed = functools.partial(_given, fmt, result)
        outs.append(_outcome(out, parsed, dataset, small_rows, together=True))
    _conform_small(outs, batch[0][4])
    return outs


def _batch_options(fmt: str, batch: list[tuple]) -> dict:
    """Kineto's: the ingest's step marker (the same for every file) and the collectives'
    attribution and time breakdown worked out over the batch at once too."""
    if fmt != "kineto":
        return {}
    return {"step_marker": batch[0][6] if len(batch[0]) > 6 else None, "derive": True}


def _given(fmt: str, result: ParseResult | Exception) -> tuple[str, ParseResult]:
    """A file's result from its batch (raised: the error it failed with)."""
    if isinstance(result, Exception):
        raise result
    return fmt, result


def _conform_small(outs: list[FileOutcome], dataset: Path) -> None:
    """Conform and pack the small tables of a batch's files (left as parsed by
    :func:`_write_tables`): each table of the files of one job at once, for what conforming
    costs whatever the rows (checks and casts of every column: 2 to 3 ms a file, most of a
    small file's write), then each file's rows packed alone. Where that fails, each file's
    tables are conformed alone, so that only a file whose rows are refused fails."""
    groups: dict[tuple[str, str], list[FileOutcome]] = {}
    for out in outs:
        if out.status == "ingested" and out.small:
            groups.setdefault((out.job, out.format or ""), []).append(out)
    for group in groups.values():
        for name in sorted({name for out in group for name in out.small}):
            holders = [out for out in group if name in out.small]
            try:
                whole = _conformed_together(name, holders)
            except Exception:  # (the file whose rows are refused is found below)
                whole = None
            if whole is not None:
                _share(whole, holders, name)
                continue
            for out in holders:
                if out.status != "ingested":
                    continue
                try:
                    out.small[name] = packed_rows(_conformed(name, out))
                except Exception as exc:
                    _fail(out, exc)
                    _remove_parts(dataset, out)


def _share(whole: pa.Table, holders: list[FileOutcome], name: str) -> None:
    """Pack ``whole`` (table ``name`` of ``holders``, their rows one after another, in
    order) once, and give each holder its rows of it."""
    packed = pack_table(whole)
    start = 0
    for out in holders:
        count = out.small[name].num_rows
        size = unpacked_size(packed) * count // max(1, whole.num_rows)
        out.small[name] = SmallRows(packed, start, count, size)
        start += count


def _conformed(name: str, out: FileOutcome) -> pa.Table:
    """``out``'s small table ``name`` conformed (:func:`~pipeline.dataset.schema.conform`),
    as its part holds it."""
    table = conform(name, out.small[name], job=out.job, source=out.format, file_id=out.file_id)
    return part_columns(name, table)


def _conformed_together(name: str, holders: list[FileOutcome]) -> pa.Table:
    """Table ``name`` of ``holders`` (files of one job and format), their rows one after
    another, conformed by one :func:`~pipeline.dataset.schema.conform` of them all, as its
    part holds it: the same values, columns and types as each file's conformed alone."""
    pieces = [out.small[name] for out in holders]
    first = holders[0]
    whole = conform(name, pa.concat_tables(pieces), job=first.job, source=first.format,
                    file_id="")  # fmt: skip
    ids = pa.chunked_array(
        [pa.repeat(string_scalar(out.file_id or ""), p.num_rows) for out, p in
         zip(holders, pieces, strict=True)],
        pa.string(),
    )  # fmt: skip
    at = whole.schema.get_field_index("file_id")
    return part_columns(name, whole.set_column(at, whole.schema.field(at), ids.combine_chunks()))


def _remove_parts(dataset: Path, out: FileOutcome) -> None:
    """Delete the parts a failed file wrote (the manifest never listed them) and drop the
    small tables it holds. (A file refused for its rank: :func:`_drop_refused`.)"""
    discard_parts(dataset, [rel for rels in out.parts.values() for rel in rels])
    out.parts = {}
    out.small = {}


def _write_tables(
    out: FileOutcome,
    tables: dict[str, pa.Table],
    dataset: Path,
    small_rows: int,
    *,
    pack: bool = True,
) -> None:
    """Write each table's part, or keep it in ``out.small`` when it has fewer than
    ``small_rows`` rows (conformed and packed; without ``pack``, as it is, for
    :func:`_conform_small`); ``tables`` is emptied as they are written (memory).

    A table is conformed (its columns cast to the schema's types, which copies them) and
    written one row group at a time, so a big trace's ops are never copied whole.
    """
    ranks: set[int] = set()
    for name in list(tables):
        table = tables.pop(name)
        out.rows[name] = table.num_rows
        if not table.num_rows:
            continue
        if "rank" in table.column_names:
            ranks.update(table.column("rank").unique().to_pylist())
        if table.num_rows < small_rows:
            if pack:
                table = conform(name, table, job=out.job, source=out.format, file_id=out.file_id)
                out.small[name] = packed_rows(part_columns(name, table))
            else:
                out.small[name] = table
            continue
        with PartWriter(dataset, part_path(name, out.job, out.file_id)) as part:
            for start in range(0, table.num_rows, ROW_GROUP_ROWS):
                piece = table.slice(start, ROW_GROUP_ROWS)
                piece = conform(name, piece, job=out.job, source=out.format, file_id=out.file_id)
                part.write(part_columns(name, piece))
        out.parts[name] = [part.rel]
    out.ranks = sorted(r for r in ranks if r is not None)


def _check_ranks(results: list[FileOutcome], txn: Transaction) -> list[FileOutcome]:
    """Refuse files that claim a rank another file of the same job and format already holds.
    A file of the same bytes as another of its job, parsed for the other rank its name
    gives (:func:`_plan`), whose trace states its rank after all, is that file again:
    skipped."""
    owner: dict[tuple[str, str, int], str] = {}
    refused: list[FileOutcome] = []
    for e in txn.manifest.files.values():
        for r in e.ranks:
            owner[(e.job, e.format, r)] = e.path
    held = txn.manifest.sha256s()
    accepted = []
    for out in results:
        if out.status != "ingested":
            continue
        if out.file_id != out.sha256[:16] and "file_name" not in (out.rank_source or ""):
            out.status, out.held = "skipped", (out.job, out.sha256) in held
            refused.append(out)
            continue
        clash = [
            (r, owner[(out.job, out.format, r)])
            for r in out.ranks
            if (out.job, out.format, r) in owner
        ]
        if clash:
            rank, other = clash[0]
            out.status = "failed"
            out.error = (
                f"{out.path}: rank {rank} of job {out.job!r} is already taken by "
                f"{other}; use --job to keep them apart"
            )
            refused.append(out)
            continue
        for r in out.ranks:
            owner[(out.job, out.format, r)] = str(out.path)
        accepted.append(out)
    _drop_refused(txn, refused, accepted)
    for out in refused:
        if out.status == "skipped":  # (its rows dropped by the id they were written under)
            out.file_id = out.sha256[:16]
    return accepted


def _drop_refused(
    txn: Transaction, refused: list[FileOutcome], accepted: list[FileOutcome]
) -> None:
    """Delete what refused files wrote. A part they share with accepted files (small tables
    written past :data:`SMALL_TABLES_BYTES`) is written again without their rows."""
    holders: dict[str, list[FileOutcome]] = {}
    for out in accepted:
        for rels in out.parts.values():
            for rel in rels:
                holders.setdefault(rel, []).append(out)
    drop: dict[tuple[str, str], set[str]] = {}
    for out in refused:
        for name, rels in out.parts.items():
            for rel in rels:
                if rel in holders:
                    drop.setdefault((name, rel), set()).add(out.file_id)
                else:
                    txn.discard(rel)
        out.parts, out.small = {}, {}
    for (name, rel), file_ids in sorted(drop.items()):
        kept = holders[rel]
        new = part_path(name, kept[0].job, part_id(out.file_id for out in kept))
        copy_part_without(txn.dataset, rel, new, file_ids)
        for out in kept:
            out.parts[name] = [new if r == rel else r for r in out.parts[name]]
        txn.discard(rel)


def _commit(txn: Transaction, accepted: list[FileOutcome]) -> None:
    """Write the small tables and the ``files`` rows (one part per table and job), list the
    accepted files in the manifest, then merge the small parts of their jobs (those of earlier
    runs; :mod:`pipeline.dataset.compact`).

    New rows make the derived tables stale: they leave the manifest with the new files
    (``tokenwire link`` makes them again), and their parts are deleted after the commit.
    """
    if not accepted:
        return
    manifest = txn.manifest
    stale = [rel for rels in manifest.derived.values() for rel in rels]
    manifest.derived = {}
    for job, outs in _by_job(accepted).items():
        _write_small_tables(txn.dataset, job, outs)
        rel = part_path("files", job, part_id(out.file_id for out in outs))
        paths = _real_paths(outs)
        write_part(txn.dataset, rel, _files_rows(job, outs, paths))
        for out, path in zip(outs, paths, strict=True):
            out.parts["files"] = [rel]
            out.rows["files"] = 1
            manifest.add(
                FileEntry(
                    file_id=out.file_id,
                    sha256=out.sha256,
                    path=path,
                    job=out.job,
                    format=out.format,
                    ranks=out.ranks,
                    parts=out.parts,
                )
            )
    from ..dataset.compact import compact

    merged = compact(txn.dataset, manifest, {out.job for out in accepted})
    txn.commit(removed=stale + merged)  # until here the dataset is as it was


def _write_small_tables(dataset: Path, job: str, outs: list[FileOutcome]) -> None:
    """Write the small tables ``outs`` hold as one part per table
    (:func:`~pipeline.dataset.small_parts.write_shared_parts`), listed under each file whose
    rows it holds. At the commit the workers are done and the cores free; past
    :data:`SMALL_TABLES_BYTES`, during the run, the writes share the cores with them."""
    names = {out.file_id: list(out.small) for out in outs}
    written = write_shared_parts(dataset, job, [(out.file_id, out.small) for out in outs])
    for out in outs:
        for name in names[out.file_id]:
            out.parts[name] = [written[name]]


class _SmallTables:
    """The files whose small tables are held until the commit; past
    :data:`SMALL_TABLES_BYTES`, those held are written at once (a part per table and job,
    shared by their files), so that memory stays bounded."""

    def __init__(self, dataset: Path) -> None:
        self.dataset = dataset
        self.held: list[FileOutcome] = []
        self.bytes = 0

    def hold(self, out: FileOutcome) -> None:
        """Keep ``out``'s small tables for the commit; write all held if that is too many."""
        if not out.small:
            return
        self.held.append(out)
        self.bytes += sum(rows.nbytes for rows in out.small.values())
        if self.bytes > SMALL_TABLES_BYTES:
            for job, outs in _by_job(self.held).items():
                _write_small_tables(self.dataset, job, outs)
            self.held, self.bytes = [], 0


def _by_job(outs: list[FileOutcome]) -> dict[str, list[FileOutcome]]:
    """``outs`` by job, in the order each job first appears."""
    groups: dict[str, list[FileOutcome]] = {}
    for out in outs:
        groups.setdefault(out.job, []).append(out)
    return groups


def _finished(small: _SmallTables, on_file, out: FileOutcome) -> None:
    """A file is done: hold its small tables, then report it."""
    small.hold(out)
    _notify(on_file, out)


def _real_paths(outs: list[FileOutcome]) -> list[str]:
    """Each file's absolute path with no link in it (``Path.resolve``): each folder's
    resolved once for all its files, a file that is a link itself alone (a resolve walks
    every component of the path: 0.6 s for 4,096 files)."""
    folders: dict[Path, Path] = {}
    paths = []
    for out in outs:
        path = out.path
        if path.is_symlink():
            paths.append(str(path.resolve()))
            continue
        if path.parent not in folders:
            folders[path.parent] = path.parent.resolve()
        paths.append(str(folders[path.parent] / path.name))
    return paths


def _files_rows(job: str, outs: list[FileOutcome], paths: list[str]) -> pa.Table:
    """One ``files`` row per outcome of ``job`` (at its file's real path, of ``paths``), as
    its part holds them."""
    now = time.time_ns()
    return files_part(
        job,
        {
            "file_id": [out.file_id for out in outs],
            "sha256": [out.sha256 for out in outs],
            "path": paths,
            "format": [out.format for out in outs],
            "format_version": [out.format_version for out in outs],
            "size_bytes": [out.path.stat().st_size for out in outs],
            "ranks": [out.ranks for out in outs],
            "rank_source": [out.rank_source for out in outs],
            "rows": [sum(out.rows.values()) for out in outs],
            "warnings": [out.warning_count for out in outs],
            "warning_messages": [out.warnings for out in outs],
            "ingested_at_ns": [now] * len(outs),
        },
    )


@contextmanager
def _cluster(scheduler: str | None) -> Iterator[Cluster | None]:
    """The :class:`~pipeline.ingest.distributed.Cluster` at ``scheduler``; None without one."""
    if scheduler is None:
        yield None
        return
    from ..ingest.distributed import Cluster

    with Cluster(scheduler) as cluster:
        yield cluster


@contextmanager
def _hashing(
    cluster: Cluster | None,
) -> Iterator[Callable[[list[Path], list[int]], Iterable[str | OSError]]]:
    """A function of (paths, sizes) to each path's :func:`_sha256_or_error`, in order: on the
    cluster's workers, else in threads here."""
    if cluster is not None:
        yield functools.partial(cluster.hashes, hash_files)
        return
    # hashlib releases the GIL on large buffers: a few threads hash as fast as the disk reads
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as hashers:
        yield lambda paths, sizes: hashers.map(_sha256_or_error, paths)


def hash_files(paths: list[Path]) -> list[str | OSError]:
    """Each file's sha256, or the OSError that reading it raised (a Dask task)."""
    return [_sha256_or_error(path) for path in paths]


def _read_error(exc: OSError, path: Path, cluster: Cluster | None) -> str:
    """Why ``path`` could not be read, for its one-line error."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT and path.is_symlink():
        return reason + " (broken symbolic link)"
    if exc.errno == errno.ENOENT and cluster is not None and path.exists():
        # (a cluster without the shared file system: every file would say only this)
        return reason + " on the Dask workers, though it is here: they must see it at this path"
    return reason


def _sha256_or_error(path: Path) -> str | OSError:
    try:
        return _sha256(path)
    except OSError as exc:
        return exc


def _sha256(path: Path) -> str:
    """The file's sha256; OSError for anything but a readable regular file."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block forever in open()
        raise OSError(f"not a regular file but {_kind(path)}")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: the error comes when it is read
        return path.absolute()


def _kind(path: Path) -> str:
    mode = os.stat(path).st_mode
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def _utf8(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _notify(on_file, out: FileOutcome) -> None:
    if on_file is not None:
        on_file(out)
