"""Traffic formulas: message sizes and bytes on the wire, per collective and per dimension.

Pure functions of numbers, each citing the section of ``analytic-models.md`` it implements.
Conventions (§0): a message size ``M`` is the logical buffer of one collective (all_reduce:
the buffer; all_gather: the gathered output; reduce_scatter: the full input; all_to_all:
everything one rank contributes; send/recv: the tensor); ``W`` is what one rank *sends* for
it under an algorithm (§4.2). Sizes are bytes unless a name says elements.
:mod:`pipeline.model.predict` builds per-rank rows from :func:`wire_bytes`; the per-dimension
totals here are the closed forms of §6 that those rows must add up to.
"""

from __future__ import annotations

import math

#: Collective ops the model emits (the project's ``op`` vocabulary).
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "broadcast")


def wire_bytes(
    op: str, message: float, n: int, algorithm: str = "ring", *, intra: bool = True
) -> float:
    """Bytes one rank sends for one collective of message size ``message`` over ``n`` ranks (§4.2).

    Ring (and pairwise all-to-all): all_reduce ``2(n−1)/n·M``; all_gather, reduce_scatter,
    all_to_all ``(n−1)/n·M``. Tree all_reduce: ``2(n−1)/n·M`` on average over ranks (NCCL has
    no tree for the others, they stay ring). NVLS (NVLink SHARP, only inside one node, else
    ring): all_reduce ``(n+1)/n·M``, all_gather ``M/n`` (each rank writes its chunk once),
    reduce_scatter ``M`` (the switch reads the whole input). send ``M``; recv sends nothing.
    broadcast: ``M`` (root link, §4.1).
    """
    if n <= 1 and op not in ("send", "recv"):
        return 0.0
    if algorithm == "nvls" and intra:
        if op == "all_reduce":
            return (n + 1) / n * message
        if op == "all_gather":
            return message / n
        if op == "reduce_scatter":
            return float(message)
    if op == "all_reduce":
        return 2 * (n - 1) / n * message
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * message
    if op in ("send", "broadcast"):
        return float(message)
    if op == "recv":
        return 0.0
    raise ValueError(f"unknown op {op!r}")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests ``busbw / algbw`` (§4.1): 2(n−1)/n all_reduce, (n−1)/n AG/RS/A2A, else 1."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


# --------------------------------------------------------------------------- §6 closed forms


def tp_units(*, sequence_parallel: bool, recompute: str) -> int:
    """Units of ``(t−1)/t·b·s·h·e_a`` per layer per microbatch (§6.3–§6.5, §6.10's ``u``).

    8 without SP (4 all-reduces); 10 with SP as Megatron-core runs it (6 AG + 4 RS, the
    backward re-gather included); full recomputation repeats the forward's collectives:
    +4 (two more all-reduces, or two AG + two RS).
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
    """TP bytes one rank sends per layer per microbatch: ``u·(t−1)/t·b·s·h·e_a`` (§6.3, §6.4)."""  # noqa: E501
    u = tp_units(sequence_parallel=sequence_parallel, recompute=recompute)
    return u * (t - 1) / t * b * s * h * e_a


def tp_step_wire(*, m: int, layers_per_stage: float, **layer: object) -> float:
    """TP bytes per rank per step: ``m · L_st · tp_layer_wire`` (§6.3; interleaving-neutral)."""
    return m * layers_per_stage * tp_layer_wire(**layer)  # type: ignore[arg-type]


def pp_message(*, b: int, s: int, h: int, e_a: int, c: int = 1, t_sg: int = 1) -> float:
    """PP send/recv tensor: ``b·s·h·e_a / (c·t_sg)``, ``t_sg = t`` with SP/scatter-gather (§6.6)."""
    return b * s * h * e_a / (c * t_sg)


def pp_interior_send(*, m: int, v: int, **msg: int) -> float:
    """Bytes an interior pipeline rank sends per step: ``2·m·v·b·s·h·e_a/(c·t_sg)`` (§6.6)."""
    return 2 * m * v * pp_message(**msg)


def cp_layer_wire(*, b: int, s: int, kv_width: int, c: int, e_a: int) -> float:
    """CP bytes per layer per microbatch: ``3·(c−1)/c·b·s·kv_width·e_a`` (§6.7).

    ``kv_width`` = K+V elements per token held by this TP rank (``2·h_kv/t``, or
    ``2·max(h_kv/t, d_h)`` when KV heads are replicated over TP).
    """
    return 3 * (c - 1) / c * b * s * kv_width * e_a


def dp_step_wire(*, scheme: str, n: int, params: float, e_g: int, e_p: int) -> float:
    """Data-parallel bytes per rank per step for ``params`` elements over ``n`` ranks (§6.1, §6.2).

    ddp ``2(n−1)/n·Ψ·e_g``; zero1/zero2 ``(n−1)/n·Ψ·(e_g + e_p)``; zero3 (full shard)
    ``(n−1)/n·Ψ·(e_g + 2·e_p)``; fsdp_no_reshard ``(n−1)/n·Ψ·(e_g + e_p)``.
    """
    f = (n - 1) / n
    if scheme == "ddp":
        return 2 * f * params * e_g
    if scheme in ("zero1", "zero2", "fsdp_no_reshard"):
        return f * params * (e_g + e_p)
    if scheme == "zero3":
        return f * params * (e_g + 2 * e_p)
    raise ValueError(f"unknown data-parallel scheme {scheme!r}")


def ep_a2a_message(*, k: int, tokens: int, h: int, e: int, capacity_factor: float | None = None,
                   experts: int = 1) -> int:  # fmt: skip
    """All-to-all message ``M = k·T·h·e`` (§6.8); with a capacity factor every expert buffer
    holds ``ceil(C·k·T/E)`` tokens and padded slots are sent too: ``M = E·ceil(C·k·T/E)·h·e``.
    """
    if capacity_factor is None:
        return k * tokens * h * e
    slots = math.ceil(capacity_factor * k * tokens / experts)
    return int(experts * slots * h * e)


def ep_a2a_wire(*, k: int, tokens: int, h: int, e: int, ep: int, **kw: object) -> float:
    """Bytes one rank sends per all-to-all: ``k·T·h·e·(E_p−1)/E_p`` (§6.8)."""
    return (ep - 1) / ep * ep_a2a_message(k=k, tokens=tokens, h=h, e=e, **kw)  # type: ignore[arg-type]
