"""``tokenwire export --flows``: a linked job's ``wire`` table as a flow list, one row per
collective instance and directed rank pair (src, dst, bytes, start, duration, transport,
collective, layer, step), written as Parquet or CSV for network simulators (docs/export.md).

The scope options of the timeline apply: ``--job``, ``--step``, ``--ranks`` (flows from or to
those ranks) and ``--window`` (flows that overlap it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..dataset.snapshot import read_snapshot
from ..dataset.views import connect
from ..export.scope import ExportError, Scope
from ..export.timeline import _job, _ranks, _require_linked
from ..output import atomic_output

#: The flow list's columns, in order (their meaning: schemas/wire.yaml).
COLUMNS = (
    "src_rank", "dst_rank", "src_host", "dst_host", "transport", "src_nic", "dst_nic",
    "bytes", "start_ns", "dur_ns", "op", "algorithm", "protocol", "estimated", "comm", "seq",
    "channels", "step", "phase", "layer", "parallel_dim",
)  # fmt: skip
#: Output formats by file name ending.
FORMATS = {".parquet": "parquet", ".csv": "csv"}


@dataclass
class FlowsResult:
    """What :func:`export_flows` wrote."""

    output: Path
    job: str
    size_bytes: int
    flows: int
    bytes: float

    def summary(self) -> str:
        """One line on what was written: the file, its size, the job, its flows and bytes."""
        return (
            f"wrote {self.output} ({self.size_bytes / 1e6:.1f} MB, job {self.job}, "
            f"{self.flows:,} flows, {self.bytes:,.0f} bytes)"
        )


def export_flows(dataset: Path | str, *, output: Path | str, scope: Scope) -> FlowsResult:
    """Write the flows of ``scope`` of a linked job of ``dataset`` to ``output`` (``.parquet``
    or ``.csv``), ordered by start time, then source and destination rank.

    Raises
    ------
    DatasetError
        Not a dataset.
    ExportError
        An output name that is neither .parquet nor .csv, no such job (or several and none
        chosen), a job not linked or linked before the wire table existed, ranks it lacks,
        nothing in scope.
    OutputError
        ``output`` cannot be written.
    """
    output = Path(output)
    kind = FORMATS.get(output.suffix.lower())
    if kind is None:
        raise ExportError(f"{output}: --flows writes .parquet or .csv (name the file so)")
    dataset = Path(dataset)
    job, flows = read_snapshot(
        dataset, functools.partial(_read, dataset, scope), place="export --flows (wire)"
    )
    if flows.height == 0:
        raise ExportError(f"{dataset}: job {job!r} has no flows in the scope asked for")
    with atomic_output(output) as tmp:
        if kind == "parquet":
            flows.write_parquet(tmp)
        else:
            flows.write_csv(tmp)
    return FlowsResult(output, job, output.stat().st_size, flows.height, flows["bytes"].sum())


def _read(dataset: Path, scope: Scope) -> tuple[str, pl.DataFrame]:
    con = connect(dataset, read_only=True)
    try:
        job = _job(con, dataset, scope.job)
        _require_linked(con, dataset, job)
        total = con.execute("SELECT count(*) FROM wire WHERE job = ?", [job]).fetchall()[0][0]
        if total == 0:
            raise ExportError(
                f"{dataset}: job {job!r} has no wire table (link it again: tokenwire link "
                f"{dataset})"
            )
        where, params = ["job = ?"], [job]
        if scope.ranks is not None:
            ranks = _ranks(con, dataset, job, scope.ranks)["rank"].to_list()
            where.append("(list_contains(?, src_rank) OR list_contains(?, dst_rank))")
            params += [ranks, ranks]
        if scope.steps is not None:
            where.append("step BETWEEN ? AND ?")
            params += list(scope.steps)
        if scope.window is not None:
            lo, hi = scope.window
            # (a flow overlaps the window; an untimed one is in no window)
            where.append("start_ns IS NOT NULL")
            if hi is not None:
                where.append("start_ns < ?")
                params.append(hi)
            if lo is not None:
                where.append("start_ns + coalesce(dur_ns, 0) > ?")
                params.append(lo)
        columns = ", ".join(COLUMNS)
        sql = (
            f"SELECT {columns} FROM wire WHERE {' AND '.join(where)} "
            "ORDER BY start_ns NULLS LAST, src_rank, dst_rank, comm, seq"
        )
        return job, pl.from_arrow(con.sql(sql, params=params).to_arrow_table())
    finally:
        con.close()
