"""Sections 2 to 4: one token's journey, bytes per step observed vs predicted, traffic per layer.

Observed bytes come from ``token_wire``, the one table of observed traffic: tokenwire link's,
or, on a dataset not linked, the same table computed for the report (``build_report``).
Predicted bytes come from ``token_wire``'s predicted columns, else the ``predictions`` table,
summed over the ranks that were traced (``tokenwire link --config``). Why a dimension's bytes
differ from the model's is the ledger's word (its status and reason per item), never a rule
of the report's own.
Bytes are message sizes M (docs/dataset.md) summed over ranks, per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import polars as pl

from ..report import fmt
from ..report.context import Context
from ..report.page import Chart, Note, Section, Table

_SIDES = ["observed", "predicted"]
_SIDE_COLORS = ["#4c78a8", "#f58518"]


@dataclass
class Traffic:
    """Per step bytes and calls by (parallel_dim, op, phase), observed and predicted."""

    frame: pl.DataFrame  # parallel_dim, op, phase, calls, bytes, predicted_calls, predicted_bytes
    observed_from: str  # token_wire, or '' when nothing was observed
    predicted_from: str | None  # token_wire or predictions
    steps: int
    tokens: int | None
    note: str | None = None  # why the prediction is missing, when it is


def load(ctx: Context) -> Traffic:
    """Observed and predicted traffic per step of the report's job."""
    obs = ctx.query("observed_token_wire")
    source = "token_wire" if obs.height else ""
    steps = max(obs["step"].drop_nulls().n_unique(), 1) if obs.height else 1
    tokens = obs["tokens"].max() if obs.height else None
    if tokens is None and ctx.config is not None:
        tokens = ctx.config.tokens_per_step
    keys = ["parallel_dim", "op", "phase"]
    per_step = obs.group_by(keys).agg(
        (pl.col("calls").sum() / steps).alias("calls"),
        (pl.col("bytes").sum() / steps).alias("bytes"),
        (pl.col("predicted_calls").sum() / steps).alias("predicted_calls"),
        (pl.col("predicted_bytes").sum() / steps).alias("predicted_bytes"),
        pl.col("predicted_bytes").is_not_null().any().alias("has_pred"),
    )
    predicted_from, note = None, None
    if per_step.height and per_step["has_pred"].any():
        predicted_from = "token_wire"
        frame = per_step.drop("has_pred")
    else:
        pred, predicted_from, note = _predictions(ctx)
        frame = per_step.drop("has_pred", "predicted_calls", "predicted_bytes")
        if pred is not None:
            frame = frame.join(pred, on=keys, how="full", coalesce=True)
        else:
            frame = frame.with_columns(
                pl.lit(None, pl.Float64).alias("predicted_calls"),
                pl.lit(None, pl.Float64).alias("predicted_bytes"),
            )
    frame = frame.with_columns(
        pl.col("calls", "bytes", "predicted_calls", "predicted_bytes").cast(pl.Float64)
    ).sort(keys)
    return Traffic(frame, source, predicted_from, steps, tokens, note)


def _predictions(ctx: Context) -> tuple[pl.DataFrame | None, str | None, str | None]:
    stored = ctx.query("predictions_stored")
    if stored.height:
        return (
            stored.with_columns(pl.col("predicted_calls", "predicted_bytes").cast(pl.Float64)),
            "predictions",
            None,
        )
    if ctx.config is None:
        return None, None, "no job.yaml given"
    if ctx.unfit is not None:
        return None, None, ctx.unfit
    if ctx.query("observed_ranks").height == 0:
        return None, None, "no traced collectives to compare with"
    return None, None, "the job is not linked with its job.yaml (tokenwire link --config)"


# --------------------------------------------------------------------------- comparison


def compare(traffic: Traffic, reasons: pl.DataFrame | None = None) -> pl.DataFrame:
    """Observed vs predicted per (parallel_dim, op), with the ratio and ``reasons``: the
    ledger's word on each (:func:`ledger_reasons`), empty where the ledger has none."""
    keys = ["parallel_dim", "op"]
    out = (
        traffic.frame.group_by(keys)
        .agg(
            pl.col("calls").sum(),
            pl.col("bytes").sum(),
            pl.col("predicted_calls").sum(),
            pl.col("predicted_bytes").sum(),
            pl.col("calls").is_not_null().any().alias("has_obs"),
            pl.col("predicted_calls").is_not_null().any().alias("has_pred"),
        )
        .with_columns(
            pl.when(pl.col("has_obs")).then(pl.col("calls")).alias("calls"),
            pl.when(pl.col("has_obs")).then(pl.col("bytes")).alias("bytes"),
            pl.when(pl.col("has_pred")).then(pl.col("predicted_calls")).alias("predicted_calls"),
            pl.when(pl.col("has_pred")).then(pl.col("predicted_bytes")).alias("predicted_bytes"),
        )
        .with_columns(
            pl.when(pl.col("predicted_bytes") > 0)
            .then(pl.col("bytes") / pl.col("predicted_bytes"))
            .alias("ratio")
        )
        .drop("has_obs", "has_pred")
    )
    if reasons is None or reasons.height == 0:
        reasons = pl.DataFrame(
            schema={"parallel_dim": pl.String, "op": pl.String, "reasons": pl.List(pl.String)}
        )
    return (
        out.join(reasons, on=keys, how="left")
        .with_columns(pl.col("reasons").fill_null([]))
        .with_columns(pl.col("reasons").list.join("; ").alias("reason"))
        .sort(keys)
    )


def ledger_reasons(ctx: Context) -> pl.DataFrame:
    """Per (parallel_dim, op) of the ledger (tokenwire link --config): ``reasons``, each item
    status that is not ``matched`` with its reason (``status: reason``), sorted; just
    ``matched`` where every item is."""
    rows = ctx.query("ledger_reasons")
    label = (
        pl.when(pl.col("reason").is_null())
        .then(pl.col("status"))
        .otherwise(pl.format("{}: {}", "status", "reason"))
    )
    return (
        rows.with_columns(label.alias("label"))
        .group_by("parallel_dim", "op")
        .agg(
            pl.col("label").filter(pl.col("status") != "matched").unique().sort(),
            (pl.col("status") == "matched").all().alias("all_matched"),
        )
        .select(
            "parallel_dim",
            "op",
            pl.when(pl.col("all_matched"))
            .then(pl.lit(["matched"], pl.List(pl.String)))
            .otherwise(pl.col("label"))
            .alias("reasons"),
        )
    )


# --------------------------------------------------------------------------- sections


def journey_section(ctx: Context, traffic: Traffic, table: pl.DataFrame) -> Section:
    """One token's journey: token, embedding vector, bytes per token per dimension."""
    sec = Section("journey", "One token's journey")
    if not traffic.observed_from:
        return sec.add(
            Note(
                "No collectives in this job: nothing went on the wire that the traces show.",
                "missing",
            )
        )
    tokens = traffic.tokens
    if not tokens:
        return sec.add(
            Note(
                "Tokens per step are unknown: no job.yaml was given and tokenwire link has not "
                "counted the embeddings' tokens. Give --config job.yaml (batch and seq_len) or run "
                "tokenwire link first.",
                "missing",
            )
        )
    note, rows = _embedding(ctx, tokens)
    sec.add(note)
    rows += _wire_rows(traffic, table)
    sec.add(_wire_note(traffic, table))
    return sec.add(
        Chart(
            "token_journey",
            _journey_chart(rows),
            "Embedding vector = hidden x activation element size; messages = "
            "collective message bytes per step over all traced ranks / tokens per "
            "step (the bytes links carry are in On the wire).",
        )
    )


def _embedding(ctx: Context, tokens: int) -> tuple[Note, list[dict]]:
    """The note on a token's embedding vector, and its chart row when the job.yaml sizes it."""
    job = ctx.config
    if job is None:
        return Note(
            f"The job trains {tokens:,} tokens per step (from the traces' embedding "
            "inputs). Give --config job.yaml to see the embedding vector size and "
            "the prediction.",
            "text",
        ), []
    from ..model.config import DTYPE_BYTES

    e_a = DTYPE_BYTES[job.dtypes.activations]
    emb = job.model.hidden * e_a
    note = Note(
        f"1 token becomes an embedding vector of hidden {job.model.hidden} x "
        f"{e_a} B ({job.dtypes.activations}) = {fmt.nbytes(emb)}. The job trains "
        f"{tokens:,} tokens per step.",
        "text",
    )
    return note, [{"stage": "embedding vector", "side": "model", "bytes_per_token": emb}]


def _wire_rows(traffic: Traffic, table: pl.DataFrame) -> list[dict]:
    """Collective message bytes per token per dimension, observed and (when known)
    predicted."""
    per = per_token(traffic, table)
    assert per is not None  # (journey_section has checked the tokens and the traffic)
    sides = [("observed", "bytes_per_token")]
    if traffic.predicted_from:
        sides.append(("predicted", "predicted_per_token"))
    return [
        {"stage": f"messages: {r['parallel_dim']}", "side": side, "bytes_per_token": r[col]}
        for r in per[0].iter_rows(named=True)
        for side, col in sides
        if r[col] is not None
    ]


def per_token(
    traffic: Traffic, table: pl.DataFrame
) -> tuple[pl.DataFrame, float, float | None] | None:
    """Collective message bytes per token: per dimension (``parallel_dim``,
    ``bytes_per_token``, ``predicted_per_token``), in all observed, in all predicted (None
    without a prediction); None when the tokens per step or the traffic are unknown."""
    tokens = traffic.tokens
    if not tokens or not traffic.observed_from:
        return None
    dims = (
        table.group_by("parallel_dim")
        .agg(pl.col("bytes").sum(), pl.col("predicted_bytes").sum())
        .sort("parallel_dim")
        .select(
            "parallel_dim",
            (pl.col("bytes") / tokens).alias("bytes_per_token"),
            (pl.col("predicted_bytes") / tokens).alias("predicted_per_token"),
        )
    )
    predicted = dims["predicted_per_token"].sum() if traffic.predicted_from else None
    if not traffic.predicted_from:
        dims = dims.with_columns(pl.lit(None, pl.Float64).alias("predicted_per_token"))
    return dims, dims["bytes_per_token"].sum(), predicted


def _wire_note(traffic: Traffic, table: pl.DataFrame) -> Note:
    per = per_token(traffic, table)
    assert per is not None  # (journey_section has checked the tokens and the traffic)
    _, observed, predicted = per
    return Note(
        f"In collective messages, all parallel dimensions together: {fmt.nbytes(observed)} "
        "per token observed (message sizes summed over all traced ranks)"
        + (f", {fmt.nbytes(predicted)} predicted." if predicted is not None else "."),
        "text",
    )


def _journey_chart(rows: list[dict]) -> alt.Chart:
    unit, labels = fmt.axis_unit([r["bytes_per_token"] for r in rows], "bytes")
    return (
        alt.Chart(alt.Data(values=rows))
        .mark_bar()
        .encode(
            y=alt.Y("stage:N", title=None, sort=None),
            yOffset=alt.YOffset("side:N"),
            x=alt.X(
                "bytes_per_token:Q", axis=alt.Axis(title=f"{unit} per token", labelExpr=labels)
            ),
            color=alt.Color(
                "side:N",
                title=None,
                scale=alt.Scale(domain=["model", *_SIDES], range=["#54a24b", *_SIDE_COLORS]),
            ),
            tooltip=[
                alt.Tooltip("stage:N"),
                alt.Tooltip("side:N"),
                alt.Tooltip("bytes_per_token:Q", format=",.1f", title="bytes per token"),
            ],
        )
        .properties(width=560, height=alt.Step(16), title="Bytes per token")
    )


def bytes_section(ctx: Context, traffic: Traffic, table: pl.DataFrame) -> Section:
    """Bytes per step by parallel dimension and collective, observed vs predicted."""
    sec = Section("bytes", "Bytes per step: observed vs predicted")
    if not traffic.observed_from:
        return sec.add(Note("No collectives in this job.", "missing"))
    sec.add(_observed_note(traffic), _predicted_note(traffic))
    estimated = _estimated_note(ctx, traffic)
    if estimated is not None:
        sec.add(estimated)
    sec.add(Chart("bytes_per_step", _bytes_chart(_bytes_rows(table), table)))
    sec.add(_bytes_table(table))
    phases = traffic.frame.filter(pl.col("calls").is_not_null())
    if phases.height and phases["phase"].n_unique() > 1:
        sec.add(Chart("bytes_by_phase", _phase_chart(phases)))
    return sec


def _observed_note(traffic: Traffic) -> Note:
    return Note(
        f"Observed from tokenwire link's token_wire table, averaged over {traffic.steps} "
        "step(s). Message bytes summed over the traced ranks.",
        "text",
    )


def _estimated_note(ctx: Context, traffic: Traffic) -> Note | None:
    """Which observed bytes are the model's sizes (calls the trace records without one),
    None where none are."""
    if not traffic.observed_from:
        return None
    est = ctx.query("estimated_sizes")
    if est.height == 0:
        return None
    parts = ", ".join(
        f"{r['parallel_dim']} {fmt.nbytes(r['bytes_per_step'])}" for r in est.iter_rows(named=True)
    )
    return Note(
        f"Estimated per step: {parts} of the observed bytes are the model's sizes for "
        f"{fmt.count(est['calls'].sum())} calls the trace records without one (an MoE "
        "library's dispatch and combine kernels, docs/link.md): their count, phase and layer "
        "were observed, their bytes were not.",
        "warn",
    )


def _predicted_note(traffic: Traffic) -> Note:
    if traffic.predicted_from is None:
        return Note(
            f"No prediction ({traffic.note}). Add one with: tokenwire report DATASET --config "
            "job.yaml -o report.html (the job.yaml format is in docs/job-yaml.md).",
            "missing",
        )
    return Note(
        f"Predicted from {traffic.predicted_from} (analytic model, docs/model.md), "
        "summed over the traced ranks.",
        "text",
    )


def _bytes_rows(table: pl.DataFrame) -> list[dict]:
    """One chart row per collective and side (observed, predicted) that has calls."""
    rows = []
    for r in table.iter_rows(named=True):
        key = f"{r['parallel_dim']} · {r['op']}"
        for side, b, c in (
            ("observed", r["bytes"], r["calls"]),
            ("predicted", r["predicted_bytes"], r["predicted_calls"]),
        ):
            if c is not None:
                rows.append(
                    {
                        "collective": key,
                        "side": side,
                        "bytes": b,
                        "calls": c,
                        "ratio": r["ratio"],
                        "reason": r["reason"],
                    }
                )
    return rows


def _bytes_chart(rows: list[dict], table: pl.DataFrame) -> alt.Chart:
    # (in the unit of the table beside it)
    unit, labels = fmt.axis_unit(
        table["bytes"].to_list() + table["predicted_bytes"].to_list(), "bytes"
    )
    return (
        alt.Chart(alt.Data(values=rows))
        .mark_bar()
        .encode(
            y=alt.Y("collective:N", title="dimension · op"),
            yOffset=alt.YOffset("side:N", sort=_SIDES),
            x=alt.X("bytes:Q", axis=alt.Axis(title=f"{unit} per step", labelExpr=labels)),
            color=alt.Color(
                "side:N", title=None, scale=alt.Scale(domain=_SIDES, range=_SIDE_COLORS)
            ),
            tooltip=[
                alt.Tooltip("collective:N"),
                alt.Tooltip("side:N"),
                alt.Tooltip("bytes:Q", format=",.0f", title="bytes per step"),
                alt.Tooltip("calls:Q", format=",.1f", title="calls per step"),
                alt.Tooltip("ratio:Q", format=".3f", title="observed / predicted"),
                alt.Tooltip("reason:N", title="ledger"),
            ],
        )
        .properties(width=560, height=alt.Step(14), title="Bytes per step")
    )


def _bytes_table(table: pl.DataFrame) -> Table:
    return Table(
        [
            "dimension",
            "op",
            "calls/step",
            "bytes/step",
            "predicted calls",
            "predicted bytes",
            "ratio",
            "ledger",
        ],
        [
            [
                r["parallel_dim"],
                r["op"],
                r["calls"],
                r["bytes"],
                r["predicted_calls"],
                r["predicted_bytes"],
                fmt.ratio(r["ratio"]),
                r["reason"],
            ]
            for r in table.iter_rows(named=True)
        ],
        caption="Per step; ledger: the status and reason of each item of the dimension and op "
        "that differs from the model (tokenwire link --config's ledger table, listed item by "
        "item above), or matched",
        numeric=[False, False, True, True, True, True, True, False],
        units=[None, None, None, "bytes", None, "bytes", None, None],
    )


def _phase_chart(phases: pl.DataFrame) -> alt.Chart:
    per_dim = phases.group_by("parallel_dim").agg(pl.col("bytes").sum())["bytes"].to_list()
    unit, labels = fmt.axis_unit(per_dim, "bytes")
    return (
        alt.Chart(
            alt.Data(
                values=fmt.rows(phases.select("parallel_dim", "op", "phase", "bytes", "calls"))
            )
        )
        .mark_bar()
        .encode(
            y=alt.Y("parallel_dim:N", title="dimension"),
            x=alt.X(
                "sum(bytes):Q",
                axis=alt.Axis(title=f"observed {unit} per step", labelExpr=labels),
            ),
            color=alt.Color("phase:N"),
            tooltip=[
                alt.Tooltip("parallel_dim:N"),
                alt.Tooltip("op:N"),
                alt.Tooltip("phase:N"),
                alt.Tooltip("sum(bytes):Q", format=",.0f", title="bytes per step"),
            ],
        )
        .properties(width=560, height=alt.Step(22), title="Observed bytes per step by phase")
    )


def _layer_rows(data: pl.DataFrame) -> pl.DataFrame:
    """``data`` with ``bar``, the name a layer's bar shows: its label, and its model layer
    number where one label stands for several (a pipeline stage's layers are numbered from
    0 in their module paths)."""
    several = (pl.col("layer_index").n_unique().over("layer_label") > 1) & pl.col(
        "layer_index"
    ).is_not_null()
    return data.with_columns(
        pl.when(several)
        .then(pl.format("{} (layer {})", "layer_label", "layer_index"))
        .otherwise("layer_label")
        .alias("bar")
    )


def _top_layers(data: pl.DataFrame, totals: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` layers' rows by bytes, the others as one ``(n other layers)`` bar."""
    keep = totals.sort("t", "bar", descending=[True, False]).head(top)["bar"]
    rest = data.filter(~pl.col("bar").is_in(keep.to_list()))
    shown = data.filter(pl.col("bar").is_in(keep.to_list()))
    if rest.height:
        n = rest["bar"].n_unique()
        other = f"({n} other layers)"
        shown = pl.concat(
            [
                shown,
                rest.group_by("phase")
                .agg(
                    pl.lit(other).alias("layer"),
                    pl.lit(None, pl.Int64).alias("layer_index"),
                    pl.lit(other).alias("layer_label"),
                    pl.lit("other").alias("layer_kind"),
                    pl.col("calls_per_step").sum(),
                    pl.col("bytes_per_step").sum(),
                    pl.lit(other).alias("bar"),
                )
                .select(shown.columns),
            ],
            how="vertical_relaxed",
        )
    return shown


def layer_section(ctx: Context, traffic: Traffic, top: int = 30) -> Section:
    """Traffic per layer, from collective_links."""
    sec = Section("layers", "Traffic per layer")
    if not traffic.observed_from:
        return sec.add(Note("No collectives in this job.", "missing"))
    data = ctx.query("layer_traffic")
    if data.height == 0:
        return sec.add(
            Note(
                "Needs tokenwire link: the collective_links table ties every collective to the "
                "layer (module path or NVTX range) that issued it.",
                "missing",
            )
        )
    data = _layer_rows(data)
    totals = data.group_by("bar").agg(pl.col("bytes_per_step").sum().alias("t"))
    shown = _top_layers(data, totals, top)
    order = (
        shown.group_by("bar")
        .agg(pl.col("layer_index").min())
        .sort("layer_index", "bar", nulls_last=True)["bar"]
        .to_list()
    )
    # (the axis in the unit of the largest bar, as a table column of them would be)
    unit, labels = fmt.axis_unit(totals["t"].to_list(), "bytes")
    axis = alt.Axis(title=f"{unit} per step (all traced ranks)", labelExpr=labels)
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(shown)))
        .mark_bar()
        .encode(
            y=alt.Y("bar:N", sort=order, title=None, axis=alt.Axis(labelLimit=360)),
            x=alt.X("sum(bytes_per_step):Q", axis=axis),
            color=alt.Color("phase:N"),
            tooltip=[
                alt.Tooltip("layer:N", title="layer (full path)"),
                alt.Tooltip("layer_index:Q", title="layer number"),
                alt.Tooltip("layer_kind:N"),
                alt.Tooltip("phase:N"),
                alt.Tooltip("sum(bytes_per_step):Q", format=",.0f", title="bytes per step"),
                alt.Tooltip("sum(calls_per_step):Q", format=",.1f", title="calls per step"),
            ],
        )
        .properties(width=560, height=alt.Step(16), title="Bytes per step by layer and phase")
    )
    unattributed = data.filter(pl.col("layer") == "(unattributed)")["calls_per_step"].sum()
    sec.add(
        Chart(
            "traffic_per_layer",
            chart,
            f"Top {min(top, totals.height)} of {totals.height} layers by bytes, in layer "
            "order, each by the shortest end of its module path that tells it apart (the "
            "whole path in the tooltip); gradient buckets are split over the layers whose "
            "gradients they carry; '(unattributed)' holds collectives no evidence tied to "
            "a layer.",
        )
    )
    if unattributed:
        sec.add(
            Note(
                f"{fmt.count(unattributed)} collectives per step could not be tied to a layer "
                "(shown as '(unattributed)').",
                "text",
            )
        )
    return sec
