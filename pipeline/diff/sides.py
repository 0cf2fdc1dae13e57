"""One job's side of a diff: the queries of ``side.sql`` run on its dataset, read-only.

:func:`read_side` checks the job (in the dataset, linked) and returns each query's rows as
an Arrow table, which :mod:`pipeline.diff` registers as ``a_<name>`` or ``b_<name>`` beside
the other job's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from ..dataset.snapshot import read_snapshot
from ..dataset.sql_files import named_statements
from ..dataset.views import connect
from ..errors import TokenwireError

#: side.sql's statements that make a table for the queries after them (not a side's rows)
_SETUP = ("steps",)


class DiffError(TokenwireError):
    """A job that cannot be compared: not in its dataset, or not linked."""


@functools.cache
def side_queries() -> dict[str, str]:
    """The named statements of ``side.sql``, in order."""
    return named_statements(__package__, "side.sql")


@dataclass
class Side:
    """One job's rows: ``tables[name]`` for each query of ``side.sql``."""

    dataset: Path
    job: str
    tables: dict[str, pa.Table]


def read_side(dataset: Path | str, job: str) -> Side:
    """The side of ``job`` of ``dataset`` (opened read-only; nothing is written into it).

    Raises
    ------
    DatasetError
        Not a dataset.
    DiffError
        No such job, or a job not linked.
    """
    dataset = Path(dataset)
    return read_snapshot(dataset, functools.partial(_read, dataset, job), place="side.sql")


def _read(dataset: Path, job: str) -> Side:
    con = connect(dataset, read_only=True)
    try:
        _require_job(con, dataset, job)
        tables = {}
        for name, sql in side_queries().items():
            params = {"job": job} if "$job" in sql else {}
            if name in _SETUP:
                con.execute(sql, params)
            else:
                tables[name] = con.sql(sql, params=params).to_arrow_table()
        return Side(dataset, job, tables)
    finally:
        con.close()


def _require_job(con: duckdb.DuckDBPyConnection, dataset: Path, job: str) -> None:
    jobs = [r[0] for r in con.execute("SELECT DISTINCT job FROM files ORDER BY 1").fetchall()]
    if job not in jobs:
        listed = ", ".join(repr(j) for j in jobs[:10]) + (", ..." if len(jobs) > 10 else "")
        raise DiffError(f"{dataset}: no job {job!r} in the dataset (jobs: {listed or 'none'})")
    linked = con.execute(
        "SELECT (SELECT count(*) FROM collectives WHERE job = $job), "
        "(SELECT count(*) FROM collective_links WHERE job = $job)",
        {"job": job},
    ).fetchone()
    if linked[0] == 0:
        raise DiffError(f"{dataset}: job {job!r} has no collectives to compare")
    if linked[1] == 0:
        raise DiffError(f"{dataset}: job {job!r} is not linked (run tokenwire link {dataset})")
