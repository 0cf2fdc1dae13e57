"""Report section: compute next to communication, the model's FLOPs and memory for the job's
layout beside the step time measured in its traces (achieved FLOP/s per rank), and the what-if
table: every tp x pp x dp of the run's world projected from that measured step
(:mod:`pipeline.model.whatif`), fastest first."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import DatasetError
from ..report import fmt
from ..report.context import Context
from ..report.page import Facts, Note, Section, Table

if TYPE_CHECKING:
    from ..model.config import Job
    from ..model.whatif import Observed, Projection

#: Layouts projected in the report at most: each costs a prediction of every pipeline stage,
#: and a world with more tp x pp x dp factorings than this is left to ``predict --from``.
MAX_WHATIF_LAYOUTS = 64


@dataclass
class WhatIf:
    """The measured step and every layout projected from it, worked out once for the
    compute section and the verdict; ``missing`` says why a part is absent."""

    obs: Observed | None = None
    rows: list[Projection] = field(default_factory=list)
    missing: str | None = None
    figures: str = ""


def what_if(ctx: Context) -> WhatIf:
    """The measured step of the report's job and every tp x pp x dp of its world projected
    from it (:mod:`pipeline.model.whatif`), fastest first."""
    job = ctx.config
    if job is None:
        return WhatIf(missing="No compute model: it needs the job's job.yaml (report --config).")
    from ..model.whatif import observed_in

    try:
        obs = observed_in(ctx.con, ctx.job, str(ctx.dataset))
    except DatasetError:
        return WhatIf(missing="No measured step: time_breakdown has no profiled step of this job.")
    if ctx.config_path is None:
        return WhatIf(
            obs, missing="No what-if table: it needs the job.yaml's path (report --config)."
        )
    from ..model import whatif

    try:
        targets = whatif.layouts(ctx.config_path, job.parallel.world_size, {})
    except whatif.TooMuchWork as exc:
        return WhatIf(obs, missing=f"No what-if table: {str(exc).split(': ', 2)[-1]}")
    if len(targets) > MAX_WHATIF_LAYOUTS:
        return WhatIf(
            obs,
            missing=f"No what-if table: {len(targets)} layouts of {job.parallel.world_size} "
            "ranks; tokenwire predict --config job.yaml --from DATASET --tp T --pp P "
            "projects one.",
        )
    job = whatif.with_observed_fits(job, obs)
    targets = [dataclasses.replace(t, network=job.network) for t in targets]
    return WhatIf(obs, whatif.project(job, obs, targets), figures=_figures(job, obs))


def section(ctx: Context, projected: WhatIf) -> Section:
    """FLOPs per step, memory per rank of the first stage and achieved TFLOP/s per rank."""
    sec = Section("compute", "Compute and what-if")
    job = ctx.config
    if job is None:
        return sec.add(Note(projected.missing or "", "missing"))
    # (the model is imported only for a report with a job.yaml)
    from ..model.compute import compute_summary

    summary = compute_summary(job, 0)
    mem = summary["memory_bytes"]
    pairs = [
        ("model FLOPs per step", f"{summary['model_flops']:.4g}"),
        ("hardware FLOPs per step (with recomputation)", f"{summary['hardware_flops']:.4g}"),
        ("memory of a first-stage rank", fmt.nbytes(mem["total"])),
        ("  parameters, gradients, optimizer",
         " / ".join(fmt.nbytes(mem[k]) for k in ("params", "grads", "optimizer"))),
        ("  activations", fmt.nbytes(mem["activations"])),
    ]  # fmt: skip
    obs = projected.obs
    if obs is None:
        sec.add(Facts(pairs))
        return sec.add(Note(projected.missing or "", "missing"))
    per_rank = summary["model_flops"] / (obs.step_s * job.parallel.world_size)
    pairs += [
        ("measured step (median over ranks and steps)", fmt.duration(obs.step_s * 1e9)),
        ("measured compute in it", fmt.duration(obs.compute_s * 1e9)),
        ("achieved model TFLOP/s per rank", f"{per_rank / 1e12:.4g}"),
    ]
    peak = job.peak_flops
    if peak is not None:
        pairs.append((f"MFU (peak {peak / 1e12:g} TFLOP/s per GPU, {_peak_from(job)})",
                      f"{per_rank / peak:.2%}"))  # fmt: skip
    sec.add(Facts(pairs))
    if peak is None:
        sec.add(
            Note(
                "MFU is the achieved model FLOP/s per rank over the GPU's peak: give "
                "hardware.peak_tflops or hardware.accelerator in the job.yaml "
                "(docs/job-yaml.md)."
            )
        )
    return sec.add(_what_if_table(projected))


def _figures(job: Job, obs: Observed) -> str:
    """Which alpha-beta figures the table used, and the measured compute's split."""
    fits = job.network.fitted
    if fits:
        used = "; ".join(
            f"{f.op} over {f.nranks} ranks fitted to {f.source} ({f.points} sizes): "
            f"alpha {f.alpha_us:.3g} us, bus bandwidth {f.busbw_GBps:.4g} GB/s"
            for f in fits
        )
    else:
        used = ("no nccl-tests table or traced collectives of two sizes or more to fit: "
                "the network section's figures (docs/model.md, Time)")  # fmt: skip
    split = ", ".join(f"{c} {share:.0%}" for c, share in obs.shares)
    return f"Time figures: {used}. Measured compute by layers: {split}."


def _peak_from(job: Job) -> str:
    """Where the peak came from, for the MFU line."""
    hw = job.hardware
    if hw.peak_tflops is not None:
        return "hardware.peak_tflops"
    return f"{hw.accelerator} datasheet, {job.dtypes.activations}"


def _what_if_table(projected: WhatIf) -> Table | Note:
    """Every tp x pp x dp of the run's world, projected from the measured step."""
    if projected.missing is not None:
        return Note(projected.missing, "missing")
    rows = projected.rows
    return Table(
        ["layout", "compute", "communication", "step", "bytes per token", ""],
        [
            [
                p.layout,
                p.compute_s * 1e9,
                p.comm_s * 1e9,
                p.step_s * 1e9,
                f"{p.bytes_per_token:.4g}",
                "observed" if p.observed else "",
            ]
            for p in rows
        ],  # fmt: skip
        caption=(
            "What-if: the step of every tp x pp x dp of this world, fastest first. Compute is "
            "the measured compute of each class of layers scaled by its work under the layout, "
            "with the pipeline bubble; communication the model's alpha-beta time of the "
            "busiest stage less what compute hides, calibrated on the measured step "
            "(tokenwire predict --from prints the same table). " + projected.figures
        ),
        numeric=[False, True, True, True, True, False],
        units=[None, "ns", "ns", "ns", None, None],
    )
