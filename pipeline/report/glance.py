"""Section 1, the job at a glance: model, layout, ranks, steps, tokens, sources, warnings."""

from __future__ import annotations

import altair as alt
import polars as pl

from ..report import fmt
from ..report.context import Context
from ..report.page import Chart, Facts, Note, Section, Table


def section(ctx: Context) -> Section:
    """The job at a glance."""
    sec = Section("glance", "The job at a glance")
    facts = _trace_facts(ctx) + (_job_facts(ctx) if ctx.config is not None else [])
    sec.add(Facts([(k, v) for k, v in facts if v not in (None, "", "–")]))
    if ctx.config is None:
        sec.add(
            Note(
                "No job.yaml given: the report shows what the traces observed. To set the "
                "analytic prediction beside it, describe the model, layout and batch in a "
                "job.yaml (docs/job-yaml.md) and run: tokenwire report DATASET --config job.yaml "
                "-o report.html",
                "missing",
            )
        )
    sec.add(_sources_table(ctx))
    tables = ctx.query("glance_tables").filter(pl.col("rows") > 0)
    if tables.height:
        sec.add(_tables_chart(tables))
    return sec


def _trace_facts(ctx: Context) -> list[tuple[str, object]]:
    """What the traces say: ranks, hosts, versions, steps, tokens."""
    ranks = ctx.row("glance_ranks")
    steps = ctx.row("glance_steps")
    facts: list[tuple[str, object]] = [("job", ctx.job)]
    if len(ctx.jobs) > 1:
        facts.append(("other jobs in the dataset", ", ".join(j for j in ctx.jobs if j != ctx.job)))
    return facts + [
        ("ranks traced", ranks.get("ranks_seen")),
        ("world size (from the traces)", ranks.get("world_size")),
        ("hosts", ranks.get("hosts") or None),
        ("accelerators", ranks.get("gpus")),
        ("backend", ranks.get("backends")),
        ("NCCL version", ranks.get("comm_lib_versions")),
        ("steps traced", _steps(steps)),
        ("median step time", fmt.duration(steps.get("median_step_ns"))),
        ("tokens per rank per step (embedding input)", steps.get("median_rank_tokens")),
    ]


def _job_facts(ctx: Context) -> list[tuple[str, object]]:
    """What the job.yaml says: model, layout, batch, dtypes."""
    from ..model.predict import layout_summary, model_summary
    from ..vocab import DIMS

    job = ctx.config
    m, lay = model_summary(job), layout_summary(job)
    dims = ", ".join(f"{d}={lay[d]}" for d in DIMS if lay[d] > 1)
    return [
        ("job.yaml", str(ctx.config_path) if ctx.config_path else "given"),
        (
            "model",
            f"{m['name'] or 'custom'}: {m['layers']} layers, hidden {m['hidden']}, "
            f"{m['heads']} heads, vocab {m['vocab']}, sequence {m['seq_len']}, "
            f"{m['params']:,} parameters",
        ),
        ("layout", f"{dims or 'one rank'} (world {lay['world_size']}, order {lay['order']})"),
        (
            "batch",
            f"global {lay['global_batch']} x micro {lay['micro_batch']} sequences, "
            f"{lay['microbatches']} micro-batches per pipeline",
        ),
        ("tokens per step (job)", job.tokens_per_step),
        ("dtypes", ", ".join(f"{k} {v}" for k, v in lay["dtypes"].items())),
        ("recompute", lay["recompute"]),
    ]


def _sources_table(ctx: Context) -> Table:
    sources = ctx.query("sources")
    return Table(
        ["source", "files", "size", "rows", "warnings"],
        [
            [r["format"], r["files"], r["size_bytes"], r["rows"], r["warnings"]]
            for r in sources.iter_rows(named=True)
        ],
        caption="Files ingested for this job, by source format",
        numeric=[False, True, True, True, True],
        units=[None, None, "bytes", None, None],
    )


def _tables_chart(tables: pl.DataFrame) -> Chart:
    bars = (
        alt.Chart(alt.Data(values=fmt.rows(tables)))
        .mark_bar(color="#4c78a8")
        .encode(
            x=alt.X("rows:Q", title="rows"),
            y=alt.Y("table:N", title=None, sort="-x"),
            tooltip=[alt.Tooltip("table:N"), alt.Tooltip("rows:Q", format=",")],
        )
        .properties(width=520, height=alt.Step(18), title="Rows of the derived tables")
    )
    return Chart(
        "glance_tables",
        bars,
        "Tables written by tokenwire link (predictions: tokenwire link --config job.yaml).",
    )


def _steps(steps: dict) -> str | None:
    if not steps.get("steps"):
        return None
    return f"{steps['steps']} (steps {steps['first_step']} to {steps['last_step']})"
