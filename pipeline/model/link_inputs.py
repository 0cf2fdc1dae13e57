"""What the analytic model hands ``tokenwire link`` beside the traces, for a job.yaml.

For each job: the ``predictions`` of its traced ranks; ``_job_facts`` (tokens per step, the
job.yaml key that sets DP's gradient buckets, the dimensions of degree above 1);
``_alternative_bytes`` (the ranks' bytes per dimension, op and phase were a key given
another value: :func:`pipeline.model.predict.alternative_totals`); ``_layout_ep_groups`` and
``_layout_ep_members`` (each traced rank's expert-parallel group, and its members); and
``_gradient_plan`` (the dense gradients each rank reduces over data parallel, in order:
:func:`pipeline.model.predict.gradient_plan`). :data:`TABLES` gives each table's columns
and DuckDB types: link registers them (empty without a job.yaml) before its SQL runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (predict is imported only by a link with a job.yaml)
    import pyarrow as pa

    from ..model.config import Job

#: Each table's columns and their DuckDB types. ``_gradient_plan``: per rank, the units of
#: its dense gradients in the order data parallel reduces them, each the byte range
#: [lo_bytes, hi_bytes) of that sequence.
TABLES: dict[str, dict[str, str]] = {
    "_job_facts": {
        "job": "VARCHAR",
        "tokens_per_step": "BIGINT",
        "bucket_key": "VARCHAR",
        "dims": "VARCHAR[]",
    },
    "_alternative_bytes": {
        "job": "VARCHAR",
        "key": "VARCHAR",
        "value": "VARCHAR",
        "what": "VARCHAR",
        "ranks": "BIGINT[]",
        "parallel_dim": "VARCHAR",
        "op": "VARCHAR",
        "phase": "VARCHAR",
        "bytes": "BIGINT",
    },
    "_layout_ep_groups": {"job": "VARCHAR", "rank": "BIGINT", "comm": "VARCHAR"},
    "_layout_ep_members": {"job": "VARCHAR", "comm": "VARCHAR", "ranks": "BIGINT[]"},
    "_gradient_plan": {
        "job": "VARCHAR",
        "rank": "BIGINT",
        "position": "BIGINT",
        "unit_kind": "VARCHAR",
        "layer_index": "BIGINT",
        "local_index": "BIGINT",
        "lo_bytes": "BIGINT",
        "hi_bytes": "BIGINT",
    },
}


@dataclass
class ModelInputs:
    """The rows of :data:`TABLES` (a list per column) and the ``predictions`` of the jobs
    added so far."""

    columns: dict[str, dict[str, list]] = field(
        default_factory=lambda: {t: {c: [] for c in cols} for t, cols in TABLES.items()}
    )
    predictions: list[pa.Table] = field(default_factory=list)

    def add(self, job: str, spec: Job, ranks: list[int]) -> None:
        """The rows of ``job``, described by ``spec``, whose traces hold ``ranks``."""
        from ..dataset.schema import conform
        from ..model.predict import alternative_totals, predictions_table

        world = spec.parallel.world_size
        table = predictions_table(spec, ranks, world_size=world)
        self.predictions.append(conform("predictions", table, job=job))
        self._append("_job_facts", [facts_row(job, spec)])
        self._append("_alternative_bytes", [(job, *a) for a in alternative_totals(spec, ranks)])
        by_rank, members = ep_groups(spec, ranks)
        self._append("_layout_ep_groups", [(job, rank, comm) for rank, comm in by_rank])
        self._append("_layout_ep_members", [(job, comm, m) for comm, m in members.items()])
        self._append("_gradient_plan", gradient_plan_rows(job, spec, ranks))

    def _append(self, table: str, rows: list[tuple]) -> None:
        columns = self.columns[table]
        for row in rows:
            for name, value in zip(columns, row, strict=True):
                columns[name].append(value)


def facts_row(job: str, spec: Job) -> tuple:
    """``_job_facts``'s row of ``job``: tokens per step, the job.yaml key that sets DP's
    gradient buckets, and the dimensions of degree above 1."""
    torch = spec.conventions.torch_buckets
    bucket_key = "conventions.ddp_bucket_mb" if torch else "parallel.bucket_size"
    par = spec.parallel
    degrees = {"tp": par.tp, "cp": par.cp, "pp": par.pp, "ep": par.ep, "dp": par.dp}
    dims = [d for d, n in degrees.items() if n > 1]
    return job, spec.tokens_per_step, bucket_key, dims


def ep_groups(spec: Job, ranks: list[int]) -> tuple[list[tuple[int, str]], dict[str, list[int]]]:
    """(rank, comm) of each traced rank's expert-parallel group, named ``job.yaml:ep:<lowest
    rank>``, and the members of each such group (listed once per group, not per rank);
    none where the layout has no expert parallelism. The communicator of an MoE library's
    kernels (DeepEP's buffer is made over the EP process group), which no trace names."""
    if spec.parallel.ep < 2:
        return [], {}
    from ..model.predict import group, span

    by_rank = [(r, f"job.yaml:ep:{span(spec, r, ('ep',), expert=True).lo}") for r in ranks]
    members: dict[str, list[int]] = {}
    for r, comm in by_rank:
        if comm not in members:
            members[comm] = group(spec, r, ("ep",), expert=True)
    return by_rank, members


def gradient_plan_rows(job: str, spec: Job, ranks: list[int]) -> list[tuple]:
    """``_gradient_plan``'s rows of ``job``: each rank's plan (one per pipeline stage,
    shared by its ranks)."""
    from ..model.predict import coordinates, gradient_plan

    stages: dict[int, list] = {}
    rows = []
    for rank in ranks:
        pp = coordinates(spec, rank)["pp"]
        if pp not in stages:
            stages[pp] = gradient_plan(spec, pp)
        lo = 0
        for position, unit in enumerate(stages[pp]):
            rows.append(
                (job, rank, position, unit.kind, unit.layer, unit.local, lo, lo + unit.bytes)
            )
            lo += unit.bytes
    return rows
