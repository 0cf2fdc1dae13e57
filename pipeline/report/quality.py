"""Sections 9 and 10: the flight recorder hang summary and the data quality of the job."""

from __future__ import annotations

import polars as pl

from ..report.context import Context
from ..report.page import Facts, Note, Section, Table

_MAX_FILES = 200
_MAX_WARNINGS = 50


def hang_section(ctx: Context) -> Section | None:
    """Where the ranks stopped agreeing, from flight recorder dumps; None without dumps."""
    if not ctx.row("flight_recorder_rows").get("files"):
        return None
    from ..analysis import hang  # (only for a job with dumps)

    sec = Section("hang", "Flight recorder: hang and mismatch check")
    coll = _frame(ctx, "collectives")
    comms = _frame(ctx, "communicators")
    report = hang.analyze(coll, comms)
    verdict = (
        "PROBLEM FOUND: see the groups below"
        if report.problem_found
        else "no hang or mismatch found"
    )
    sec.add(
        Note(
            f"Flight recorder dumps from {len(report.dumped_ranks)} ranks: {verdict}.",
            "warn" if report.problem_found else "text",
        )
    )
    for w in report.warnings:
        sec.add(Note(w, "text"))
    sec.add(
        Table(
            [
                "group",
                "ranks",
                "last seq all completed",
                "first disagreement",
                "first unfinished",
                "findings",
            ],
            [
                [
                    f"{g.pg_name if g.pg_name is not None else g.comm}"
                    + (f" ({g.pg_desc})" if g.pg_desc else ""),
                    len(g.ranks),
                    None
                    if g.last_completed_by_all is None
                    else f"{g.last_completed_by_all} ({g.last_completed_op})",
                    g.first_disagreement,
                    None if g.focus_seq is None else f"{g.focus_seq} ({g.focus_op})",
                    "; ".join(g.problems) or "ok",
                ]
                for g in report.groups
            ],
            numeric=[False, True, False, True, False, False],
        )
    )
    sec.add(Note("The same analysis on the dump files: tokenwire hang DUMPS...", "text"))
    return sec


def _frame(ctx: Context, table: str) -> pl.DataFrame:
    sql = f"SELECT * FROM {table} WHERE job = $job AND source = 'flight_recorder'"
    return pl.from_arrow(ctx.con.sql(sql, params={"job": ctx.job}).to_arrow_table())


def section(ctx: Context) -> Section:
    """Data quality: files, warnings, collectives that could not be used or attributed."""
    sec = Section("quality", "Data quality")
    _add_files(ctx, sec)
    _add_warnings(ctx, sec)
    _add_collectives(ctx, sec)
    _add_links(ctx, sec)
    _add_matches(ctx, sec)
    return sec


def _add_files(ctx: Context, sec: Section) -> None:
    total = ctx.row("quality_file_count").get("files", 0)
    files = ctx.query("quality_files", limit=_MAX_FILES)
    sec.add(
        Table(
            ["file", "format", "version", "size", "ranks", "rank from", "rows", "warnings"],
            [
                [
                    r["path"],
                    r["format"],
                    r["format_version"],
                    r["size_bytes"],
                    r["ranks"],
                    r["rank_source"],
                    r["rows"],
                    r["warnings"],
                ]
                for r in files.iter_rows(named=True)
            ],
            caption=f"Files ({total:,})"
            + (f", the {_MAX_FILES} largest shown" if total > _MAX_FILES else ""),
            numeric=[False, False, False, True, True, False, True, True],
            units=[None, None, None, "bytes", None, None, None, None],
        )
    )


def _add_warnings(ctx: Context, sec: Section) -> None:
    warnings = ctx.query("quality_warnings", limit=_MAX_WARNINGS)
    if warnings.height:
        sec.add(
            Table(
                ["warning", "files"],
                [list(r) for r in warnings.iter_rows()],
                caption="Warnings raised while parsing",
                numeric=[False, True],
            )
        )
    else:
        sec.add(Note("No warnings were raised while parsing.", "text"))
    marked = ctx.row("quality_marked_steps")
    if marked.get("ranks"):
        sec.add(
            Note(
                f"{marked['ranks']:,} rank(s) recorded no ProfilerStep ranges: their steps are "
                f"the ranges of the marker named at ingest ({marked['markers']}).",
                "text",
            )
        )
    whole = ctx.row("quality_whole_trace_steps").get("ranks")
    if whole:
        sec.add(
            Note(
                f"{whole:,} rank(s) recorded no ProfilerStep ranges (an inference run, or a "
                "profiler without a schedule): each of their traces is one step, 0, spanning "
                "the whole trace.",
                "warn",
            )
        )


def _add_collectives(ctx: Context, sec: Section) -> None:
    c = ctx.row("quality_collectives")
    if c.get("collectives"):
        sec.add(
            Facts(
                [
                    ("collectives (flight recorder aside)", c["collectives"]),
                    ("without a size", c["without_bytes"]),
                    ("outside any step", c["without_step"]),
                    ("without timing", c["without_timing"]),
                ]
            )
        )


def _add_links(ctx: Context, sec: Section) -> None:
    """How tokenwire link attributed the collectives, or that it has not run."""
    links = ctx.query("quality_links")
    if links.height:
        unattributed = links.filter(pl.col("attributed_by") == "none")["collectives"].sum()
        unknown_dim = links.filter(pl.col("dim_unknown"))["collectives"].sum()
        sec.add(
            Table(
                ["layer evidence", "dimension unknown", "collectives"],
                [
                    [r["attributed_by"], "yes" if r["dim_unknown"] else "no", r["collectives"]]
                    for r in links.iter_rows(named=True)
                ],
                caption=f"Attribution by tokenwire link: {unattributed:,} collectives without a "
                f"layer, {unknown_dim:,} without a parallel dimension (counted in every "
                "total, never dropped)",
                numeric=[False, False, True],
            )
        )
        steps = ctx.query("quality_steps")
        sec.add(
            Table(
                ["source", "step from", "collectives"],
                [list(r) for r in steps.iter_rows()],
                caption="How collectives got their step: trace (inside a ProfilerStep range of "
                "their own record), matched (the profiler call matched to them), instance (the "
                "same collective on a profiled rank), log_order (their place in their own log "
                "between placed calls), none (outside every step)",
                numeric=[False, False, True],
            )
        )
    else:
        sec.add(
            Note(
                "tokenwire link has not run on this dataset: steps, phases, layers and "
                "parallel dimensions are only what the sources recorded themselves.",
                "missing",
            )
        )


def _add_matches(ctx: Context, sec: Section) -> None:
    """Calls matched across sources and across ranks."""
    matches = ctx.query("quality_matches")
    if matches.height:
        sec.add(
            Table(
                [
                    "source",
                    "calls",
                    "matched to the profiler",
                    "by time",
                    "by order",
                    "sizes differ",
                ],  # fmt: skip
                [list(r) for r in matches.iter_rows()],
                caption="The same calls seen by other sources: a matched call takes the "
                "profiler's step, phase and layer, and fills sizes the profiler lacks",
                numeric=[False, True, True, True, True, True],
            )
        )
    inst = ctx.row("quality_instances")
    if inst.get("instances"):
        sec.add(
            Facts(
                [
                    ("collective instances matched across ranks", inst["instances"]),
                    ("seen by fewer ranks than their group", inst["partial"]),
                    ("ranks disagree on op or size", inst["inconsistent"]),
                ]
            )
        )
