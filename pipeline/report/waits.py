"""Three sections on waiting versus transferring: the time in collectives split at the last
rank's arrival, per dimension and rank, and whom the ranks waited for (collective_waits);
each step's straggler and what it ran meanwhile (step_stragglers, straggler_ops); what each
step's critical path is made of (critical_path). All are made by tokenwire link."""

from __future__ import annotations

import altair as alt
import polars as pl

from ..report import fmt
from ..report.context import Context
from ..report.page import Chart, Note, Section, Table

#: Above this many ranks the per-rank table lists the WAIT_TOP ranks that waited longest.
MAX_RANK_ROWS = 64
WAIT_TOP = 30
_PARTS = ["wait", "transfer"]
_PART_COLORS = ["#e45756", "#4c78a8"]


_NEEDS_LINK = "Needs tokenwire link: collective_waits splits each rank's collective time at "
_NEEDS_LINK += "the last rank's arrival, on the clock link aligns."


def section(ctx: Context, no_timing: str | None) -> Section:
    """Waiting or transferring: where collective time goes, per dimension and rank, and whom
    the ranks waited for."""
    sec = Section("waits", "Waiting or transferring")
    by_dim = ctx.query("wait_by_dim")
    if by_dim.height == 0:
        return sec.add(Note(no_timing or _NEEDS_LINK, "missing"))
    _wait_chart(sec, by_dim)
    _wait_note(ctx, sec, by_dim)
    _wait_by_rank(ctx, sec)
    return sec


def straggler_section(ctx: Context, no_timing: str | None, limit: int = 10) -> Section:
    """Who held each step back, and what it ran while the others waited."""
    sec = Section("stragglers", "Who held each step back")
    if not _stragglers(ctx, sec, limit):
        sec.add(Note(no_timing or _NEEDS_LINK, "missing"))
    return sec


def critical_path_section(ctx: Context, no_timing: str | None) -> Section:
    """What set each step's length: its critical path across ranks."""
    sec = Section("critical_path", "The critical path of each step")
    if not _critical_path(ctx, sec):
        sec.add(Note(no_timing or _NEEDS_LINK, "missing"))
    return sec


def _wait_chart(sec: Section, by_dim: pl.DataFrame) -> None:
    data = (
        by_dim.with_columns(
            (pl.col("parallel_dim") + " " + pl.col("op")).alias("collective"),
            (pl.col("wait_per_step_ns") / 1e6).alias("wait"),
            (pl.col("transfer_per_step_ns") / 1e6).alias("transfer"),
        )
        .select("collective", "calls", "wait", "transfer")
        .unpivot(index=["collective", "calls"], variable_name="part", value_name="ms")
    )
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(data)))
        .mark_bar()
        .encode(
            y=alt.Y("collective:N", title=None, sort=None),
            x=alt.X("ms:Q", title="ms per step, summed over ranks"),
            color=alt.Color(
                "part:N", title=None, scale=alt.Scale(domain=_PARTS, range=_PART_COLORS)
            ),
            tooltip=[
                alt.Tooltip("collective:N"),
                alt.Tooltip("part:N"),
                alt.Tooltip("ms:Q", format=",.3f"),
                alt.Tooltip("calls:Q"),
            ],
        )
        .properties(
            width=700, title="Time in collectives: waiting for the last rank, or moving data"
        )
    )
    sec.add(
        Chart(
            "wait_transfer",
            chart,
            "A collective cannot complete before its last rank arrives: a rank's call waits "
            "until then and transfers after (on the clock tokenwire link aligns).",
        )
    )


def _wait_note(ctx: Context, sec: Section, by_dim: pl.DataFrame) -> None:
    wait, transfer = by_dim["wait_ns"].sum(), by_dim["transfer_ns"].sum()
    text = (
        f"Ranks waited {fmt.duration(wait)} and transferred {fmt.duration(transfer)} "
        f"in collectives ({fmt.share(wait / (wait + transfer) if wait + transfer else None)}"
        " of it waiting)"
    )
    late = ctx.query("wait_for_rank")
    if late.height:
        top = late.row(0, named=True)
        text += (
            f"; {fmt.duration(top['wait_ns'])} of the waiting was for rank {top['late_rank']}"
            f", the last to arrive ({top['calls']:,} calls waited for it)"
        )
    sec.add(Note(text + ".", "text"))


def _wait_by_rank(ctx: Context, sec: Section) -> None:
    ranks = ctx.query("wait_by_rank")
    caption = (
        "Per rank, over the traced steps: time in collectives waiting for the last "
        "rank and moving data, and the rank it waited for longest"
    )
    if ranks.height > MAX_RANK_ROWS:
        caption = (
            f"The {WAIT_TOP} of {ranks.height:,} ranks that waited longest, over the traced "
            "steps: time in collectives waiting for the last rank and moving data, and the "
            "rank it waited for longest"
        )
        ranks = ranks.sort(["wait_ns", "rank"], descending=[True, False]).head(WAIT_TOP)
    sec.add(
        Table(
            ["rank", "calls", "waiting", "transferring", "share waiting", "waited most for"],
            [
                [
                    r["rank"],
                    r["calls"],
                    r["wait_ns"],
                    r["transfer_ns"],
                    fmt.share(r["wait_share"]),
                    "–"
                    if r["waited_most_for"] is None
                    else f"rank {r['waited_most_for']} ({fmt.duration(r['waited_most_ns'])})",
                ]
                for r in ranks.iter_rows(named=True)
            ],
            caption=caption,
            numeric=[True, True, True, True, True, False],
            units=[None, None, "ns", "ns", None, None],
        )
    )


def _stragglers(ctx: Context, sec: Section, limit: int) -> bool:
    """The straggler tables; False when link made none."""
    ranks = ctx.query("straggler_ranks", limit=limit)
    if ranks.height == 0:
        return False
    sec.add(
        Table(
            [
                "rank",
                "share of all waiting",
                "wait it caused",
                "steps as straggler",
                "busy in",
                "dimension it delayed",
            ],
            [
                [
                    r["rank"],
                    fmt.share(r["wait_share"]),
                    r["caused_wait_ns"],
                    _steps(r["step_list"]),
                    r["busy_layer"],
                    r["parallel_dim"],
                ]
                for r in ranks.iter_rows(named=True)
            ],
            caption="Who held steps back, the largest share of all waiting first: each "
            "step's straggler is the rank whose late arrival at collectives other than "
            "send/recv made the others wait longest; the share is of all waiting in the "
            "traced steps, receives waiting for their sends included (the pipeline's "
            "schedule: Waiting or transferring)",
            numeric=[True, True, True, False, False, False],
            units=[None, None, "ns", None, None, None],
        )
    )
    ops = ctx.query("straggler_ops_top", limit=limit)
    sec.add(
        Table(
            ["what", "name", "layer", "steps", "time while others waited"],
            [
                [r["what"], r["name"], r["layer"], r["steps"], r["overlap_ns"]]
                for r in ops.iter_rows(named=True)
            ],
            caption="What the stragglers ran meanwhile (ops by their own time)",
            numeric=[False, False, False, True, True],
            units=[None, None, None, None, "ns"],
        )
    )
    return True


def _steps(steps: list[int], shown: int = 6) -> str:
    """How many steps, and which: ``2 (2, 3)``; past ``shown`` the first ones and ``…``."""
    which = ", ".join(str(s) for s in steps[:shown]) + (", …" if len(steps) > shown else "")
    return f"{len(steps):,} ({which})"


def _critical_path(ctx: Context, sec: Section) -> bool:
    """The critical path's parts and the bound on faster transfers; False when none."""
    split = ctx.query("critical_path_split")
    if split.height == 0:
        return False
    sec.add(
        Table(
            ["part", "steps", "segments", "time on the path", "share of the path"],
            [
                [
                    r["part"],
                    r["steps"],
                    r["segments"],
                    r["dur_ns"],
                    fmt.share(r["share"]),
                ]
                for r in split.iter_rows(named=True)
            ],
            caption="The critical path of each step, across ranks: what set its length",
            numeric=[False, True, True, True, True],
            units=[None, None, None, "ns", None],
        )
    )
    transfers = split.filter(pl.col("part").str.starts_with("transfer"))
    if transfers.height:
        top = transfers.row(0, named=True)
        steps = ctx.query("critical_path_steps")
        sec.add(
            Note(
                f"Faster {top['part'].removeprefix('transfer ')} transfers could shorten "
                f"the {steps.height:,} steps by at most {fmt.duration(top['dur_ns'])} in all "
                f"({fmt.share(top['share'])} of their critical paths); waiting is never on "
                "the path: it follows whom each collective waited for.",
                "text",
            )
        )
    return True
