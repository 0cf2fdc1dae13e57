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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipeline.errors import TraceFormatError
from pipeline.ingest.nccl import lines as L
from pipeline.ingest.nccl.version import infer_version
from pipeline.ingest.result import ParseResult, Warnings, parsed_table
from pipeline.ingest.values import LineOutOfRange, check_line_numbers, product_fits
from pipeline.ingest.vocab import DTYPE_SIZES, op_name_expr

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
_IDENT = ["line_no", "host", "pid", "tid", "dev"]
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
        return _build(path, parts, facts, warnings)
    except LineOutOfRange as exc:
        raise TraceFormatError(path, str(exc), line=exc.line) from None
    except (pl.exceptions.PolarsError, pa.ArrowException) as exc:  # pragma: no cover - bug net
        raise TraceFormatError(path, f"cannot interpret log: {exc}") from exc


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
        # every integer field is int64: a line with a longer number is refused, not cast
        text = lines["line"]
        kept = text.str.contains("NCCL ", literal=True) | text.str.contains(": opCount ")
        check_line_numbers(lines.filter(kept), "line")
        nccl = L.tag_kinds(L.split_prefix(lines))
        facts["nccl_lines"] += nccl.height - nccl["level"].null_count()
        if batch.cut_last and lines.height:
            _cut_line(lines.tail(1), nccl, add, warnings)
        # the version comes from the banner when there is one
        _kinds(nccl, add, sample="banner" not in acc)
    parts = {k: pl.concat(v, how="diagonal_relaxed") for k, v in acc.items()}
    return parts, facts


def _whole_lines(lines: pl.DataFrame, add: _Add) -> None:
    """The lines read whole, prefix and all: NCCL's version banner, nccl-tests' rank lines."""
    # A query costs 0.03 to 0.1 ms however few its rows: lines that a cheap test rules
    # out are not looked for.
    text = lines["line"]
    if (banner := text.str.contains("NCCL version ", literal=True)).any():
        add(
            "banner",
            lines.filter(banner)
            .select("line_no", pl.col("line").str.extract_groups(L.BANNER).alias("b"))
            .unnest("b")
            .filter(pl.col("version").is_not_null()),
        )
    if (tests_rank := text.str.contains(" Pid ", literal=True)).any():
        add(
            "tests_rank",
            lines.filter(tests_rank)
            .select(pl.col("line").str.extract_groups(L.TESTS_RANK).alias("t"))
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
            last.select("line_no", pl.col("line").alias("msg")).with_columns(
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
            .select("host", "pid", "dev", "launcher_rank")
            .unique(),
        )
    add("idents", nccl.select("host", "pid", "dev").unique())
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
            .group_by("kind")
            .head(200)
            .select("kind", "msg"),
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


def _build(
    path: Path, parts: dict[str, pl.DataFrame], facts: dict, warnings: Warnings
) -> ParseResult:
    version = _version(parts, warnings)
    inits = _inits(parts)
    rank_map, pid_map, source = _rank_maps(parts, inits, warnings)
    world = inits["nranks"].max() if inits.height else None

    process_ranks = _process_ranks(parts, rank_map, pid_map)

    def ranked(frame: pl.DataFrame) -> pl.DataFrame:
        return _with_rank(frame, process_ranks, warnings)

    comm_ids = _comm_ids(inits)
    comms = _comm_table(parts, comm_ids, world, ranked)
    colls = _collectives(parts, inits, comms, ranked, warnings)
    tables = {
        "ranks": _ranks_table(rank_map, inits, parts, world, version),
        "communicators": comms.select(
            "rank", "comm", "nranks", "ranks", "rank_in_comm", pl.lit("nccl").alias("backend")
        ),
        "topology": _topology(parts, inits, comm_ids, ranked),
        "collectives": colls,
        "log_messages": _log_messages(parts, ranked, warnings),
    }
    return ParseResult(
        format=FORMAT,
        tables={k: parsed_table(k, v) for k, v in tables.items()},
        format_version=version,
        rank_source=source,
        warnings=warnings,
    )


def _version(parts: dict[str, pl.DataFrame], warnings: Warnings) -> str | None:
    banner = parts.get("banner")
    if banner is not None and banner.height:
        return banner["version"].mode().sort()[-1] + (banner["suffix"][0] or "")
    sample = parts.get(
        "sample",
        pl.DataFrame({"kind": [], "msg": []}, schema={"kind": pl.String, "msg": pl.String}),
    )
    return infer_version(sample, warnings)


def _inits(parts: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Init START/COMPLETE and 2.20+ ``comm .. nRanks`` lines: one row per line, typed."""
    cols = {
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
    return pl.concat(frames).sort("line_no")


#: Columns of the rank evidence; ``prio``: how much a kind of line is trusted (0 most).
_EVIDENCE = {
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


def _rank_maps(parts, inits: pl.DataFrame, warnings: Warnings):
    """(host, pid, dev) -> rank and (host, pid) -> rank, from the best evidence; rank_source."""
    casts = [pl.col(c).cast(t) for c, t in _EVIDENCE.items()]
    ev = _rank_evidence(parts, inits)
    evidence = pl.concat([e.select(list(_EVIDENCE)) for e in ev], how="vertical_relaxed")
    evidence = evidence.select(casts)
    evidence = evidence.filter(pl.col("host").is_not_null() & pl.col("rank").is_not_null())
    best = (
        evidence.sort(
            ["prio", "nranks", "line_no"], descending=[False, True, False], nulls_last=True
        )
        .group_by("host", "pid", "dev", maintain_order=True)
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
            warnings.add(
                f"rank of {row['host']}:{row['pid']} [{row['dev']}] ambiguous from topology lines"
            )
        best = best.filter(~ambiguous)
    rank_map = best.drop("n")
    pid_map = (
        rank_map.group_by("host", "pid")
        .agg(pl.col("rank").unique())
        .filter(pl.col("rank").list.len() == 1)
        .select("host", "pid", pl.col("rank").list.first().alias("pid_rank"))
    )
    source = _RANK_SOURCES[rank_map["prio"].min()] if rank_map.height else None
    return rank_map.select("host", "pid", "dev", "rank", "prio"), pid_map, source


def _rank_evidence(parts, inits: pl.DataFrame) -> list[pl.DataFrame]:
    """Every line that tells a process's rank: init lines, nccl-tests' device lines, launcher
    prefixes, topology lines."""
    ev = [inits.filter(pl.col("host").is_not_null()).select(
        "host",
        "pid",
        pl.coalesce("cuda_dev", "dev").alias("dev"),
        pl.col("rank_in_comm").alias("rank"),
        pl.lit(0, pl.Int32).alias("prio"), "nranks", "line_no")]  # fmt: skip
    if (t := parts.get("tests_rank")) is not None:
        ev.append(
            t.select(
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
            f.select("host", "pid", "dev", me.cast(pl.Int64).alias("rank"), prio, nr, "line_no")
        )
    for kind in ("ring", "tree"):
        if (f := parts.get(kind)) is not None:
            out.append(
                f.select(
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
        out.append(f.select("host", "pid", "dev", me.alias("rank"), prio, nr, "line_no"))
    if (f := parts.get("coll")) is not None:
        # The only member of a one-rank communicator is its rank 0: the weakest evidence.
        one = f.filter(pl.col("nranks") == 1)
        out.append(
            one.select(
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
        idents = pl.DataFrame(schema={"host": pl.String, "pid": pl.Int64, "dev": pl.Int64})
    return (
        idents.unique()
        .join(rank_map.select("host", "pid", "dev", "rank"), on=["host", "pid", "dev"], how="left")
        .join(pid_map, on=["host", "pid"], how="left")
        .select("host", "pid", "dev", pl.coalesce("rank", "pid_rank").alias("rank"))
    )


def _with_rank(
    frame: pl.DataFrame, process_ranks: pl.DataFrame, warnings: Warnings
) -> pl.DataFrame:
    """Add ``rank`` to rows that carry host/pid/dev (and launcher_rank); -1 with a warning."""
    # null keys match the null-keyed rows of process_ranks, whose rank is null too: a prefix
    # without a device still finds its process's rank
    out = frame.join(process_ranks, on=["host", "pid", "dev"], how="left", nulls_equal=True)
    launcher = pl.col("launcher_rank") if "launcher_rank" in out.columns else pl.lit(None, pl.Int64)
    out = out.with_columns(pl.coalesce("rank", launcher, pl.lit(-1)).cast(pl.Int64).alias("rank"))
    if (out["rank"] == -1).any():
        unknown = out.filter(pl.col("rank") == -1)
        by_process = unknown.group_by("host", "pid").len().sort("host", "pid", nulls_last=True)
        for host, pid, n in by_process.iter_rows():  # sorted: the same warnings every run
            who = f"{host}:{pid}" if host else "lines without a host:pid prefix"
            warnings.add(f"rank unknown for {who}; rank -1 used", n)
    return out


def _comm_ids(inits: pl.DataFrame) -> pl.DataFrame:
    """(host, pid, comm_ptr) -> comm (commId where printed, else pointer), nranks, rank_in_comm."""
    return (
        inits.sort("line_no")
        .group_by("host", "pid", "comm_ptr", maintain_order=True)
        .agg(
            pl.col("comm_id").drop_nulls().last(),
            pl.col("nranks").drop_nulls().last(),
            pl.col("rank_in_comm").drop_nulls().last(),
            pl.col("dev").first().alias("init_dev"),
        )
        .with_columns(pl.coalesce("comm_id", "comm_ptr").alias("comm"))
    )


def _comm_table(parts, comm_ids: pl.DataFrame, world, ranked) -> pl.DataFrame:
    """One row per (rank, communicator) seen in Init lines (``comm_ids``) or only in COLL
    lines."""
    ids = ranked(comm_ids.rename({"init_dev": "dev"}))
    coll = parts.get("coll")
    if coll is not None:
        extra = (
            coll.filter(pl.col("host").is_not_null())
            .group_by("host", "pid", "comm_ptr")
            .agg(pl.col("dev").first(), pl.col("nranks").cast(pl.Int64).drop_nulls().last())
            .join(ids.select("host", "pid", "comm_ptr"), on=["host", "pid", "comm_ptr"], how="anti")
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
        .group_by("comm", "rank_in_comm")
        .agg(pl.col("rank").first())
    )
    positions = ids.select("comm", "nranks").unique("comm").filter(pl.col("nranks").is_not_null())
    positions = positions.with_columns(
        pl.int_ranges(0, pl.col("nranks")).alias("rank_in_comm")
    ).explode("rank_in_comm")
    lists = (
        positions.join(members, on=["comm", "rank_in_comm"], how="left")
        .sort("comm", "rank_in_comm")
        .group_by("comm", maintain_order=True)
        .agg(pl.col("rank").alias("ranks"), pl.col("nranks").first())
        .with_columns(
            pl.when(pl.col("nranks") == pl.lit(world, pl.Int64))
            .then(pl.int_ranges(0, pl.col("nranks")))
            .otherwise(pl.col("ranks"))
            .alias("ranks")
        )
        .drop("nranks")
    )
    return ids.join(lists, on="comm", how="left").sort("rank", "comm")


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


def _collectives(parts, inits, comms, ranked, warnings: Warnings) -> pl.DataFrame:
    coll = parts.get("coll")
    if coll is None:
        return pl.DataFrame(schema={"rank": pl.Int64, "collective_id": pl.Int64, "op": pl.String})
    coll = coll.sort("line_no")
    if coll["host"].null_count():
        coll = _place_bare_lines(coll)
    ids = comms.select(
        "host", "pid", "comm_ptr", "comm", pl.col("nranks").alias("comm_nranks"), "rank_in_comm"
    )
    joined = coll.join(ids, on=["host", "pid", "comm_ptr"], how="left", nulls_equal=False)
    out = joined.with_columns(_coll_fields(joined))
    unknown_dtype = out.filter(pl.col("dtype").is_null()).height
    warnings.add("COLL line with an unknown datatype id", unknown_dtype)
    out = out.with_columns(
        pl.int_range(pl.len()).over(["host", "pid", "comm_ptr"]).cast(pl.Int64).alias("seq")
    )
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
        .group_by("comm_ptr")
        .agg(pl.struct("host", "pid", "dev").unique().alias("o"))
        .filter(pl.col("o").list.len() == 1)
        .select("comm_ptr", pl.col("o").list.first().struct.unnest())
        .rename({"host": "o_host", "pid": "o_pid", "dev": "o_dev"})
    )
    out = coll.join(owners, on="comm_ptr", how="left")
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
    key = ["host", "pid", "tid", "rank_bytes"]
    cand = coll.filter(pl.col("rank_in_comm").is_null() | (pl.col("rank_in_comm") == 0))
    cand = cand.select(*key, "line_no", "op_name").with_columns(
        pl.int_range(pl.len()).over(key).alias("k")
    )
    tun = tuning.select(
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
    return coll.join(pairs.select("line_no", "algorithm", "protocol"), on="line_no", how="left")


def _hex_int(col: str) -> pl.Expr:
    return pl.col(col).str.strip_prefix("0x").str.to_integer(base=16, strict=False).cast(pl.Int64)


def _ranks_table(rank_map, inits, parts, world, version) -> pl.DataFrame:
    world_inits = inits.filter(pl.col("nranks") == world) if world is not None else inits.clear()
    info = world_inits.group_by("host", "pid", pl.coalesce("cuda_dev", "dev").alias("dev")).agg(
        pl.col("bus_id").drop_nulls().first(),
        pl.col("nvml_dev").drop_nulls().first(),
        pl.col("local_rank").drop_nulls().first(),
    )
    # the few bus ids of the file's ranks, formatted in Python: as expressions they would be
    # a dozen replace_strict calls on every file
    pci = {b: _pci_bus_id(b) for b in set(info["bus_id"].to_list()) if b is not None}
    exact = version if version and version[0].isdigit() and version.count(".") >= 2 else None
    return (
        rank_map.join(info, on=["host", "pid", "dev"], how="left")
        .select(
            "rank",
            pl.lit(world, pl.Int64).alias("world_size"),
            pl.when(pl.col("host") != L.TRIMMED_HOST).then("host").alias("host"),
            pl.when(pl.col("pid") != L.TRIMMED_PID).then("pid").alias("pid"),
            "local_rank",
            pl.format("cuda:{}", "dev").alias("device"),
            pl.lit("nccl").alias("backend"),
            pl.lit(exact, pl.String).alias("comm_lib_version"),
            pl.col("bus_id").replace_strict(pci, default=None, return_dtype=pl.String),
            "nvml_dev",
        )
        .unique(maintain_order=True)
        .sort("rank")
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
    topo = pl.concat(rows, how="vertical_relaxed").sort("line_no")
    topo = _topology_comm(topo, inits, comm_ids)
    return ranked(topo).select(
        "rank", "comm", "channel", "kind", "peer", "peers", "transport", "detail"
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
    ids = comm_ids.select("host", "pid", "comm_ptr", "comm")
    marks = inits.join(ids, on=["host", "pid", "comm_ptr"], how="left").select(
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
    key = ["host", "pid", "tid"]
    both = both.sort("line_no").with_columns(
        pl.coalesce(
            pl.col("c_next").backward_fill().over(key), pl.col("c_prev").forward_fill().over(key)
        ).alias("comm")
    )
    return both.filter(pl.col("is_topo")).drop("c_next", "c_prev", "is_topo")


def _log_messages(parts, ranked, warnings: Warnings) -> pl.DataFrame:
    """WARN lines, unrecognised NCCL lines and damaged lines, each counted as a warning."""
    frames = []
    schema = {
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
            warnings.add(what, f.height)
    if not frames:
        return pl.DataFrame(schema={"rank": pl.Int64, "line": pl.Int64, "message": pl.String})
    msgs = ranked(pl.concat(frames).sort("line_no"))
    return msgs.select(
        "rank",
        pl.col("line_no").alias("line"),
        "level",
        "subsys",
        "location",
        "message",
        "recognized",
    )
