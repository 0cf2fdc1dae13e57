"""A linked job's rows, read for a timeline: the queries of ``timeline.sql`` run in scope.

:func:`read_timeline` settles the job and checks the scope against the dataset (an unlinked
job, an unknown step or rank is an :class:`~pipeline.export.scope.ExportError`), then returns
the rows of each kind of event as Polars frames, every time on the job's aligned clock.
Turning them into trace events is :mod:`pipeline.export.events`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from ..dataset.snapshot import read_snapshot
from ..dataset.sql_files import named_statements
from ..dataset.views import connect
from ..export.scope import ExportError, Scope

_PARAM = re.compile(r"\$(\w+)")


@functools.cache
def queries() -> dict[str, str]:
    """The named queries of ``timeline.sql``."""
    return named_statements(__package__, "timeline.sql")


@dataclass
class TimelineRows:
    """The rows of one job's timeline, per kind of event (empty frames for kinds not asked)."""

    job: str
    ranks: pl.DataFrame  # rank, host: the ranks in scope
    collectives: pl.DataFrame
    steps: pl.DataFrame
    phases: pl.DataFrame
    kernels: pl.DataFrame
    ops: pl.DataFrame
    untimed_ranks: list[int] = field(default_factory=list)


def read_timeline(dataset: Path | str, scope: Scope) -> TimelineRows:
    """Read the rows of ``scope`` of a linked job of ``dataset``.

    Raises
    ------
    DatasetError
        Not a dataset.
    ExportError
        No such job, several and none chosen, a job not linked, ranks or steps it lacks.
    """
    dataset = Path(dataset)
    return read_snapshot(dataset, functools.partial(_read, dataset, scope), place="timeline.sql")


def _read(dataset: Path, scope: Scope) -> TimelineRows:
    con = connect(dataset, read_only=True)
    try:
        job = _job(con, dataset, scope.job)
        _require_linked(con, dataset, job)
        ranks = _ranks(con, dataset, job, scope.ranks)
        con.register("_export_ranks", ranks.select("rank").to_arrow())
        steps = scope.steps or (None, None)
        window = scope.window or (None, None)
        params = {"job": job, "step_lo": steps[0], "step_hi": steps[1]}
        _run(con, "scope", **params, win_lo=window[0], win_hi=window[1])
        _run(con, "calls")
        if scope.steps is not None:
            _require_steps(con, job, scope.steps)
        rows = TimelineRows(
            job=job,
            ranks=ranks,
            collectives=_frame(con, "collectives"),
            steps=_frame(con, "steps"),
            phases=_frame(con, "phases"),
            kernels=_frame(con, "kernels") if scope.kernels else pl.DataFrame(),
            ops=_frame(con, "ops") if scope.ops else pl.DataFrame(),
            untimed_ranks=_frame(con, "untimed_ranks")["rank"].to_list(),
        )
        if scope.window is not None:
            _require_window(con, job, scope.window, rows)
        return rows
    finally:
        con.close()


def _require_window(
    con: duckdb.DuckDBPyConnection, job: str, window: tuple[int | None, int | None],
    rows: TimelineRows,
) -> None:  # fmt: skip
    """Refuse a window that holds no event, naming where the job's events lie."""
    frames = (rows.collectives, rows.steps, rows.phases, rows.kernels, rows.ops)
    if any(f.height for f in frames):
        return
    start, end = _frame(con, "extent").row(0)
    asked = f"{'' if window[0] is None else window[0]}:{'' if window[1] is None else window[1]}"
    if start is None:
        return  # (no timed collective in scope at all: build_events says nothing is there)
    raise ExportError(
        f"--window {asked}: job {job!r} has no event there; its collectives in scope lie in "
        f"{start}:{end} (ns on the aligned clock)"
    )


def _params(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    return {p: params[p] for p in dict.fromkeys(_PARAM.findall(sql))}


def _run(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> None:
    """Run the named statement (one that makes a table)."""
    sql = queries()[name]
    con.execute(sql, _params(sql, params))


def _frame(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pl.DataFrame:
    """The rows of the named query."""
    sql = queries()[name]
    return pl.from_arrow(con.sql(sql, params=_params(sql, params)).to_arrow_table())


def _job(con: duckdb.DuckDBPyConnection, dataset: Path, job: str | None) -> str:
    jobs = _frame(con, "jobs")["job"].to_list()
    if not jobs:
        raise ExportError(f"{dataset}: the dataset holds no files yet (run tokenwire ingest)")
    if job is None:
        if len(jobs) > 1:
            raise ExportError(
                f"{dataset}: the dataset holds {len(jobs)} jobs ({_listed(jobs)}); "
                "choose one with --job"
            )
        return jobs[0]
    if job not in jobs:
        raise ExportError(f"{dataset}: no job {job!r} in the dataset (jobs: {_listed(jobs)})")
    return job


def _require_linked(con: duckdb.DuckDBPyConnection, dataset: Path, job: str) -> None:
    counts = _frame(con, "linked", job=job).row(0, named=True)
    if counts["collectives"] == 0:
        raise ExportError(f"{dataset}: job {job!r} has no collectives to put on a timeline")
    if counts["links"] == 0 or counts["offsets"] == 0:
        raise ExportError(
            f"{dataset}: job {job!r} is not linked (run tokenwire link {dataset}); "
            "the timeline needs its steps, phases, instances and clock offsets"
        )


def _ranks(
    con: duckdb.DuckDBPyConnection, dataset: Path, job: str, wanted: tuple[int, ...] | None
) -> pl.DataFrame:
    ranks = _frame(con, "job_ranks", job=job)
    if wanted is None:
        return ranks
    missing = sorted(set(wanted) - set(ranks["rank"].to_list()))
    if missing:
        raise ExportError(
            f"{dataset}: --ranks: job {job!r} has no rank {_spans(missing)} "
            f"(its ranks: {_spans(ranks['rank'].to_list())})"
        )
    return ranks.filter(pl.col("rank").is_in(list(wanted)))


def _require_steps(con: duckdb.DuckDBPyConnection, job: str, steps: tuple[int, int]) -> None:
    known = _frame(con, "steps_known")["step"].to_list()
    if not any(steps[0] <= s <= steps[1] for s in known):
        asked = str(steps[0]) if steps[0] == steps[1] else f"{steps[0]}-{steps[1]}"
        raise ExportError(
            f"--step: job {job!r} has no step {asked} on the ranks asked for "
            f"(its steps: {_spans(known) or 'none'})"
        )


def _spans(values: list[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3,7"`` (sorted input)."""
    out: list[tuple[int, int]] = []
    for v in values:
        if out and out[-1][1] == v - 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def _listed(jobs: list[str]) -> str:
    shown = ", ".join(jobs[:10])
    return shown + (f", ... {len(jobs) - 10} more" if len(jobs) > 10 else "")
