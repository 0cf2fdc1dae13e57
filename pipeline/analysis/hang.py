"""Hang analysis: where the ranks of each process group stopped agreeing, from flight recorder rows.

Input is the ``collectives`` and ``communicators`` rows of source ``flight_recorder`` of one job
(the schema's columns, as Polars DataFrames). For every process group (``comm``) the result says:
the last collective every rank completed, the first sequence id where the ranks disagree, which
ranks never entered the first unfinished collective and which are stuck in it, and collectives
whose op, element counts or dtypes differ between ranks at the same sequence id (a desync).

What "completed" means depends on what the dump can know:

- ``state == "completed"``: the backend's end event was seen done (NCCL-like backends with device
  events; hooked backends marked done through ``retire_completed``).
- ``retired`` and a backend without events (gloo and any other ``<backend>:`` prefix not in
  :data:`~pipeline.ingest.flight_recorder.parse.EVENT_BACKENDS`): gloo never moves ``state`` past
  ``scheduled``; its work is retired when it finishes, so retired means completed.
- ``retired`` on a backend with events but ``state`` not completed: the watchdog gave up on the
  work (timeout or abort) -- status ``timed_out``.
- otherwise the raw state: ``started`` (kernel seen running) or ``scheduled`` (enqueued, not seen
  running; for gloo: not finished).

Sequence ids are ``collective_seq_id`` (column ``seq``); the entries of a coalesced group share one
and are compared as one signature. A ring buffer forgets its oldest entries, so ranks are compared
from the highest first sequence id any rank still has. Send/recv (``is_p2p``) do not advance
``seq``; unfinished ones are listed per rank with what their peer has pending.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..dataset.schema import conform
from ..errors import DatasetError, TraceFormatError
from ..guards import require_regular
from ..ingest.detect import read_head
from ..ingest.flight_recorder import parse as flight_recorder

#: Exit code of ``tokenwire hang`` when a hang or a mismatch was found.
EXIT_PROBLEM = 4

_PROGRESS = {"timed_out": 0, "scheduled": 1, "started": 2, "completed": 3}
_STATUS = {v: k for k, v in _PROGRESS.items()}
_MAX_MISMATCHES = 10
_MAX_P2P = 20


# --------------------------------------------------------------------------- result types


@dataclass(frozen=True)
class RankState:
    """One rank at one collective: how far it got."""

    rank: int
    status: str  # completed, started, scheduled, timed_out, not_entered
    state: str | None = None  # the dump's own state field
    retired: bool | None = None
    op_name: str | None = None


@dataclass(frozen=True)
class Mismatch:
    """A sequence id at which ranks issued different collectives."""

    seq: int
    op_name: str | None  # the op as the lowest rank named it
    what: str  # op, count, out_count, dtype, all_to_all_total
    values: dict[int, str]  # rank -> what it issued
    odd_ranks: list[int]  # ranks outside the majority (or differing from the lowest rank on a tie)
    majority: bool  # False when no value has a strict majority


@dataclass(frozen=True)
class P2PIssue:
    """An unfinished send or recv on one rank, and what its peer has pending."""

    rank: int
    op: str
    peer: int | None
    p2p_seq: int | None
    status: str
    count: int | None
    dtype: str | None
    peer_side: str  # what the peer has: matching op pending, size differs, nothing pending, no dump


@dataclass
class GroupReport:
    """One process group across all ranks that dumped."""

    comm: str
    pg_name: str | None
    pg_desc: str | None
    ranks: list[int]
    membership: str  # pg_config, default_group (all dumped ranks), observed (ranks seen in entries)
    ranks_without_dump: list[int]
    seq_first: int | None  # first sequence id every dumped rank still has
    seq_last: int | None
    last_completed_by_all: int | None
    last_completed_op: str | None
    last_completed: dict[int, int | None]
    last_entered: dict[int, int | None]
    first_disagreement: int | None
    focus_seq: int | None  # first collective not completed by all ranks, else first disagreement
    focus_op: str | None
    never_entered: list[int]
    stuck: list[RankState]
    completed_at_focus: list[int]
    mismatches: list[Mismatch] = field(default_factory=list)
    more_mismatches: int = 0
    p2p: list[P2PIssue] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """One line per finding; empty when the group looks healthy."""
        out = []
        if self.never_entered:
            out.append(f"ranks {rank_list(self.never_entered)} never entered seq {self.focus_seq}")
        if self.stuck:
            ranks = rank_list(s.rank for s in self.stuck)
            out.append(f"ranks {ranks} are stuck in seq {self.focus_seq} ({self.focus_op})")
        for m in self.mismatches:
            out.append(f"seq {m.seq}: {m.what} differs between ranks ({_values(m.values)})")
        for p in self.p2p:
            out.append(f"rank {p.rank} {p.op} peer {p.peer} unfinished ({p.status}): {p.peer_side}")
        return out


@dataclass
class HangReport:
    """The hang analysis of one job: one :class:`GroupReport` per process group."""

    dumped_ranks: list[int]
    groups: list[GroupReport]
    warnings: list[str] = field(default_factory=list)

    @property
    def problem_found(self) -> bool:
        """True when any group has a hang or a mismatch."""
        return any(g.problems for g in self.groups)

    def to_json(self) -> str:
        """The report as JSON (rank keys become strings)."""
        doc = {
            "problem_found": self.problem_found,
            "dumped_ranks": self.dumped_ranks,
            "warnings": self.warnings,
            "groups": [{**asdict(g), "problems": g.problems} for g in self.groups],
        }
        return json.dumps(doc, indent=2, default=str)

    def to_text(self) -> str:
        """The report as plain text, one block per process group."""
        lines = [f"flight recorder dumps from ranks {rank_list(self.dumped_ranks)}"]
        lines += [f"warning: {w}" for w in self.warnings]
        if not self.groups:
            lines.append("no collectives recorded in any dump")
        for g in self.groups:
            lines.append("")
            lines.extend(_group_text(g))
        lines.append("")
        verdict = "PROBLEM FOUND" if self.problem_found else "no hang or mismatch found"
        lines.append(f"verdict: {verdict}")
        return "\n".join(lines)


def rank_list(ranks: Iterable[int]) -> str:
    """Ranks for a reader: runs of consecutive ranks as ``first-last``, a strided set as its
    first ranks and its stride, and past a dozen ranks their number. A group of thousands of
    ranks then fits on a line (``[0-4095] (4,096 ranks)``); the JSON report lists each one."""
    ordered = sorted(set(ranks))
    count = f" ({len(ordered):,} ranks)" if len(ordered) > 12 else ""
    stride = ordered[1] - ordered[0] if len(ordered) > 12 else 0
    # (compared pairwise: a range() from the first rank to the last may be 10**18 long)
    if stride > 1 and all(b - a == stride for a, b in zip(ordered, ordered[1:], strict=False)):
        first, second, last = ordered[0], ordered[1], ordered[-1]
        return f"[{first}, {second}, ..., {last}] ({len(ordered):,} ranks, {stride} apart)"
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    parts = [f"{a}-{b}" if b > a + 1 else ", ".join(map(str, range(a, b + 1))) for a, b in runs]
    if len(parts) > 12:
        parts = [*parts[:10], "...", *parts[-2:]]
    return "[" + ", ".join(parts) + "]" + count


def _ranks_of(ranks: list[int]) -> str:
    """``rank 7`` or ``ranks [0-6, 8-15]``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


def _by_value(values: dict[int, Any]) -> list[tuple[Any, list[int]]]:
    """The ranks of each distinct value, in the order of their lowest rank."""
    groups: dict[Any, list[int]] = {}
    for rank, value in sorted(values.items()):
        groups.setdefault(value, []).append(rank)
    return list(groups.items())


def _values(values: dict[int, str]) -> str:
    return ", ".join(f"{_ranks_of(ranks)}: {v}" for v, ranks in _by_value(values))


def _group_text(g: GroupReport) -> list[str]:
    desc = f" ({g.pg_desc})" if g.pg_desc else ""
    out = [f"process group {g.pg_name if g.pg_name is not None else g.comm}{desc} [{g.comm}]"]
    out.append(f"  ranks: {rank_list(g.ranks)} (from {g.membership})")
    if g.ranks_without_dump:
        out.append(f"  no dump from ranks {rank_list(g.ranks_without_dump)}: they are left out")
    out.append(f"  sequence ids compared: {g.seq_first}..{g.seq_last}")
    lc = g.last_completed_by_all
    out.append(
        "  last collective every rank completed: "
        + (f"seq {lc} ({g.last_completed_op})" if lc is not None else "none")
    )
    progress = {r: f"{g.last_completed[r]}/{g.last_entered[r]}" for r in g.last_completed}
    out.append(f"  last completed/entered per rank: {_values(progress)}")
    fd = g.first_disagreement
    out.append(f"  first seq where ranks disagree: {fd if fd is not None else 'none'}")
    if g.focus_seq is not None and (g.never_entered or g.stuck):
        out.append(f"  first unfinished collective: seq {g.focus_seq} ({g.focus_op})")
        if g.never_entered:
            out.append(f"    never entered: ranks {rank_list(g.never_entered)}")
        # (one line per way of being stuck, not per rank: thousands of ranks wait alike)
        how = {s.rank: (s.status, s.state, s.retired) for s in g.stuck}
        for (status, state, retired), ranks in _by_value(how):
            flag = "" if retired is None else f", retired={str(retired).lower()}"
            out.append(f"    stuck in it: {_ranks_of(ranks)} ({status}; state={state}{flag})")
        if g.completed_at_focus:
            out.append(f"    completed it: ranks {rank_list(g.completed_at_focus)}")
    for m in g.mismatches:
        if not m.odd_ranks:
            odd = ""
        elif m.majority:
            odd = f"; odd ranks {rank_list(m.odd_ranks)}"
        else:
            odd = f"; ranks {rank_list(m.odd_ranks)} differ from rank {min(m.values)} (no majority)"
        out.append(
            f"  MISMATCH seq {m.seq} ({m.op_name}): {m.what} differs: {_values(m.values)}{odd}"
        )
    if g.more_mismatches:
        out.append(f"  ... and {g.more_mismatches} more sequence ids with mismatches")
    for p in g.p2p:
        out.append(
            f"  unfinished {p.op}: rank {p.rank} peer {p.peer} p2p_seq {p.p2p_seq} "
            f"({p.status}, {p.count} x {p.dtype}): {p.peer_side}"
        )
    out.append(f"  status: {'PROBLEM' if g.problems else 'ok'}")
    return out


# --------------------------------------------------------------------------- analysis


def with_status(collectives: pl.DataFrame) -> pl.DataFrame:
    """Add ``status`` (completed, started, scheduled, timed_out) and ``progress`` (0..3)."""
    backend = pl.col("op_name").str.extract(r"^([^:]+):", 1)
    evented = backend.is_in(sorted(flight_recorder.EVENT_BACKENDS)).fill_null(False)
    retired = pl.col("retired").fill_null(False)
    status = (
        pl.when(pl.col("state") == "completed")
        .then(pl.lit("completed"))
        .when(retired & ~evented)
        .then(pl.lit("completed"))
        .when(retired & evented)
        .then(pl.lit("timed_out"))
        .when(pl.col("state") == "started")
        .then(pl.lit("started"))
        .otherwise(pl.lit("scheduled"))
    )
    return collectives.with_columns(status=status).with_columns(
        progress=pl.col("status").replace_strict(_PROGRESS, return_dtype=pl.Int8)
    )


def _signatures(coll: pl.DataFrame) -> pl.DataFrame:
    """One row per (comm, rank, seq): what the rank issued there and how far it got."""
    op = pl.col("op")
    return (
        coll.filter(~pl.col("is_p2p").fill_null(False))
        .with_columns(
            order=pl.coalesce("op_seq", "collective_id"),
            # all_to_all splits differ by design; scatter inputs and gather outputs live on root
            cnt=pl.when(op.is_in(["all_to_all", "scatter"]))
            .then(pl.lit("-"))
            .otherwise(pl.col("count").cast(pl.String).fill_null("?")),
            out=pl.when(op.is_in(["all_to_all", "gather"]))
            .then(pl.lit("-"))
            .otherwise(pl.col("out_count").cast(pl.String).fill_null("?")),
        )
        .sort(["comm", "rank", "seq", "order"])
        .group_by(["comm", "rank", "seq"], maintain_order=True)
        .agg(
            op_sig=op.str.join("+"),
            op_names=pl.col("op_name").str.join("+"),
            count_sig=pl.col("cnt").str.join(","),
            out_sig=pl.col("out").str.join(","),
            dtype_sig=pl.col("dtype").fill_null("?").str.join(","),
            # (Int128: counts near int64's limit add up past it, which Int64 would wrap)
            count_total=pl.col("count").cast(pl.Int128).sum(),
            out_total=pl.col("out_count").cast(pl.Int128).sum(),
            progress=pl.col("progress").min(),
            state=pl.col("state").sort_by("progress").first(),
            retired=pl.col("retired").sort_by("progress").first(),
        )
    )


def _membership(
    comm: str,
    rows: pl.DataFrame,
    coll_ranks: list[int],
    dumped: list[int],
    warnings: list[str],
) -> tuple[list[int], str, str | None, str | None]:
    """Members of ``comm`` (from its ``communicators`` rows), how they were found, name, desc."""
    name = next(iter(rows["pg_name"].drop_nulls()), None) if rows.height else None
    desc = next(iter(rows["pg_desc"].drop_nulls()), None) if rows.height else None
    # distinct lists first: every rank's dump repeats each group's list (a world-sized group
    # at 4,096 ranks: 16.8 M Python ints, 0.66 s and 530 MB, against 0.08 s)
    lists = (
        {tuple(x) for x in rows["ranks"].drop_nulls().unique().to_list()} if rows.height else set()
    )
    # rows read from a dataset keep a sequence as its first rank and stride (rank_sets.py)
    sequences = rows.filter(pl.col("ranks_stride").is_not_null())
    for first, stride, n in (
        sequences.select("ranks_first", "ranks_stride", "nranks").unique().rows()
    ):
        lists.add(tuple(range(first, first + stride * n, stride)))
    if len(lists) > 1:
        warnings.append(f"{comm}: ranks disagree on its members {sorted(lists)}; using the union")
    if lists:
        return sorted({r for members in lists for r in members}), "pg_config", name, desc
    if comm == "pg:0" or desc == "default_pg":
        return sorted(set(dumped) | set(coll_ranks)), "default_group", name, desc
    return sorted(set(coll_ranks)), "observed", name, desc


def _odd(values: dict[int, str]) -> tuple[list[int], bool]:
    counts: dict[str, int] = {}
    for v in values.values():
        counts[v] = counts.get(v, 0) + 1
    best = max(counts.values())
    winners = [v for v, n in counts.items() if n == best]
    if len(winners) == 1 and best * 2 > len(values):
        return sorted(r for r, v in values.items() if v != winners[0]), True
    reference = values[min(values)]
    return sorted(r for r, v in values.items() if v != reference), False


def _mismatches(grid: pl.DataFrame, per_seq: pl.DataFrame) -> tuple[list[Mismatch], int]:
    fields = (
        ("op", "op_sig", "n_op"),
        ("count", "count_sig", "n_count"),
        ("out_count", "out_sig", "n_out"),
        ("dtype", "dtype_sig", "n_dtype"),
    )
    bad = per_seq.filter(
        pl.any_horizontal([pl.col(n) > 1 for _, _, n in fields]) | pl.col("a2a_unbalanced")
    ).sort("seq")
    found: list[Mismatch] = []
    for row in bad.head(_MAX_MISMATCHES).iter_rows(named=True):
        at = grid.filter((pl.col("seq") == row["seq"]) & pl.col("op_sig").is_not_null())
        for what, col, n in fields:
            if row[n] > 1:
                values = dict(zip(at["rank"].to_list(), at[col].to_list(), strict=True))
                if what == "op":
                    values = dict(zip(at["rank"].to_list(), at["op_names"].to_list(), strict=True))
                odd, majority = _odd(values)
                found.append(Mismatch(row["seq"], row["op"], what, values, odd, majority))
        if row["a2a_unbalanced"]:
            values = {
                r: f"in {i} out {o}"
                for r, i, o in zip(at["rank"], at["count_total"], at["out_total"], strict=True)
            }
            found.append(Mismatch(row["seq"], row["op"], "all_to_all_total", values, [], False))
    return found, max(0, bad.height - _MAX_MISMATCHES)


def _group(
    comm: str,
    mine: pl.DataFrame,
    members: list[int],
    membership: str,
    name: str | None,
    desc: str | None,
    dumped: list[int],
) -> GroupReport:
    have = set(dumped)
    expected = [r for r in members if r in have]
    bounds = mine.group_by("rank").agg(
        lo=pl.col("seq").min(),
        hi=pl.col("seq").max(),
        done=pl.col("seq").filter(pl.col("progress") == _PROGRESS["completed"]).max(),
    )
    lo = bounds.filter(pl.col("rank").is_in(expected))["lo"].max()
    grid = _grid(mine, expected, lo)
    per_seq = _per_seq(grid, len(expected))
    first_disagreement, last_done, focus = _landmarks(per_seq, len(expected))
    mismatches, more = _mismatches(grid, per_seq)
    focus_op, never, stuck, completed_at = _at_focus(grid, per_seq, focus)
    last_entered, last_completed = _last_seqs(bounds, expected)
    return GroupReport(
        comm=comm,
        pg_name=name,
        pg_desc=desc,
        ranks=members,
        membership=membership,
        ranks_without_dump=[r for r in members if r not in have],
        seq_first=lo,
        seq_last=mine["seq"].max(),
        last_completed_by_all=last_done,
        last_completed_op=(
            per_seq.filter(pl.col("seq") == last_done)["op"].first()
            if last_done is not None
            else None
        ),
        last_completed=last_completed,
        last_entered=last_entered,
        first_disagreement=first_disagreement,
        focus_seq=focus,
        focus_op=focus_op,
        never_entered=never,
        stuck=stuck,
        completed_at_focus=completed_at,
        mismatches=mismatches,
        more_mismatches=more,
    )


def _grid(mine: pl.DataFrame, expected: list[int], lo: int | None) -> pl.DataFrame:
    """Every expected rank's entry (or nulls) at each sequence id from ``lo`` on."""
    ranks_df = pl.DataFrame({"rank": expected}, schema={"rank": pl.Int64})
    # the sequence ids some rank has from lo on, not every id from lo to hi: ids are any int64
    # (one entry at 10**18 must not make a grid of 10**18 rows); an id no rank has is no finding
    seqs = (
        mine.select("seq").filter(pl.col("seq") >= lo).unique().sort("seq")
        if lo is not None
        else pl.DataFrame(schema={"seq": pl.Int64})
    )
    return seqs.join(ranks_df, how="cross").join(mine, on=["seq", "rank"], how="left")


def _per_seq(grid: pl.DataFrame, n: int) -> pl.DataFrame:
    """Per sequence id: how many of the ``n`` ranks have it and completed it, how many
    signatures each field has, and whether an all-to-all's totals disagree."""
    present = pl.col("op_sig").is_not_null()
    return (
        grid.group_by("seq")
        .agg(
            n_present=present.sum(),
            n_completed=(pl.col("progress") == _PROGRESS["completed"]).sum(),
            n_op=pl.col("op_sig").drop_nulls().n_unique(),
            n_count=pl.col("count_sig").drop_nulls().n_unique(),
            n_out=pl.col("out_sig").drop_nulls().n_unique(),
            n_dtype=pl.col("dtype_sig").drop_nulls().n_unique(),
            all_a2a=(pl.col("op_sig") == "all_to_all").all(),
            in_total=pl.col("count_total").sum(),
            out_total=pl.col("out_total").sum(),
            op=pl.col("op_names").sort_by("rank").drop_nulls().first(),
        )
        .with_columns(
            a2a_unbalanced=pl.col("all_a2a")
            & (pl.col("n_present") == n)
            & (pl.col("in_total") != pl.col("out_total"))
        )
        .sort("seq")
    )


def _landmarks(per_seq: pl.DataFrame, n: int) -> tuple[int | None, int | None, int | None]:
    """(first sequence id the ``n`` ranks disagree on, last all completed, the focus: first
    not all completed, else the first disagreement)."""
    mismatch_any = pl.any_horizontal(
        [pl.col(c) > 1 for c in ("n_op", "n_count", "n_out", "n_dtype")]
    ) | pl.col("a2a_unbalanced")
    state_split = (pl.col("n_completed") > 0) & (pl.col("n_completed") < pl.col("n_present"))
    disagree = per_seq.filter((pl.col("n_present") < n) | mismatch_any | state_split)
    all_done = per_seq.filter(pl.col("n_completed") == n)
    unfinished = per_seq.filter(pl.col("n_completed") < n)
    first_disagreement = disagree["seq"].min() if disagree.height else None
    last_done = all_done["seq"].max() if all_done.height else None
    focus = unfinished["seq"].min() if unfinished.height else first_disagreement
    return first_disagreement, last_done, focus


def _at_focus(
    grid: pl.DataFrame, per_seq: pl.DataFrame, focus: int | None
) -> tuple[str | None, list[int], list[RankState], list[int]]:
    """(op at the focus, ranks that never entered it, ranks stuck in it, ranks done with it)."""
    never: list[int] = []
    stuck: list[RankState] = []
    completed_at: list[int] = []
    if focus is None:
        return None, never, stuck, completed_at
    at = grid.filter(pl.col("seq") == focus).sort("rank")
    focus_op = per_seq.filter(pl.col("seq") == focus)["op"].first()
    for r in at.iter_rows(named=True):
        if r["op_sig"] is None:
            never.append(r["rank"])
        elif r["progress"] == _PROGRESS["completed"]:
            completed_at.append(r["rank"])
        else:
            stuck.append(
                RankState(
                    r["rank"], _STATUS[r["progress"]], r["state"], r["retired"], r["op_names"]
                )
            )
    return focus_op, never, stuck, completed_at


def _last_seqs(
    bounds: pl.DataFrame, expected: list[int]
) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """(last sequence id each expected rank entered, last it completed)."""
    last_completed = dict.fromkeys(expected)
    last_entered = dict.fromkeys(expected)
    for r, entered, completed in bounds.select("rank", "hi", "done").iter_rows():
        if r in last_entered:
            last_entered[r], last_completed[r] = entered, completed
    return last_entered, last_completed


def _p2p_issues(coll: pl.DataFrame, dumped: set[int]) -> list[P2PIssue]:
    p2p = coll.filter(pl.col("is_p2p").fill_null(False) & pl.col("op").is_in(["send", "recv"]))
    pending = p2p.filter(pl.col("progress") < _PROGRESS["completed"]).sort(
        ["rank", "p2p_seq", "collective_id"]
    )
    issues = []
    for r in pending.head(_MAX_P2P).iter_rows(named=True):
        want = "recv" if r["op"] == "send" else "send"
        if r["peer"] is None or r["peer"] not in dumped:
            side = "peer has no dump" if r["peer"] is not None else "peer unknown"
        else:
            match = pending.filter(
                (pl.col("rank") == r["peer"])
                & (pl.col("op") == want)
                & (pl.col("peer") == r["rank"])
            )
            if match.height == 0:
                side = f"peer has no unfinished {want} from rank {r['rank']}"
            else:
                other = match.row(0, named=True)
                if (other["count"], other["dtype"]) != (r["count"], r["dtype"]):
                    side = (
                        f"peer's {want} differs: {other['count']} x {other['dtype']} "
                        f"vs {r['count']} x {r['dtype']}"
                    )
                else:
                    side = f"peer has the matching {want} unfinished too"
        issues.append(
            P2PIssue(
                r["rank"],
                r["op"],
                r["peer"],
                r["p2p_seq"],
                r["status"],
                r["count"],
                r["dtype"],
                side,
            )
        )
    return issues


def analyze(
    collectives: pl.DataFrame,
    communicators: pl.DataFrame,
    *,
    dumped_ranks: Iterable[int] | None = None,
) -> HangReport:
    """Hang report of one job from its flight recorder ``collectives`` and ``communicators``.

    Parameters
    ----------
    collectives, communicators
        Rows of source ``flight_recorder`` of one job, with the schema's columns.
    dumped_ranks
        Ranks that left a dump (some dumps hold no rows); default: every rank in either table.
    """
    coll = with_status(collectives.filter(pl.col("source") == "flight_recorder"))
    comms = communicators.filter(pl.col("source") == "flight_recorder")
    dumped = sorted(
        set(dumped_ranks or [])
        | set(coll["rank"].unique().to_list())
        | set(comms["rank"].unique().to_list())
    )
    warnings: list[str] = []
    # split once by group: a job has many groups and each is analysed on its own rows
    coll_by = {k[0]: v for k, v in coll.partition_by("comm", as_dict=True).items()}
    sig_by = {k[0]: v for k, v in _signatures(coll).partition_by("comm", as_dict=True).items()}
    comms_by = {k[0]: v for k, v in comms.partition_by("comm", as_dict=True).items()}
    empty_comms = comms.clear()
    groups = []
    for comm in sorted(c for c in coll_by if c is not None):
        rows = coll_by[comm]
        members, how, name, desc = _membership(
            comm,
            comms_by.get(comm, empty_comms),
            rows["rank"].unique().to_list(),
            dumped,
            warnings,
        )
        if comm in sig_by:
            g = _group(comm, sig_by[comm], members, how, name, desc, dumped)
        else:
            g = _empty_group(comm, members, how, name, desc, dumped)
        g.p2p = _p2p_issues(rows, set(dumped))
        groups.append(g)
    return HangReport(dumped_ranks=dumped, groups=groups, warnings=warnings)


def _empty_group(
    comm: str, members: list[int], how: str, name: str | None, desc: str | None, dumped: list[int]
) -> GroupReport:
    """A group used only for send/recv: no collective sequence to compare."""
    have = set(dumped)
    expected = [r for r in members if r in have]
    return GroupReport(
        comm=comm,
        pg_name=name,
        pg_desc=desc,
        ranks=members,
        membership=how,
        ranks_without_dump=[r for r in members if r not in have],
        seq_first=None,
        seq_last=None,
        last_completed_by_all=None,
        last_completed_op=None,
        last_completed=dict.fromkeys(expected),
        last_entered=dict.fromkeys(expected),
        first_disagreement=None,
        focus_seq=None,
        focus_op=None,
        never_entered=[],
        stuck=[],
        completed_at_focus=[],
    )


# --------------------------------------------------------------------------- loading dumps


@dataclass
class LoadedDumps:
    """Flight recorder dumps read straight from files, as schema-conformed DataFrames."""

    collectives: pl.DataFrame
    communicators: pl.DataFrame
    ranks: list[int]
    files: list[Path]
    warnings: list[str]


def dump_files(paths: Sequence[Path]) -> list[Path]:
    """The dump files named: files as given, folders expanded to the dumps directly in them."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            # (read_head places a damaged .gz: an error naming it, not a rank left out quietly,
            # which would change the verdict)
            found = [
                f
                for f in sorted(p.iterdir())
                if f.is_file() and flight_recorder.sniff(f, read_head(f))
            ]
            if not found:
                raise TraceFormatError(p, "no flight recorder dumps in this folder")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        elif os.path.lexists(p):
            require_regular(p)  # (a FIFO, a device: named, never opened)
        else:
            raise TraceFormatError(p, "no such file or folder")
    return out


def load_dumps(paths: Sequence[Path], *, job: str | None = None) -> LoadedDumps:
    """Parse dump files (or folders of dumps) with the flight recorder parser."""
    files = dump_files(paths)
    job = job or (Path(paths[0]).name if Path(paths[0]).is_dir() else files[0].parent.name)
    tables: dict[str, list[pl.DataFrame]] = {"collectives": [], "communicators": []}
    seen: dict[tuple[int, str], Path] = {}
    ranks: set[int] = set()
    warnings: list[str] = []
    for f in files:
        result = flight_recorder.parse(f)
        file_id = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
        rank = result.tables["ranks"]["rank"][0].as_py()
        ranks.add(rank)
        comms = set(result.tables["collectives"]["comm"].to_pylist())
        for comm in comms:
            if (rank, comm) in seen:
                raise TraceFormatError(
                    f, f"rank {rank} group {comm} was already read from {seen[rank, comm]}"
                )
            seen[rank, comm] = f
        warnings += [f"{f.name}: {m}" for m in result.warnings.messages()]
        for name in tables:
            try:  # (a value outside its schema's range, as an ingest would refuse it)
                t = conform(name, result.tables[name], job=job, source=result.format,
                            file_id=file_id)  # fmt: skip
            except DatasetError as exc:
                raise TraceFormatError(f, str(exc)) from None
            tables[name].append(pl.from_arrow(t))
    return LoadedDumps(
        collectives=pl.concat(tables["collectives"]),
        communicators=pl.concat(tables["communicators"]),
        ranks=sorted(ranks),
        files=files,
        warnings=warnings,
    )


def analyze_paths(paths: Sequence[Path]) -> HangReport:
    """Hang report straight from dump files or folders (no dataset needed)."""
    loaded = load_dumps(paths)
    report = analyze(loaded.collectives, loaded.communicators, dumped_ranks=loaded.ranks)
    report.warnings = loaded.warnings + report.warnings
    return report


def analyze_dataset(dataset: Path, *, job: str | None = None) -> HangReport:
    """Hang report of one job of a dataset, from its ``flight_recorder`` rows.

    Raises
    ------
    DatasetError
        No flight recorder dumps in the dataset, or several jobs and no ``job`` to pick one.
    """
    from ..dataset.snapshot import read_snapshot

    # (read again if an ingest commits while this reads)
    read = functools.partial(_dump_rows, Path(dataset), job)
    collectives, communicators, dumped = read_snapshot(Path(dataset), read, place="hang")
    return analyze(collectives, communicators, dumped_ranks=dumped)


def _dump_rows(dataset: Path, job: str | None) -> tuple[pl.DataFrame, pl.DataFrame, list[int]]:
    """The flight recorder's collectives and communicators of ``job``, and its dumped ranks."""
    from ..dataset.rank_sets import STORED_VIEW
    from ..dataset.views import connect

    con = connect(dataset, read_only=True)
    jobs = [
        j
        for (j,) in con.execute(
            "SELECT DISTINCT job FROM files WHERE format = 'flight_recorder' ORDER BY 1"
        ).fetchall()
    ]
    if not jobs:
        raise DatasetError(f"{dataset}: no flight recorder dumps ingested")
    if job is None and len(jobs) > 1:
        raise DatasetError(
            f"{dataset}: dumps of several jobs ({', '.join(jobs)}): pick one with --job"
        )
    job = job or jobs[0]
    if job not in jobs:
        raise DatasetError(f"{dataset}: job {job!r} has no flight recorder dumps")

    def rows(table: str) -> pl.DataFrame:
        query = f"SELECT * FROM {table} WHERE job = ? AND source = 'flight_recorder'"
        return pl.from_arrow(con.sql(query, params=[job]).to_arrow_table())

    dumped = [
        r
        for (r,) in con.execute(
            "SELECT DISTINCT unnest(ranks) FROM files WHERE job = ? AND format = 'flight_recorder'",
            [job],
        ).fetchall()
    ]
    # (communicators as stored: expanded on every rank's row, the world group's list is N²)
    return rows("collectives"), rows(STORED_VIEW), dumped
