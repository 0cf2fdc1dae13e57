"""Time of one collective: the latency-bandwidth (alpha-beta) model, the algorithm it picks,
its fit to nccl-tests, and how much of a step's communication compute hides.

``t = α + W / (η·B)``: a latency ``α`` that grows with the algorithm's step count and a
transfer of the ``W`` wire bytes one rank sends at the achievable share ``η`` of the link's
bandwidth ``B``. The latency follows NCCL's own tuning model (``ncclTopoTuneModel`` in
``src/graph/tuning.cc``; step counts as in NCCL 2.18 to 2.21): a base latency plus a
per-step latency for each step inside the node and each step between nodes. Ring all-reduce
takes ``2(n−1)`` steps of which ``2g`` cross nodes (at most all of them), all-gather and
reduce-scatter ``n−1`` of which ``g−1`` cross, tree all-reduce ``2(n/g−1)`` steps inside
plus ``2⌈log2 g⌉`` between nodes, NVLS one step. The two-level (hierarchical) algorithm runs
a ring inside the node, one across nodes and the inside ring again, each phase with its own
base latency and its own link. All-to-all is the pairwise exchange (Thakur, Rabenseifner and
Gropp 2005, "Optimization of Collective Communication Operations in MPICH"): ``n−1`` steps,
``n−n_l`` of them to other nodes. A send is one step.

The transfer of rings, trees and all-to-alls moves its inside and across parts at once (the
slower part sets the time: NCCL runs one ring per NIC, so each rank's share of the traffic
that crosses nodes goes over its own NIC while the rest moves over NVLink); the phases of the
hierarchical algorithm follow one another. With several algorithms allowed
(``network.algorithm: auto`` or a list) each collective takes the fastest, as NCCL picks the
algorithm of least predicted time (``ncclTopoGetAlgoTime``, ``src/graph/tuning.cc``).

:func:`fit` finds ``α`` and the bus bandwidth per collective from an nccl-tests table
(``bandwidth_tests``): nccl-tests reports ``busbw = algbw·factor`` with ``factor`` the ring
factor of ``pipeline.model.traffic.wire_bytes`` (nccl-tests ``doc/PERFORMANCE.md``), so its
time is ``α + W/busbw`` with the ring's ``W``, whatever algorithm NCCL chose.

:func:`exposed` estimates the communication a step cannot hide behind compute.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ..dataset.sql_files import sql_text
from ..model.config import AUTO_ALGORITHMS, Job, Network
from ..model.traffic import hierarchical_split, node_split, wire_bytes
from ..vocab import bus_factor_expr

#: nccl-tests' ops the fit can use, in the model's op names.
FIT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: Tree all-reduce's bus bandwidth against the ring's: NCCL's ``busBw*.9`` for trees
#: (``ncclTopoTuneModel``, ``src/graph/tuning.cc``).
TREE_BW_FACTOR = 0.9
#: Collectives that have ring, NVLS and two-level forms.
_RING_OPS = ("all_reduce", "all_gather", "reduce_scatter")


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
    others fall back to ring). The hierarchical algorithm's phases: :func:`call_time`."""
    if op in ("send", "recv"):
        return (1, 0) if nodes == 1 else (0, 1)
    if algorithm == "nvls" and intra and op in _RING_OPS:
        return 1, 0
    if algorithm == "tree" and op == "all_reduce":
        return 2 * (-(-n // nodes) - 1), 2 * math.ceil(math.log2(nodes)) if nodes > 1 else 0
    if op == "all_to_all":  # pairwise: one step per peer, those on other nodes between
        return n // nodes - 1, n - n // nodes
    total = 2 * (n - 1) if op == "all_reduce" else n - 1
    inter = 0 if nodes == 1 else (2 * nodes if op == "all_reduce" else nodes - 1)
    inter = min(inter, total)  # (NCCL counts 2g even when the ring has fewer steps)
    return total - inter, inter


def candidates(net: Network) -> tuple[str, ...]:
    """The algorithms ``network.algorithm`` allows: one, a list, or ``auto``'s."""
    a = net.algorithm
    if a == "auto":
        return AUTO_ALGORITHMS
    return a if isinstance(a, tuple) else (a,)


def applicable(op: str, n: int, local: int, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """Of ``allowed``, the algorithms NCCL (or a two-level scheme) has for ``op`` over ``n``
    ranks, ``local`` of them on this rank's node: ``pairwise`` for all-to-all, ``p2p`` for
    send/recv/broadcast, tree for all-reduce, NVLS inside one node, hierarchical across
    nodes with more than one rank a node; ``ring`` when none of them applies."""
    if op == "all_to_all":
        return ("pairwise",)
    if op not in _RING_OPS:
        return ("p2p",)
    ok = {
        "ring": True,
        "tree": op == "all_reduce",
        "nvls": local >= n,
        "hierarchical": 1 < local < n,
    }
    return tuple(a for a in allowed if ok[a]) or ("ring",)


def item_bytes(
    algorithm: str, op: str, message: float, n: int, local: int
) -> tuple[float, float, float]:
    """``(wire, intra, inter)``: what one rank sends for one collective under ``algorithm``,
    and its split inside and across nodes (:mod:`pipeline.model.traffic`)."""
    if algorithm == "hierarchical":
        intra, inter = hierarchical_split(op, message, n, local)
        return intra + inter, intra, inter
    name = {"pairwise": "ring", "p2p": "ring"}.get(algorithm, algorithm)
    w = wire_bytes(op, message, n, name, intra=local >= n)
    intra, inter = node_split(op, w, message, n, local, crosses=local < n)
    return w, intra, inter


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
    algorithm: str = "ring",
) -> tuple[float, str]:
    """Seconds of one collective and which figures gave them (``fit`` or ``model``).

    ``wire``, ``intra`` and ``inter`` are this rank's bytes for it under ``algorithm``
    (total, inside and across nodes; a recv passes the transfer it waits for). A fitted op
    takes ``α + W/busbw`` with the ring's ``W`` (the rank count nearest ``n``); otherwise the
    latency steps of :func:`steps` and the transfer at ``efficiency`` times the line rate:
    rings, trees and all-to-alls move their inside and across parts at once, the phases of
    the hierarchical algorithm one after the other.
    """
    f = fitted_for(net.fitted, op, n)
    if f is not None:
        ring = wire_bytes("send" if op == "recv" else op, message, n)
        return f.alpha_us * 1e-6 + ring / (f.busbw_GBps * 1e9), "fit"
    nodes = -(-n // local)
    b_in = net.efficiency * net.intra_node_GBps * 1e9
    b_out = net.efficiency * net.inter_node_GBps * 1e9
    if algorithm == "hierarchical" and op in _RING_OPS and 1 < local < n:
        twice = 2 if op == "all_reduce" else 1
        lat = (1 + twice) * net.base_latency_us + twice * (local - 1) * net.intra_node_latency_us
        lat += twice * (nodes - 1) * net.inter_node_latency_us
        return lat * 1e-6 + intra / b_in + inter / b_out, "model"
    s_in, s_out = steps(op, n, nodes, algorithm, intra=nodes == 1)
    lat = net.base_latency_us + s_in * net.intra_node_latency_us
    lat += s_out * net.inter_node_latency_us
    if nodes == 1:
        moved = wire / b_in
    else:
        moved = max(intra / b_in, inter / b_out)
    if algorithm == "tree" and op == "all_reduce":
        moved /= TREE_BW_FACTOR
    return lat * 1e-6 + moved, "model"


def choose(
    net: Network, op: str, message: float, n: int, local: int
) -> tuple[str, float, float, float, float, str]:
    """The fastest allowed algorithm for one collective and its figures:
    ``(algorithm, wire, intra, inter, seconds, timing)`` (ties go to the first allowed)."""
    best = None
    for algo in applicable(op, n, local, candidates(net)):
        w, intra, inter = item_bytes(algo, op, message, n, local)
        t, how = call_time(net, op, n, local, wire=w, intra=intra, inter=inter,
                           message=message, algorithm=algo)  # fmt: skip
        if best is None or t < best[4]:
            best = (algo, w, intra, inter, t, how)
    assert best is not None
    return best


def fitted_for(fits: tuple[Fitted, ...], op: str, n: int) -> Fitted | None:
    """The fit of ``op`` whose rank count is nearest ``n`` (None when ``op`` has none).

    A send, recv or broadcast without a fit of its own takes that of any fitted collective
    (nccl-tests' bus bandwidth of a point-to-point transfer is its ``M`` per second, the same
    link the fitted collective's ring ran over)."""
    same = [f for f in fits if f.op == op]
    if not same and op in ("send", "recv", "broadcast"):
        same = list(fits)
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
    from ..guards import require_regular
    from ..ingest.nccl.nccl_tests import parse

    fits: list[Fitted] = []
    for path in paths:
        require_regular(path)
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
            "inter_node_latency_us": net.inter_node_latency_us,
            "algorithm": list(candidates(net)) if _chooses(net) else net.algorithm,
        },
        "fitted": [vars(f).copy() for f in net.fitted],
    }  # fmt: skip


def _chooses(net: Network) -> bool:
    """Whether ``network.algorithm`` lets each collective take the fastest of several."""
    return net.algorithm == "auto" or isinstance(net.algorithm, tuple)


def _algorithms(net: Network) -> str:
    """The configured algorithm, or the fastest-of list it names."""
    if _chooses(net):
        return "the fastest of " + ", ".join(candidates(net)) + " per collective"
    return net.algorithm


def format_summary(job: Job) -> str:
    """One line per figure set ``est_time_s`` came from."""
    net = job.network
    lines = [
        f"est_time_s: alpha-beta, {_algorithms(net)}: {net.base_latency_us:g} us + "
        f"{net.intra_node_latency_us:g} us per step inside a node, "
        f"{net.inter_node_latency_us:g} us between nodes; {net.efficiency:.0%} of "
        f"{net.intra_node_GBps:g} / {net.inter_node_GBps:g} GB/s"
        + ("" if net.fitted else "; nothing fitted: every item uses these figures")
    ]
    for f in net.fitted:
        lines.append(
            f"  {f.op} fitted to {f.source} ({f.nranks} ranks, {f.points} sizes): "
            f"alpha {f.alpha_us:.3g} us, busbw {f.busbw_GBps:.4g} GB/s (used for {f.op})"
        )
    return "\n".join(lines)


def hidden_behind(row: Any) -> str | None:
    """The compute phase that can hide an item, or None when nothing does.

    Data-parallel items of the forward and the backward: the gradient buckets reduce while
    the backward computes the next ones (PyTorch DDP's bucketed all-reduce, Li et al.,
    "PyTorch Distributed", VLDB 2020; Megatron-LM ``--overlap-grad-reduce``), and FSDP/ZeRO-3
    gather the next unit's parameters while the current one computes (FSDP's forward and
    backward prefetch, Zhao et al., "PyTorch FSDP", VLDB 2023). Tensor-, context- and
    expert-parallel collectives sit on the layer's critical path (the next matmul needs
    their output), pipeline sends and receives between the stages' compute, and the
    optimizer's parameter gathers and the loss report after the backward: exposed.
    """
    if row.parallel_dim == "dp" and row.phase in ("forward", "backward"):
        return str(row.phase)
    return None


def exposed(rows: Iterable[Any], forward_s: float, backward_s: float) -> dict[str, float]:
    """Communication seconds of one rank's step, and how much of it compute cannot hide.

    ``rows`` are the rank's items (``est_time_s``), ``forward_s`` and ``backward_s`` its
    compute in each phase. Items that compute can hide (:func:`hidden_behind`) are exposed by
    what exceeds their phase's compute, and at least one call of the longest of them (the
    last bucket has no backward left behind it, the first unit's gather no forward before
    it); the others are exposed whole.
    """
    rows = list(rows)
    total = sum(r.est_time_s for r in rows)
    out = sum(r.est_time_s for r in rows if hidden_behind(r) is None)
    for phase, compute_s in (("forward", forward_s), ("backward", backward_s)):
        items = [r for r in rows if hidden_behind(r) == phase and r.calls > 0]
        if items:
            hideable = sum(r.est_time_s for r in items)
            last = max(r.est_time_s / r.calls for r in items)
            out += max(hideable - compute_s, last)
    return {"comm_s": total, "exposed_s": out}


def dataset_fits(con: Any, job: str) -> list[Fitted]:
    """Alpha and beta fitted to what the linked dataset holds for ``job``: its nccl-tests
    tables (``bandwidth_tests``, ``fit_nccl_tests.sql``), else, per op and rank count they
    leave out, its own collectives (``fit_collectives.sql``: the median shortest duration per
    message size; two sizes or more)."""
    import duckdb

    fits: list[Fitted] = []
    try:
        tests = _query(con, "fit_nccl_tests.sql", job)
    except duckdb.CatalogException:  # (no nccl-tests output in the dataset)
        tests = pl.DataFrame()
    if not tests.is_empty():
        fits += fit(tests, f"nccl-tests tables of job {job}")
    try:
        seen = _query(con, "fit_collectives.sql", job)
    except duckdb.CatalogException:  # (a dataset not linked: no collective_instances)
        seen = pl.DataFrame()
    if not seen.is_empty():
        have = {(f.op, f.nranks) for f in fits}
        for f in fit(seen):
            if (f.op, f.nranks) in have:
                continue
            calls = seen.filter((pl.col("op") == f.op) & (pl.col("nranks") == f.nranks))
            source = f"{int(calls['calls'].sum())} traced collectives of job {job}"
            fits.append(dataclasses.replace(f, source=source))
    return fits


def _query(con: Any, file: str, job: str) -> pl.DataFrame:
    sql = sql_text(__package__, file)
    out = pl.from_arrow(con.sql(sql, params={"job": job}).to_arrow_table())
    assert isinstance(out, pl.DataFrame)
    return out


def step_summary(job: Job, rows: Iterable[Any], peak_flops: float | None) -> dict[str, Any]:
    """The rank's communication per step and, with a peak, how much of it compute at that
    peak leaves exposed (the compute an ideal lower bound: the exposure an upper one)."""
    from ..model.compute import phase_split, step_flops

    rows = list(rows)
    out: dict[str, Any] = {"comm_s": sum(r.est_time_s for r in rows)}
    if peak_flops is not None:
        compute = step_flops(job)["hardware_flops"] / job.parallel.world_size / peak_flops
        out |= {"compute_at_peak_s": compute} | exposed(rows, *phase_split(job, compute))
    return out


def format_step(step: dict[str, Any]) -> str:
    """One line for :func:`step_summary`."""
    line = f"communication per step: {step['comm_s']:.6g} s (alpha-beta, summed)"
    if "exposed_s" in step:
        line += (f"; exposed {step['exposed_s']:.6g} s beside {step['compute_at_peak_s']:.6g} s "
                 "of compute at peak (DP overlaps its phase, the rest does not)")  # fmt: skip
    return line
