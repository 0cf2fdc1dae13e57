"""What every section of the report reads: the dataset's DuckDB views, the job, its job.yaml.

The named queries of ``queries.sql`` run here with their parameters; a section asks for one
by name and gets a small Polars frame back (the queries aggregate, so the frames are small
whatever the job's size).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from ..dataset.location import overflow_error
from ..dataset.sql_files import named_statements
from ..dataset.views import connect
from ..errors import DatasetError

if TYPE_CHECKING:
    from ..model.config import Job

_PARAM = re.compile(r"\$(\w+)")


@functools.cache
def queries() -> dict[str, str]:
    """The named queries of ``queries.sql``."""
    return named_statements(__package__, "queries.sql")


@dataclass
class Context:
    """One report's inputs: a DuckDB connection over the dataset, the job and its job.yaml."""

    dataset: Path
    con: duckdb.DuckDBPyConnection
    job: str
    jobs: list[str]
    config: Job | None = None
    config_path: Path | None = None
    notes: list[str] = field(default_factory=list)
    #: why the job.yaml given could not be linked (its layout does not fit the traced ranks)
    unfit: str | None = None
    #: link's tables were computed for this report, not read from the dataset
    derived_here: bool = False
    #: where the job.yaml contradicts the traces, when link's tables were computed with it
    warnings: list[str] = field(default_factory=list)

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Run the named query with ``$job`` and ``params``; a Polars frame."""
        sql = queries()[name]
        values = {"job": self.job, **params}
        used = {p: values[p] for p in _PARAM.findall(sql)}
        try:
            frame = pl.from_arrow(self.con.sql(sql, params=used).to_arrow_table())
        except duckdb.Error as exc:  # (values near int64's limits adding up past it)
            overflow_error(self.dataset, f"queries.sql: {name}", exc)
            raise
        # sums of BIGINT come back as 128-bit decimals; the report wants plain numbers
        return frame.with_columns(pl.col(pl.Decimal).cast(pl.Float64))

    def row(self, name: str, **params: Any) -> dict[str, Any]:
        """The first row of the named query as a dict (empty when it has none)."""
        frame = self.query(name, **params)
        return frame.row(0, named=True) if frame.height else {}


def open_context(
    dataset: Path | str, *, job: str | None = None, config: Job | None = None,
    config_path: Path | None = None,
) -> Context:  # fmt: skip
    """Connect to ``dataset`` and settle which job the report is about.

    Raises
    ------
    DatasetError
        Not a dataset, an empty one, an unknown ``job``, or several jobs and no ``job``.
    """
    dataset = Path(dataset)
    con = connect(dataset)
    con.execute(queries()["read_once"])
    jobs = [r[0] for r in con.execute(queries()["jobs"]).fetchall()]
    if not jobs:
        raise DatasetError(f"{dataset}: the dataset holds no files yet (run tokenwire ingest)")
    if job is None:
        if len(jobs) > 1:
            raise DatasetError(
                f"{dataset}: the dataset holds {len(jobs)} jobs ({_names(jobs)}); "
                "choose one with --job"
            )
        job = jobs[0]
    elif job not in jobs:
        raise DatasetError(f"{dataset}: no job {job!r} in the dataset (jobs: {_names(jobs)})")
    return Context(dataset, con, job, jobs, config=config, config_path=config_path)


def _names(jobs: list[str]) -> str:
    shown = ", ".join(jobs[:10])
    return shown + (f", ... {len(jobs) - 10} more" if len(jobs) > 10 else "")
