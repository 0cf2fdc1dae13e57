"""The report: one offline HTML page of where a job's bytes went, next to the analytic model.

``build_report`` reads a dataset through its DuckDB views (raw tables and the derived ones
of ``tokenwire link``), aggregates in SQL (``queries.sql``), draws Altair
charts per section (``verdict``, the first, which answers the question in a few
sentences from the tables below it; ``ledger``, ``traffic``, ``timing``, ``waits`` (three),
``topology``, ``wire``, ``glance``, ``quality``) and writes one self-contained HTML file (``page``).
Sections whose data is missing say why and what would fill them. docs/report.md describes
every section and what it needs.

The report reads the dataset and never writes it. Every figure of link's comes from link's
tables: the stored ones, or, for a job that is not linked (or, given a job.yaml, has no
predictions yet), the same tables computed by link's SQL in memory for this report
(:func:`pipeline.link.runner.link_in_memory`). The report never runs the model itself.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from altair.utils.schemapi import debug_mode

from ..dataset.location import overflow_error
from ..dataset.snapshot import read_snapshot
from ..errors import ConfigError
from ..report import (
    compute,
    glance,
    ledger,
    quality,
    timing,
    topology,
    traffic,
    verdict,
    waits,
    wire,
)
from ..report.context import Context, open_context, queries
from ..report.page import Section, atomic_write_text, render, write_images

if TYPE_CHECKING:
    from ..model.config import Job

__all__ = ["ReportResult", "build_report", "report_context"]


@dataclass
class ReportResult:
    """What ``build_report`` wrote."""

    output: Path
    job: str
    size_bytes: int
    sections: list[str]
    charts: list[str]
    images: list[Path] = field(default_factory=list)
    #: where the job.yaml contradicts the traces, when the report computed link's tables
    #: with it (one line each, as tokenwire link warns)
    warnings: list[str] = field(default_factory=list)


def build_report(
    dataset: Path | str,
    *,
    config: Path | str | Job | None = None,
    output: Path | str,
    png_dir: Path | str | None = None,
    job: str | None = None,
) -> ReportResult:
    """Write the report of one job of ``dataset`` to ``output`` (one HTML file).

    Parameters
    ----------
    dataset
        A tokenwire dataset folder.
    config
        The job's job.yaml (path or loaded :class:`Job`): adds the prediction, the model and
        the network peaks.
    output
        The HTML file to write.
    png_dir
        Also write every chart as ``<name>.png`` and ``<name>.svg`` into this folder.
    job
        The job to report on; needed only when the dataset holds several.

    Raises
    ------
    DatasetError
        Not a dataset, or no such job.
    ConfigError
        A bad job.yaml.
    """
    config_path = None
    if config is not None:
        # (the model is imported only for a report with a job.yaml)
        from ..model.config import Job, load_job

        if not isinstance(config, Job):
            config_path = Path(config)
            config = load_job(config_path)
    # (read again from the start if an ingest or link commits while the report reads)
    read = functools.partial(_read, dataset, job=job, config=config, config_path=config_path)
    ctx, sections = read_snapshot(Path(dataset), read)
    output = Path(output)
    page = render(f"tokenwire report: {ctx.job}", _subtitle(ctx), sections)
    atomic_write_text(output, page)
    charts = [c.name for s in sections for c in s.charts()]
    images = write_images(sections, Path(png_dir)) if png_dir is not None else []
    return ReportResult(
        output,
        ctx.job,
        output.stat().st_size,
        [s.id for s in sections],
        charts,
        images,
        ctx.warnings,
    )


def _read(
    dataset: Path | str, *, job: str | None, config: Job | None, config_path: Path | None
) -> tuple[Context, list[Section]]:
    ctx = report_context(dataset, job=job, config=config, config_path=config_path)
    try:
        # Altair validates every object it builds in debug mode, data rows included
        with debug_mode(False):
            return ctx, _sections(ctx)
    except duckdb.Error as exc:  # (a query outside queries.sql: the what-if's, the model's)
        overflow_error(ctx.dataset, "report", exc)
        raise
    finally:
        ctx.con.close()


def report_context(
    dataset: Path | str, *, job: str | None = None, config: Job | None = None,
    config_path: Path | None = None,
) -> Context:  # fmt: skip
    """What the report reads (:func:`pipeline.report.context.open_context`), with link's
    tables computed in memory where the dataset does not store them (:func:`_derive_unstored`).
    The caller closes ``ctx.con``."""
    ctx = open_context(dataset, job=job, config=config, config_path=config_path)
    try:
        _derive_unstored(ctx)
    except BaseException:
        ctx.con.close()
        raise
    return ctx


def _derive_unstored(ctx: Context) -> None:
    """Give ``ctx`` link's tables where the dataset does not store what the page needs: a
    job not linked, or, given a job.yaml, linked without one. They are computed in memory
    by link's SQL (:func:`pipeline.link.runner.link_in_memory`) and the dataset is left as
    it is. A job.yaml whose layout does not fit the traced ranks leaves the job without
    predictions (``ctx.unfit`` says why)."""
    state = ctx.row("link_state")
    if not state["ranks"] or state["linked"] and (state["predicted"] or ctx.config is None):
        return
    from ..link.runner import link_in_memory

    try:
        con, ctx.warnings = link_in_memory(ctx.dataset, job=ctx.job, config=ctx.config)
    except ConfigError as exc:
        ctx.unfit = f"the job.yaml does not fit the traced ranks: {exc}"
        if state["linked"]:
            return
        con, ctx.warnings = link_in_memory(ctx.dataset, job=ctx.job)
    ctx.con.close()
    ctx.con = con
    ctx.derived_here = True
    con.execute(queries()["read_once"])


def _sections(ctx: Context) -> list[Section]:
    no_timing = timing.no_timing_reason(ctx)
    traffic_data = traffic.load(ctx)
    table = traffic.compare(traffic_data, traffic.ledger_reasons(ctx))
    projected = compute.what_if(ctx)
    sections = [
        verdict.section(ctx, traffic_data, table, projected, no_timing),
        ledger.section(ctx),
        traffic.journey_section(ctx, traffic_data, table),
        traffic.bytes_section(ctx, traffic_data, table),
        traffic.layer_section(ctx, traffic_data),
        timing.time_section(ctx, no_timing),
        timing.bandwidth_section(ctx, no_timing),
        timing.skew_section(ctx, no_timing),
        waits.section(ctx, no_timing),
        waits.straggler_section(ctx, no_timing),
        waits.critical_path_section(ctx, no_timing),
        compute.section(ctx, projected),
        topology.section(ctx),
        wire.section(ctx),
        # the job's metadata, files and derived tables: below the answers, above the
        # data quality they belong with
        glance.section(ctx),
    ]
    hang_sec = quality.hang_section(ctx)
    if hang_sec is not None:
        sections.append(hang_sec)
    sections.append(quality.section(ctx))
    return sections


def _subtitle(ctx: Context) -> str:
    parts = [f"dataset {ctx.dataset}"]
    parts.append(
        f"job.yaml {ctx.config_path}"
        if ctx.config_path
        else "no job.yaml"
        if ctx.config is None
        else "job.yaml given"
    )
    if ctx.derived_here:
        parts.append(
            "not linked: link's tables computed for this report and not stored "
            "(tokenwire link stores them)"
        )
    return " · ".join(parts)
