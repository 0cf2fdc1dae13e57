"""Section "On the wire": what crosses which link (the ``wire`` table of tokenwire link and
its views, docs/wire.md): host x host bytes, intra- vs inter-host bytes per dimension, what
each host sends over a step, and the busiest links."""

from __future__ import annotations

import altair as alt
import polars as pl

from ..report import fmt
from ..report.context import Context
from ..report.page import Chart, Facts, Note, Section, Table

#: Above this many hosts the demand chart draws the TOP_HOSTS busiest and the others' mean
#: (a line and a legend entry per host of thousands take a browser seconds to draw).
MAX_HOST_LINES = 64
TOP_HOSTS = 16
#: Above this many hosts the host x host heatmap keeps the HEAT_HOSTS that move the most bytes
#: and folds the others into one row and column.
MAX_HEAT_HOSTS = 64
HEAT_HOSTS = 32
OTHER_HOSTS = "other hosts"


def section(ctx: Context) -> Section:
    """On the wire."""
    sec = Section("wire", "On the wire")
    summary = ctx.row("wire_summary")
    if not summary or not summary["flows"]:
        return sec.add(
            Note(
                "No wire table: run tokenwire link on the dataset (it needs collectives with "
                "sizes; NCCL logs add the rings, trees and transports).",
                "missing",
            )
        )
    sec.add(
        Facts(
            [
                ("flows (instance x directed rank pair)", fmt.count(summary["flows"])),
                ("steps", fmt.count(summary["steps"])),
                ("bytes", fmt.nbytes(summary["bytes"])),
                ("across hosts", fmt.nbytes(summary["inter_host_bytes"])),
                ("algorithms", summary["algorithms"]),
            ]
        )
    )
    if summary["estimated_flows"]:
        sec.add(
            Note(
                f"{fmt.count(summary['estimated_flows'])} of {fmt.count(summary['flows'])} "
                "flows are estimated: no NCCL TUNING line named their algorithm (a ring is "
                "assumed), the logs gave no ring or tree through their ranks (rank order "
                "is used), or the trace recorded no size (the model's is used). docs/wire.md "
                "says what is modelled.",
                "warn",
            )
        )
    sec.add(_host_heatmap(ctx))
    _split(ctx, sec)
    _demand(ctx, sec)
    _busiest(ctx, sec)
    return sec


def _fold_hosts(matrix: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` hosts by bytes sent plus received (lowest name of equals); every other
    host becomes OTHER_HOSTS and the bytes of the cells folded together are summed."""
    moved = pl.concat(
        [
            matrix.select(pl.col("src_host").alias("host"), "bytes_per_step"),
            matrix.select(pl.col("dst_host").alias("host"), "bytes_per_step"),
        ]
    )
    busiest = (
        moved.group_by("host")
        .agg(_fixed_sum("bytes_per_step"))
        .sort(["bytes_per_step", "host"], descending=[True, False])
        .head(top)["host"]
        .implode()
    )

    def fold(col: str) -> pl.Expr:
        return pl.when(pl.col(col).is_in(busiest)).then(pl.col(col)).otherwise(pl.lit(OTHER_HOSTS))

    return (
        matrix.with_columns(fold("src_host"), fold("dst_host"))
        .group_by("src_host", "dst_host")
        .agg(_fixed_sum("bytes_per_step"))
        .sort("src_host", "dst_host")
    )


def _fixed_sum(col: str) -> pl.Expr:
    """The sum of a float column per group, added in one order (smallest first): Polars
    sums a large group in parallel pieces in whichever order they finish, so that two
    reports of the same data could differ in the last digits, and hosts of equal bytes
    could swap places in a top list."""
    return pl.col(col).sort().sum()


def _host_heatmap(ctx: Context) -> Chart:
    hosts = ctx.query("wire_host_matrix")
    caption = (
        "The diagonal stays inside a host (NVLink, PCIe, shared memory); the rest crosses the "
        "network."
    )
    n = pl.concat([hosts["src_host"], hosts["dst_host"]]).n_unique()
    step = 40
    if n > MAX_HEAT_HOSTS:
        step = 24  # 33 columns within the page's width
        hosts = _fold_hosts(hosts, HEAT_HOSTS)
        caption += (
            f" The {HEAT_HOSTS} of {n:,} hosts that send and receive the most; the other "
            f'{n - HEAT_HOSTS:,} are one row and column, "{OTHER_HOSTS}", their bytes summed.'
        )
    # (in the unit of the busiest links' table)
    unit, labels = fmt.axis_unit(hosts["bytes_per_step"].to_list(), "bytes")
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(hosts)))
        .mark_rect()
        .encode(
            x=alt.X("dst_host:N", title="to host"),
            y=alt.Y("src_host:N", title="from host"),
            color=alt.Color(
                "bytes_per_step:Q",
                legend=alt.Legend(title=f"{unit} per step", labelExpr=labels),
            ),
            tooltip=[
                alt.Tooltip("src_host:N", title="from"),
                alt.Tooltip("dst_host:N", title="to"),
                alt.Tooltip("bytes_per_step:Q", format=",.0f", title="bytes per step"),
            ],
        )
        .properties(
            width=alt.Step(step), height=alt.Step(step), title="Bytes per step, host x host"
        )
    )
    return Chart("wire_host_heatmap", chart, caption)


#: Above this many ranks the report leaves out the model's intra/inter split (one prediction
#: per rank; 16,384 ranks take 1.4 to 1.9 s).
MAX_PREDICTED_RANKS = 4096


def _split(ctx: Context, sec: Section) -> None:
    split = ctx.query("wire_split_dims")
    if split.height == 0:
        return
    predicted = _predicted_split(ctx)
    columns = ["dimension", "inside hosts / step", "across hosts / step", "across / token"]
    if predicted is not None:
        columns += ["predicted inside nodes", "predicted across nodes"]
    rows = []
    for r in split.iter_rows(named=True):
        row = [
            r["parallel_dim"],
            r["intra_host_bytes"],
            r["inter_host_bytes"],
            r["inter_host_bytes_per_token"],
        ]
        if predicted is not None:
            row += [predicted.get((r["parallel_dim"], link), 0.0) for link in
                    ("intra", "inter")]  # fmt: skip
        rows.append(row)
    caption = "Bytes inside and across hosts per parallel dimension (mean over steps)"
    if predicted is not None:
        caption += (
            "; predicted: the analytic model's wire bytes of every rank, each item split "
            "into what goes to ranks on the same node and to other nodes (job.yaml's "
            "gpus_per_node)"
        )
    units = [None, "bytes", "bytes", "bytes#token"] + ["bytes"] * (len(columns) - 4)
    numeric = [False] + [True] * (len(columns) - 1)
    sec.add(Table(columns, rows, caption=caption, numeric=numeric, units=units))


def _predicted_split(ctx: Context) -> dict[tuple[str, str], float] | None:
    """The model's wire bytes per step of every rank by dimension and link class (intra,
    inter node), or None without a job.yaml or above MAX_PREDICTED_RANKS.

    Each item counts as the model splits it (``intra_node_bytes``, ``inter_node_bytes``):
    a group that spans nodes still sends part of its bytes to ranks on its own node (a ring
    over two nodes of two ranks each crosses on two of its four links)."""
    if ctx.config is None or ctx.config.parallel.world_size > MAX_PREDICTED_RANKS:
        return None
    from ..model.predict import predict_ranks

    out: dict[tuple[str, str], float] = {}
    for pred in predict_ranks(ctx.config, range(ctx.config.parallel.world_size)):
        for row in pred.rows:
            for link, wire in (("intra", row.intra_node_bytes), ("inter", row.inter_node_bytes)):
                key = (row.parallel_dim, link)
                out[key] = out.get(key, 0.0) + wire
    return out


def demand_step(ctx: Context) -> pl.DataFrame:
    """What each host sends per 1 ms bucket over the step wire_demand_pick chooses
    (wire_demand_step)."""
    return ctx.query("wire_demand_step", **ctx.row("wire_demand_pick"))


def _demand(ctx: Context, sec: Section) -> None:
    demand = demand_step(ctx)
    if demand.height == 0:
        sec.add(Note("No timed transfers: the demand over a step needs a timed source.", "text"))
        return
    scope = demand["scope"][0]
    where = (
        "to other hosts (the NICs' load)"
        if scope == "inter_host"
        else "to GPUs of its own (nothing crosses hosts)"
    )
    caption = "Peaks and percentiles: view wire_demand_peaks."
    hosts = demand["host"].n_unique()
    if hosts > MAX_HOST_LINES:
        demand = _top_hosts(demand, TOP_HOSTS)
        caption = (
            f"The {TOP_HOSTS} hosts that send the most over the step, and the mean of the "
            f"other {hosts - TOP_HOSTS:,} hosts per bucket (of {hosts:,} hosts). " + caption
        )
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(demand)))
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("ms:Q", title="ms into the step (1 ms buckets)"),
            y=alt.Y("gbps:Q", title="Gbit/s sent"),
            color=alt.Color("host:N"),
            tooltip=[
                alt.Tooltip("host:N"),
                alt.Tooltip("ms:Q", format=",.0f"),
                alt.Tooltip("gbps:Q", format=",.2f"),
            ],
        )
        .properties(width=600, height=200, title=f"What each host sends {where}, first step")
    )
    sec.add(Chart("wire_host_demand", chart, caption))


def _top_hosts(demand: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` hosts by bytes sent over the step (lowest name of equals), each bucket of
    the others as one line "other hosts (mean)": their mean Gbit/s in it (every host has a
    row per bucket, 0 where it sends nothing)."""
    busiest = (
        demand.group_by("host")
        .agg(_fixed_sum("gbps"))
        .sort(["gbps", "host"], descending=[True, False])
        .head(top)["host"]
    )
    kept = demand.filter(pl.col("host").is_in(busiest.implode()))
    others = (
        demand.filter(~pl.col("host").is_in(busiest.implode()))
        .group_by("scope", "ms")
        .agg(_fixed_sum("gbps") / pl.len())
        .with_columns(pl.lit("other hosts (mean)").alias("host"))
        .select(demand.columns)
    )
    return pl.concat([kept, others.sort("ms")])


def _busiest(ctx: Context, sec: Section) -> None:
    links = ctx.query("wire_busiest")
    sec.add(
        Table(
            ["from rank", "to rank", "from host", "to host", "transport", "bytes / step"],
            [
                [
                    r["src_rank"],
                    r["dst_rank"],
                    r["src_host"] or "–",
                    r["dst_host"] or "–",
                    r["transport"] or "–",
                    r["bytes_per_step"],
                ]
                for r in links.iter_rows(named=True)
            ],
            caption="The busiest links",
            numeric=[True, True, False, False, False, True],
            units=[None] * 5 + ["bytes"],
        )
    )
