"""Time of one collective: the latency-bandwidth (alpha-beta) model, and its fit to nccl-tests.

``t = α + W / (η·B)``: a latency ``α`` that grows with the algorithm's step count and a
transfer of the ``W`` wire bytes one rank sends at the achievable share ``η`` of the link's
bandwidth ``B``. The latency follows NCCL's own tuning model (``src/graph/tuning.cc``,
``ncclTopoTuneModel``, NCCL 2.18 to 2.21): a base latency plus a per-step latency for each
step inside the node and each step between nodes; ring all-reduce takes ``2(n−1)`` steps of
which ``2(g−1)`` cross nodes, all-gather and reduce-scatter ``n−1`` of which ``g−1`` cross,
tree all-reduce ``2((n/g−1)`` steps inside plus ``⌈log2 g⌉`` between nodes), NVLS one step.
All-to-all is the pairwise exchange (Thakur, Rabenseifner and Gropp 2005, "Optimization of
Collective Communication Operations in MPICH"): ``n−1`` steps, ``n−n_l`` of them to other
nodes, its inside and across parts moving at once. A send is one step.

:func:`fit` finds ``α`` and the bus bandwidth per collective from an nccl-tests table
(``bandwidth_tests``): nccl-tests reports ``busbw = algbw·factor`` with ``factor`` the ring
factor of ``pipeline.model.traffic.wire_bytes`` (nccl-tests ``doc/PERFORMANCE.md``), so its
time is ``α + W/busbw`` with the same ``W`` this model sends.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.ingest.vocab import bus_factor_expr
from pipeline.model.config import Job, Network

#: nccl-tests' ops the fit can use, in the model's op names.
FIT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass(frozen=True)
class Fitted:
    """Alpha and beta of one collective fitted to an nccl-tests table: ``t = α + W/busbw``."""

    op: str
    nranks: int
    alpha_us: float
    busbw_GBps: float
    points: int
    source: str


def steps(op: str, n: int, nodes: int, algorithm: str, *, intra: bool) -> tuple[int, int]:
    """Latency steps ``(inside the node, between nodes)`` of one collective over ``n`` ranks
    on ``nodes`` nodes (``tree`` applies to all-reduce and ``nvls`` to one node, as in NCCL;
    others fall back to ring)."""
    if op in ("send", "recv"):
        return (1, 0) if nodes == 1 else (0, 1)
    if algorithm == "nvls" and intra and op in ("all_reduce", "all_gather", "reduce_scatter"):
        return 1, 0
    if algorithm == "tree" and op == "all_reduce":
        return 2 * (-(-n // nodes) - 1), 2 * math.ceil(math.log2(nodes)) if nodes > 1 else 0
    if op == "all_to_all":  # pairwise: one step per peer, those on other nodes between
        return n // nodes - 1, n - n // nodes
    total = 2 * (n - 1) if op == "all_reduce" else n - 1
    inter = 0 if nodes == 1 else (2 * (nodes - 1) if op == "all_reduce" else nodes - 1)
    return total - inter, inter


def fit(table: pl.DataFrame, source: str = "") -> list[Fitted]:
    """``α`` and bus bandwidth per (op, ranks) of an nccl-tests ``bandwidth_tests`` table.

    Least squares on the out-of-place rows of ``t = α + W·β`` weighted by ``1/t`` (relative
    error, so the small messages that set ``α`` count as much as the large ones that set
    ``β``); ``W`` is the ring wire bytes of the message. Fits with a non-positive ``β`` or
    fewer than 2 sizes are left out.
    """
    n = pl.col("nranks").cast(pl.Float64)
    factor = bus_factor_expr(pl.col("op"), n)
    w, t, q = pl.col("w"), pl.col("time_us"), pl.col("q")
    sums = (
        table.filter(
            (pl.col("placement") == "out_of_place")
            & pl.col("op").is_in(FIT_OPS)
            & (pl.col("time_us") > 0)
            & (pl.col("nranks") > 1)
        )
        .with_columns(w=pl.col("size_bytes") * factor, q=1 / (t * t))
        .group_by(["op", "nranks"], maintain_order=True)
        .agg(
            points=pl.col("w").n_unique(),
            s=q.sum(),
            sx=(q * w).sum(),
            sy=(q * t).sum(),
            sxx=(q * w * w).sum(),
            sxy=(q * w * t).sum(),
        )  # fmt: skip
        .filter(pl.col("points") >= 2)
        .with_columns(det=pl.col("s") * pl.col("sxx") - pl.col("sx") ** 2)
        .with_columns(
            beta=(pl.col("s") * pl.col("sxy") - pl.col("sx") * pl.col("sy")) / pl.col("det")
        )
        .with_columns(alpha=(pl.col("sy") - pl.col("beta") * pl.col("sx")) / pl.col("s"))
        .filter(pl.col("beta") > 0)
    )
    return [
        Fitted(r["op"], int(r["nranks"]), max(r["alpha"], 0.0), 1e-3 / r["beta"], r["points"],
               source)
        for r in sums.iter_rows(named=True)
    ]  # fmt: skip


def call_time(
    net: Network,
    op: str,
    n: int,
    local: int,
    *,
    wire: float,
    intra: float,
    inter: float,
    message: float,
) -> tuple[float, str]:
    """Seconds of one collective and which figures gave them (``fit`` or ``model``).

    ``wire``, ``intra`` and ``inter`` are this rank's bytes for it (total, inside and across
    nodes; a recv passes the transfer it waits for). A fitted op takes ``α + W/busbw``
    (the rank count nearest ``n``); otherwise the latency steps of :func:`steps` and the
    transfer at ``efficiency`` times the line rate: rings and trees run at their slowest
    link (the group's link class), an all-to-all moves its inside and across parts at once.
    """
    f = fitted_for(net.fitted, op, n)
    if f is not None:
        return f.alpha_us * 1e-6 + wire / (f.busbw_GBps * 1e9), "fit"
    nodes = -(-n // local)
    s_in, s_out = steps(op, n, nodes, net.algorithm, intra=nodes == 1)
    lat = net.base_latency_us + s_in * net.intra_node_latency_us
    lat += s_out * net.inter_node_latency_us
    b_in = net.efficiency * net.intra_node_GBps * 1e9
    b_out = net.efficiency * net.inter_node_GBps * 1e9
    if op == "all_to_all":
        moved = max(intra / b_in, inter / b_out)
    else:
        moved = wire / (b_in if nodes == 1 else b_out)
    return lat * 1e-6 + moved, "model"


def fitted_for(fits: tuple[Fitted, ...], op: str, n: int) -> Fitted | None:
    """The fit of ``op`` whose rank count is nearest ``n`` (None when ``op`` has none)."""
    same = [f for f in fits if f.op == op]
    if not same:
        return None
    return min(same, key=lambda f: (abs(math.log2(f.nranks) - math.log2(n)), f.nranks))


def with_fits(job: Job, paths: Iterable[str | Path]) -> Job:
    """``job`` with alpha and beta fitted to the nccl-tests outputs at ``paths``.

    Raises
    ------
    TraceFormatError
        A file that is not nccl-tests output.
    """
    from pipeline.ingest.nccl.nccl_tests import parse

    fits: list[Fitted] = []
    for path in paths:
        table = pl.from_arrow(parse(Path(path)).tables["bandwidth_tests"])
        fits += fit(table, Path(path).name)
    if not fits:
        return job
    return dataclasses.replace(job, network=dataclasses.replace(job.network, fitted=tuple(fits)))


def summary(job: Job) -> dict[str, Any]:
    """Which figures ``est_time_s`` uses: the fits, and the network's model figures."""
    net = job.network
    return {
        "model": {
            "efficiency": net.efficiency, "base_latency_us": net.base_latency_us,
            "intra_node_latency_us": net.intra_node_latency_us,
            "inter_node_latency_us": net.inter_node_latency_us, "algorithm": net.algorithm,
        },
        "fitted": [vars(f).copy() for f in net.fitted],
    }  # fmt: skip


def format_summary(job: Job) -> str:
    """One line per figure set ``est_time_s`` came from."""
    net = job.network
    lines = [
        f"est_time_s: alpha-beta, {net.algorithm}: {net.base_latency_us:g} us + "
        f"{net.intra_node_latency_us:g} us per step inside a node, "
        f"{net.inter_node_latency_us:g} us between nodes; {net.efficiency:.0%} of "
        f"{net.intra_node_GBps:g} / {net.inter_node_GBps:g} GB/s"
    ]
    for f in net.fitted:
        lines.append(
            f"  {f.op} fitted to {f.source} ({f.nranks} ranks, {f.points} sizes): "
            f"alpha {f.alpha_us:.3g} us, busbw {f.busbw_GBps:.4g} GB/s (used for {f.op})"
        )
    return "\n".join(lines)
