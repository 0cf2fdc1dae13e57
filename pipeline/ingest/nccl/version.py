"""The NCCL version range a log's line shapes imply, when it has no ``NCCL version`` banner.

Each rule is a regex on the message of one line kind and the (first, last) minor versions of
2.x whose source prints that shape (github.com/NVIDIA/nccl's format strings, release tag by
release tag: ``src/init.cc``, ``src/enqueue.cc``, ``src/graph/``, ``src/transport/``). The ranges
of the rules that fire are intersected.
"""

from __future__ import annotations

import polars as pl

from ...ingest.result import Warnings

_NEWEST = 30

#: (kind, pattern, first minor, last minor)
RULES: list[tuple[str, str, int, int]] = [
    ("init", r"childCount \d+", 29, _NEWEST),
    ("init", r"splitCount \d+", 24, 28),
    ("init", r"^\[Rank \d+\] ", 29, _NEWEST),
    ("init", r"^nccl\w+ comm ", 21, _NEWEST),
    ("init", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ nvmlDev \d+ busId \w+ commId ", 18, 20),
    ("init", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ busId \w+ commId ", 16, 18),
    ("init", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ busId \w+ - Init", 5, 15),
    ("init", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ nvmlDev \d+ - Init", 4, 4),
    ("comm_local", r" nNodes \d+ localRanks \d+ localRank \d+ MNNVL ", 20, _NEWEST),
    ("tuning", r"^\d+ Bytes -> Algo \d+ proto \d+ time ", 20, 22),
    ("tuning", r"^\w+: \d+ Bytes -> Algo \d+ proto \d+ time ", 23, 23),
    ("tuning", r"channel\{Lo\.\.Hi\}", 24, _NEWEST),
    ("conn", r"^Channel \d+/\d+ : ", 12, _NEWEST),
    ("conn", r"^Channel \d+ : .* via NET/", 7, 11),
    ("conn", r"^Channel \d+ : .* via P2P/", 7, 13),
    ("conn", r"via SHM/", 13, _NEWEST),
    ("conn", r"via direct shared memory", 3, 12),
    ("conn", r"via P2P/CUMEM", 18, _NEWEST),
    ("conn", r"^Channel \d+(?:/\d+)? : \d+\[[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\]", 3, 18),
    ("conn", r"^Ring \d+ : ", 3, 6),
    ("trees", r"\|", 5, 7),
    ("trees", r"^Trees \[\d+\] -?\d+/-?\d+/-?\d+->-?\d+->-?\d+(?: \[|\s*$)", 8, _NEWEST),
    ("ring", r".", 10, _NEWEST),
    ("channels", r"collnet channels", 20, _NEWEST),
    ("channels", r"^\d+ coll channels, \d+ nvls channels", 17, 19),
    ("channels", r"^\d+ coll channels, \d+ p2p channels, \d+ p2p channels per peer", 7, 16),
    ("coll", r"^Send: .* sendbuff 0x[0-9a-f]+ recvbuff \(nil\)", 7, 11),
    ("coll", r"^Send: .* sendbuff \(nil\) recvbuff 0x", 12, _NEWEST),
    ("coll", r"^(?:AlltoAll|Gather|Scatter): ", 28, _NEWEST),
]


def infer_version(sample: pl.DataFrame, warnings: Warnings) -> str | None:
    """The range of 2.x versions consistent with a sample of (kind, msg) rows, e.g. ``2.20-2.22``.

    Returns None when no rule fires; when the rules contradict each other (a log from several
    jobs, or a shape this table has wrong) a warning is added and None returned.
    """
    # every rule in one pass: a log of a few KB is parsed in tens of ms, a query per rule
    # would add a fifth to that
    hits = sample.select(_rule_hits()).row(0)
    return _range(hits, warnings)


def infer_versions(
    sample: pl.DataFrame, files: list[int], warnings: list[Warnings]
) -> dict[int, str | None]:
    """:func:`infer_version` of each of ``files`` at once, from a sample of (file, kind, msg)
    rows of several files; ``warnings[file]`` takes that file's warning."""
    if not files:
        return {}
    hits = {}
    if sample.height:
        for row in sample.group_by("file").agg(_rule_hits()).iter_rows():
            hits[row[0]] = row[1:]
    none = (False,) * len(RULES)
    return {f: _range(hits.get(f, none), warnings[f]) for f in files}


def _rule_hits() -> list[pl.Expr]:
    """Whether each rule fires on some row."""
    return [
        ((pl.col("kind") == kind) & pl.col("msg").str.contains(pattern)).any().alias(str(i))
        for i, (kind, pattern, _, _) in enumerate(RULES)
    ]


def _range(hits: tuple[bool, ...], warnings: Warnings) -> str | None:
    """The version range of the rules that fired (``hits``, one per rule)."""
    fired = [(first, last) for (_, _, first, last), hit in zip(RULES, hits, strict=True) if hit]
    if not fired:
        return None
    lo = max(first for first, _ in fired)
    hi = min(last for _, last in fired)
    if lo > hi:
        warnings.add("NCCL version: line shapes of different versions; none inferred")
        return None
    if lo == hi:
        return f"2.{lo}"
    if hi == _NEWEST:
        return f">=2.{lo}"
    return f"2.{lo}-2.{hi}"
