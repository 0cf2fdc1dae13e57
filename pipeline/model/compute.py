"""Compute and memory next to communication: FLOPs per step, MFU and memory per rank.

This module owns the step's floating-point work (model FLOPs, and the hardware FLOPs that
recomputation adds), model FLOPs utilisation for an observed step time, and the bytes one
rank holds: parameters, gradients and optimizer state (mixed-precision Adam, sharded by the
ZeRO stage, Rajbhandari et al., arXiv:1910.02054) and activations (Korthikanti et al.,
arXiv:2205.05198, Table 2). Formulas and sources are in ``docs/model.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ConfigError
from ..model import params as P
from ..model.config import DTYPE_BYTES, Job

#: Adam state per parameter: fp32 master weights, momentum and variance (ZeRO's ``K = 12``);
#: with fp32 parameters there is no separate master copy (``K = 8``).
ADAM_BYTES_MIXED = 12
ADAM_BYTES_FP32 = 8


def step_flops(job: Job) -> dict[str, float]:
    """Model FLOPs of one step (``flops_per_token · B·s``) and the hardware FLOPs run.

    Full recomputation runs every layer's forward twice (``8/6`` of the layer FLOPs);
    selective recomputation reruns only the attention score and context matmuls (a third of
    their forward-and-backward term), Korthikanti et al., arXiv:2205.05198, Section 5.
    """
    m, tokens = job.model, job.tokens_per_step
    model_flops = P.flops_per_token(m) * tokens
    if job.recompute == "full":
        layer = P.flops_per_token(m) - 6 * _head_elements(job)
        extra = layer / 3
    elif job.recompute == "selective":
        extra = m.layers * P.attention_flops_per_token(m) / 3
    else:
        extra = 0
    return {
        "model_flops": float(model_flops),
        "hardware_flops": float(model_flops + extra * tokens),
    }


def _head_elements(job: Job) -> int:
    """LM-head matmul weights, which full recomputation of the layers does not rerun."""
    return P.embedding_params(job.model)


def mfu(job: Job, step_time_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: ``model FLOPs per step / (step time · n · peak per GPU)``
    (Chowdhery et al., PaLM, arXiv:2204.02311, Appendix B)."""
    if not (step_time_s > 0 and peak_flops > 0):
        raise ConfigError(
            f"MFU needs a positive step time and peak (got {step_time_s}, {peak_flops})"
        )
    return step_flops(job)["model_flops"] / (step_time_s * job.parallel.world_size * peak_flops)


def state_bytes(
    elements: float, scheme: str, shards: int, param_bytes: int, grad_bytes: int
) -> dict[str, float]:
    """Parameters, gradients and Adam state of ``elements`` weights, by ZeRO stage.

    ``ddp`` keeps all three whole; ``zero1`` shards the optimizer state, ``zero2`` also the
    gradients, ``zero3`` (and FSDP) also the parameters, each over ``shards`` ranks
    (arXiv:1910.02054, Figure 1).
    """
    adam = ADAM_BYTES_FP32 if param_bytes == 4 else ADAM_BYTES_MIXED
    sharded = {"ddp": 0, "zero1": 1, "zero2": 2}.get(scheme, 3)
    return {
        "params": elements * param_bytes / (shards if sharded >= 3 else 1),
        "grads": elements * grad_bytes / (shards if sharded >= 2 else 1),
        "optimizer": elements * adam / (shards if sharded >= 1 else 1),
    }


def layer_activation_bytes(job: Job) -> float:
    """Activation bytes one transformer layer keeps for one micro-batch (16-bit activations).

    Korthikanti et al., arXiv:2205.05198, Table 2, with ``s`` the rank's sequence share
    ``s/c`` under context parallelism: ``sbh(34 + 5as/h)`` without parallelism,
    ``sbh(10 + 24/t + 5as/(ht))`` with TP, ``sbh/t·(34 + 5as/h)`` with TP and sequence
    parallelism; selective recomputation drops the ``5as/h`` term, full keeps ``2sbh``
    (``/t`` with SP).
    """
    m, par = job.model, job.parallel
    s, b, h, a, t = m.seq_len / par.cp, job.batch.micro_batch, m.hidden, m.heads, par.tp
    sbh = s * b * h
    attn = 0.0 if job.recompute == "selective" else 5 * a * s / h
    sp = par.sequence_parallel or t == 1
    if job.recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if sp:
        return sbh / t * (34 + attn)
    return sbh * (10 + 24 / t + attn / t)


def in_flight_microbatches(job: Job, pp_rank: int) -> int:
    """Micro-batches whose activations stage ``pp_rank`` holds at once under 1F1B: ``p - r``
    (the first stage ``p``), at most the ``m`` of the step (Narayanan et al.,
    arXiv:2104.04473, Section 2.2)."""
    return max(1, min(job.parallel.pp - pp_rank, job.microbatches))


@dataclass(frozen=True)
class Memory:
    """Bytes one rank holds during a step."""

    params: float
    grads: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        """Sum of the four."""
        return self.params + self.grads + self.optimizer + self.activations


def rank_memory(job: Job, pp_rank: int) -> Memory:
    """Memory of a rank of pipeline stage ``pp_rank``.

    Dense weights are sharded over the ``d·c`` data-parallel ranks, expert weights over the
    ``d·c/E_p`` expert-data-parallel ranks (Megatron's ``expert_data_parallel``).
    """
    par, dt = job.parallel, job.dtypes
    units = P.rank_units(job, pp_rank)
    dense = sum(u.elements for u in units if u.group == "dense")
    expert = sum(u.elements for u in units if u.group == "expert")
    e_p, e_g = DTYPE_BYTES[dt.params], DTYPE_BYTES[dt.grad_reduce]
    d = state_bytes(dense, par.dp_scheme, par.dp * par.cp, e_p, e_g)
    e = state_bytes(expert, par.dp_scheme, max(1, par.dp * par.cp // par.ep), e_p, e_g)
    layers = len(P.stage_layers(job, pp_rank))
    act = layer_activation_bytes(job) * layers * in_flight_microbatches(job, pp_rank)
    return Memory(d["params"] + e["params"], d["grads"] + e["grads"],
                  d["optimizer"] + e["optimizer"], act)  # fmt: skip


def compute_summary(
    job: Job, pp_rank: int, step_time_s: float | None = None, peak_flops: float | None = None
) -> dict[str, Any]:
    """FLOPs per step, MFU (when a step time and a peak are given) and the rank's memory."""
    out: dict[str, Any] = dict(step_flops(job))
    if step_time_s is not None and peak_flops is not None:
        out["mfu"] = mfu(job, step_time_s, peak_flops)
    mem = rank_memory(job, pp_rank)
    out["memory_bytes"] = asdict(mem) | {"total": mem.total}
    return out


def format_compute(summary: dict[str, Any]) -> str:
    """The plain-text lines of :func:`compute_summary` under ``predict``'s table."""
    mem = summary["memory_bytes"]
    gib = {k: v / 2**30 for k, v in mem.items()}
    lines = [
        f"compute: {summary['model_flops']:.4g} model FLOPs, "
        f"{summary['hardware_flops']:.4g} hardware FLOPs per step",
        f"memory per rank (GiB): params {gib['params']:.2f}, grads {gib['grads']:.2f}, "
        f"optimizer {gib['optimizer']:.2f}, activations {gib['activations']:.2f}, "
        f"total {gib['total']:.2f}",
    ]
    if "mfu" in summary:
        lines.append(f"MFU: {summary['mfu']:.1%}")
    return "\n".join(lines)


def phase_split(job: Job, compute_s: float) -> tuple[float, float]:
    """``compute_s`` split into forward and backward: the forward is a third of the model
    FLOPs (``2N`` of ``6N`` per token), the backward the rest with what recomputation adds."""
    f = step_flops(job)
    forward = compute_s * f["model_flops"] / 3 / f["hardware_flops"]
    return forward, compute_s - forward
