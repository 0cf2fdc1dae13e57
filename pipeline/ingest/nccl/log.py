"""NCCL debug logs (``NCCL_DEBUG=INFO``), NCCL 2.7 to 2.30, into ranks, communicators,
topology, collectives and log_messages.

Input is a per-rank file (``NCCL_DEBUG_FILE=%h.%p``) or a launcher's combined output with
ranks interleaved, launcher tags and other program output mixed in. Lines are read in
batches into a Polars column and parsed with vectorized patterns (see
:mod:`pipeline.ingest.nccl.lines`); this module turns the per-kind rows into tables.

How a line gets its rank: NCCL prefixes carry ``host:pid:tid [cudaDev]``; each
``(host, pid, cudaDev)`` is mapped to a global rank by the best evidence in the file, in
order: its ``Init START/COMPLETE`` (or 2.20+ ``comm .. nRanks``) lines, using the largest
communicator (the world); nccl-tests' ``# Rank r .. Pid p on host device d`` list; the
launcher tag (``[1,3]<stdout>:``, ``[rank3]:``, ``[3] ``); the ring/tree/connection lines
(``me`` in ``prev -> me -> next``). Without any, the rank is -1 and a warning says so.

``opCount`` is kept as ``collectives.op_count``; it is not a call sequence number in most
versions (2.7: +1 per call; 2.8: always 0; 2.9-2.11: +1 per launch with proxy work;
2.12-2.26: +1 per kernel launch, so calls of one group share it; 2.27+: +1 per launch with
proxy work). ``collectives.seq`` is the order of issue per (process, communicator).

Small logs are parsed several at once (:func:`parse_batch`): each step's queries cost about
the same for one 7 KB log as for 32, so every frame carries ``file`` (the log's place in
the batch; 0 for a log parsed alone), which leads every key that works per file, and the
tables are cut into each file's at the end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from ...dataset.schema import table_schema
from ...errors import TraceFormatError
from ...ingest.nccl import lines as L
from ...ingest.nccl.version import infer_versions
from ...ingest.result import ParseResult, Warnings, parsed_table
from ...ingest.values import LineOutOfRange, check_line_numbers, product_fits
from ...vocab import DTYPE_SIZES, op_name_expr

FORMAT = "nccl_log"

_SNIFF = (
    r"(?m)(?:^|[\s:>\]\)])[^\s:\[\]]+:\d+:\d+ (?:\[\d+\] )?(?:\S+:\d+ )?NCCL (?:INFO|WARN|TRACE) "
    r"|^\s*(?:\[\d+\] )?NCCL (?:INFO|WARN) \S|^NCCL version \d+\.\d+\.\d+"
)

# ncclDataType_t -> dtype name (its size: vocab.DTYPE_SIZES); ncclRedOp_t -> name (>= 5:
# PreMulSum handles, 2.11+).
_DTYPES = {
    0: "int8",
    1: "uint8",
    2: "int32",
    3: "uint32",
    4: "int64",
    5: "uint64",
    6: "float16",
    7: "float32",
    8: "float64",
    9: "bfloat16",
    10: "float8_e4m3",
    11: "float8_e5m2",
}
_REDOPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
_ALGOS = {
    "0": "tree",
    "1": "ring",
    "2": "collnet_direct",
    "3": "collnet_chain",
    "4": "nvls",
    "5": "nvls_tree",
    "6": "pat",
}
_PROTOS = {"0": "ll", "1": "ll128", "2": "simple"}
# Which subsystem prints each kind (the log line itself does not name it).
_SUBSYS = {
    "coll": "COLL",
    "tuning": "TUNING",
    "conn": "INIT",
    "collnet_conn": "INIT",
    "init": "INIT",
    "comm_local": "INIT",
    "ring_order": "INIT",
    "ring": "GRAPH",
    "trees": "INIT",
    "tree": "GRAPH",
    "nvls_head": "INIT",
    "nvls_trees": "GRAPH",
    "collnet_direct": "GRAPH",
}
# kind -> (pattern, a group every good line has): lines of a kind that miss it are damaged.
_PATTERNS = {
    "coll": (L.COLL, "op_count"),
    "tuning": (L.TUNING, "tuning_bytes"),
    "conn": (L.CONN, "channel"),
    "collnet_conn": (L.COLLNET_CONN, "channel"),
    "init": (L.INIT, "comm_ptr"),
    "comm_local": (L.COMM_LOCAL, "comm_ptr"),
    "ring_order": (L.RING_ORDER, "channel"),
    "ring": (L.RING_NEIGHBOURS, "channel"),
    "tree": (L.TREE, "channel"),
    "nvls_head": (L.NVLS_HEAD, "channel"),
    "collnet_direct": (L.COLLNET_DIRECT, "channel"),
}
# ``file``: the file's index in a batch of files parsed together (0 for a file alone); it
# leads every key, so that no file's rows meet another's.
_IDENT = ["file", "line_no", "host", "pid", "tid", "dev"]
# Kinds whose message is kept verbatim (no field pattern).
_VERBATIM = ("trees", "nvls_trees", "channels")


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` holds NCCL debug-log lines (prefixed INFO/WARN lines or the banner)."""
    import re

    text = head.decode("utf-8", errors="replace")
    return re.search(_SNIFF, text) is not None


def parse(path: Path) -> ParseResult:
    """Parse one NCCL debug log.

    Parameters
    ----------
    path
        The log: a per-rank file or a launcher's combined output.

    Returns
    -------
    ParseResult
        Tables ``ranks``, ``communicators``, ``topology``, ``collectives``, ``log_messages``.

    Raises
    ------
    TraceFormatError
        The file is empty, unreadable, or holds no NCCL log line.
    """
    path = Path(path)
    warnings = Warnings()
    try:
        size = path.stat().st_size
        parts, facts = _scan(path, warnings)
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from exc
    except LineOutOfRange as exc:
        raise TraceFormatError(path, str(exc), line=exc.line) from None
    if size == 0:
        raise TraceFormatError(path, "empty file", offset=0)
    if facts["nccl_lines"] == 0:
        raise TraceFormatError(path, "not an NCCL debug log: no NCCL INFO/WARN line found", line=1)
    try:
        return _build(parts, [warnings])[0]
    except LineOutOfRange as exc:
        raise TraceFormatError(path, str(exc), line=exc.line) from None
    except (pl.exceptions.PolarsError, pa.ArrowException) as exc:  # pragma: no cover - bug net
        raise TraceFormatError(path, f"cannot interpret log: {exc}") from exc


def parse_batch(paths: list[Path]) -> list[ParseResult | Exception]:
    """Parse several small NCCL debug logs at once: each step runs once over the lines of all
    of them (a ``file`` key in every frame), which a log of a few KB pays for in fixed cost
    per query, not in rows.

    Each result is the one :func:`parse` gives for that file, or the exception it raises. A
    file that is not plain whole lines of UTF-8 (empty, unreadable, cut at its end, over
    :data:`BATCH_FILE_BYTES`) or holds no NCCL line is parsed alone; when a step over the
    batch fails (it refuses a line), every file is parsed alone, so that only that line's file
    fails. Never raises.
    """
    paths = [Path(p) for p in paths]
    texts = [_whole_text(p) for p in paths]
    together = [i for i, t in enumerate(texts) if t is not None]
    out: list[ParseResult | Exception | None] = [None] * len(paths)
    if len(together) > 1:
        warns = [Warnings() for _ in together]
        try:
            parts, nccl_files = _scan_files([texts[i] for i in together])
            results = _build(parts, warns)
        except Exception:  # (a refused line, or a bug: each file alone tells which file)
            results, nccl_files = [], set()
        for j, i in enumerate(together):
            if j in nccl_files:
                out[i] = results[j]
    for i, path in enumerate(paths):
        if out[i] is None:
            out[i] = _alone(path)
    return out  # type: ignore[return-value]  # (every slot is filled)


#: The largest file :func:`parse_batch` parses with others.
BATCH_FILE_BYTES = 2 * 1024 * 1024


def _whole_text(path: Path) -> str | None:
    """The file's text without its final newline, when it is whole lines of UTF-8 and small
    (:func:`parse_batch`), else None."""
    try:
        if path.stat().st_size >= BATCH_FILE_BYTES:
            return None
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            return None
        return data[:-1].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _alone(path: Path) -> ParseResult | Exception:
    """:func:`parse` of one file, or the exception it raises."""
    try:
        return parse(path)
    except Exception as exc:  # (the caller reports it for this file)
        return exc


#: Takes the rows of one part (a line kind, or a fact such as the banner) of one batch.
_Add = Callable[[str, pl.DataFrame], None]


def _scan(path: Path, warnings: Warnings) -> tuple[dict[str, pl.DataFrame], dict]:
    """One pass over the file: per-kind rows with their fields, and whole-file facts."""
    acc: dict[str, list[pl.DataFrame]] = {}
    facts = {"nccl_lines": 0, "lines": 0}

    def add(name: str, frame: pl.DataFrame) -> None:
        if frame.height:
            acc.setdefault(name, []).append(frame)

    for batch in L.iter_batches(path):
        lines = batch.frame
        facts["lines"] += lines.height
        warnings.add("non-UTF-8 bytes replaced", batch.undecodable)
        _whole_lines(lines, add)
        nccl = _nccl_lines(lines)
        facts["nccl_lines"] += nccl.height - nccl["level"].null_count()
        if batch.cut_last and lines.height:
            _cut_line(lines.tail(1), nccl, add, warnings)
        # the version comes from the banner when there is one
        _kinds(nccl, add, sample="banner" not in acc)
    parts = {k: pl.concat(v, how="diagonal_relaxed") for k, v in acc.items()}
    return parts, facts


def _scan_files(texts: list[str]) -> tuple[dict[str, pl.DataFrame], set[int]]:
    """:func:`_scan` of several whole files at once (``file``: the text's index); the files
    with an NCCL line."""
    acc: dict[str, list[pl.DataFrame]] = {}

    def add(name: str, frame: pl.DataFrame) -> None:
        if frame.height:
            acc.setdefault(name, []).append(frame)

    lines = L.whole_files(texts)
    _whole_lines(lines, add)
    nccl = _nccl_lines(lines)
    found = set(nccl.filter(pl.col("level").is_not_null())["file"].unique().to_list())
    # (each file's version comes from its banner when it has one: the sample is for the rest)
    _kinds(nccl, add, sample=True)
    return {k: pl.concat(v, how="diagonal_relaxed") for k, v in acc.items()}, found


def _nccl_lines(lines: pl.DataFrame) -> pl.DataFrame:
    """The NCCL lines of a batch with their prefix fields and kind; refuses a line with a
    number beyond int64 (every integer field is int64: such a line is refused, not cast)."""
    text = lines["line"]
    kept = text.str.contains("NCCL ", literal=True) | text.str.contains(": opCount ")
    check_line_numbers(lines.filter(kept), "line")
    return L.tag_kinds(L.split_prefix(lines))


def _whole_lines(lines: pl.DataFrame, add: _Add) -> None:
    """The lines read whole, prefix and all: NCCL's version banner, nccl-tests' rank lines."""
    # A query costs 0.03 to 0.1 ms however few its rows: lines that a cheap test rules
    # out are not looked for.
    text = lines["line"]
    if (banner := text.str.contains("NCCL version ", literal=True)).any():
        add(
            "banner",
            lines.filter(banner)
            .select("file", "line_no", pl.col("line").str.extract_groups(L.BANNER).alias("b"))
            .unnest("b")
            .filter(pl.col("version").is_not_null()),
        )
    if (tests_rank := text.str.contains(" Pid ", literal=True)).any():
        add(
            "tests_rank",
            lines.filter(tests_rank)
            .select("file", pl.col("line").str.extract_groups(L.TESTS_RANK).alias("t"))
            .unnest("t")
            .filter(pl.col("rank").is_not_null()),
        )


def _cut_line(last: pl.DataFrame, nccl: pl.DataFrame, add: _Add, warnings: Warnings) -> None:
    """The file's last line, cut: warned, and a damaged line when it shows no prefix."""
    warnings.add("last line cut (no newline at end of file)")
    if not nccl.filter(pl.col("line_no") == last["line_no"][0]).height:
        # A fragment too short to show its prefix is still the damaged line.
        add(
            "damaged",
            last.select("file", "line_no", pl.col("line").alias("msg")).with_columns(
                pl.lit(None, pl.String).alias("kind")
            ),
        )


def _kinds(nccl: pl.DataFrame, add: _Add, *, sample: bool) -> None:
    """A batch's NCCL lines by kind: who wrote them, warnings and unknown lines, a sample of
    each kind's messages (``sample``: for the version, when no banner has been seen), the
    verbatim kinds, and the fields of every kind with a pattern."""
    if nccl["launcher_rank"].null_count() < nccl.height:
        add(
            "launcher",
            nccl.filter(pl.col("launcher_rank").is_not_null() & pl.col("host").is_not_null())
            .select("file", "host", "pid", "dev", "launcher_rank")
            .unique(),
        )
    add("idents", nccl.select("file", "host", "pid", "dev").unique())
    # one split by kind, not a filter per kind: a small log has a few of the kinds, and
    # each query costs 0.03 to 0.1 ms whatever its size
    by_kind = _by_kind(nccl)
    for kind in ("warn", "unknown"):
        if by_kind[kind].height:
            add(kind, by_kind[kind].select(*_IDENT, "launcher_rank", "level", "loc", "msg"))
    if sample:
        add(
            "sample",
            nccl.filter(~pl.col("kind").is_in(["known", "unknown", "warn"]))
            .group_by("file", "kind")
            .head(200)
            .select("file", "kind", "msg"),
        )
    for kind in _VERBATIM:
        if by_kind[kind].height:
            add(kind, by_kind[kind].select(*_IDENT, "launcher_rank", "msg"))
    for kind, (pattern, required) in _PATTERNS.items():
        if by_kind[kind].height:
            _fields(kind, by_kind[kind], pattern, required, add)


def _fields(kind: str, rows: pl.DataFrame, pattern: str, required: str, add: _Add) -> None:
    """The fields of one kind's lines; a line without its ``required`` field is damaged."""
    ex = rows.select(
        *_IDENT,
        "launcher_rank",
        "msg",
        pl.col("msg").str.extract_groups(pattern).alias("x"),
    ).unnest("x")
    if ex[required].null_count():
        add(
            "damaged",
            ex.filter(pl.col(required).is_null())
            .select(*_IDENT, "launcher_rank", "msg")
            .with_columns(pl.lit(kind).alias("kind")),
        )
        ex = ex.filter(pl.col(required).is_not_null())
    good = ex.drop("msg")
    add(kind, _compact_coll(good) if kind == "coll" else good)


def _by_kind(nccl: pl.DataFrame) -> defaultdict[str, pl.DataFrame]:
    """The rows of each line kind (no rows for a kind the batch lacks)."""
    empty = nccl.clear()
    out: defaultdict[str, pl.DataFrame] = defaultdict(lambda: empty)
    out.update((key[0], rows) for key, rows in nccl.partition_by("kind", as_dict=True).items())
    return out


def _compact_coll(coll: pl.DataFrame) -> pl.DataFrame:
    """COLL rows as numbers right away: they are most of a big log and all of its memory."""
    i64 = pl.Int64
    return coll.select(
        *_IDENT,
        "launcher_rank",
        "op_name",
        "comm_ptr",
        *[pl.col(c).cast(i64) for c in ("count", "datatype", "redop_id", "root", "nranks")],
        pl.col("op_count").str.to_integer(base=16, strict=False).alias("op_count"),
        _hex_int("stream").alias("stream"),
    )


def _build(parts: dict[str, pl.DataFrame], warns: list[Warnings]) -> list[ParseResult]:
    """The tables of each file of ``parts`` (``warns[file]``: its warnings), all files at once."""
    versions = _versions(parts, warns)
    inits = _inits(parts)
    for frame in (inits, parts.get("coll")):
        _check_nranks(frame)
    rank_map, pid_map, sources = _rank_maps(parts, inits, warns)
    facts = _file_facts(inits, versions)

    process_ranks = _process_ranks(parts, rank_map, pid_map)

    def ranked(frame: pl.DataFrame) -> pl.DataFrame:
        return _with_rank(frame, process_ranks, warns)

    comm_ids = _comm_ids(inits)
    comms = _comm_table(parts, comm_ids, facts, ranked)
    colls = _collectives(parts, inits, comms, ranked, warns)
    tables = {
        "ranks": _ranks_table(rank_map, inits, facts),
        "communicators": comms.select(
            "file",
            "rank",
            "comm",
            "nranks",
            "ranks",
            "rank_in_comm",
            pl.lit("nccl").alias("backend"),
        ),
        "topology": _topology(parts, inits, comm_ids, ranked),
        "collectives": colls,
        "log_messages": _log_messages(parts, ranked, warns),
    }
    split = {k: _by_file(k, v, len(warns)) for k, v in tables.items()}
    return [
        ParseResult(
            format=FORMAT,
            tables={k: v[i] for k, v in split.items()},
            format_version=versions[i],
            rank_source=sources[i],
            warnings=w,
        )
        for i, w in enumerate(warns)
    ]


def _by_file(name: str, frame: pl.DataFrame, files: int) -> list[pa.Table]:
    """Table ``name`` of each of ``files`` files, without the ``file`` column: the frame
    goes to Arrow once and each file's rows are a slice of it (no copy)."""
    empty = parsed_table(name, frame.clear())
    if not frame.height:
        return [empty] * files
    # (stable: each file's rows keep their order)
    frame = frame.sort("file", maintain_order=True)
    counts = np.bincount(frame["file"].to_numpy(), minlength=files)
    table = parsed_table(name, frame.drop("file"))
    starts = np.cumsum(counts) - counts
    return [table.slice(s, n) if n else empty for s, n in zip(starts, counts, strict=True)]


def _file_facts(inits: pl.DataFrame, versions: list[str | None]) -> pl.DataFrame:
    """Per file: ``world`` (the largest communicator's size) and ``comm_lib_version`` (the
    version when it is an exact one)."""
    worlds = dict(inits.group_by("file").agg(pl.col("nranks").max()).iter_rows())
    exact = [v if v and v[0].isdigit() and v.count(".") >= 2 else None for v in versions]
    return pl.DataFrame(
        {
            "file": range(len(versions)),
            "world": [worlds.get(i) for i in range(len(versions))],
            "comm_lib_version": exact,
        },
        schema={"file": pl.Int32, "world": pl.Int64, "comm_lib_version": pl.String},
    )


def _versions(parts: dict[str, pl.DataFrame], warns: list[Warnings]) -> list[str | None]:
    """Each file's NCCL version: its banner's, else the range its line shapes imply."""
    out: list[str | None] = [None] * len(warns)
    banner = parts.get("banner")
    if banner is not None and banner.height:
        per_file = banner.group_by("file").agg(
            pl.col("version").mode().sort().last(), pl.col("suffix").first()
        )
        for file, version, suffix in per_file.iter_rows():
            out[file] = version + (suffix or "")
    sample = parts.get(
        "sample",
        pl.DataFrame(schema={"file": pl.Int32, "kind": pl.String, "msg": pl.String}),
    )
    rest = [i for i, v in enumerate(out) if v is None]
    for i, version in infer_versions(sample, rest, warns).items():
        out[i] = version
    return out


def _inits(parts: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Init START/COMPLETE and 2.20+ ``comm .. nRanks`` lines: one row per line, typed."""
    cols = {
        "file": pl.Int32,
        "line_no": pl.Int64,
        "host": pl.String,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "dev": pl.Int64,
        "comm_ptr": pl.String,
        "comm_id": pl.String,
        "rank_in_comm": pl.Int64,
        "nranks": pl.Int64,
        "cuda_dev": pl.Int64,
        "nvml_dev": pl.Int64,
        "bus_id": pl.String,
        "phase": pl.String,
        "local_rank": pl.Int64,
    }
    frames = []
    for kind in ("init", "comm_local"):
        f = parts.get(kind)
        if f is None:
            continue
        if kind == "comm_local":
            f = f.with_columns(pl.lit("comm").alias("phase"), pl.col("dev").alias("cuda_dev"))
        frames.append(
            f.select(
                [
                    pl.col(c).cast(t) if c in f.columns else pl.lit(None, t).alias(c)
                    for c, t in cols.items()
                ]
            )
        )
    if not frames:
        return pl.DataFrame(schema=cols)
    return pl.concat(frames).sort("file", "line_no")


#: Columns of the rank evidence; ``prio``: how much a kind of line is trusted (0 most).
_EVIDENCE = {
    "file": pl.Int32,
    "host": pl.String,
    "pid": pl.Int64,
    "dev": pl.Int64,
    "rank": pl.Int64,
    "prio": pl.Int32,
    "nranks": pl.Int64,
    "line_no": pl.Int64,
}
#: prio -> rank_source
_RANK_SOURCES = {
    0: "nccl_init",
    1: "nccl_tests_devices",
    2: "launcher_prefix",
    3: "nccl_topology",
    4: "nccl_single_rank_comm",
}


def _rank_maps(parts, inits: pl.DataFrame, warns: list[Warnings]):
    """(host, pid, dev) -> rank and (host, pid) -> rank of each file, from the best evidence;
    each file's rank_source."""
    casts = [pl.col(c).cast(t) for c, t in _EVIDENCE.items()]
    ev = _rank_evidence(parts, inits)
    evidence = pl.concat([e.select(list(_EVIDENCE)) for e in ev], how="vertical_relaxed")
    evidence = evidence.select(casts)
    evidence = evidence.filter(pl.col("host").is_not_null() & pl.col("rank").is_not_null())
    best = (
        evidence.sort(
            ["file", "prio", "nranks", "line_no"],
            descending=[False, False, True, False],
            nulls_last=True,
            maintain_order=True,
        )
        .group_by("file", "host", "pid", "dev", maintain_order=True)
        .agg(
            pl.col("rank").first(),
            pl.col("prio").first(),
            # Ring/tree lines name a rank of some communicator: usable only when unambiguous.
            pl.col("rank").filter(pl.col("prio") == pl.col("prio").min()).n_unique().alias("n"),
        )
    )
    ambiguous = (best["prio"] >= 3) & (best["n"] > 1)
    if ambiguous.any():
        for row in best.filter(ambiguous).iter_rows(named=True):
            warns[row["file"]].add(
                f"rank of {row['host']}:{row['pid']} [{row['dev']}] ambiguous from topology lines"
            )
        best = best.filter(~ambiguous)
    rank_map = best.drop("n")
    pid_map = (
        rank_map.group_by("file", "host", "pid")
        .agg(pl.col("rank").unique())
        .filter(pl.col("rank").list.len() == 1)
        .select("file", "host", "pid", pl.col("rank").list.first().alias("pid_rank"))
    )
    best_prio = dict(rank_map.group_by("file").agg(pl.col("prio").min()).iter_rows())
    sources = [_RANK_SOURCES.get(best_prio.get(i)) for i in range(len(warns))]
    return rank_map.select("file", "host", "pid", "dev", "rank", "prio"), pid_map, sources


def _rank_evidence(parts, inits: pl.DataFrame) -> list[pl.DataFrame]:
    """Every line that tells a process's rank: init lines, nccl-tests' device lines, launcher
    prefixes, topology lines."""
    ev = [inits.filter(pl.col("host").is_not_null()).select(
        "file",
        "host",
        "pid",
        pl.coalesce("cuda_dev", "dev").alias("dev"),
        pl.col("rank_in_comm").alias("rank"),
        pl.lit(0, pl.Int32).alias("prio"), "nranks", "line_no")]  # fmt: skip
    if (t := parts.get("tests_rank")) is not None:
        ev.append(
            t.select(
                "file",
                "host",
                pl.col("pid").cast(pl.Int64),
                pl.col("dev").cast(pl.Int64),
                pl.col("rank").cast(pl.Int64),
                pl.lit(1, pl.Int32).alias("prio"),
                pl.lit(None, pl.Int64).alias("nranks"),
                pl.lit(0, pl.Int64).alias("line_no"),
            )
        )
    if (t := parts.get("launcher")) is not None:
        ev.append(
            t.select(
                "file",
                "host",
                "pid",
                "dev",
                pl.col("launcher_rank").alias("rank"),
                pl.lit(2, pl.Int32).alias("prio"),
                pl.lit(None, pl.Int64).alias("nranks"),
                pl.lit(0, pl.Int64).alias("line_no"),
            )
        )
    ev.extend(_topology_evidence(parts))
    return ev


def _topology_evidence(parts) -> list[pl.DataFrame]:
    """Ranks that ring, tree and connection lines reveal: the writer is ``me``."""
    out = []
    prio = pl.lit(3, pl.Int32).alias("prio")
    nr = pl.lit(None, pl.Int64).alias("nranks")
    if (f := parts.get("conn")) is not None:
        me = pl.when(pl.col("direction") == "receive").then("dst").otherwise("src")
        out.append(
            f.select(
                "file", "host", "pid", "dev", me.cast(pl.Int64).alias("rank"), prio, nr, "line_no"
            )
        )
    for kind in ("ring", "tree"):
        if (f := parts.get(kind)) is not None:
            out.append(
                f.select(
                    "file",
                    "host",
                    "pid",
                    "dev",
                    pl.col("me").cast(pl.Int64).alias("rank"),
                    prio,
                    nr,
                    "line_no",
                )
            )
    if (f := parts.get("trees")) is not None:
        me = pl.col("msg").str.extract(r"->(-?\d+)->", 1).cast(pl.Int64)
        out.append(f.select("file", "host", "pid", "dev", me.alias("rank"), prio, nr, "line_no"))
    if (f := parts.get("coll")) is not None:
        # The only member of a one-rank communicator is its rank 0: the weakest evidence.
        one = f.filter(pl.col("nranks") == 1)
        out.append(
            one.select(
                "file",
                "host",
                "pid",
                "dev",
                pl.lit(0, pl.Int64).alias("rank"),
                pl.lit(4, pl.Int32).alias("prio"),
                nr,
                "line_no",
            )
        )
    return out


def _process_ranks(parts, rank_map: pl.DataFrame, pid_map: pl.DataFrame) -> pl.DataFrame:
    """(host, pid, dev) -> rank for every prefix in the file: the rank its own evidence gives,
    else the one rank of its process, else null. Worked out once, so that each table takes
    its ranks with one join."""
    idents = parts.get("idents")
    if idents is None:
        schema = {"file": pl.Int32, "host": pl.String, "pid": pl.Int64, "dev": pl.Int64}
        idents = pl.DataFrame(schema=schema)
    key = ["file", "host", "pid", "dev"]
    return (
        idents.unique()
        .join(rank_map.select(*key, "rank"), on=key, how="left")
        .join(pid_map, on=["file", "host", "pid"], how="left")
        .select(*key, pl.coalesce("rank", "pid_rank").alias("rank"))
    )


def _with_rank(
    frame: pl.DataFrame, process_ranks: pl.DataFrame, warns: list[Warnings]
) -> pl.DataFrame:
    """Add ``rank`` to rows that carry host/pid/dev (and launcher_rank); -1 with a warning."""
    # null keys match the null-keyed rows of process_ranks, whose rank is null too: a prefix
    # without a device still finds its process's rank
    key = ["file", "host", "pid", "dev"]
    out = frame.join(process_ranks, on=key, how="left", nulls_equal=True)
    launcher = pl.col("launcher_rank") if "launcher_rank" in out.columns else pl.lit(None, pl.Int64)
    out = out.with_columns(pl.coalesce("rank", launcher, pl.lit(-1)).cast(pl.Int64).alias("rank"))
    if (out["rank"] == -1).any():
        unknown = out.filter(pl.col("rank") == -1)
        by_process = unknown.group_by("file", "host", "pid").len()
        by_process = by_process.sort("file", "host", "pid", nulls_last=True)
        for file, host, pid, n in by_process.iter_rows():  # sorted: the same warnings every run
            who = f"{host}:{pid}" if host else "lines without a host:pid prefix"
            warns[file].add(f"rank unknown for {who}; rank -1 used", n)
    return out


def _comm_ids(inits: pl.DataFrame) -> pl.DataFrame:
    """(host, pid, comm_ptr) -> comm (commId where printed, else pointer), nranks, rank_in_comm."""
    return (
        inits.sort("file", "line_no")
        .group_by("file", "host", "pid", "comm_ptr", maintain_order=True)
        .agg(
            pl.col("comm_id").drop_nulls().last(),
            pl.col("nranks").drop_nulls().last(),
            pl.col("rank_in_comm").drop_nulls().last(),
            pl.col("dev").first().alias("init_dev"),
        )
        .with_columns(pl.coalesce("comm_id", "comm_ptr").alias("comm"))
    )


def _comm_table(parts, comm_ids: pl.DataFrame, facts: pl.DataFrame, ranked) -> pl.DataFrame:
    """One row per (rank, communicator) seen in Init lines (``comm_ids``) or only in COLL
    lines; ``facts``: each file's world size."""
    ids = ranked(comm_ids.rename({"init_dev": "dev"}))
    coll = parts.get("coll")
    if coll is not None:
        key = ["file", "host", "pid", "comm_ptr"]
        extra = (
            coll.filter(pl.col("host").is_not_null())
            .group_by(key)
            .agg(pl.col("dev").first(), pl.col("nranks").cast(pl.Int64).drop_nulls().last())
            .join(ids.select(key), on=key, how="anti")
            .with_columns(
                pl.col("comm_ptr").alias("comm"),
                pl.lit(None, pl.Int64).alias("rank_in_comm"),
                pl.lit(None, pl.String).alias("comm_id"),
            )
        )
        ids = pl.concat([ids, ranked(extra)], how="diagonal_relaxed")
    # Members: every rank whose Init line names the same comm (commId, or the pointer before
    # 2.16); the world communicator's members are 0..n-1 by definition of the global rank.
    members = (
        ids.filter(pl.col("rank_in_comm").is_not_null() & (pl.col("rank") >= 0))
        .group_by("file", "comm", "rank_in_comm")
        .agg(pl.col("rank").first())
    )
    comms = (
        ids.select("file", "comm", "nranks")
        .unique(["file", "comm"])
        .filter(pl.col("nranks").is_not_null())
        .join(facts.select("file", "world"), on="file", how="left")
    )
    # (a world communicator's list is made whole at once: placing each of its positions
    # in every file of a 16,384-rank job cost more than the rest of the parse)
    is_world = (pl.col("nranks") == pl.col("world")).fill_null(False)
    world = comms.filter(is_world).select(
        "file", "comm", pl.int_ranges(0, pl.col("nranks")).alias("ranks")
    )
    positions = (
        comms.filter(~is_world)
        .with_columns(pl.int_ranges(0, pl.col("nranks")).alias("rank_in_comm"))
        .explode("rank_in_comm")
    )
    placed = (
        positions.join(members, on=["file", "comm", "rank_in_comm"], how="left")
        .sort("file", "comm", "rank_in_comm")
        .group_by("file", "comm", maintain_order=True)
        .agg(pl.col("rank").alias("ranks"))
    )
    lists = pl.concat([world, placed], how="vertical_relaxed")
    return ids.join(lists, on=["file", "comm"], how="left").sort(
        "file", "rank", "comm", maintain_order=True
    )


def _check_nranks(lines: pl.DataFrame | None) -> None:
    """Refuse the first line claiming more ranks than the schema allows a communicator
    (``communicators.nranks``): a few bytes of log would otherwise become a list of that
    many members (2**30 ranks: 8 GiB)."""
    if lines is None or "nranks" not in lines.columns:
        return
    _, most = table_schema("communicators").column("nranks").range
    bad = lines.filter(pl.col("nranks").cast(pl.Int64, strict=False) > most)
    if bad.height:
        raise LineOutOfRange(
            bad["line_no"].min(),
            f"nranks {bad['nranks'][0]} is more than the {int(most):,} ranks a communicator "
            "may have",
        )


def _check_negative(coll: pl.DataFrame, count: pl.Expr, nranks: pl.Expr) -> None:
    """Refuse the first COLL line with a negative count or number of ranks: NCCL prints
    both as unsigned (``size_t``, ``int`` >= 1), so one below 0 is not NCCL's."""
    bad = coll.filter((count < 0) | (nranks < 0))
    if bad.height:
        raise LineOutOfRange(
            bad["line_no"].min(), "a negative count or nranks; NCCL counts are never below 0"
        )


def _check_products(coll: pl.DataFrame, fits: pl.Expr) -> None:
    """Refuse the first COLL line where ``fits`` is false: a count x ranks or byte count beyond
    int64, which Polars would wrap into a wrong, even negative, number."""
    bad = coll.filter(~fits)
    if bad.height:
        raise LineOutOfRange(
            bad["line_no"].min(), "count x ranks x element size is beyond 64-bit integers"
        )


#: The collectives table's columns, from the parsed COLL lines.
_COLL_COLUMNS = (
    "file",
    "rank",
    pl.col("line_no").alias("collective_id"),
    "comm",
    "seq",
    "op",
    "op_name",
    "dtype",
    pl.col("count_in").alias("count"),
    "out_count",
    "bytes",
    "group_size",
    "peer",
    "root",
    "redop",
    "algorithm",
    "protocol",
    "stream",
    "size_source",
    "op_count",
)


def _collectives(parts, inits, comms, ranked, warns: list[Warnings]) -> pl.DataFrame:
    coll = parts.get("coll")
    if coll is None:
        return pl.DataFrame(schema={"rank": pl.Int64, "collective_id": pl.Int64, "op": pl.String})
    coll = coll.sort("file", "line_no")
    if coll["host"].null_count():
        coll = _place_bare_lines(coll)
    key = ["file", "host", "pid", "comm_ptr"]
    ids = comms.select(*key, "comm", pl.col("nranks").alias("comm_nranks"), "rank_in_comm")
    joined = coll.join(ids, on=key, how="left", nulls_equal=False)
    out = joined.with_columns(_coll_fields(joined))
    if out["dtype"].null_count():
        unknown = out.filter(pl.col("dtype").is_null()).group_by("file").len()
        for file, n in unknown.iter_rows():
            warns[file].add("COLL line with an unknown datatype id", n)
    out = out.with_columns(pl.int_range(pl.len()).over(key).cast(pl.Int64).alias("seq"))
    out = _attach_tuning(out, parts.get("tuning"))
    return ranked(out).select(*_COLL_COLUMNS)


def _coll_fields(joined: pl.DataFrame) -> list[pl.Expr]:
    """The collective's columns from a COLL line's fields (and its communicator's size);
    refuses a line whose counts or bytes do not fit int64."""
    dt = pl.col("datatype").cast(pl.Int64)
    c = pl.col("count").cast(pl.Int64)
    n = pl.coalesce(pl.col("nranks").cast(pl.Int64), "comm_nranks")
    size = dt.replace_strict(
        {k: DTYPE_SIZES[v] for k, v in _DTYPES.items()}, default=None, return_dtype=pl.Int64
    )
    op = op_name_expr(pl.col("op_name"))
    times_n = op.is_in(["all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"])
    full = pl.when(times_n).then(c * n).otherwise(c)
    # (counts scale with ranks exactly for the times_n ops: count_in / count_out below too)
    _check_negative(joined, c, n)
    _check_products(joined, (product_fits(c, n) | ~times_n) & product_fits(full, size))
    redop_id = pl.col("redop_id").cast(pl.Int64)
    redop = redop_id.replace_strict(_REDOPS, default="premul_sum", return_dtype=pl.String)
    return [
        op.alias("op"),
        dt.replace_strict(_DTYPES, default=None, return_dtype=pl.String).alias("dtype"),
        (c * size).alias("rank_bytes"),
        (full * size).alias("bytes"),
        *_coll_counts(op, c, n),
        n.alias("group_size"),
        pl.when(op.is_in(["send", "recv"])).then(pl.col("root").cast(pl.Int64)).alias("peer"),
        pl.when(op.is_in(["broadcast", "reduce", "gather", "scatter"]))
        .then(pl.col("root").cast(pl.Int64))
        .alias("root"),
        pl.when(op.is_in(["all_reduce", "reduce", "reduce_scatter"])).then(redop).alias("redop"),
        pl.coalesce("comm", "comm_ptr").alias("comm"),
        pl.lit("nccl_log").alias("size_source"),
    ]


def _coll_counts(op: pl.Expr, c: pl.Expr, n: pl.Expr) -> list[pl.Expr]:
    """count_in, out_count: a COLL line's ``count`` is per rank; the buffer a rank gives or
    gets holds n of them for the ops that split or gather over the group."""
    count_in = (
        pl.when(op.is_in(["reduce_scatter", "all_to_all", "scatter"]))
        .then(c * n)
        .when(op == "recv")
        .then(None)
        .otherwise(c)
    )
    count_out = (
        pl.when(op.is_in(["all_gather", "all_to_all", "gather"]))
        .then(c * n)
        .when(op == "send")
        .then(None)
        .otherwise(c)
    )
    return [count_in.alias("count_in"), count_out.alias("out_count")]


def _place_bare_lines(coll: pl.DataFrame) -> pl.DataFrame:
    """Prefix-less COLL fragments: borrow host/pid/dev from the one process using that comm."""
    owners = (
        coll.filter(pl.col("host").is_not_null())
        .group_by("file", "comm_ptr")
        .agg(pl.struct("host", "pid", "dev").unique().alias("o"))
        .filter(pl.col("o").list.len() == 1)
        .select("file", "comm_ptr", pl.col("o").list.first().struct.unnest())
        .rename({"host": "o_host", "pid": "o_pid", "dev": "o_dev"})
    )
    out = coll.join(owners, on=["file", "comm_ptr"], how="left")
    bare = pl.col("host").is_null()
    return out.with_columns(
        pl.when(bare).then("o_host").otherwise("host").alias("host"),
        pl.when(bare).then("o_pid").otherwise("pid").alias("pid"),
        pl.when(bare).then("o_dev").otherwise("dev").alias("dev"),
    ).drop("o_host", "o_pid", "o_dev")


def _attach_tuning(coll: pl.DataFrame, tuning: pl.DataFrame | None) -> pl.DataFrame:
    """Per-call TUNING lines (rank 0 of a comm, 2.20+) to the COLL line they follow.

    The k-th TUNING line of a thread for b bytes goes with the k-th COLL line of that thread
    for b bytes (per-rank bytes) on a comm where this rank is rank 0 (or unknown); lines of
    one group come out as N COLL lines then N TUNING lines, which this keeps in step.
    """
    algo = pl.col("algo").str.to_lowercase().replace(_ALGOS)
    proto = pl.col("proto").str.to_lowercase().replace(_PROTOS)
    if tuning is None:
        return coll.with_columns(
            pl.lit(None, pl.String).alias("algorithm"), pl.lit(None, pl.String).alias("protocol")
        )
    key = ["file", "host", "pid", "tid", "rank_bytes"]
    cand = coll.filter(pl.col("rank_in_comm").is_null() | (pl.col("rank_in_comm") == 0))
    cand = cand.select(*key, "line_no", "op_name").with_columns(
        pl.int_range(pl.len()).over(key).alias("k")
    )
    tun = tuning.select(
        "file",
        "host",
        "pid",
        "tid",
        pl.col("tuning_bytes").cast(pl.Int64).alias("rank_bytes"),
        pl.col("op_name").alias("t_op"),
        algo.alias("algorithm"),
        proto.alias("protocol"),
    ).with_columns(pl.int_range(pl.len()).over(key).alias("k"))
    pairs = cand.join(tun, on=[*key, "k"], how="inner").filter(
        pl.col("t_op").is_null() | (pl.col("t_op") == pl.col("op_name"))
    )
    pairs = pairs.select("file", "line_no", "algorithm", "protocol")
    return coll.join(pairs, on=["file", "line_no"], how="left")


def _hex_int(col: str) -> pl.Expr:
    return pl.col(col).str.strip_prefix("0x").str.to_integer(base=16, strict=False).cast(pl.Int64)


def _ranks_table(rank_map, inits, facts: pl.DataFrame) -> pl.DataFrame:
    """One row per rank of each file; ``facts``: each file's world size and NCCL version."""
    world_inits = inits.join(facts.select("file", "world"), on="file").filter(
        pl.col("nranks") == pl.col("world")
    )
    key = ["file", "host", "pid"]
    info = world_inits.group_by(*key, pl.coalesce("cuda_dev", "dev").alias("dev")).agg(
        pl.col("bus_id").drop_nulls().first(),
        pl.col("nvml_dev").drop_nulls().first(),
        pl.col("local_rank").drop_nulls().first(),
    )
    # the few bus ids of the file's ranks, formatted in Python: as expressions they would be
    # a dozen replace_strict calls on every file
    pci = {b: _pci_bus_id(b) for b in set(info["bus_id"].to_list()) if b is not None}
    return (
        rank_map.join(info, on=[*key, "dev"], how="left")
        .join(facts, on="file", how="left")
        .select(
            "file",
            "rank",
            pl.col("world").alias("world_size"),
            pl.when(pl.col("host") != L.TRIMMED_HOST).then("host").alias("host"),
            pl.when(pl.col("pid") != L.TRIMMED_PID).then("pid").alias("pid"),
            "local_rank",
            pl.format("cuda:{}", "dev").alias("device"),
            pl.lit("nccl").alias("backend"),
            "comm_lib_version",
            pl.col("bus_id").replace_strict(pci, default=None, return_dtype=pl.String),
            "nvml_dev",
        )
        .unique(maintain_order=True)
        .sort("file", "rank", maintain_order=True)
    )


def _pci_bus_id(bus_id: str) -> str | None:
    """NCCL's ``busId``, the hex of domain << 20 | bus << 12 | device << 4 | function (e.g.
    ``18000``), in PCI form (``0000:18:00.0``); None when it is not such a number."""
    try:
        v = int(bus_id, 16)
    except ValueError:
        return None
    if not 0 <= v < 1 << 63 or bus_id.lower().startswith("0x"):
        return None
    return f"{(v >> 20) & 0xFFFF:04x}:{(v >> 12) & 0xFF:02x}:{(v >> 4) & 0xFF:02x}.{v & 0xF:x}"


def _topology_rows(
    frame: pl.DataFrame,
    kind: str,
    detail: pl.Expr,
    *,
    channel: pl.Expr | None = None,
    peer: pl.Expr | None = None,
    peers: pl.Expr | None = None,
    transport: str | pl.Expr | None = None,
) -> pl.DataFrame:
    """One topology row per line of ``frame``: the line's identity, then the topology columns
    (``channel`` from the line's own field unless given; absent ones null)."""
    i64 = pl.Int64
    if isinstance(transport, str):
        transport = pl.lit(transport)
    return frame.select(
        *_IDENT,
        "launcher_rank",
        (pl.col("channel").cast(i64) if channel is None else channel).alias("channel"),
        pl.lit(kind).alias("kind"),
        (pl.lit(None, i64) if peer is None else peer).alias("peer"),
        (pl.lit(None, pl.List(i64)) if peers is None else peers).alias("peers"),
        (pl.lit(None, pl.String) if transport is None else transport).alias("transport"),
        detail.alias("detail"),
    )


def _numbers(text: pl.Expr) -> pl.Expr:
    """The integers in a printed rank list (``0 1 2 3``, ``-1``)."""
    return text.str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))


def _topology(parts, inits: pl.DataFrame, comm_ids: pl.DataFrame, ranked) -> pl.DataFrame:
    """Rings, trees, NVLS/CollNet lines and connection lines, one row per channel entry."""
    rows = []
    i64 = pl.Int64
    if (f := parts.get("conn")) is not None:
        via = pl.col("via")
        transport = (
            pl.when(via.str.starts_with("P2P"))
            .then(pl.lit("P2P"))
            .when(via.str.starts_with("SHM") | via.str.contains("shared memory"))
            .then(pl.lit("SHM"))
            .when(via.str.starts_with("NET/"))
            .then(via.str.extract(r"^(NET/[^/]+)", 1))
            .when(via.str.starts_with("COLLNET"))
            .then(pl.lit("CollNet"))
            .otherwise(via)
        )
        peer = pl.when(pl.col("direction") == "receive").then("src").otherwise("dst").cast(i64)
        detail = (
            pl.when(pl.col("direction").is_not_null())
            .then(pl.format("{} [{}]", via, "direction"))
            .otherwise(via)
        )
        rows.append(_topology_rows(f, "connection", detail, peer=peer, transport=transport))
    if (f := parts.get("collnet_conn")) is not None:
        detail = pl.format("{} [{}]", "via", "direction")
        rows.append(_topology_rows(f, "collnet", detail, transport="CollNet"))
    if (f := parts.get("ring_order")) is not None:
        detail = pl.format("order of {} channels", pl.col("nchannels").cast(i64))
        rows.append(_topology_rows(f, "ring", detail, peers=_numbers(pl.col("order"))))
    if (f := parts.get("ring")) is not None:
        peers = pl.concat_list(pl.col("prev").cast(i64), pl.col("next").cast(i64))
        rows.append(_topology_rows(f, "ring", pl.lit("prev/next"), peers=peers))
    rows.extend(_tree_rows(parts))
    if (f := parts.get("nvls_head")) is not None:
        detail = pl.lit("head ranks per node")
        peers = _numbers(pl.col("order"))
        rows.append(_topology_rows(f, "nvls", detail, peers=peers, transport="NVLS"))
    if (f := parts.get("collnet_direct")) is not None:
        rows.append(_topology_rows(f, "collnet", pl.lit("direct"), transport="CollNet"))
    if (f := parts.get("channels")) is not None:
        detail = pl.col("msg").str.strip_chars()
        rows.append(_topology_rows(f, "channels", detail, channel=pl.lit(None, i64)))
    if not rows:
        return pl.DataFrame(schema={"rank": pl.Int64, "kind": pl.String})
    # (stable: the entries of one line keep their order)
    topo = pl.concat(rows, how="vertical_relaxed").sort("file", "line_no", maintain_order=True)
    topo = _topology_comm(topo, inits, comm_ids)
    return ranked(topo).select(
        "file", "rank", "comm", "channel", "kind", "peer", "peers", "transport", "detail"
    )


def _tree_fields(group: pl.Expr, fields: tuple[int, ...]) -> pl.Expr:
    """The listed capture groups of a tree item, as one list of ints (up, down0..2)."""
    return pl.concat_list(*[group.struct.field(str(i)).cast(pl.Int64) for i in fields])


def _tree_rows(parts) -> list[pl.DataFrame]:
    out = []
    i64 = pl.Int64
    if (f := parts.get("trees")) is not None:
        items = f.with_columns(pl.col("msg").str.extract_all(L.TREES_ITEM).alias("item")).explode(
            "item"
        )
        g = pl.col("item").str.extract_groups(L.TREES_ITEM)
        out.append(
            _topology_rows(
                items.filter(pl.col("item").is_not_null()),
                "tree",
                pl.lit("up/down0/down1/down2"),
                channel=g.struct.field("1").cast(i64),
                peers=_tree_fields(g, (6, 2, 3, 4)),
            )
        )
    if (f := parts.get("tree")) is not None:
        peers = pl.concat_list(*[pl.col(c).cast(i64) for c in ("up", "d0", "d1", "d2")])
        out.append(_topology_rows(f, "tree", pl.lit("up/down0/down1/down2"), peers=peers))
    if (f := parts.get("nvls_trees")) is not None:
        items = (
            f.with_columns(pl.col("msg").str.extract_all(L.NVLS_TREES_ITEM).alias("item"))
            .with_columns(pl.int_ranges(0, pl.col("item").list.len()).alias("channel"))
            .explode("item", "channel")
        )
        g = pl.col("item").str.extract_groups(L.NVLS_TREES_ITEM)
        out.append(
            _topology_rows(
                items.filter(pl.col("item").is_not_null()),
                "nvls",
                pl.lit("tree up/down0/down1/down2"),
                peers=_tree_fields(g, (5, 1, 2, 3)),
                transport="NVLS",
            )
        )
    return out


def _topology_comm(topo: pl.DataFrame, inits: pl.DataFrame, comm_ids: pl.DataFrame) -> pl.DataFrame:
    """The comm a topology line belongs to: the next Init COMPLETE of its thread, else the
    last init line of its thread (Init START, ``comm .. nRanks`` or Init COMPLETE). Topology
    is printed during init, on the thread that runs it; connection lines after the thread's
    last Init COMPLETE are the connections NCCL makes at a communicator's first collective
    (runtime connect), on the thread of its last init."""
    ids = comm_ids.select("file", "host", "pid", "comm_ptr", "comm")
    marks = inits.join(ids, on=["file", "host", "pid", "comm_ptr"], how="left").select(
        "file",
        "line_no",
        "host",
        "pid",
        "tid",
        pl.when(pl.col("phase") == "Init COMPLETE").then("comm").alias("c_next"),
        pl.col("comm").alias("c_prev"),
    )
    both = pl.concat(
        [
            topo.with_columns(pl.lit(True).alias("is_topo")),
            marks.with_columns(pl.lit(False).alias("is_topo")),
        ],
        how="diagonal_relaxed",
    )
    key = ["file", "host", "pid", "tid"]
    both = both.sort("file", "line_no", maintain_order=True).with_columns(
        pl.coalesce(
            pl.col("c_next").backward_fill().over(key), pl.col("c_prev").forward_fill().over(key)
        ).alias("comm")
    )
    return both.filter(pl.col("is_topo")).drop("c_next", "c_prev", "is_topo")


def _log_messages(parts, ranked, warns: list[Warnings]) -> pl.DataFrame:
    """WARN lines, unrecognised NCCL lines and damaged lines, each counted as a warning."""
    frames = []
    schema = {
        "file": pl.Int32,
        "line_no": pl.Int64,
        "host": pl.String,
        "pid": pl.Int64,
        "dev": pl.Int64,
        "launcher_rank": pl.Int64,
        "level": pl.String,
        "subsys": pl.String,
        "location": pl.String,
        "message": pl.String,
        "recognized": pl.Boolean,
    }

    def take(name: str, recognized: bool, subsys: pl.Expr) -> None:
        f = parts.get(name)
        if f is None:
            return
        f = f.with_columns(
            pl.col("loc").alias("location")
            if "loc" in f.columns
            else pl.lit(None, pl.String).alias("location"),
            subsys.alias("subsys"),
            pl.col("msg").alias("message"),
            pl.lit(recognized).alias("recognized"),
        )
        frames.append(
            f.select(
                [
                    pl.col(c).cast(t) if c in f.columns else pl.lit(None, t).alias(c)
                    for c, t in schema.items()
                ]
            )
        )

    take("warn", True, pl.lit(None, pl.String))
    take("unknown", False, pl.lit(None, pl.String))
    take(
        "damaged",
        False,
        pl.col("kind").replace_strict(_SUBSYS, default=None, return_dtype=pl.String)
        if "damaged" in parts
        else pl.lit(None, pl.String),
    )
    for name, what in (
        ("warn", "NCCL WARN line"),
        ("unknown", "unrecognised NCCL line"),
        ("damaged", "damaged line (a known line shape that does not parse)"),
    ):
        if (f := parts.get(name)) is not None:
            for file, n in f.group_by("file").len().iter_rows():
                warns[file].add(what, n)
    if not frames:
        return pl.DataFrame(schema={"rank": pl.Int64, "line": pl.Int64, "message": pl.String})
    msgs = ranked(pl.concat(frames).sort("file", "line_no"))
    return msgs.select(
        "file",
        "rank",
        pl.col("line_no").alias("line"),
        "level",
        "subsys",
        "location",
        "message",
        "recognized",
    )
