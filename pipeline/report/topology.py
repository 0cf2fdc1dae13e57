"""Section 8, NCCL topology: transports per channel, rings and trees (from NCCL debug logs)."""

from __future__ import annotations

import altair as alt
import polars as pl

from ..report import fmt
from ..report.context import Context
from ..report.page import Chart, Note, Section, Table

#: Above this many ranks the rank x channel grid is left out (the per-channel bars stay).
MAX_GRID_RANKS = 128


def section(ctx: Context) -> Section:
    """NCCL topology."""
    sec = Section("topology", "NCCL topology")
    kinds = ctx.query("topo_kinds")
    if kinds.height == 0:
        return sec.add(
            Note(
                "No topology: it comes from NCCL debug logs (NCCL_DEBUG=INFO, "
                "NCCL_DEBUG_SUBSYS=INIT,GRAPH,COLL) ingested with the traces.",
                "missing",
            )
        )
    sec.add(
        Table(
            ["kind", "rows", "ranks", "channels"],
            [list(r) for r in kinds.iter_rows()],
            caption="What the logs describe",
            numeric=[False, True, True, True],
        )
    )
    per_channel = ctx.query("topo_transport_channel")
    if per_channel.height:
        sec.add(_per_channel_chart(per_channel))
        sec.add(_rank_channel_grid(ctx))
    rings = ctx.query("topo_rings", limit=20)
    if rings.height:
        sec.add(_rings_table(rings))
    if per_channel.height == 0 and rings.height == 0:
        sec.add(
            Note(
                "The logs hold channel counts but no per-channel connection lines "
                "(NCCL_DEBUG_SUBSYS=INIT prints them).",
                "text",
            )
        )
    return sec


def _per_channel_chart(per_channel: pl.DataFrame) -> Chart:
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(per_channel)))
        .mark_bar()
        .encode(
            x=alt.X("channel:O"),
            y=alt.Y("connections:Q", title="connections (all ranks)"),
            color=alt.Color("transport:N"),
            tooltip=[
                alt.Tooltip("channel:O"),
                alt.Tooltip("transport:N"),
                alt.Tooltip("connections:Q", format=","),
                alt.Tooltip("ranks:Q"),
            ],
        )
        .properties(width=alt.Step(18), height=200, title="Transports per channel")
    )
    return Chart(
        "transports_per_channel",
        chart,
        "P2P and SHM stay inside a node; NET/* crosses the network.",
    )


def _rank_channel_grid(ctx: Context) -> Chart | Note:
    """Each rank's transport per channel, or a note where there are too many ranks to draw."""
    ranks = ctx.row("topo_grid_ranks")["ranks"]
    if ranks > MAX_GRID_RANKS:
        return Note(
            f"{ranks} ranks: the rank x channel grid is left out; the bars above sum over ranks.",
            "text",
        )
    grid = ctx.query("topo_rank_channel")
    heat = (
        alt.Chart(alt.Data(values=fmt.rows(grid)))
        .mark_rect()
        .encode(
            x=alt.X("channel:O"),
            y=alt.Y("rank:O"),
            color=alt.Color("transport:N"),
            tooltip=[
                alt.Tooltip("rank:O"),
                alt.Tooltip("channel:O"),
                alt.Tooltip("transport:N"),
                alt.Tooltip("peers:N"),
                alt.Tooltip("connections:Q"),
            ],
        )
        .properties(
            width=alt.Step(18),
            height=alt.Step(14),
            title="Transport of each rank's connections per channel",
        )
    )
    return Chart("transport_grid", heat)


def _rings_table(rings: pl.DataFrame) -> Table:
    orders = rings["orders"][0]
    shown = f"; the {rings.height} printed by the most ranks" if orders > rings.height else ""
    return Table(
        ["kind", "channels", "order", "ranks"],
        [list(r) for r in rings.drop("orders").iter_rows()],
        caption=f"Ring and tree orders as the logs print them ({orders:,}{shown})",
        numeric=[False, False, False, True],
    )
