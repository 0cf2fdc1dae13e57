"""Sections 5 to 7: time per rank, achieved bus bandwidth against message size, skew.

These need timings. NCCL debug logs and flight recorder dumps carry sizes but no execution
times, so a job traced only by them gets a note saying why the section is empty.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from ..report import fmt
from ..report.context import Context
from ..report.page import Chart, Note, Section, Table

_PARTS = ["compute", "overlapped comm", "exposed comm", "idle"]
_PART_COLORS = ["#54a24b", "#72b7b2", "#e45756", "#bab0ac"]
#: Above this many rank x step rows the per-step chart is left out (the page stays small).
MAX_RANK_STEP_ROWS = 20_000
#: Above this many ranks the per-rank breakdown draws bins of consecutive ranks, at most
#: RANK_BINS bars (a browser draws 16,384 stacked bars in seconds).
MAX_RANK_BARS = 512
RANK_BINS = 256
#: Above this many late ranks their chart draws the LATE_TOP latest and one bar for the rest.
MAX_LATE_BARS = 64
LATE_TOP = 40


def no_timing_reason(ctx: Context) -> str | None:
    """Why this job has no timings, or None when it has some."""
    if ctx.row("timed_rows").get("timed_files"):
        return None
    return (
        "The traces of this job carry no timings: NCCL debug logs and flight recorder "
        "dumps give sizes, not execution times. Add PyTorch profiler (Kineto) traces or "
        "Nsight Systems exports of the same run for the time sections."
    )


def time_section(ctx: Context, no_timing: str | None) -> Section:
    """Time per rank: compute, overlapped comm, exposed comm, idle."""
    sec = Section("time", "Time per rank")
    per_rank = ctx.query("time_per_rank")
    if per_rank.height == 0:
        sec.add(
            Note(
                no_timing
                or "No profiler steps with timings: the time_breakdown table splits each "
                "rank's step (ProfilerStep#N of its Kineto trace) into compute, overlapped "
                "and exposed communication and idle.",
                "missing",
            )
        )
    else:
        _time_charts(ctx, sec, per_rank)
    _top_kernels(ctx, sec)
    return sec


def _long(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame:
    names = dict(
        zip(["compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "idle_ns"], _PARTS, strict=True)
    )
    return (
        frame.select(*index, *names)
        .rename(names)
        .unpivot(index=index, variable_name="part", value_name="ns")
        .with_columns((pl.col("ns") / 1e6).alias("ms"))
        .drop("ns")
    )


def rank_bin_width(ranks: int) -> int:
    """Consecutive ranks per bar of the per-rank breakdown: 1 up to MAX_RANK_BARS ranks."""
    return 1 if ranks <= MAX_RANK_BARS else -(-ranks // RANK_BINS)


def _binned(per_rank: pl.DataFrame, width: int) -> pl.DataFrame:
    """Per bin of ``width`` consecutive ranks (labelled by its first rank): the mean of each
    part over its ranks, its last rank and the slowest rank's step (max of the parts' sum)."""
    parts = ["compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "idle_ns"]
    total = pl.sum_horizontal(parts)
    return (
        per_rank.with_columns(
            ((pl.col("rank") // width) * width).alias("bin"), total.alias("total_ns")
        )
        .group_by("bin")
        .agg(
            *[pl.col(c).mean() for c in parts],
            pl.col("rank").max().alias("last_rank"),
            (pl.col("total_ns").max() / 1e6).alias("max_ms"),
            pl.col("rank").sort_by("total_ns", descending=True).first().alias("max_rank"),
        )
        .rename({"bin": "rank"})
        .sort("rank")
    )


def _time_charts(ctx: Context, sec: Section, per_rank: pl.DataFrame) -> None:
    ranks = per_rank["rank"].to_list()
    width = rank_bin_width(per_rank.height)
    if width > 1:
        long = _long(_binned(per_rank, width), ["rank", "last_rank", "max_ms", "max_rank"])
    else:
        long = _long(per_rank, ["rank"])
    color = alt.Color(
        "part:N", title=None, sort=_PARTS, scale=alt.Scale(domain=_PARTS, range=_PART_COLORS)
    )
    pick = alt.param(
        name="rank_pick",
        value=ranks[0],
        bind=alt.binding(input="number", name="rank "),
    )
    brush = alt.selection_interval(encodings=["x"], name="rank_brush")
    order = {p: i for i, p in enumerate(_PARTS)}
    data = fmt.rows(long.with_columns(pl.col("part").replace_strict(order).alias("part_order")))
    charts = [_rank_detail(color, pick, brush, width), _rank_overview(brush)]
    steps = ctx.query("time_per_rank_step")
    if 0 < steps.height <= MAX_RANK_STEP_ROWS and steps["step"].n_unique() > 1:
        step_long = _long(steps, ["rank", "step"]).with_columns(
            pl.col("part").replace_strict(order).alias("part_order")
        )
        charts.append(_picked_rank_steps(step_long, color))
    chart = alt.vconcat(*charts, data=alt.Data(values=data))
    sec.add(
        Chart(
            "time_per_rank",
            chart,
            "Compute: kernels (or CPU ops) without communication; overlapped: "
            "communication while compute runs; exposed: communication alone; idle: "
            "neither. Brush the grey strip to zoom into ranks; the rank box picks the "
            "rank highlighted above and drawn per step below." + _bin_caption(width),
        )
    )
    _add_exposed_note(sec, per_rank)


def _bin_caption(width: int) -> str:
    if width == 1:
        return ""
    return (
        f" Each bar is a bin of {width:,} consecutive ranks (labelled by its first rank): the "
        "mean of its ranks; the tooltip gives its slowest rank and that rank's step. The "
        "rank box highlights the bin holding the rank."
    )


def _rank_detail(
    color: alt.Color, pick: alt.Parameter, brush: alt.Parameter, width: int = 1
) -> alt.Chart:
    """Each rank's step split into its parts (or each bin's mean, for bins of ``width``
    consecutive ranks), for the ranks the brush selects."""
    tooltip = [
        alt.Tooltip("rank:O"),
        alt.Tooltip("part:N"),
        alt.Tooltip("sum(ms):Q", format=",.3f", title="ms per step"),
    ]
    picked = "datum.rank == rank_pick"
    title = "rank"
    if width > 1:
        picked = "datum.rank <= rank_pick && rank_pick <= datum.last_rank"
        title = f"first rank of each bin of {width:,} ranks"
        tooltip = [
            alt.Tooltip("rank:O", title="first rank"),
            alt.Tooltip("last_rank:O", title="last rank"),
            alt.Tooltip("part:N"),
            alt.Tooltip("sum(ms):Q", format=",.3f", title="ms per step (bin mean)"),
            alt.Tooltip("max_rank:O", title="slowest rank"),
            alt.Tooltip("max_ms:Q", format=",.3f", title="its ms per step"),
        ]
    return (
        alt.Chart()
        .mark_bar()
        .encode(
            x=alt.X("rank:O", title=title, axis=alt.Axis(labelOverlap=True)),
            y=alt.Y("sum(ms):Q", title="ms per step (mean over steps)"),
            color=color,
            order=alt.Order("part_order:Q"),
            opacity=alt.OpacityValue(**alt.condition(picked, alt.value(1.0), alt.value(0.55))),
            tooltip=tooltip,
        )
        .transform_filter(brush)
        .add_params(pick)
        .properties(width=760, height=240, title="Where each rank's step goes")
    )


def _rank_overview(brush: alt.Parameter) -> alt.Chart:
    """Every rank's step, the strip the brush selects ranks on."""
    return (
        alt.Chart()
        .mark_area(color="#9aa5b1")
        .encode(
            x=alt.X(
                "rank:Q",
                title="drag to zoom into ranks",
                scale=alt.Scale(nice=False),
                axis=alt.Axis(tickMinStep=1, format="d"),
            ),
            y=alt.Y("sum(ms):Q", title=None, axis=alt.Axis(ticks=False, labels=False)),
        )
        .add_params(brush)
        .properties(width=760, height=40)
    )


def _picked_rank_steps(step_long: pl.DataFrame, color: alt.Color) -> alt.Chart:
    return (
        alt.Chart(alt.Data(values=fmt.rows(step_long)))
        .mark_bar()
        .encode(
            x=alt.X("step:O"),
            y=alt.Y("ms:Q", title="ms"),
            color=color,
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("rank:O"),
                alt.Tooltip("step:O"),
                alt.Tooltip("part:N"),
                alt.Tooltip("ms:Q", format=",.3f"),
            ],
        )
        .transform_filter("datum.rank == rank_pick")
        .properties(width=420, height=180, title="Steps of the picked rank")
    )


def _add_exposed_note(sec: Section, per_rank: pl.DataFrame) -> None:
    n = per_rank.height
    exposed = per_rank["exposed_comm_ns"].mean()
    window = per_rank["window_ns"].mean()
    if window:
        worst = per_rank.sort("exposed_comm_ns", descending=True).row(0, named=True)
        sec.add(
            Note(
                f"Over {n:,} ranks, exposed communication takes {fmt.duration(exposed)} of a "
                f"{fmt.duration(window)} step on average ({exposed / window:.1%}); the most "
                f"exposed rank is {worst['rank']} ({fmt.duration(worst['exposed_comm_ns'])}).",
                "text",
            )
        )


def _top_kernels(ctx: Context, sec: Section, limit: int = 15) -> None:
    kernels = ctx.query("top_kernels", limit=limit)
    if kernels.height == 0:
        return
    data = kernels.with_columns((pl.col("total_ns") / 1e6).alias("total_ms"))
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(data)))
        .mark_bar()
        .encode(
            y=alt.Y("name:N", sort="-x", title=None, axis=alt.Axis(labelLimit=420)),
            x=alt.X("total_ms:Q", title="GPU time over all ranks (ms)"),
            color=alt.Color("kind:N"),
            tooltip=[
                alt.Tooltip("name:N", title="kernel"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("calls:Q", format=","),
                alt.Tooltip("ranks:Q"),
                alt.Tooltip("total_ms:Q", format=",.3f", title="total ms"),
            ],
        )
        .properties(width=420, height=alt.Step(16), title=f"Top {kernels.height} kernels by time")
    )
    sec.add(Chart("top_kernels", chart))
    sec.add(
        Table(
            ["kernel", "kind", "calls", "ranks", "total time"],
            [
                [r["name"], r["kind"], r["calls"], r["ranks"], r["total_ns"]]
                for r in kernels.iter_rows(named=True)
            ],
            numeric=[False, False, True, True, True],
            units=[None, None, None, None, "ns"],
        )
    )


def bandwidth_section(ctx: Context, no_timing: str | None) -> Section:
    """Achieved bus bandwidth against message size, with the network's peaks."""
    sec = Section("bandwidth", "Achieved bus bandwidth vs message size")
    points = ctx.query("busbw_instances")
    tests = ctx.query("bandwidth_tests")
    peaks = []
    if ctx.config is not None:
        net = ctx.config.network
        peaks = [
            {"peak": "job.yaml intra-node", "busbw_gbps": net.intra_node_GBps},
            {"peak": "job.yaml inter-node", "busbw_gbps": net.inter_node_GBps},
        ]
    if points.height == 0:
        # (one definition of achieved bandwidth: instances matched across ranks, never a
        # rank's own duration, which holds its wait for the others)
        unmatched = Note(
            no_timing
            or "No observed bus bandwidth: it is measured on collectives matched across ranks "
            "with sizes and durations (tokenwire link).",
            "missing",
        )
        if tests.height == 0:
            return sec.add(unmatched)
        sec.add(unmatched)
    layers = _bandwidth_layers(points, tests, peaks)
    chart = (
        alt.layer(*layers)
        .resolve_scale(color="independent", strokeDash="independent")
        .properties(width=640, height=320, title="Bus bandwidth by message size")
    )
    caption = (
        "Points: bus bytes over transfer time of the matched instances in each power-of-two "
        "size bin (each instance timed by its shortest duration across ranks), bars p10 to "
        "p90 of the instances."
    )
    if peaks:
        caption += " Rules: per-GPU link bandwidth from job.yaml's network."
    if tests.height:
        caption += " Dashed: nccl-tests runs ingested into this dataset (out-of-place busbw)."
    sec.add(Chart("busbw_vs_size", chart, caption))
    if not peaks:
        sec.add(
            Note("Give --config job.yaml with a network section to draw the link peaks.", "text")
        )
    return sec


def _bandwidth_layers(points: pl.DataFrame, tests: pl.DataFrame, peaks: list[dict]) -> list:
    """The chart's layers: observed points with p10-p90 rules, nccl-tests runs, peaks."""
    layers = []
    # (sizes over decades: decimal prefixes, 4k, 1M, as the tables' kB and MB)
    x = alt.X(
        "size_bytes:Q",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(title="message size (bytes: k = 1,000, M = 1,000,000)", format="~s"),
    )
    y = alt.Y("busbw_gbps:Q", title="bus bandwidth (GB/s)")
    if points.height:
        base = alt.Chart(alt.Data(values=fmt.rows(points)))
        layers.append(
            base.mark_rule(opacity=0.6).encode(
                x=x, y=alt.Y("busbw_p10:Q"), y2=alt.Y2("busbw_p90:Q"), color=alt.Color("op:N")
            )
        )
        layers.append(
            base.mark_circle(size=70).encode(
                x=x,
                y=y,
                color=alt.Color("op:N", title="op (observed)"),
                tooltip=[
                    alt.Tooltip("op:N"),
                    alt.Tooltip("parallel_dim:N"),
                    alt.Tooltip("size_bytes:Q", format=",", title="size bin (bytes)"),
                    alt.Tooltip("instances:Q", format=","),
                    alt.Tooltip("busbw_gbps:Q", format=".2f", title="median GB/s"),
                    alt.Tooltip("busbw_p10:Q", format=".2f", title="p10 GB/s"),
                    alt.Tooltip("busbw_p90:Q", format=".2f", title="p90 GB/s"),
                ],
            )
        )
    if tests.height:
        tests = tests.with_columns(
            (pl.lit("nccl-tests ") + pl.col("op") + " (" + pl.col("job") + ")").alias("test")
        )
        layers.append(
            alt.Chart(alt.Data(values=fmt.rows(tests)))
            .mark_line(strokeDash=[4, 3], point=True)
            .encode(
                x=x,
                y=y,
                detail=alt.Detail("test:N"),
                strokeDash=alt.StrokeDash("test:N", title="nccl-tests"),
                tooltip=[
                    alt.Tooltip("test:N"),
                    alt.Tooltip("size_bytes:Q", format=","),
                    alt.Tooltip("busbw_gbps:Q", format=".2f"),
                    alt.Tooltip("nranks:Q"),
                ],
            )
        )
    if peaks:
        layers.append(
            alt.Chart(alt.Data(values=peaks))
            .mark_rule(color="#444")
            .encode(
                y=alt.Y("busbw_gbps:Q"),
                strokeDash=alt.StrokeDash("peak:N", title="network peak"),
                tooltip=[alt.Tooltip("peak:N"), alt.Tooltip("busbw_gbps:Q", title="GB/s")],
            )
        )
    return layers


def skew_section(ctx: Context, no_timing: str | None, limit: int = 15) -> Section:
    """Skew across ranks: which rank arrives late at which collective."""
    sec = Section("skew", "Skew across ranks")
    by_rank = ctx.query("skew_by_rank")
    if by_rank.height == 0:
        return sec.add(
            Note(
                no_timing
                or "Needs tokenwire link: the collective_instances table "
                "matches each collective across the ranks of its communicator and "
                "records who arrived last.",
                "missing",
            )
        )
    sec.add(_late_chart(by_rank))
    worst = by_rank.sort("late_skew_ns", descending=True).row(0, named=True)
    sec.add(
        Note(
            f"Rank {worst['rank']} arrived last {worst['late_count']:,} times, making the "
            f"others wait {fmt.duration(worst['late_skew_ns'])} in all.",
            "text",
        )
    )
    sec.add(_where_table(ctx), _top_table(ctx, limit))
    return sec


def _late_chart(by_rank: pl.DataFrame) -> Chart:
    if by_rank.height > MAX_LATE_BARS:
        return _late_chart_capped(by_rank)
    data = by_rank.with_columns(
        (pl.col("late_skew_ns") / 1e6).alias("late_skew_ms"),
        (pl.col("max_skew_ns") / 1e6).alias("max_skew_ms"),
    )
    chart = _late_bars(
        data,
        x=alt.X("rank:O", title="rank that arrived last", axis=alt.Axis(labelOverlap=True)),
        y_title="skew others waited for it (ms, total)",
        tooltip=[
            alt.Tooltip("rank:O"),
            alt.Tooltip("late_count:Q", format=",", title="times last"),
            alt.Tooltip("late_skew_ms:Q", format=",.3f", title="total skew ms"),
            alt.Tooltip("max_skew_ms:Q", format=",.3f", title="largest skew ms"),
        ],
    )
    return Chart("late_ranks", chart, _SKEW_CAPTION)


#: What the late-rank chart's skew is.
_SKEW_CAPTION = (
    "Skew = last start minus first start of one collective "
    "across its ranks (clock-aligned by tokenwire link)."
)


def _late_bars(
    data: pl.DataFrame, *, x: alt.X, y_title: str, tooltip: list, **encoding
) -> alt.Chart:
    """The late-rank bars: one per row of ``data``, as tall as its skew in ms."""
    return (
        alt.Chart(alt.Data(values=fmt.rows(data)))
        .mark_bar(color="#e45756")
        .encode(x=x, y=alt.Y("late_skew_ms:Q", title=y_title), tooltip=tooltip, **encoding)
        .properties(width=760, height=220, title="Who arrives late")
    )


def _late_top(by_rank: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` ranks by late skew (largest first, lowest rank of equals), then one row
    for the rest: their mean count and skew per rank (a sum of thousands of ranks would dwarf
    the bars it stands beside), how many they are and the largest of their skews."""
    ranked = by_rank.sort(["late_skew_ns", "rank"], descending=[True, False])
    head = ranked.head(top).with_columns(
        pl.col("rank").cast(pl.String).alias("who"), pl.lit(1).alias("ranks")
    )
    rest = ranked.slice(top)
    other = rest.select(
        pl.lit(None, pl.Int64).alias("rank"),
        pl.col("late_count").mean(),
        pl.col("late_skew_ns").mean(),
        pl.col("max_skew_ns").max(),
        pl.lit(f"other {rest.height:,} ranks (mean)").alias("who"),
        pl.lit(rest.height).alias("ranks"),
    )
    return pl.concat([head, other], how="vertical_relaxed").with_columns(
        (pl.col("late_skew_ns") / 1e6).alias("late_skew_ms"),
        (pl.col("max_skew_ns") / 1e6).alias("max_skew_ms"),
    )


def _late_chart_capped(by_rank: pl.DataFrame) -> Chart:
    """Who arrives late when many ranks do: the LATE_TOP latest ranks and the rest's mean."""
    chart = _late_bars(
        _late_top(by_rank, LATE_TOP),
        x=alt.X("who:N", sort=None, title="rank that arrived last"),
        y_title="skew others waited for it (ms, total per rank)",
        tooltip=[
            alt.Tooltip("who:N", title="rank"),
            alt.Tooltip("ranks:Q", format=",", title="ranks"),
            alt.Tooltip("late_count:Q", format=",.1f", title="times last (per rank)"),
            alt.Tooltip("late_skew_ms:Q", format=",.3f", title="total skew ms (per rank)"),
            alt.Tooltip("max_skew_ms:Q", format=",.3f", title="largest skew ms"),
        ],
        color=alt.ColorValue(
            **alt.condition("datum.rank == null", alt.value("#bab0ac"), alt.value("#e45756"))
        ),
    )
    return Chart(
        "late_ranks",
        chart,
        f"{_SKEW_CAPTION} {by_rank.height:,} ranks arrived last at some collective: the "
        f"{LATE_TOP} that made the others wait longest, then the other "
        f"{by_rank.height - LATE_TOP:,} as one grey bar of their mean per rank.",
    )


def _where_table(ctx: Context) -> Table:
    where = ctx.query("skew_by_where")
    return Table(
        [
            "dimension",
            "op",
            "phase",
            "instances",
            "median skew",
            "p90 skew",
            "max skew",
            "usual late rank",
        ],
        [
            [
                r["parallel_dim"],
                r["op"],
                r["phase"],
                r["instances"],
                r["median_skew_ns"],
                r["p90_skew_ns"],
                r["max_skew_ns"],
                r["usual_late_rank"],
            ]
            for r in where.head(20).iter_rows(named=True)
        ],
        caption="Where the skew is",
        numeric=[False, False, False, True, True, True, True, True],
        units=[None, None, None, None, "ns", "ns", "ns", None],
    )


def _top_table(ctx: Context, limit: int) -> Table:
    top = ctx.query("skew_top", limit=limit)
    return Table(
        [
            "comm",
            "seq",
            "op",
            "step",
            "phase",
            "layer",
            "dimension",
            "ranks",
            "skew",
            "late rank",
        ],
        [
            [
                r["comm"],
                r["seq"],
                r["op"],
                r["step"],
                r["phase"],
                r["layer"],
                r["parallel_dim"],
                r["ranks_seen"],
                r["skew_ns"],
                r["late_rank"],
            ]
            for r in top.iter_rows(named=True)
        ],
        caption=f"The {top.height} collectives with the largest skew",
        numeric=[False, True, False, True, False, False, False, True, True, True],
        units=[None] * 8 + ["ns", None],
    )
