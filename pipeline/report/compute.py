"""Report section: compute next to communication, the model's FLOPs and memory for the job's
layout beside the step time measured in its traces (achieved FLOP/s per rank)."""

from __future__ import annotations

from pipeline.errors import DatasetError
from pipeline.model.compute import compute_summary
from pipeline.model.whatif import observed_in
from pipeline.report import fmt
from pipeline.report.context import Context
from pipeline.report.page import Facts, Note, Section


def section(ctx: Context) -> Section:
    """FLOPs per step, memory per rank of the first stage and achieved TFLOP/s per rank."""
    sec = Section("compute", "Compute")
    job = ctx.config
    if job is None:
        return sec.add(
            Note("No compute model: it needs the job's job.yaml (report --config).", "missing")
        )
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
    try:
        obs = observed_in(ctx.con, ctx.job, str(ctx.dataset))
    except DatasetError:
        sec.add(Facts(pairs))
        return sec.add(
            Note("No measured step: time_breakdown has no profiled step of this job.", "missing")
        )
    per_rank = summary["model_flops"] / (obs.step_s * job.parallel.world_size)
    pairs += [
        ("measured step (median over ranks and steps)", fmt.duration(obs.step_s * 1e9)),
        ("measured compute in it", fmt.duration(obs.compute_s * 1e9)),
        ("achieved model TFLOP/s per rank", f"{per_rank / 1e12:.4g}"),
    ]
    sec.add(Facts(pairs))
    return sec.add(
        Note(
            "MFU is the achieved model FLOP/s per rank over the GPU's peak: "
            "tokenwire predict --config job.yaml --from DATASET --peak-tflops P prints it."
        )
    )
