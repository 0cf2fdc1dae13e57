"""Warnings a person would give about a layout: it does not fit the accelerator's memory, or
its pipeline runs fewer micro-batches than it has stages.

The accelerator is the one ``job.yaml``'s ``hardware.accelerator`` names, else the one the
traces name (the ``ranks`` table's ``gpu_name``, such as ``NVIDIA H100 80GB HBM3``). A rank
holds its parameters, gradients and mixed-precision Adam state, sharded by the ZeRO stage
(16 bytes per parameter unsharded, Rajbhandari et al., arXiv:1910.02054, section 3.1), and
the activations of the micro-batches its pipeline stage keeps in flight (Korthikanti et al.,
arXiv:2205.05198, Table 2): :func:`pipeline.model.compute.rank_memory`. A pipeline of ``p``
stages running ``m`` micro-batches a step under 1F1B idles ``(p − 1)/(m + p − 1)`` of the
step (``(p − 1)/(v·m + p − 1)`` interleaved; Narayanan et al., arXiv:2104.04473, section 2.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..model.compute import rank_memory
from ..model.config import Job
from ..model.presets import ACCELERATOR_MEMORY_BYTES, ACCELERATORS

#: Accelerator names as drivers report them (CUDA's device name, ROCm's marketing name) ->
#: ``hardware.accelerator``; the first match wins, so the PCIe H100 comes before the SXM. A
#: Grace Hopper superchip (``GH200 480GB``: CPU and GPU memory together) is none of these.
_GPU_NAMES = (
    (re.compile(r"(?<!G)H200", re.I), "h200"),
    (re.compile(r"H100.*PCIe", re.I), "h100-pcie"),
    (re.compile(r"H100", re.I), "h100-sxm"),
    (re.compile(r"A100", re.I), "a100"),
    (re.compile(r"MI300X", re.I), "mi300x"),
)
#: The memory a device name states (``A100-SXM4-40GB``, ``H100 80GB HBM3``), in GB.
_NAMED_GB = re.compile(r"(\d+)\s*GB", re.I)


@dataclass(frozen=True)
class Accelerator:
    """One GPU of the job: its ``hardware.accelerator`` name, its memory and where they came
    from (``job.yaml hardware.accelerator`` or ``traces: <device name>``)."""

    name: str
    memory_bytes: int
    source: str

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype`` (None where the datasheet gives none)."""
        tflops = ACCELERATORS[self.name].get(dtype)
        return None if tflops is None else tflops * 1e12


def accelerator_of(gpu_name: str) -> Accelerator | None:
    """The accelerator a device name names (None for one the tables do not hold)."""
    for pattern, name in _GPU_NAMES:
        if pattern.search(gpu_name):
            stated = _NAMED_GB.search(gpu_name)
            memory = int(stated.group(1)) * 2**30 if stated else ACCELERATOR_MEMORY_BYTES[name]
            return Accelerator(name, memory, f"traces: {gpu_name}")
    return None


def job_accelerator(job: Job) -> Accelerator | None:
    """The accelerator ``job.yaml``'s ``hardware`` names (None when it names none)."""
    name = job.hardware.accelerator
    if name is None:
        return None
    return Accelerator(name, ACCELERATOR_MEMORY_BYTES[name], "job.yaml hardware.accelerator")


def traced_accelerator(con: Any, job_name: str) -> Accelerator | None:
    """The accelerator the ``ranks`` table of ``job_name`` names: the device name most of its
    ranks report (None when no rank names a GPU the tables hold)."""
    from ..dataset.sql_files import sql_text

    for (gpu_name,) in con.execute(sql_text(__package__, "gpu.sql"), [job_name]).fetchall():
        found = accelerator_of(gpu_name)
        if found is not None:
            return found
    return None


def describe(job: Job) -> str:
    """The layout as the what-if table names it."""
    p = job.parallel
    return f"tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp} ep={p.ep} mb={job.batch.micro_batch}"


def bubble_share(job: Job) -> float:
    """Share of the step a pipeline idles: ``(p − 1)/(v·m + p − 1)`` (0 without pipeline)."""
    p, v, m = job.parallel.pp, job.parallel.vpp, job.microbatches
    return (p - 1) / (v * m + p - 1)


def bubble_warning(job: Job) -> dict[str, Any] | None:
    """A warning when the pipeline runs fewer micro-batches per step than it has stages."""
    p, m = job.parallel.pp, job.microbatches
    if p == 1 or m >= p:
        return None
    message = (
        f"{describe(job)}: {m} micro-batch{'es' if m > 1 else ''} per step for {p} pipeline "
        f"stages; the bubble leaves {bubble_share(job):.0%} of the step idle "
        f"((p-1)/(v*m+p-1), Narayanan et al. arXiv:2104.04473); raise batch.global_batch or "
        f"lower batch.micro_batch to at least {p} micro-batches"
    )
    return {"kind": "bubble", "layout": describe(job), "bubble_share": bubble_share(job),
            "message": message}  # fmt: skip


def peak_memory(job: Job) -> tuple[int, Any]:
    """The pipeline stage whose ranks hold the most bytes, and their :class:`Memory`: the
    first stage (the embedding, and the most micro-batches in flight under 1F1B) or the last
    (the LM head); the stages between hold fewer activations and no embedding."""
    stages = ((s, rank_memory(job, s)) for s in sorted({0, job.parallel.pp - 1}))
    return max(stages, key=lambda sm: sm[1].total)


def memory_warning(job: Job, acc: Accelerator | None) -> dict[str, Any] | None:
    """A warning when a rank's parameters, gradients, optimizer state and activations exceed
    the accelerator's memory (None when they fit or no accelerator is known)."""
    if acc is None:
        return None
    stage, mem = peak_memory(job)
    if mem.total <= acc.memory_bytes:
        return None
    gib = 2**30
    message = (
        f"{describe(job)} does not fit: a rank of pipeline stage {stage} holds "
        f"{mem.total / gib:.1f} GiB (params {mem.params / gib:.1f}, grads {mem.grads / gib:.1f}, "
        f"optimizer {mem.optimizer / gib:.1f}, activations {mem.activations / gib:.1f}; "
        f"arXiv:1910.02054, arXiv:2205.05198), more than the {acc.memory_bytes / gib:.0f} GiB "
        f"of one {acc.name} ({acc.source})"
    )
    return {"kind": "memory", "layout": describe(job), "memory_bytes": mem.total,
            "capacity_bytes": acc.memory_bytes, "message": message}  # fmt: skip


def layout_warnings(job: Job, acc: Accelerator | None) -> list[dict[str, Any]]:
    """The memory and bubble warnings of one layout, in that order."""
    found = (memory_warning(job, acc), bubble_warning(job))
    return [w for w in found if w is not None]


def accelerator_summary(acc: Accelerator | None) -> dict[str, Any] | None:
    """The accelerator as ``--format json`` carries it."""
    if acc is None:
        return None
    return {"name": acc.name, "memory_bytes": acc.memory_bytes, "source": acc.source}
