"""What-if: the step time and bytes per token of other layouts, projected from an observed run.

A linked dataset gives the run's measured step and compute time per rank (``time_breakdown``:
medians over ranks and profiled steps) and how its compute splits among its layers (the
profiler's ops, each placed in its module, a backward op in the module of its forward op:
``whatif_layers.sql``). Another layout's step is projected per pipeline stage as

* compute: each class of layers (transformer layers, embedding, LM head, the rest) keeps
  its measured time per unit of work, and its work under the new layout is what one rank of
  that stage does: the FLOPs of each of its layers (``params.layer_flops_per_token``) times
  the tokens of its pipeline over ``tp``, the embedding's ``tokens·h`` lookups, the LM
  head's ``6·V·h`` per token over ``tp``, and the rest the rank's share of the step's
  hardware FLOPs; then the pipeline bubble, ``(m + p − 1)/m`` of it under 1F1B
  (``(p − 1)/(v·m)`` interleaved; Narayanan et al., arXiv:2104.04473, section 2.2);
* communication: the model's alpha-beta time of the stage's items less what its compute
  hides (:func:`pipeline.model.timing.exposed`), scaled by the observed run's own ratio of
  non-compute time to that exposed time (the model calibrated on the run);

and the busiest stage sets the step. The observed layout (one stage) projects onto its own
measured step and compute.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dataset.sql_files import sql_text
from ..errors import ConfigError, DatasetError
from ..model import params as P
from ..model.compute import phase_split, step_flops
from ..model.config import Job, build_job
from ..model.memory import describe
from ..model.predict import _peer, predict_ranks
from ..model.timing import Fitted, dataset_fits, exposed
from ..vocab import WORLD_DIMS

#: Classes of layers whose work :func:`class_work` measures.
CLASSES = ("transformer", "embedding", "lm_head", "other")
#: Most tp x pp x dp layouts a what-if over a whole world builds: a world of 98,304 ranks
#: (2^15 x 3) has 408, one of 2^30 has 496; a world of many small prime factors within
#: job.yaml's limits (735,134,400 = 2^6 3^3 5^2 7 11 13 17) has 136,080, about 7 ms each.
MAX_LAYOUTS = 4096
#: Most pipeline stages a what-if projects, over all its layouts (each about 2 ms): a real
#: model of ~130 layers on 16,384 ranks gives some 4,000; 16,384 layers on 2^14 ranks 65,000.
MAX_STAGES = 16384


class TooMuchWork(ConfigError):
    """A what-if over more layouts or pipeline stages than :data:`MAX_LAYOUTS` or
    :data:`MAX_STAGES`: refused before the work, with the limit named."""


@dataclass(frozen=True)
class Observed:
    """The measured step and compute time of one job of a linked dataset (seconds)."""

    job: str
    step_s: float
    compute_s: float
    samples: int
    #: Share of the compute of each class of layers (:data:`CLASSES`); all ``other`` when
    #: the dataset holds no ops to place.
    shares: tuple[tuple[str, float], ...] = (("other", 1.0),)
    #: Alpha and beta fitted to the dataset's nccl-tests tables or traced collectives.
    fits: tuple[Fitted, ...] = ()


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
    from ..dataset.views import connect

    con = connect(dataset, read_only=True)
    try:
        return observed_in(con, job, str(dataset))
    finally:
        con.close()


def observed_in(con: Any, job: str | None, where: str) -> Observed:
    """:func:`observed` over an open DuckDB connection to the dataset (``where`` names it in
    errors)."""
    dataset = where
    rows = con.execute(sql_text(__package__, "whatif.sql")).fetchall()
    jobs = {r[0]: r for r in rows}
    if job is None and len(jobs) > 1:
        raise DatasetError(f"{dataset}: {len(jobs)} jobs with step timings; name one with --job")
    pick = jobs.get(job) if job is not None else next(iter(jobs.values()), None)
    if pick is None:
        what = f"job {job!r}" if job else "any job"
        raise DatasetError(
            f"{dataset}: no step timings (time_breakdown) for {what}; link the dataset first"
        )
    name = pick[0]
    return Observed(name, pick[1] / 1e9, pick[2] / 1e9, pick[3], _shares(con, name),
                    tuple(dataset_fits(con, name)))  # fmt: skip


def with_observed_fits(job: Job, obs: Observed) -> Job:
    """``job`` timed with the dataset's fits for the ops and rank counts its own leave out."""
    have = {(f.op, f.nranks) for f in job.network.fitted}
    extra = tuple(f for f in obs.fits if (f.op, f.nranks) not in have)
    if not extra:
        return job
    net = dataclasses.replace(job.network, fitted=job.network.fitted + extra)
    return dataclasses.replace(job, network=net)


def _shares(con: Any, job: str) -> tuple[tuple[str, float], ...]:
    """Each class's share of the job's placed compute time (all ``other`` without ops)."""
    import duckdb

    try:
        _register_forward_modules(con)
        rows = con.execute(sql_text(__package__, "whatif_layers.sql")).fetchall()
    except duckdb.CatalogException:  # (a dataset of NCCL logs only has no ops table)
        rows = []
    ns = {c: float(t) for j, c, t in rows if j == job and t}
    total = sum(ns.values())
    if not total:
        return (("other", 1.0),)
    return tuple((c, ns[c] / total) for c in CLASSES if c in ns)


def _register_forward_modules(con: Any) -> None:
    """``_forward_modules`` (job, rank, file_id, seq_nr, module_path): the module of the
    forward op of each autograd sequence number, by the rule that places backward
    collectives (:func:`pipeline.ingest.derive.attribution.forward_module_paths`)."""
    import polars as pl

    from ..ingest.derive.attribution import forward_module_paths

    ops = pl.from_arrow(
        con.sql(
            "SELECT job, rank, file_id, op_id, seq_nr, name, module_path FROM ops WHERE seq_nr >= 0"
        ).to_arrow_table()
    )
    keys = ("job", "rank", "file_id")
    found = (
        forward_module_paths(ops.lazy(), keys)
        .collect()
        .rename({"backward_seq_nr": "seq_nr", "forward_module_path": "module_path"})
    )
    con.register("_forward_modules", found.to_arrow())


def class_work(job: Job, pp_rank: int) -> dict[str, float]:
    """The work one rank of pipeline stage ``pp_rank`` does per step in each class of layers
    (:data:`CLASSES`; units differ between classes, only ratios within one are used)."""
    m, par = job.model, job.parallel
    tokens = job.tokens_per_step / (par.dp * par.cp)  # (its pipeline's tokens, its share)
    layer = sum(P.layer_flops_per_token(m, i) for i in P.stage_layers(job, pp_rank))
    if job.recompute == "full":  # (one more forward: 2 of the 6)
        layer *= 8 / 6
    elif job.recompute == "selective":
        layer += len(P.stage_layers(job, pp_rank)) * P.attention_flops_per_token(m) / 3
    last = pp_rank == par.pp - 1
    return {
        "transformer": layer * tokens / par.tp,
        "embedding": tokens * m.hidden if pp_rank == 0 else 0.0,
        "lm_head": 6 * P.embedding_params(m, tp=P.vocab_tp(job)) * tokens if last else 0.0,
        "other": step_flops(job)["hardware_flops"] / par.world_size,
    }


def _rates(base: Job, obs: Observed) -> dict[str, float]:
    """Seconds per unit of work of each class, from the observed layout (its stages' mean
    work: the observation is a median over all ranks)."""
    stages = [class_work(base, r) for r in range(base.parallel.pp)]
    rates: dict[str, float] = {}
    spare = 0.0
    for c, share in obs.shares:
        work = sum(w[c] for w in stages) / len(stages)
        if work > 0:
            rates[c] = obs.compute_s * share / work
        else:  # (time in a class the layout gives no work: carried with the rest)
            spare += share
    other = sum(w["other"] for w in stages) / len(stages)
    rates["other"] = rates.get("other", 0.0) + obs.compute_s * spare / other
    return rates


def _bubble(job: Job) -> float:
    """``(m + p − 1)/m`` under 1F1B, ``1 + (p − 1)/(v·m)`` interleaved."""
    p, v, m = job.parallel.pp, job.parallel.vpp, job.microbatches
    return 1 + (p - 1) / (v * m)


def _stages(job: Job, rates: dict[str, float]) -> list[tuple[float, Any]]:
    """Per pipeline stage: its projected compute (bubble included) and its exposed
    communication before calibration."""
    out = []
    preds = predict_ranks(job, [_peer(job, 0, s) for s in range(job.parallel.pp)])
    for stage, pred in enumerate(preds):
        work = class_work(job, stage)
        compute = sum(rate * work[c] for c, rate in rates.items())
        fwd, bwd = phase_split(job, compute)
        out.append((compute * _bubble(job), exposed(pred.rows, fwd, bwd)["exposed_s"]))
    return out


def _describe(job: Job) -> str:
    return describe(job)


def project(base: Job, obs: Observed, targets: list[Job]) -> list[Projection]:
    """``base`` (the observed layout) and each target projected, fastest step first."""
    rates = _rates(base, obs)
    base_stages = _stages(base, rates)
    compute_base, comm_base = max(base_stages, key=lambda s: s[0] + s[1])
    ratio = max(obs.step_s - compute_base, 0.0) / comm_base if comm_base else 1.0
    out = []
    for job in [base, *targets]:
        stages = base_stages if job is base else _stages(job, rates)
        compute, comm = max(stages, key=lambda s: s[0] + ratio * s[1])
        pred = predict_ranks(job, [0])[0]
        out.append(
            Projection(
                _describe(job),
                job.parallel.world_size,
                job.tokens_per_step,
                compute,
                ratio * comm,
                pred.totals["bytes_per_token"],
                job is base,
            )  # fmt: skip
        )
    return sorted(out, key=lambda p: (p.step_s, not p.observed))


@dataclass(frozen=True)
class LayoutNote:
    """What a what-if did to one layout of the world: ``adjusted`` (its micro-batch changed
    to keep the global batch) or ``dropped`` (the model does not admit it), and why; or how
    a requested layout ``differs`` from the observed run (world size, global batch)."""

    layout: str
    action: str
    reason: str


def layouts(config: str | Path, world: int, overrides: dict[str, Any]) -> list[Job]:
    """Every tp x pp x dp of ``world`` ranks the model admits, keeping the global batch
    (:func:`layouts_explained` without the notes)."""
    return layouts_explained(config, world, overrides)[0]


def layouts_explained(
    config: str | Path, world: int, overrides: dict[str, Any]
) -> tuple[list[Job], list[LayoutNote]]:
    """Every tp x pp x dp of ``world`` ranks (``cp`` and the other keys from ``config`` and
    ``overrides``), each with the observed global batch ``B``: its micro-batch is the
    largest ``b' <= b`` with ``B`` divisible by ``b'·dp`` (the accumulation follows,
    ``m = B/(b'·dp)``). The notes say which layouts were adjusted and which dropped, and why."""
    base = build_job(config, overrides)
    cp, gb, mb = base.parallel.cp, base.batch.global_batch, base.batch.micro_batch
    count = layout_count(world, cp)
    if count > MAX_LAYOUTS:
        raise TooMuchWork(
            f"{config}: what-if: {world:,} ranks split into {count:,} tp x pp x dp layouts "
            f"(cp={cp}), more than the {MAX_LAYOUTS:,} a what-if projects "
            "(pipeline.model.whatif.MAX_LAYOUTS); give --tp and --pp to project one"
        )
    divisors = _divisors(world)
    jobs: list[Job] = []
    notes: list[LayoutNote] = []
    for tp in divisors:
        for pp in (d for d in divisors if world % (tp * d * cp) == 0):
            dp = world // (tp * pp * cp)
            name = f"tp={tp} pp={pp} dp={dp} cp={cp}"
            b = next((b for b in range(mb, 0, -1) if gb % (b * dp) == 0), None)
            if b is None:
                reason = f"the global batch of {gb} sequences does not split over dp={dp}"
                notes.append(LayoutNote(name, "dropped", reason))
                continue
            keys = overrides | {"parallel.tp": tp, "parallel.pp": pp, "parallel.dp": dp,
                                "parallel.world_size": world,
                                "batch": {"micro_batch": b, "global_batch": gb}}  # fmt: skip
            try:
                jobs.append(build_job(config, keys))
            except ConfigError as exc:  # (heads, layers, experts the layout does not divide)
                reason = str(exc).removeprefix(f"{config}: ")
                notes.append(LayoutNote(name, "dropped", reason))
                continue
            if b != mb:
                m = gb // (b * dp)
                reason = (f"micro_batch {mb} -> {b} keeps the global batch of {gb} sequences "
                          f"({m} micro-batch{'es' if m > 1 else ''} per step)")  # fmt: skip
                notes.append(LayoutNote(name, "adjusted", reason))
    stages = sum(j.parallel.pp for j in jobs)
    if stages > MAX_STAGES:
        raise TooMuchWork(
            f"{config}: what-if: the {len(jobs):,} layouts of {world:,} ranks the model admits "
            f"have {stages:,} pipeline stages, more than the {MAX_STAGES:,} a what-if projects "
            "(pipeline.model.whatif.MAX_STAGES); give --tp and --pp to project one"
        )
    return jobs, notes


def _factors(n: int) -> dict[int, int]:
    """The prime factors of ``n`` with their exponents (trial division: ``n`` <= 2^30)."""
    out: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
        p += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending, from its prime factors."""
    out = [1]
    for p, e in _factors(n).items():
        out = [d * p**k for d in out for k in range(e + 1)]
    return sorted(out)


def layout_count(world: int, cp: int) -> int:
    """How many (tp, pp) pairs split ``world`` ranks with ``cp``: ordered pairs whose product
    divides ``world / cp``, ``(e + 2)(e + 1)/2`` ways for each prime power ``p^e`` of it."""
    if world % cp:
        return 0
    count = 1
    for e in _factors(world // cp).values():
        count *= (e + 2) * (e + 1) // 2
    return count


def target(config: str | Path, overrides: dict[str, Any], second: str | Path | None) -> Job:
    """The layout to project: ``second`` job.yaml, else ``config`` with ``overrides``.

    The observed world size stays unless ``parallel.world_size`` asks for another: ``dp``,
    when not given, follows the other dimensions; given, the layout must fill the world.
    """
    if second is not None:
        return build_job(second, overrides)
    base = build_job(config, {})
    keys = {f"parallel.{d}": getattr(base.parallel, d) for d in WORLD_DIMS}
    keys |= {k: v for k, v in overrides.items() if v is not None}
    world = keys.pop("parallel.world_size", None) or base.parallel.world_size
    rest = 1
    for d in WORLD_DIMS:
        rest *= keys[f"parallel.{d}"] if d != "dp" else 1
    if "parallel.dp" not in overrides:
        if world % rest:
            raise ConfigError(
                f"tp*pp*cp = {rest} does not divide the world of {world} ranks; give --dp, "
                f"and --world-size to project another world size"
            )
        keys["parallel.dp"] = world // rest
    elif rest * keys["parallel.dp"] != world:
        asked = rest * keys["parallel.dp"]
        raise ConfigError(
            f"the layout asks for {asked} ranks (tp*pp*dp*cp), the observed world has "
            f"{world}; give --world-size {asked} to project another world size"
        )
    return build_job(config, keys | {"parallel.world_size": world})


def batch_note(base: Job, job: Job) -> str | None:
    """A line when the projected layout's world or global batch is not the observed one."""
    notes = []
    if job.parallel.world_size != base.parallel.world_size:
        notes.append(
            f"{job.parallel.world_size} ranks, the observed run's {base.parallel.world_size}"
        )
    a, b = base.batch.global_batch, job.batch.global_batch
    if a != b:
        notes.append(
            f"global batch {b} sequences, the observed run's {a} (give --global-batch {a} to "
            "keep it)"
        )
    return "; ".join(notes) or None


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
