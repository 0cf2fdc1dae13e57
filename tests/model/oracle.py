"""Closed forms the model's per-rank rows must add up to: the tests' oracle, not product code.

Each function is a published per-GPU volume formula, written out on its own (it imports
nothing from :mod:`pipeline`), so that ``predict``'s row-by-row construction is checked
against an independent total. Conventions as in ``docs/model.md``: a message size ``M`` is
the logical buffer of one collective, ``W`` what one rank sends for it; sizes are bytes
unless a name says elements.

Sources: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM" (SC'21, arXiv:2104.04473); Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (MLSys'23, arXiv:2205.05198); Rajbhandari et al.,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC'20,
arXiv:1910.02054); Fedus et al., "Switch Transformers" (arXiv:2101.03961); NVIDIA/Megatron-LM
docs/source/api-guide/context_parallel.rst.
"""

from __future__ import annotations


def tp_units(*, sequence_parallel: bool, recompute: str) -> int:
    """Units of ``(t−1)/t·b·s·h·e_a`` one rank sends per layer per microbatch.

    8 without SP: 4 ring all-reduces of ``b·s·h`` (Narayanan sec. 3.2, "8bsh((t−1)/t)"). 10 with
    SP as Megatron-core runs it: 6 all-gathers + 4 reduce-scatters, the backward re-gathering
    the input of each column-parallel linear (Korthikanti sec. 4.2.2; Megatron-LM
    megatron/core/tensor_parallel/layers.py). Full recomputation repeats the forward's
    collectives: +4 (Korthikanti sec. 5).
    """
    u = 10 if sequence_parallel else 8
    return u + (4 if recompute == "full" else 0)


def tp_layer_wire(
    *,
    b: int,
    s: int,
    h: int,
    t: int,
    e_a: int,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """TP bytes one rank sends per layer per microbatch: ``u·(t−1)/t·b·s·h·e_a``."""
    u = tp_units(sequence_parallel=sequence_parallel, recompute=recompute)
    return u * (t - 1) / t * b * s * h * e_a


def tp_step_wire(*, m: int, layers_per_stage: float, **layer: object) -> float:
    """TP bytes per rank per step: ``m · L_st · tp_layer_wire`` (interleaving-neutral: a rank
    still runs its ``L_st`` layers once per microbatch)."""
    return m * layers_per_stage * tp_layer_wire(**layer)  # type: ignore[arg-type]


def pp_message(*, b: int, s: int, h: int, e_a: int, c: int = 1, t_sg: int = 1) -> float:
    """PP send/recv tensor ``b·s·h·e_a / (c·t_sg)``; ``t_sg = t`` with Narayanan sec. 4.1's
    scatter/gather (or sequence-parallel sharding), else 1."""
    return b * s * h * e_a / (c * t_sg)


def pp_interior_send(*, m: int, v: int, **msg: int) -> float:
    """Bytes an interior pipeline rank sends per step: activations downstream and gradients
    upstream, ``2·m·v`` tensors (Narayanan sec. 2.2)."""
    return 2 * m * v * pp_message(**msg)


def cp_layer_wire(*, b: int, s: int, kv_width: int, c: int, e_a: int) -> float:
    """CP bytes per layer per microbatch ``3·(c−1)/c·b·s·kv_width·e_a``: K,V all-gathered in
    the forward, again in the backward, and dK,dV reduce-scattered (Megatron-LM
    context_parallel.rst). ``kv_width`` = K+V elements per token on this TP rank."""
    return 3 * (c - 1) / c * b * s * kv_width * e_a


def dp_step_wire(*, scheme: str, n: int, params: float, e_g: int, e_p: int) -> float:
    """Data-parallel bytes per rank per step for ``params`` elements over ``n`` ranks (ZeRO sec. 7).

    ddp ``2(n−1)/n·Ψ·e_g`` (one all-reduce); zero1/zero2 and fsdp_no_reshard
    ``(n−1)/n·Ψ·(e_g + e_p)`` (reduce-scatter + one all-gather); zero3 ``(n−1)/n·Ψ·(e_g + 2·e_p)``
    (all-gathers in forward and backward).
    """
    f = (n - 1) / n
    if scheme == "ddp":
        return 2 * f * params * e_g
    if scheme in ("zero1", "zero2", "fsdp_no_reshard"):
        return f * params * (e_g + e_p)
    if scheme == "zero3":
        return f * params * (e_g + 2 * e_p)
    raise ValueError(f"unknown data-parallel scheme {scheme!r}")


def ep_a2a_wire(*, k: int, tokens: int, h: int, e: int, ep: int) -> float:
    """Bytes one rank sends per dropless all-to-all, uniform routing: ``k·T·h·e·(E_p−1)/E_p``
    (each of ``T`` tokens goes to ``k`` experts; the share on other ranks leaves the GPU)."""
    return (ep - 1) / ep * k * tokens * h * e


def narayanan_params(*, layers: int, hidden: int, vocab: int, seq_len: int) -> float:
    """Narayanan eq. (2), GPT with ``f = 4h`` and tied vocabulary:
    ``N = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h))``."""
    n_l, h = layers, hidden
    return 12 * n_l * h**2 * (1 + 13 / (12 * h) + (vocab + seq_len) / (12 * n_l * h))


def narayanan_flops_per_iteration(
    *, batch: int, seq_len: int, layers: int, hidden: int, vocab: int
) -> float:
    """Narayanan eq. (3), full recomputation: ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))``."""
    b, s, n_l, h = batch, seq_len, layers, hidden
    return 96 * b * s * n_l * h**2 * (1 + s / (6 * h) + vocab / (16 * n_l * h))
