"""The diff as one offline HTML page in the report's style (:mod:`pipeline.report.page`: the
same sections, tables, escaping and inlined Vega JavaScript): the two jobs, step time and
its breakdown, traffic per dimension, op and phase, predicted against observed change,
per layer, and the op and kernel names whose time changed most."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import polars as pl
from altair.utils.schemapi import debug_mode

from ..diff import RunDiff, view_descriptions
from ..report import fmt
from ..report.page import Chart, Facts, Note, Section, Table, atomic_write_text, render

#: colours of job A and job B (the report's observed / predicted pair)
_COLORS = ["#4c78a8", "#f58518"]


def write_page(diff: RunDiff, output: Path) -> int:
    """Write the page of ``diff`` to ``output``; its size in bytes."""
    a, b = _label(diff, "a"), _label(diff, "b")
    with debug_mode(False):  # (fmt.Rows is not a list Altair's checks accept; see fmt.Rows)
        sections = _sections(diff, a, b)
    text = render(f"tokenwire diff: {a} → {b}", "B − A: what changed between two jobs", sections)
    atomic_write_text(Path(output), text)
    return len(text.encode("utf-8"))


def _sections(diff: RunDiff, a: str, b: str) -> list[Section]:
    return [_jobs(diff, a, b), _steps(diff, a, b), _traffic(diff, a, b),
                _predicted(diff), _layers(diff), _ops(diff, a, b)]  # fmt: skip


def _label(diff: RunDiff, side: str) -> str:
    s = diff.a if side == "a" else diff.b
    same = diff.a.dataset == diff.b.dataset
    return f"{s.job}" if same else f"{s.job} ({s.dataset.name})"


def _jobs(diff: RunDiff, a: str, b: str) -> Section:
    pairs: list[tuple[str, Any]] = []
    for name, side, key in (("A", diff.a, "a"), ("B", diff.b, "b")):
        f = diff.facts(key)
        pairs += [
            (f"job {name}", f"{side.job} in {side.dataset}"),
            (f"{name}: steps, ranks", f"{f['steps']} steps, {f['ranks']} ranks"),
            (f"{name}: tokens per step", fmt.count(f["tokens_per_step"])),
            (f"{name}: prediction", "yes (job.yaml)" if f["predicted"] else "none"),
        ]
    return Section("jobs", "The two jobs").add(
        Facts(pairs),
        Note("Counts and bytes are per step summed over all ranks; times per step and rank. "
             "Changes are B − A. docs/diff.md says how rows are matched."),
    )  # fmt: skip


def _value(metric: str, value: float | None) -> str:
    if metric == "bytes":
        return fmt.nbytes(value)
    if metric == "tokens":
        return fmt.count(value)
    return fmt.duration(value)


def _steps(diff: RunDiff, a: str, b: str) -> Section:
    frame = diff.views["diff_steps"]
    sec = Section("steps", "Step time and its breakdown")
    sec.add(
        Table(
            ["metric", "timeline", a, b, "change", "change / A"],
            [[r["metric"], r["timeline"], _value(r["metric"], r["a"]), _value(r["metric"], r["b"]),
              _value(r["metric"], r["change"]), fmt.share(r["change_share"])]
             for r in frame.iter_rows(named=True)],
            caption=view_descriptions()["diff_steps"],
            numeric=[False, False, True, True, True, True],
        )
    )  # fmt: skip
    times = _sides(frame.filter(pl.col("metric").str.ends_with("_ns")), ["metric", "timeline"])
    if times.height:
        times = times.with_columns(
            (pl.col("value") / 1e6).alias("ms"),
            (pl.col("timeline") + " · " + pl.col("metric")).alias("what"),
        )
        sec.add(Chart("diff_step_time", _bars(times, "what", "ms", "ms per step and rank", a, b),
                      "Time per step and rank of each job"))  # fmt: skip
    return sec


def _sides(frame: pl.DataFrame, keys: list[str], a: str = "a", b: str = "b") -> pl.DataFrame:
    """``frame``'s ``a`` and ``b`` columns as rows of ``side`` (A or B) and ``value``."""
    return frame.select(*keys, pl.col(a).alias("A"), pl.col(b).alias("B")).unpivot(
        ["A", "B"], index=keys, variable_name="side", value_name="value"
    )


def _bars(rows: pl.DataFrame, y: str, x: str, title: str, a: str, b: str) -> alt.Chart:
    legend = alt.Legend(labelExpr=f"datum.label == 'A' ? {_js(a)} : {_js(b)}")
    return (
        alt.Chart(alt.Data(values=fmt.rows(rows.select(y, x, "side"))))
        .mark_bar()
        .encode(
            y=alt.Y(f"{y}:N", title=None, sort=None),
            yOffset=alt.YOffset("side:N", sort=["A", "B"]),
            x=alt.X(f"{x}:Q", title=title),
            color=alt.Color("side:N", title=None,
                            scale=alt.Scale(domain=["A", "B"], range=_COLORS),
                            legend=legend),
            tooltip=[alt.Tooltip(f"{y}:N"), alt.Tooltip("side:N"),
                     alt.Tooltip(f"{x}:Q", format=",.3f", title=title)],
        )
        .properties(width=560)
    )  # fmt: skip


def _js(text: str) -> str:
    """``text`` as a Vega expression string literal ('A: name')."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _traffic(diff: RunDiff, a: str, b: str) -> Section:
    frame = diff.views["diff_traffic"]
    sec = Section("traffic", "Traffic per dimension, op and phase")
    if frame.height == 0:
        return sec.add(Note("Neither job has collectives in a step.", "missing"))
    sec.add(
        Table(
            ["dimension", "op", "phase", "found", "calls A", "calls B", "bytes A", "bytes B",
             "change", "B/token A", "B/token B", "time A", "time B", "wait A", "wait B",
             "transfer A", "transfer B", "busbw A GB/s", "busbw B GB/s"],
            [[r["parallel_dim"], r["op"], r["phase"], r["found"], fmt.count(r["calls_a"]),
              fmt.count(r["calls_b"]), r["bytes_a"], r["bytes_b"],
              _signed_bytes(r["bytes_change"]), _num(r["bytes_per_token_a"]),
              _num(r["bytes_per_token_b"]), r["time_ns_a"], r["time_ns_b"], r["wait_ns_a"],
              r["wait_ns_b"], r["transfer_ns_a"], r["transfer_ns_b"], _num(r["busbw_gbps_a"]),
              _num(r["busbw_gbps_b"])]
             for r in frame.iter_rows(named=True)],
            caption=view_descriptions()["diff_traffic"],
            numeric=[False] * 4 + [True] * 15,
            # (A beside B in one unit, the times of a call in one unit)
            units=[None] * 6 + ["bytes", "bytes"] + [None] * 3 + ["ns"] * 6 + [None] * 2,
        )
    )  # fmt: skip
    rows = _sides(
        frame.with_columns(
            (pl.col("parallel_dim").fill_null("?") + " · " + pl.col("op") + " · "
             + pl.col("phase").fill_null("?")).alias("collective")
        ),
        ["collective"], "bytes_a", "bytes_b",
    ).rename({"value": "bytes"})  # fmt: skip
    sec.add(Chart("diff_traffic_bytes", _bars(rows, "collective", "bytes", "bytes per step", a, b),
                  "Bytes per step, summed over ranks, of each job"))  # fmt: skip
    return sec


def _predicted(diff: RunDiff) -> Section:
    frame = diff.views["diff_predicted"]
    sec = Section("predicted", "Predicted change next to observed change")
    if frame.height == 0:
        return sec.add(Note("Needs a prediction for both jobs: link each with --config "
                            "job.yaml.", "missing"))  # fmt: skip
    return sec.add(
        Table(
            ["dimension", "op", "predicted A", "predicted B", "predicted change",
             "observed A", "observed B", "observed change"],
            [[r["parallel_dim"], r["op"], r["predicted_bytes_a"], r["predicted_bytes_b"],
              _signed_bytes(r["predicted_change"]), r["observed_bytes_a"], r["observed_bytes_b"],
              _signed_bytes(r["observed_change"])] for r in frame.iter_rows(named=True)],
            caption=view_descriptions()["diff_predicted"],
            numeric=[False, False] + [True] * 6,
            units=[None, None, "bytes", "bytes", None, "bytes", "bytes", None],
        )
    )  # fmt: skip


def _layers(diff: RunDiff, limit: int = 60) -> Section:
    frame = diff.views["diff_layers"]
    sec = Section("layers", "Per layer")
    if frame.height == 0:
        return sec.add(Note("Neither job has collectives in a step.", "missing"))
    top = frame.sort(pl.col("bytes_change").abs(), descending=True, maintain_order=True)
    sec.add(
        Table(
            ["dimension", "op", "phase", "layer", "found", "calls A", "calls B", "bytes A",
             "bytes B", "change", "time A", "time B", "time change"],
            [[r["parallel_dim"], r["op"], r["phase"], r["layer"], r["found"],
              fmt.count(r["calls_a"]), fmt.count(r["calls_b"]), fmt.nbytes(r["bytes_a"]),
              fmt.nbytes(r["bytes_b"]), _signed_bytes(r["bytes_change"]),
              fmt.duration(r["time_ns_a"]), fmt.duration(r["time_ns_b"]),
              fmt.duration(r["time_change_ns"])] for r in top.head(limit).iter_rows(named=True)],
            caption=view_descriptions()["diff_layers"]
            + (f" The {limit} largest byte changes of {frame.height}." if frame.height > limit
               else ""),
            numeric=[False] * 5 + [True] * 8,
        )
    )  # fmt: skip
    return sec


def _ops(diff: RunDiff, a: str, b: str) -> Section:
    frame = diff.views["diff_ops"]
    sec = Section("ops", "Largest time changes per op and kernel")
    if frame.height == 0:
        return sec.add(Note("Neither job has kernels or host ops in a step.", "missing"))
    sec.add(
        Table(
            ["kind", "name", "found", "calls A", "calls B", "time A", "time B", "change"],
            [[r["kind"], r["name"], r["found"], fmt.count(r["calls_a"]), fmt.count(r["calls_b"]),
              fmt.duration(r["time_ns_a"]), fmt.duration(r["time_ns_b"]),
              fmt.duration(r["time_change_ns"])] for r in frame.iter_rows(named=True)],
            caption=view_descriptions()["diff_ops"],
            numeric=[False, False, False] + [True] * 5,
        )
    )  # fmt: skip
    rows = frame.with_columns(
        (pl.col("kind") + " · " + pl.col("name").str.slice(0, 60)).alias("what"),
        (pl.col("time_change_ns") / 1e6).alias("ms"),
    )
    chart = (
        alt.Chart(alt.Data(values=fmt.rows(rows.select("what", "ms", "name"))))
        .mark_bar()
        .encode(
            y=alt.Y("what:N", title=None, sort=None),
            x=alt.X("ms:Q", title=f"time change per step and rank, ms ({b} − {a})"),
            color=alt.condition("datum.ms > 0", alt.value(_COLORS[1]), alt.value(_COLORS[0])),
            tooltip=[alt.Tooltip("name:N"), alt.Tooltip("ms:Q", format=",.3f")],
        )
        .properties(width=560)
    )
    return sec.add(Chart("diff_op_time", chart, "Time change per op or kernel name"))


def _num(value: float | None) -> str:
    return fmt.count(round(value, 3)) if value is not None else "–"


def _signed_bytes(value: float | None) -> str:
    if value is None:
        return "–"
    return ("+" if value > 0 else "") + fmt.nbytes(value)
