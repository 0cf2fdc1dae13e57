"""The section on waiting versus transferring: per dimension the time in collectives split at
the last rank's arrival, each step's straggler and what it ran meanwhile, and what each
step's critical path is made of (collective_waits, step_stragglers, straggler_ops,
critical_path, all made by tokenwire link)."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report import fmt
from pipeline.report.context import Context
from pipeline.report.page import Chart, Note, Section, Table

_PARTS = ["wait", "transfer"]
_PART_COLORS = ["#e45756", "#4c78a8"]


def section(ctx: Context, no_timing: str | None, limit: int = 10) -> Section:
    """Waiting or transferring: where collective time goes, who held steps back, and the
    critical path."""
    sec = Section("waits", "Waiting or transferring")
    by_dim = ctx.query("wait_by_dim")
    if by_dim.height == 0:
        return sec.add(
            Note(
                no_timing
                or "Needs tokenwire link: collective_waits splits each rank's collective "
                "time at the last rank's arrival, on the clock link aligns.",
                "missing",
            )
        )
    _wait_chart(sec, by_dim)
    _stragglers(ctx, sec, limit)
    _critical_path(ctx, sec)
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
            tooltip=["collective:N", "part:N", alt.Tooltip("ms:Q", format=",.3f"), "calls:Q"],
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
    wait, transfer = by_dim["wait_ns"].sum(), by_dim["transfer_ns"].sum()
    sec.add(
        Note(
            f"Ranks waited {fmt.duration(wait)} and transferred {fmt.duration(transfer)} "
            f"in collectives ({fmt.share(wait / (wait + transfer) if wait + transfer else None)}"
            " of it waiting).",
            "text",
        )
    )


def _stragglers(ctx: Context, sec: Section, limit: int) -> None:
    ranks = ctx.query("straggler_ranks", limit=limit)
    if ranks.height == 0:
        return
    sec.add(
        Table(
            [
                "rank",
                "steps as straggler",
                "wait it caused",
                "share of the wait",
                "busy in",
                "dimension it delayed",
            ],
            [
                [
                    r["rank"],
                    r["steps"],
                    fmt.duration(r["caused_wait_ns"]),
                    fmt.share(r["wait_share"]),
                    r["busy_layer"],
                    r["parallel_dim"],
                ]
                for r in ranks.iter_rows(named=True)
            ],
            caption="Who held steps back: each step's straggler made the others wait longest",
            numeric=[True, True, True, True, False, False],
        )
    )
    ops = ctx.query("straggler_ops_top", limit=limit)
    sec.add(
        Table(
            ["what", "name", "layer", "steps", "time while others waited"],
            [
                [r["what"], r["name"], r["layer"], r["steps"], fmt.duration(r["overlap_ns"])]
                for r in ops.iter_rows(named=True)
            ],
            caption="What the stragglers ran meanwhile (ops by their own time)",
            numeric=[False, False, False, True, True],
        )
    )


def _critical_path(ctx: Context, sec: Section) -> None:
    split = ctx.query("critical_path_split")
    if split.height == 0:
        return
    sec.add(
        Table(
            ["part", "steps", "segments", "time on the path", "share of the path"],
            [
                [
                    r["part"],
                    r["steps"],
                    r["segments"],
                    fmt.duration(r["dur_ns"]),
                    fmt.share(r["share"]),
                ]
                for r in split.iter_rows(named=True)
            ],
            caption="The critical path of each step, across ranks: what set its length",
            numeric=[False, True, True, True, True],
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
