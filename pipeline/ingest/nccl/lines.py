"""NCCL debug-log lines: reading them in batches, the prefix grammar, and the line kinds.

This module owns the text side of :mod:`pipeline.ingest.nccl.log`: the file is read in batches
of whole lines into a Polars ``line`` column, one regex splits the NCCL prefix
(``[wrapper]HOST:PID:TID [DEV] [FILE:LINE ]NCCL LEVEL message``) off every line that has one,
a chain of cheap literal tests tags each message with its kind, and each kind's named-group
pattern (group names = output columns) is applied to that kind's rows only. Line shapes per
NCCL version follow NCCL's own format strings (github.com/NVIDIA/nccl, v2.7.3 to v2.30.7-1,
``src/debug.cc``, ``src/init.cc``, ``src/enqueue.cc``); no Python loop touches a line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

#: Bytes of text handed to Polars at once; bounds peak memory on multi-GB logs.
BATCH_BYTES = 64 * 1024 * 1024

# Host names may hold '<' '>' (anonymised logs) but no blank, ':' or brackets; the wrapper in
# front (launcher tag, timestamp, a second writer's prefix) must end on a delimiter so the greedy
# wrapper cannot eat the host. Greedy: with two prefixes on one line the last one owns the text.
_HOST = r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+)"
_LOC = r"(?:(?P<loc>\d+\.\d+ \S+|\S+:\d+(?: \(\S+\))?) )?"
_LEVEL = r"NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT)\b ?(?P<msg>.*)$"
PREFIX_FULL = rf"^(?P<wrapper>(?:.*[\s:>\]\)])?){_HOST}(?: \[(?P<dev>\d+)\])? {_LOC}{_LEVEL}"
# The part before ' NCCL ' on the fast path (same groups as PREFIX_FULL, short haystack).
_HEAD = (
    rf"^(?P<wrapper>(?:.*[\s:>\]\)])?){_HOST}(?: \[(?P<dev>\d+)\])?"
    r"(?: (?P<loc>\d+\.\d+ \S+|\S+:\d+(?: \(\S+\))?))?$"
)
# Prefix trimmed by whoever pasted the log: ' [0] NCCL INFO ...' or 'NCCL INFO ...'.
PREFIX_TRIMMED = rf"^(?P<wrapper>.*?)(?:\[(?P<dev>\d+)\] )?{_LOC}{_LEVEL}"

#: host / pid given to lines whose prefix was trimmed to '[dev] NCCL INFO' or 'NCCL INFO'.
TRIMMED_HOST = ""
TRIMMED_PID = -1

# Launcher tags that carry a rank: OpenMPI --tag-output, torchrun, mpirun -prepend-rank, srun -l.
LAUNCHER_RANK = r"\[\d+,(\d+)\]<std(?:out|err)>:|\[rank(\d+)\]:|^\s*\[(\d+)\] |^\s*(\d+): "

_HEX = r"(?:0x[0-9a-fA-F]+|\(nil\)|0)"
COLL = (
    r"(?P<op_name>[A-Za-z]+): opCount (?P<op_count>[0-9a-fA-F]+)"
    rf" sendbuff (?P<sendbuff>{_HEX}) recvbuff (?P<recvbuff>{_HEX})"
    r" count (?P<count>-?\d+) datatype (?P<datatype>\d+) op (?P<redop_id>\d+)"
    rf" root (?P<root>-?\d+) comm (?P<comm_ptr>{_HEX})(?: \[nranks=(?P<nranks>\d+)\])?"
    rf" stream (?P<stream>{_HEX})"
)
INIT = (
    r"^(?:\[Rank \d+\] )?(?:(?P<init_func>nccl\w+) )?comm (?P<comm_ptr>0x[0-9a-fA-F]+)"
    r" rank (?P<rank_in_comm>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda_dev>\d+)"
    r"(?: nvmlDev (?P<nvml_dev>\d+))?(?: busId (?P<bus_id>[0-9a-fA-F]+))?"
    r"(?: parent (?P<parent>0x[0-9a-fA-F]+|\(nil\)))?(?: (?:splitCount|childCount) \d+)?"
    r"(?: color (?P<color>-?\d+) key (?P<key>-?\d+))?(?: commId (?P<comm_id>0x[0-9a-fA-F]+))?"
    r" ?- (?P<phase>Init START|Init COMPLETE)"
)
COMM_LOCAL = (
    r"^comm (?P<comm_ptr>0x[0-9a-fA-F]+) rank (?P<rank_in_comm>\d+) nRanks (?P<nranks>\d+)"
    r" nNodes (?P<nnodes>\d+) localRanks (?P<local_ranks>\d+) localRank (?P<local_rank>\d+)"
)
TUNING = (
    r"^(?:(?P<op_name>[A-Za-z]+): )?(?P<tuning_bytes>\d+) Bytes -> Algo (?P<algo>\w+)"
    r" proto (?P<proto>\w+)"
)
CONN = (
    r"^(?:Channel|Ring) (?P<channel>\d+)(?:/(?P<conn_index>\d+))? : (?P<src>\d+)\[[0-9a-fA-F]+\]"
    r" -> (?P<dst>\d+)\[[0-9a-fA-F]+\](?: \[(?P<direction>send|receive)\])? via (?P<via>.+?)\s*$"
)
COLLNET_CONN = (
    r"^(?:CollNet|Coll) (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+) \[(?P<direction>send|receive)\]"
    r" via (?P<via>.+?)\s*$"
)
RING_ORDER = (
    r"^Channel (?P<channel>\d+)/(?P<nchannels>\d+) :(?P<order>(?: +-?\d+)+)(?: ?\.\.\.)?\s*$"
)
RING_NEIGHBOURS = (
    r"^Ring (?P<channel>\d+) : (?P<prev>-?\d+) -> (?P<me>-?\d+) -> (?P<next>-?\d+)\s*$"
)
TREES_ITEM = r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(-?\d+)->(-?\d+)"
TREE = (
    r"^Tree (?P<channel>\d+) : (?P<up>-?\d+) -> (?P<me>-?\d+) -> "
    r"(?P<d0>-?\d+)/(?P<d1>-?\d+)/(?P<d2>-?\d+)"
)
NVLS_HEAD = r"^NVLS Head +(?P<channel>\d+):(?P<order>(?: +-?\d+)*)\s*$"
NVLS_TREES_ITEM = r"(-?\d+)/(-?\d+)/(-?\d+)->(-?\d+)->(-?\d+)"
COLLNET_DIRECT = r"^CollNetDirect channel (?P<channel>\d+) rank (?P<me>\d+) "
CHANNELS = r"^\d+ coll channels, "
BANNER = r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^\s+]*)(?:\+cuda(?P<cuda>[\d.]+))?"
# nccl-tests' device list, printed into the same stdout as the log: rank -> host/pid/device.
TESTS_RANK = (
    r"^.{0,40}?#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<dev>\d+)"
)

# Messages that are NCCL's, understood, and not tabulated (discovery, env echoes, tables of
# the tuning model, allocation and proxy chatter, error propagation). Anything else at INFO is
# kept in log_messages as unrecognised.
KNOWN_OTHER = "|".join(
    [
        r"^Bootstrap ?:",
        r"^bootstrap",
        r"^NET/",
        r"^Using network ",
        r"^Using non-device net plugin",
        r"^cudaDriverVersion ",
        r"^Setting affinity ",
        r"^NVLS ",
        r"^DMA-BUF ",
        r"^P2P Chunksize ",
        r"^CC ",
        r"^\S+ set (?:by environment )?to ",
        r"^Connected ",
        r"^threadThresholds ",
        r"^Pattern \d+, ",
        r"^ *\d+ : (?:NET|GPU|CPU|NIC|NVS)",
        r"^ *(?:Latency/AlgBw|Algorithm|Protocol|Max NThreads) *\|",
        r"^ *\w+ *\|( *[\d.]+/ *[\d.]+ *\|)+",
        r"^Init timings",
        r"^Check P2P Type ",
        r"^\[Proxy ",
        r"^New proxy ",
        r"^Connected to proxy ",
        r"^Allocated ",
        r"^\S+:\d+ (?:\(\S+\) )?\w+(?: \w+)? Alloc ",
        r"^\S+:\d+ (?:\(\S+\) )?-> \d+",
        r"^Launch mode ",
        r"^Plugin Path ",
        r"^P2P plugin ",
        r"^(?:TUNER|PROFILER|NET|ENV)/Plugin",
        r"^MNNVL ",
        r"^CUDA Dev \d+",
        r"^Threads per block ",
        r"^\S+ Destroy COMPLETE|^comm \S+ .*- (?:Destroy|Abort|Revoke) ",
        r"^NCCL version ",
        r"^(?:ncclCommInitRank|ncclCommSplit|ncclCommInitAll).* - (?:Init|DONE)",
        r"^\w+ \[Symmetric\]: ",
        r"^\w+ \[Copy Engine\]: ",
        r"^Git ",
        r"^Trees |^Tree |^Ring |^Channel ",
    ]
)


#: What :func:`split_prefix` finds in a line, before ``launcher_rank``.
_PREFIX_COLUMNS = [
    "file",
    "line_no",
    "line",
    "wrapper",
    "host",
    "pid",
    "tid",
    "dev",
    "loc",
    "level",
    "msg",
]


@dataclass
class Batch:
    """One batch of whole lines: a frame with ``file`` (0: the one file), ``line_no``
    (1-based) and ``line``."""

    frame: pl.DataFrame
    undecodable: int
    cut_last: bool


def iter_batches(path: Path, *, batch_bytes: int = BATCH_BYTES) -> Iterator[Batch]:
    """Yield the file as batches of whole lines; the last batch may end in a cut line.

    Bytes that are not UTF-8 are replaced (U+FFFD) and counted per batch; a trailing ``\\r``
    (Windows line ends) is removed.
    """
    first = 1
    carry = b""
    with open(path, "rb") as fh:
        while True:
            block = fh.read(batch_bytes)
            if not block:
                break
            data = carry + block if carry else block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1 :]
            batch = _lines(data[:cut], first, cut_last=False)
            first += batch.frame.height
            yield batch
    if carry:
        yield _lines(carry, first, cut_last=True)


def _lines(data: bytes, first: int, *, cut_last: bool) -> Batch:
    try:
        text = data.decode("utf-8")
        bad = False
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        bad = True
    line = pl.Series("line", [text]).str.split("\n").explode().str.strip_suffix("\r")
    frame = pl.DataFrame(
        {
            "file": pl.repeat(0, line.len(), dtype=pl.Int32, eager=True),
            "line_no": pl.int_range(first, first + line.len(), eager=True, dtype=pl.Int64),
            "line": line,
        }
    )
    undecodable = int(line.str.contains("\ufffd", literal=True).sum()) if bad else 0
    return Batch(frame=frame, undecodable=undecodable, cut_last=cut_last)


def whole_files(texts: list[str]) -> pl.DataFrame:
    """The lines of several files in one frame: ``file`` (the text's index), ``line_no``
    (1-based in its file) and ``line``, as :func:`iter_batches` gives them for each file on
    its own. Each text is a whole file, decoded, without its final newline."""
    counts = np.array([t.count("\n") + 1 for t in texts], dtype=np.int64)
    line = pl.Series("line", ["\n".join(texts)]).str.split("\n").explode().str.strip_suffix("\r")
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return pl.DataFrame(
        {
            "file": np.repeat(np.arange(len(texts), dtype=np.int32), counts),
            "line_no": np.arange(int(counts.sum()), dtype=np.int64) - starts + 1,
            "line": line,
        }
    )


def split_prefix(lines: pl.DataFrame) -> pl.DataFrame:
    """NCCL lines of a batch with their prefix fields, plus prefix-less COLL lines.

    Returns ``file, line_no, line, wrapper, host, pid, tid, dev, loc, level, msg,
    launcher_rank``; rows whose line has no NCCL prefix but holds a per-call ``<Op>: opCount``
    line (a fragment left when several processes share one terminal) come back with ``level``
    null and ``msg`` = the line. Lines that are neither (other program output) are dropped.
    """
    # Each step below is a query of its own (0.03 to 0.1 ms however few its rows), and most
    # logs need only the fast path: a step with no rows to work on is skipped.
    text = lines["line"]
    has_nccl = text.str.contains("NCCL ", literal=True)
    fast = _fast_prefix(lines.filter(has_nccl))
    found = [fast.select(_PREFIX_COLUMNS)]
    if fast["level"].null_count():
        found[0] = found[0].filter(pl.col("level").is_not_null())
        found.extend(_slow_prefix(fast.filter(pl.col("level").is_null())))
    bare = ~has_nccl & text.str.contains(": opCount ", literal=True)
    if bare.any():
        found.append(
            lines.filter(bare).select(
                "file",
                "line_no",
                "line",
                pl.col("line").str.extract(r"^(.*?)[A-Za-z]+: opCount ", 1).alias("wrapper"),
                *[pl.lit(None, pl.String).alias(c) for c in ("host", "pid", "tid", "dev")],
                *[pl.lit(None, pl.String).alias(c) for c in ("loc", "level")],
                pl.col("line").str.extract(r"([A-Za-z]+: opCount .*)$", 1).alias("msg"),
            )
        )
    out = pl.concat(found, how="vertical").sort("file", "line_no") if len(found) > 1 else found[0]
    launcher = pl.col("wrapper").str.extract_groups(LAUNCHER_RANK)
    return out.with_columns(
        pl.col("pid").cast(pl.Int64),
        pl.col("tid").cast(pl.Int64),
        pl.col("dev").cast(pl.Int64),
        pl.coalesce(*[launcher.struct.field(str(i)) for i in range(1, 5)])
        .cast(pl.Int64)
        .alias("launcher_rank"),
    )


def _slow_prefix(lines: pl.DataFrame) -> list[pl.DataFrame]:
    """Lines the fast path could not settle, through the full prefix pattern, then the
    trimmed one; the frames of the lines each one matched (those matching neither are not
    NCCL lines)."""
    lines = lines.select("file", "line_no", "line")
    full = lines.with_columns(pl.col("line").str.extract_groups(PREFIX_FULL).alias("p")).unnest("p")
    rest = full.filter(pl.col("level").is_null()).select("file", "line_no", "line")
    trimmed = (
        rest.with_columns(pl.col("line").str.extract_groups(PREFIX_TRIMMED).alias("p"))
        .unnest("p")
        .filter(pl.col("level").is_not_null())
        .with_columns(
            # All prefix-trimmed lines of a file are taken as one process ('' : -1), the way
            # they are pasted; their rank then comes from their own Init/ring lines.
            pl.lit(TRIMMED_HOST, pl.String).alias("host"),
            pl.lit(str(TRIMMED_PID), pl.String).alias("pid"),
            pl.lit(None, pl.String).alias("tid"),
        )
    )
    return [
        full.filter(pl.col("level").is_not_null()).select(_PREFIX_COLUMNS),
        trimmed.select(_PREFIX_COLUMNS),
    ]


def _fast_prefix(lines: pl.DataFrame) -> pl.DataFrame:
    """The common case without a regex over the whole line: split at the first ' NCCL ',
    read the level with slices, and match only the short head (wrapper, host:pid:tid, dev).

    Rows this cannot settle (no ' NCCL ' with a known level, a head that does not match, or a
    second prefix inside the message) come back with ``level`` null for the full pattern.
    """
    parts = pl.col("line").str.splitn(" NCCL ", 2)
    out = lines.with_columns(
        parts.struct.field("field_0").alias("head"), parts.struct.field("field_1").alias("rest")
    )
    l4 = pl.col("rest").str.slice(0, 4)
    l5 = pl.col("rest").str.slice(0, 5)
    after = pl.col("rest").str.slice(pl.col("level").str.len_bytes() + 1)
    out = out.with_columns(
        pl.when(
            l4.is_in(["INFO", "WARN", "CALL"]) & (pl.col("rest").str.slice(4, 1).is_in([" ", ""]))
        )
        .then(l4)
        .when(l5.is_in(["TRACE", "ABORT"]) & (pl.col("rest").str.slice(5, 1).is_in([" ", ""])))
        .then(l5)
        .alias("level"),
        pl.col("head").str.extract_groups(_HEAD).alias("h"),
    ).unnest("h")
    out = out.with_columns(after.alias("msg"))
    second = pl.col("msg").str.contains(" NCCL INFO ", literal=True) | pl.col("msg").str.contains(
        " NCCL WARN ", literal=True
    )
    settled = pl.col("level").is_not_null() & pl.col("host").is_not_null() & ~second
    return out.with_columns(pl.when(settled).then("level").alias("level")).drop("head", "rest")


def tag_kinds(nccl: pl.DataFrame) -> pl.DataFrame:
    """Add ``kind``: one cheap literal test per kind, most frequent kinds first."""
    return nccl.with_columns(_KIND)


def _kind_expr() -> pl.Expr:
    # built once: building it took longer than running it on a small log
    m = pl.col("msg")
    starts = m.str.starts_with
    has = m.str.contains
    kind = (
        pl.when(pl.col("level") == "WARN")
        .then(pl.lit("warn"))
        .when(has(": opCount ", literal=True))
        .then(pl.lit("coll"))
        .when(has(" Bytes -> Algo ", literal=True))
        .then(pl.lit("tuning"))
        .when(has(" via ", literal=True) & (starts("Channel ") | starts("Ring ")))
        .then(pl.lit("conn"))
        .when(has(" via ", literal=True) & starts("Coll"))
        .then(pl.lit("collnet_conn"))
        .when(has(" - Init ", literal=True) | has("- Init START", literal=True))
        .then(pl.lit("init"))
        .when(starts("comm ") & has(" nRanks ", literal=True))
        .then(pl.lit("comm_local"))
        .when(starts("Channel "))
        .then(pl.lit("ring_order"))
        .when(starts("Ring "))
        .then(pl.lit("ring"))
        .when(starts("Trees "))
        .then(pl.lit("trees"))
        .when(starts("Tree "))
        .then(pl.lit("tree"))
        .when(starts("NVLS Head"))
        .then(pl.lit("nvls_head"))
        .when(starts("NVLS Trees"))
        .then(pl.lit("nvls_trees"))
        .when(starts("CollNetDirect channel"))
        .then(pl.lit("collnet_direct"))
        .when(has(" coll channels, ", literal=True))
        .then(pl.lit("channels"))
        .when(starts("NCCL version "))
        .then(pl.lit("banner"))
        .when(m.str.contains(KNOWN_OTHER))
        .then(pl.lit("known"))
        .otherwise(pl.lit("unknown"))
    )
    return kind.alias("kind")


_KIND = _kind_expr()
