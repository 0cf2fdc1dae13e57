"""``tokenwire diff``: what changed between two jobs, on the wire and in time.

Each job's side is aggregated in its own dataset, opened read-only (``side.sql``, run by
:mod:`pipeline.diff.sides`); the sides are kept as tables ``a_<name>`` and ``b_<name>`` of
an in-memory DuckDB connection, and ``diff.sql`` makes the diff as views over both
(``diff_steps``, ``diff_traffic``, ``diff_predicted``, ``diff_layers``, ``diff_ops``).
:func:`query_diff` runs a user's SQL over them (``tokenwire diff --sql``).
:mod:`pipeline.diff.page` draws them as an HTML page in the report's style.
docs/diff.md describes every column.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from ..dataset.sql_files import measures_sql, sql_text
from ..diff.sides import DiffError, Side, read_side

__all__ = ["VIEWS", "DiffError", "RunDiff", "diff_jobs", "query_diff", "view_descriptions"]

#: The diff's views, in the order they are shown.
VIEWS = ("diff_steps", "diff_traffic", "diff_predicted", "diff_layers", "diff_ops")

_VIEW_COMMENT = re.compile(r"((?:^-- .*\n)+)CREATE VIEW (\w+)", re.MULTILINE)


@functools.cache
def diff_sql() -> str:
    """The text of ``diff.sql``."""
    return sql_text(__package__, "diff.sql")


@functools.cache
def view_descriptions() -> dict[str, str]:
    """Each view's comment in ``diff.sql``, as one paragraph."""
    out = {}
    for comment, name in _VIEW_COMMENT.findall(diff_sql()):
        text = " ".join(line[3:].strip() for line in comment.splitlines())
        out[name] = text.removeprefix(f"{name}: ")
    return out


@dataclass
class RunDiff:
    """Two jobs side by side: ``views[name]`` for each of :data:`VIEWS`, and each side's
    facts (steps, ranks, tokens per step, whether it has a prediction)."""

    a: Side
    b: Side
    views: dict[str, pl.DataFrame]

    def facts(self, side: str) -> dict[str, Any]:
        """``facts`` of side ``"a"`` or ``"b"`` as a dict."""
        table = (self.a if side == "a" else self.b).tables["facts"]
        return table.to_pylist()[0]


def diff_jobs(
    dataset: Path | str, job_a: str, job_b: str, *, other: Path | str | None = None
) -> RunDiff:
    """Compare ``job_a`` of ``dataset`` with ``job_b`` of ``other`` (default: the same
    dataset). Both must be linked; neither dataset is written to.

    Raises
    ------
    DatasetError
        Not a dataset.
    DiffError
        A job not in its dataset, or not linked.
    """
    a = read_side(dataset, job_a)
    b = read_side(other if other is not None else dataset, job_b)
    con = _diff_connection(a, b)
    try:
        views = {
            name: pl.from_arrow(con.sql(f"SELECT * FROM {name}{_ORDER[name]}").to_arrow_table())
            for name in VIEWS
        }
    finally:
        con.close()
    return RunDiff(a, b, views)


def query_diff(
    dataset: Path | str, job_a: str, job_b: str, text: str, *, other: Path | str | None = None
) -> pl.DataFrame:
    """Run the SQL ``text`` over the diff of ``job_a`` and ``job_b`` (as :func:`diff_jobs`
    takes them): the views of :data:`VIEWS` and each side's tables ``a_<name>`` and
    ``b_<name>``. Statements that could write are refused; no file can be read.

    Raises
    ------
    DatasetError, DiffError
        As :func:`diff_jobs`.
    QueryError
        SQL that DuckDB or the read-only check refused.
    """
    from ..dataset.query import QueryError, run_statements

    if not text.strip():
        raise QueryError("no SQL given")
    con = _diff_connection(
        read_side(dataset, job_a), read_side(other if other is not None else dataset, job_b)
    )
    try:
        return run_statements(
            con, text, refusal="tokenwire diff --sql only reads (the diff is not stored)"
        )
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from exc
    finally:
        con.close()


def _diff_connection(a: Side, b: Side) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database with both sides' tables and the diff's views; it can
    reach no file and its settings are locked, so a user's query cannot leave it."""
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        for prefix, side in (("a", a), ("b", b)):
            for name, table in side.tables.items():
                con.register(f"_{prefix}_{name}", table)
                con.execute(f"CREATE TABLE {prefix}_{name} AS SELECT * FROM _{prefix}_{name}")
                con.unregister(f"_{prefix}_{name}")
        con.execute("SET enable_external_access = false")
        con.execute(measures_sql())
        con.execute(diff_sql())
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


#: How each view's rows are listed: largest changes first, then by their key.
_ORDER = {
    "diff_steps": " ORDER BY timeline, metric",
    "diff_traffic": " ORDER BY parallel_dim, op, phase",
    "diff_predicted": " ORDER BY parallel_dim, op",
    "diff_layers": " ORDER BY parallel_dim, op, phase, layer",
    "diff_ops": "",  # (the view's own order: largest change first, per kind)
}
