"""The report's first section, the verdict: a few sentences that answer the report's question,
then the charts that prove them.

Each sentence takes its figures from one query or table and only formats them: where
job.yaml's layout contradicts the traces (``verdict_conflicts``: communicator_dims), the
traffic against the model (``verdict_ledger``: the ledger), the share of the step that is
exposed communication and what the ranks wait for (``verdict_time``: time_breakdown,
collective_waits), the bytes per token (the traffic table the journey and bytes sections
show) and the fastest layout of the what-if (the compute section's table).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from ..report import fmt, traffic
from ..report.compute import WhatIf
from ..report.context import Context
from ..report.page import Chart, Note, Section

#: Contradictions of job.yaml stated in full; the others are counted.
MAX_CONFLICTS = 3
#: Ranks named in a sentence as at most this many runs of consecutive ranks; more are counted.
MAX_RUNS = 6
#: Above this many ranks the per-rank chart draws the ranks that wait longest.
MAX_RANKS = 32
_SIDES = ["observed", "predicted"]
_SIDE_COLORS = ["#4c78a8", "#f58518"]


def section(
    ctx: Context, traffic_data: traffic.Traffic, table: pl.DataFrame, projected: WhatIf,
    no_timing: str | None,
) -> Section:  # fmt: skip
    """The verdict: contradictions first, then the sentences, then their charts."""
    sec = Section("verdict", "The verdict")
    sec.add(*_contradictions(ctx))
    sentences = [
        _model_sentence(ctx, table),
        _time_sentence(ctx, no_timing),
        _token_sentence(traffic_data, table),
        _what_if_sentence(ctx, projected),
    ]
    sec.add(*[Note(s, "lead") for s in sentences if s])
    sec.add(*_charts(ctx, traffic_data, table, projected))
    return sec


# --------------------------------------------------------------------------- sentences


def _contradictions(ctx: Context) -> list[Note]:
    """Where job.yaml's layout contradicts the traces, or does not fit them at all."""
    if ctx.unfit is not None:
        return [Note(f"No prediction: {ctx.unfit}.", "warn")]
    found = ctx.query("verdict_conflicts")
    if found.height == 0:
        return []
    said = [
        f"{r['statement']} ({r['groups']:,} group{'s' if r['groups'] > 1 else ''}, e.g. ranks "
        f"{', '.join(str(x) for x in r['first_ranks'])})"
        for r in found.head(MAX_CONFLICTS).iter_rows(named=True)
    ]
    more = found.height - len(said)
    text = (
        "job.yaml's layout contradicts the traces: " + "; ".join(said)
        + (f"; and {more} more (tokenwire link prints each)" if more > 0 else "")
        + ". The predictions below are for a layout this run did not have."
    )  # fmt: skip
    return [Note(text, "warn")]


def _model_sentence(ctx: Context, table: pl.DataFrame) -> str:
    """Observed against predicted over the ledger, and its largest difference; without a
    ledger, the bytes observed (the traffic table) and what would add the prediction."""
    led = ctx.row("verdict_ledger") if ctx.config is not None else {}
    if not led:
        observed = table["bytes"].sum() if table.height else None
        seen = (
            f"Collective messages of {fmt.nbytes(observed)} per step observed; " if observed else ""
        )
        how = (
            "give the job's job.yaml (tokenwire report DATASET --config job.yaml, docs/job-yaml.md)"
            if ctx.config is None
            else "link the job with its job.yaml (tokenwire link --config job.yaml)"
        )
        text = f"{seen}no prediction to hold them against: {how}."
        return text[0].upper() + text[1:]
    layout = _layout(ctx)
    verdict = "differs from" if led["differing_items"] else "is"
    head = (
        f"The traffic {verdict} what the model predicts for {layout}: collective messages "
        f"of {fmt.nbytes(led['bytes'])} observed, {fmt.nbytes(led['predicted_bytes'])} "
        f"predicted per step ({fmt.ratio(_ratio(led['bytes'], led['predicted_bytes']))})"
    )
    if not led["differing_items"]:
        return head + "; every item of the model was seen with its size and count."
    observed = _calls(led["calls"], led["message_bytes"])
    predicted = _calls(led["predicted_calls"], led["predicted_message_bytes"])
    what = " ".join(x for x in (led["parallel_dim"], led["phase"], led["op"]) if x)
    purpose = f" ({led['purpose']})" if led["purpose"] else ""
    return (
        f"{head}. {led['differing_items']:,} ledger items differ; the largest, {what}"
        f"{purpose}, is {led['status']}: {observed} observed, {predicted} predicted "
        f"({_signed(led['bytes_difference'])} per step). Reason: "
        f"{led['reason'] or 'none known (the ledger below lists every item)'}."
    )


def _time_sentence(ctx: Context, no_timing: str | None) -> str:
    """The share of the step that is exposed communication, and what the ranks wait for."""
    t = ctx.row("verdict_time")
    if not t or t.get("exposed_share") is None:
        return no_timing or ""
    text = (
        f"Exposed communication is {fmt.share(t['exposed_share'])} of the step "
        f"(over {t['ranks']:,} ranks)"
    )
    if t["parallel_dim"] is None:
        if t["wait_share"] is None:  # (collective_waits is empty)
            return text + "; what the ranks wait for needs tokenwire link (collective_waits)."
        return text + "."
    who = _ranks(t["late_ranks"])
    whom = f"{t['waited_for']} ({who})" if t["waited_for"] else who
    return (
        f"{text}. {_ranks(t['waiting_ranks']).capitalize()} "
        f"{'spends' if len(t['waiting_ranks']) == 1 else 'spend'} "
        f"{fmt.share(t['waiting_step_share'])} of every step waiting in {t['phase']} "
        f"{t['parallel_dim']} {_op_plural(t['op'])} for {whom}; "
        f"{fmt.share(t['wait_share'])} of all time in collectives is waiting for the last "
        "rank to arrive."
    )


def _token_sentence(data: traffic.Traffic, table: pl.DataFrame) -> str:
    """Collective message bytes per token, per dimension (the journey section's figures):
    each traced rank's calls, as the ledger counts them, not the bytes links carry (the
    ``wire`` table, where a send and its receive are one transfer)."""
    per_token = traffic.per_token(data, table)
    if per_token is None:
        return ""
    dims, observed, predicted = per_token
    split = ", ".join(
        f"{r['parallel_dim']} {fmt.nbytes(r['bytes_per_token'])}"
        for r in dims.sort("bytes_per_token", descending=True).iter_rows(named=True)
    )
    pred = f" ({fmt.nbytes(predicted)} predicted)" if predicted is not None else ""
    return (
        f"Each token accounts for {fmt.nbytes(observed)} of collective messages over all ranks"
        f"{pred}: {split}."
    )


def _what_if_sentence(ctx: Context, projected: WhatIf) -> str:
    """The layout the what-if projects as fastest, against the observed one."""
    if not projected.rows:
        return ""
    best = projected.rows[0]
    seen = next((p for p in projected.rows if p.observed), None)
    if best.observed or seen is None:
        return (
            f"The what-if projects no layout of these {best.world_size:,} ranks faster than "
            f"the observed {_short(best.layout)} ({fmt.duration(best.step_s * 1e9)} a step)."
        )
    return (
        f"The what-if projects {_short(best.layout)} as the fastest layout of these "
        f"{best.world_size:,} ranks: {fmt.duration(best.step_s * 1e9)} a step against the "
        f"measured {fmt.duration(seen.step_s * 1e9)} of {_short(seen.layout)}."
    )


def _short(layout: str) -> str:
    """A what-if layout without its dimensions of one rank: ``tp=1 pp=1 dp=8 cp=1 ep=1
    mb=2`` -> ``tp=1 pp=1 dp=8 mb=2``."""
    return " ".join(p for p in layout.split() if p not in ("cp=1", "ep=1"))


def _layout(ctx: Context) -> str:
    from ..link.layout_check import layout_text

    assert ctx.config is not None
    return f"job.yaml's {layout_text(ctx.config)}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _calls(calls: float | None, message: int | None) -> str:
    if not calls or message is None:
        return "none"
    return f"{fmt.count(calls)} × {fmt.nbytes(message)}"


def _signed(value: float | None) -> str:
    return ("+" if value and value > 0 else "") + fmt.nbytes(value)


def _op_plural(op: str) -> str:
    """``recv`` -> ``receives``, ``all_reduce`` -> ``all-reduces``."""
    return {"recv": "receives", "send": "sends"}.get(op, op.replace("_", "-") + "s")


def _ranks(ranks: list[int] | None) -> str:
    """``ranks 0–3, 6``: runs of consecutive ranks joined."""
    if not ranks:
        return "no rank"
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    if len(runs) > MAX_RUNS:
        return f"{len(ranks):,} ranks"
    parts = [f"{g[0]}–{g[-1]}" if len(g) > 2 else ", ".join(map(str, g)) for g in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


# --------------------------------------------------------------------------- charts


def _charts(
    ctx: Context, data: traffic.Traffic, table: pl.DataFrame, projected: WhatIf
) -> list[Chart]:
    charts = [_model_chart(ctx), _rank_chart(ctx), _token_chart(data, table)]
    charts.append(_what_if_chart(projected))
    return [c for c in charts if c is not None]


def _model_chart(ctx: Context) -> Chart | None:
    dims = ctx.query("ledger_dims")
    if dims.height == 0:
        return None
    sides = (("observed", "bytes"), ("predicted", "predicted_bytes"))
    chart = _sides_chart(dims, sides, "MB", 1e6, "MB per step", "Bytes per step", 170)
    return Chart("verdict_model", chart, "Collective message bytes per step (the ledger).")


def _sides_chart(
    dims: pl.DataFrame,
    sides: tuple[tuple[str, str], ...],
    unit: str,
    size: float,
    axis: str,
    title: str,
    width: int,
) -> alt.Chart:
    """Bars of each dimension, observed beside predicted (``sides``: side, column), in
    ``unit`` (``size`` bytes)."""
    rows = [
        {"dimension": r["parallel_dim"], "side": side, unit: r[col] / size}
        for r in dims.iter_rows(named=True)
        for side, col in sides
        if r[col] is not None
    ]
    return (
        alt.Chart(alt.Data(values=rows))
        .mark_bar()
        .encode(
            y=alt.Y("dimension:N", title=None, sort=None),
            yOffset=alt.YOffset("side:N", sort=_SIDES),
            x=alt.X(f"{unit}:Q", title=axis),
            color=_side_color(),
            tooltip=[
                alt.Tooltip("dimension:N"),
                alt.Tooltip("side:N"),
                alt.Tooltip(f"{unit}:Q", format=",.2f"),
            ],
        )
        .properties(width=width, height=alt.Step(11), title=title)
    )


def _rank_chart(ctx: Context) -> Chart | None:
    parts = ctx.query("verdict_rank_waits")
    if parts.filter(pl.col("part") != "rest of the step").height == 0:
        return None  # (no collective_waits: tokenwire link has not run, or no timings)
    caption = "Each rank's step (ms, mean over steps): collective_waits and time_breakdown."
    ranks = parts["rank"].n_unique()
    if ranks > MAX_RANKS:
        waiting = parts.filter(pl.col("part").str.starts_with("waiting"))
        top = (
            waiting.group_by("rank")
            .agg(pl.col("ms").sum())
            .sort(["ms", "rank"], descending=[True, False])
        )
        parts = parts.filter(pl.col("rank").is_in(top["rank"].head(MAX_RANKS).implode()))
        caption += f" The {MAX_RANKS} of {ranks:,} ranks that wait longest."
    # the waits named, longest first (the query names the three longest)
    named = parts.filter(
        pl.col("part").str.starts_with("waiting: ") & (pl.col("part") != "waiting: other")
    )
    order = (
        named.group_by("part")
        .agg(pl.col("ms").sum())
        .sort(["ms", "part"], descending=[True, False])
    )["part"].to_list()
    domain = [*order, "waiting: other", "moving data", "rest of the step"]
    colors = ["#e45756", "#ff9d98", "#f2cf5b"][: len(order)] + ["#b279a2", "#4c78a8", "#d5dbe3"]
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(parts)))
        .mark_bar()
        .encode(
            y=alt.Y("rank:O", title="rank"),
            x=alt.X("sum(ms):Q", title="ms per step"),
            color=alt.Color(
                "part:N", title=None, sort=domain,
                scale=alt.Scale(domain=domain, range=colors),
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=200),
            ),
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("rank:O"), alt.Tooltip("part:N"),
                alt.Tooltip("sum(ms):Q", format=",.2f", title="ms"),
            ],
        )
        .transform_calculate(part_order=f"indexof({domain!r}, datum.part)")
        .properties(width=270, height=alt.Step(13), title="Where each rank's step goes")
    )  # fmt: skip
    return Chart("verdict_ranks", chart, caption)


def _token_chart(data: traffic.Traffic, table: pl.DataFrame) -> Chart | None:
    per_token = traffic.per_token(data, table)
    if per_token is None:
        return None
    dims = per_token[0].sort("bytes_per_token", descending=True)
    sides = (("observed", "bytes_per_token"), ("predicted", "predicted_per_token"))
    chart = _sides_chart(dims, sides, "kB", 1e3, "kB per token", "Bytes per token", 150)
    caption = "Collective message bytes per token, over all ranks' calls."
    return Chart("verdict_tokens", chart, caption)


def _what_if_chart(projected: WhatIf, top: int = 8) -> Chart | None:
    if not projected.rows:
        return None
    # (the observed layout is also projected, onto the same step: drawn once, as observed)
    seen = {p.layout for p in projected.rows if p.observed}
    rows = [p for p in projected.rows if p.observed or p.layout not in seen]
    shown = rows[:top] + [p for p in rows[top:] if p.observed]
    rows = [
        {"layout": _short(p.layout), "ms": p.step_s * 1e3, "kind": _kind(p.observed)} for p in shown
    ]
    chart = (
        alt.Chart(alt.Data(values=rows))
        .mark_bar()
        .encode(
            y=alt.Y("layout:N", title=None, sort=None),
            x=alt.X("ms:Q", title="ms per step"),
            color=alt.Color(
                "kind:N", title=None,
                scale=alt.Scale(domain=["observed", "projected"], range=["#4c78a8", "#54a24b"]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                alt.Tooltip("layout:N"), alt.Tooltip("kind:N"),
                alt.Tooltip("ms:Q", format=",.2f"),
            ],
        )
        .properties(width=150, height=alt.Step(13), title="What-if: step per layout")
    )  # fmt: skip
    return Chart(
        "verdict_what_if",
        chart,
        f"The {min(top, len(shown))} fastest layouts of the what-if, and the observed one.",
    )


def _kind(observed: bool) -> str:
    return "observed" if observed else "projected"


def _side_color() -> alt.Color:
    return alt.Color(
        "side:N", title=None, scale=alt.Scale(domain=_SIDES, range=_SIDE_COLORS),
        legend=alt.Legend(orient="bottom"),
    )  # fmt: skip
