"""What-if: the step time and bytes per token of other layouts, projected from an observed run.

A linked dataset gives the run's measured step and compute time per rank (``time_breakdown``:
medians over ranks and profiled steps). Another layout's step is projected as

* compute: the observed compute time scaled by the hardware FLOPs one rank runs per step
  (``compute.step_flops`` over the world size), which carries the layout's split of the work
  and its batch;
* communication: the model's alpha-beta time of the busiest pipeline stage's items
  (``est_time_s``, :mod:`pipeline.model.timing`), scaled by the observed run's own ratio of
  non-compute time to the time the model predicts for it (the model calibrated on the run);

so the observed layout projects onto its own measured step. Overlap of communication with
compute is not modelled beyond what that ratio carries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError, DatasetError
from pipeline.ingest.vocab import WORLD_DIMS
from pipeline.model.compute import step_flops
from pipeline.model.config import Job, build_job
from pipeline.model.predict import _peer, predict_ranks

#: The SQL that reads the observed step and compute time (what it answers is in the file).
_SQL = Path(__file__).with_name("whatif.sql")


@dataclass(frozen=True)
class Observed:
    """The measured step and compute time of one job of a linked dataset (seconds)."""

    job: str
    step_s: float
    compute_s: float
    samples: int


@dataclass(frozen=True)
class Projection:
    """One layout's projected step."""

    layout: str
    world_size: int
    tokens_per_step: int
    compute_s: float
    comm_s: float
    bytes_per_token: float
    observed: bool

    @property
    def step_s(self) -> float:
        """Projected step time: compute plus calibrated communication."""
        return self.compute_s + self.comm_s


def observed(dataset: str | Path, job: str | None = None) -> Observed:
    """Median step and compute time per rank and step of ``job`` (the only job when None).

    Raises
    ------
    DatasetError
        No job of that name, several jobs and none named, or no profiled step timings.
    """
    from pipeline.dataset.views import connect

    con = connect(dataset, read_only=True)
    try:
        return observed_in(con, job, str(dataset))
    finally:
        con.close()


def observed_in(con: Any, job: str | None, where: str) -> Observed:
    """:func:`observed` over an open DuckDB connection to the dataset (``where`` names it in
    errors)."""
    dataset = where
    rows = con.execute(_SQL.read_text()).fetchall()
    jobs = {r[0]: r for r in rows}
    if job is None and len(jobs) > 1:
        raise DatasetError(f"{dataset}: {len(jobs)} jobs with step timings; name one with --job")
    pick = jobs.get(job) if job is not None else next(iter(jobs.values()), None)
    if pick is None:
        what = f"job {job!r}" if job else "any job"
        raise DatasetError(
            f"{dataset}: no step timings (time_breakdown) for {what}; link the dataset first"
        )
    return Observed(pick[0], pick[1] / 1e9, pick[2] / 1e9, pick[3])


def _comm_s(job: Job) -> float:
    """Predicted communication seconds per step of the busiest pipeline stage."""
    ranks = [_peer(job, 0, s) for s in range(job.parallel.pp)]
    return max(sum(r.est_time_s for r in p.rows) for p in predict_ranks(job, ranks))


def _flops_per_rank(job: Job) -> float:
    return step_flops(job)["hardware_flops"] / job.parallel.world_size


def _describe(job: Job) -> str:
    p = job.parallel
    return f"tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp} ep={p.ep} mb={job.batch.micro_batch}"


def project(base: Job, obs: Observed, targets: list[Job]) -> list[Projection]:
    """``base`` (the observed layout) and each target projected, fastest step first."""
    comm_base = _comm_s(base)
    ratio = max(obs.step_s - obs.compute_s, 0.0) / comm_base if comm_base else 1.0
    out = []
    for job in [base, *targets]:
        pred = predict_ranks(job, [0])[0]
        out.append(
            Projection(
                _describe(job),
                job.parallel.world_size,
                job.tokens_per_step,
                obs.compute_s * _flops_per_rank(job) / _flops_per_rank(base),
                ratio * _comm_s(job),
                pred.totals["bytes_per_token"],
                job is base,
            )  # fmt: skip
        )
    return sorted(out, key=lambda p: (p.step_s, not p.observed))


def layouts(config: str | Path, world: int, overrides: dict[str, Any]) -> list[Job]:
    """Every tp x pp x dp of ``world`` ranks the model admits (others keys from ``config``
    and ``overrides``), for ranking when no target is given."""
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    out = []
    for tp in divisors:
        for pp in (d for d in divisors if (world // tp) % d == 0):
            dp = world // tp // pp
            keys = overrides | {"parallel.tp": tp, "parallel.pp": pp, "parallel.dp": dp,
                                "parallel.world_size": world}  # fmt: skip
            try:
                out.append(build_job(config, keys))
            except ConfigError:
                continue  # (a layout the model does not admit: heads, layers, experts)
    return out


def target(config: str | Path, overrides: dict[str, Any], second: str | Path | None) -> Job:
    """The layout to project: ``second`` job.yaml, else ``config`` with ``overrides`` (its
    ``world_size``, if any, following the new layout)."""
    if second is not None:
        return build_job(second, overrides)
    base = build_job(config, {})
    keys = {f"parallel.{d}": getattr(base.parallel, d) for d in WORLD_DIMS}
    keys |= {k: v for k, v in overrides.items() if v is not None}
    world = 1
    for d in WORLD_DIMS:
        world *= keys[f"parallel.{d}"]
    return build_job(config, keys | {"parallel.world_size": world})


def format_projections(obs: Observed, rows: list[Projection]) -> str:
    """The ranked table."""
    lines = [
        f"what-if from job {obs.job!r}: observed step {obs.step_s:.6g} s, compute "
        f"{obs.compute_s:.6g} s (median of {obs.samples} rank-steps)",
        f"{'layout':<36} {'world':>6} {'tokens/step':>12} {'compute_s':>11} {'comm_s':>11} "
        f"{'step_s':>11} {'bytes/token':>12}",
    ]
    for p in rows:
        mark = "  (observed)" if p.observed else ""
        lines.append(
            f"{p.layout:<36} {p.world_size:>6} {p.tokens_per_step:>12,} {p.compute_s:>11.6f} "
            f"{p.comm_s:>11.6f} {p.step_s:>11.6f} {p.bytes_per_token:>12.4g}{mark}"
        )
    return "\n".join(lines)


def as_dict(obs: Observed, rows: list[Projection]) -> dict[str, Any]:
    """The JSON shape: the observation and the ranked projections."""
    return {
        "observed": dataclasses.asdict(obs),
        "projections": [dataclasses.asdict(p) | {"step_s": p.step_s} for p in rows],
    }
