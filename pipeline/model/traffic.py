"""Message sizes and bytes on the wire, per collective.

Pure functions of numbers. Conventions (``docs/model.md``): a message size ``M`` is the
logical buffer of one collective (all_reduce: the buffer; all_gather: the gathered output;
reduce_scatter: the full input; all_to_all: everything one rank contributes; send/recv: the
tensor); ``W`` is what one rank *sends* for it under an algorithm. Sizes are bytes unless a
name says elements. :mod:`pipeline.model.predict` builds per-rank rows from
:func:`wire_bytes`; the per-dimension closed forms those rows must add up to are the tests'
oracle (``tests/model/oracle.py``).
"""

from __future__ import annotations

import math

from ..vocab import bus_factor

#: Collective ops the model emits (the project's ``op`` vocabulary).
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "broadcast")


def wire_bytes(
    op: str, message: float, n: int, algorithm: str = "ring", *, intra: bool = True
) -> float:
    """Bytes one rank sends for one collective of message size ``message`` over ``n`` ranks.

    Ring (and pairwise all-to-all): all_reduce ``2(n−1)/n·M``; all_gather, reduce_scatter,
    all_to_all ``(n−1)/n·M``. Tree all_reduce: ``2(n−1)/n·M`` on average over ranks (NCCL has
    no tree for the others, they stay ring). NVLS (NVLink SHARP, only inside one node, else
    ring): all_reduce ``(n+1)/n·M``, all_gather ``M/n`` (each rank writes its chunk once),
    reduce_scatter ``M`` (the switch reads the whole input; NVIDIA/nccl issue #1506). send
    ``M``; recv sends nothing. broadcast: ``M`` (root link, as in nccl-tests
    doc/PERFORMANCE.md).
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
    if op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "broadcast"):
        return bus_factor(op, n) * message
    if op == "recv":
        return 0.0
    raise ValueError(f"unknown op {op!r}")


def node_split(
    op: str, wire: float, message: float, n: int, local: int, *, crosses: bool
) -> tuple[float, float]:
    """``wire`` (what one rank sends for one collective over ``n`` ranks) split into bytes
    over links inside the node and bytes across nodes: ``(intra, inter)``.

    ``local`` is how many of the ``n`` ranks share this rank's node (itself included) and
    ``crosses`` whether the group spans more than one node. All-to-all (pairwise: ``M/n``
    to each peer) sends ``(local−1)/n·M`` inside and ``(n−local)/n·M`` across. A send
    goes all one way (its pair is on one node or not). Ring and tree collectives: NCCL lays
    its rings out node by node (``src/graph/rings.cc``, NCCL 2.21), so a ring over ``g``
    nodes has ``g`` of its ``n`` links between nodes and each link carries ``wire``; per rank
    on average ``g/n·wire`` crosses, ``wire/local`` with ``g = n/local`` (exact when every
    node holds the same number of the group's ranks). Trees are counted the same way.
    """
    if not crosses or wire == 0:
        return float(wire), 0.0
    if op in ("send", "recv", "broadcast"):
        return 0.0, float(wire)
    if op == "all_to_all":
        return (local - 1) / n * message, (n - local) / n * message
    inter = wire / local
    return wire - inter, inter


def hierarchical_split(op: str, message: float, n: int, local: int) -> tuple[float, float]:
    """Bytes one rank sends inside and across nodes for one two-level collective over ``n``
    ranks, ``local`` on each node and ``g = n/local`` nodes: a ring inside the node, then a
    ring across nodes between the ranks of the same local index (one per rail), then the
    inside ring again (Horovod's hierarchical all-reduce, ``NCCLHierarchicalAllreduce`` in
    ``horovod/common/ops/nccl_operations.cc``: reduce-scatter in the node, all-reduce across,
    all-gather in the node).

    All-reduce ``2(local−1)/local·M`` inside and ``2(g−1)/g·M/local`` across; all-gather and
    reduce-scatter half of each. Other ops have no two-level form (``ValueError``).
    """
    if op not in ("all_reduce", "all_gather", "reduce_scatter"):
        raise ValueError(f"no hierarchical {op}")
    # each level is a ring, so each sends its ring's share of what it carries
    return bus_factor(op, local) * message, bus_factor(op, n / local) * message / local


def ep_a2a_message(*, k: int, tokens: int, h: int, e: int, capacity_factor: float | None = None,
                   experts: int = 1) -> int:  # fmt: skip
    """All-to-all message ``M = k·T·h·e``; with a capacity factor ``C`` (Switch Transformers,
    arXiv:2101.03961) every expert buffer holds ``ceil(C·k·T/E)`` tokens and padded slots are
    sent too: ``M = E·ceil(C·k·T/E)·h·e``.
    """
    if capacity_factor is None:
        return k * tokens * h * e
    slots = math.ceil(capacity_factor * k * tokens / experts)
    return int(experts * slots * h * e)


def node_limited_ep_bytes(
    *, top_k: int, hidden: int, max_nodes: int, nodes: int,
    dispatch_bytes: int = 1, combine_bytes: int = 2,
) -> dict[str, int]:  # fmt: skip
    """Upper bound on one token's expert-parallel bytes inside and across nodes under
    DeepSeek-V3's node-limited routing (arXiv:2412.19437, sections 2.1.2, 3.2.2, 3.3.4).

    A token's ``top_k`` routed experts lie on at most ``max_nodes`` nodes; it crosses the
    scale-out network once per other node it goes to (at most ``min(max_nodes, nodes − 1)``
    of the EP group's ``nodes``) and is forwarded over NVLink to each of its ``top_k``
    experts. Dispatch sends ``hidden`` elements in FP8 (``dispatch_bytes``), combine returns
    them in BF16 (``combine_bytes``).
    """
    cross = min(max_nodes, nodes - 1)
    return {
        "dispatch_inter": cross * hidden * dispatch_bytes,
        "dispatch_intra": top_k * hidden * dispatch_bytes,
        "combine_inter": cross * hidden * combine_bytes,
        "combine_intra": top_k * hidden * combine_bytes,
    }
