"""Network requirements: the per-GPU bandwidth a job needs, the inverse of the traffic model.

Given a step time ``S`` and the share ``β`` of it that communication may take without being
hidden behind compute (``--comm-budget``), a rank that must send ``W`` bytes over a link class
per step needs ``W / (β·S)`` bytes per second on that link (the time model
``T ≈ W / B_eff`` solved for ``B_eff``, latency terms ignored). This module computes it per
parallel dimension and link class (``intra``/``inter`` node) from a
:class:`~pipeline.model.predict.Prediction`, beside the configured link bandwidth and, when a
dataset supplies it, the achieved bus bandwidth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from ..model.predict import DIMS, Prediction


@dataclass(frozen=True)
class Requirement:
    """Bandwidth one rank needs on one link class for one parallel dimension (``all``: summed).

    ``required_GBps`` = ``wire_bytes / (comm_budget·step_time_s) / 1e9``; ``available_GBps``
    is the job's configured per-GPU bandwidth of that link class; ``achieved_busbw_GBps`` is
    the observed bus bandwidth for that dimension, when known.
    """

    parallel_dim: str
    link: str
    wire_bytes: float
    required_GBps: float
    available_GBps: float
    achieved_busbw_GBps: float | None = None

    @property
    def headroom(self) -> float:
        """``available / required`` (inf when nothing is required)."""
        return self.available_GBps / self.required_GBps if self.required_GBps else float("inf")


def requirements(
    pred: Prediction,
    *,
    step_time_s: float,
    comm_budget: float = 0.2,
    achieved_busbw_GBps: Mapping[str, float] | None = None,
) -> list[Requirement]:
    """Per-GPU bandwidth each link class needs for each parallel dimension, and in all.

    Parameters
    ----------
    pred
        One rank's prediction.
    step_time_s
        Time of one training step (given, or the observed one when linked to a dataset).
    comm_budget
        Share of the step that communication may take unhidden, in (0, 1].
    achieved_busbw_GBps
        Observed bus bandwidth per parallel dimension, shown beside the requirement.

    Raises
    ------
    ConfigError
        A non-positive step time or a budget outside (0, 1].
    """
    if not step_time_s > 0:
        raise ConfigError(f"step time: must be a positive number of seconds, got {step_time_s!r}")
    if not 0 < comm_budget <= 1:
        raise ConfigError(f"comm budget: must be in (0, 1], got {comm_budget!r}")
    net = pred.job.network
    avail = {"intra": net.intra_node_GBps, "inter": net.inter_node_GBps}
    seconds = comm_budget * step_time_s
    per: dict[tuple[str, str], float] = {}
    for row in pred.rows:
        # each item as the model splits it: a group over nodes still sends part of its bytes
        # to ranks of its own node
        for link, w in (("intra", row.intra_node_bytes), ("inter", row.inter_node_bytes)):
            if w:
                per[(row.parallel_dim, link)] = per.get((row.parallel_dim, link), 0.0) + w
    achieved = dict(achieved_busbw_GBps or {})
    out = []
    for (dim, link), w in sorted(per.items(), key=lambda kv: (DIMS.index(kv[0][0]), kv[0][1])):
        out.append(Requirement(dim, link, w, w / seconds / 1e9, avail[link], achieved.get(dim)))
    for link in ("intra", "inter"):
        w = sum(v for (_, lk), v in per.items() if lk == link)
        if w:
            out.append(Requirement("all", link, w, w / seconds / 1e9, avail[link]))
    return out


def format_requirements(reqs: list[Requirement], *, step_time_s: float, comm_budget: float) -> str:
    """Plain-text table of :func:`requirements`."""
    lines = [
        f"network requirements: step {step_time_s:g} s, communication budget "
        f"{comm_budget:.0%} -> {comm_budget * step_time_s:g} s of unhidden transfer per step",
        f"{'dim':<4}  {'link':<5}  {'wire_bytes':>16}  {'need_GB/s':>10}  {'have_GB/s':>10}  "
        f"{'achieved_busbw':>14}",
    ]
    for r in reqs:
        ach = "" if r.achieved_busbw_GBps is None else f"{r.achieved_busbw_GBps:.1f}"
        lines.append(
            f"{r.parallel_dim:<4}  {r.link:<5}  {r.wire_bytes:>16,.0f}  {r.required_GBps:>10.3f}  "
            f"{r.available_GBps:>10.1f}  {ach:>14}".rstrip()
        )
    return "\n".join(lines)
