"""Where job.yaml's layout contradicts the traces: the statements link warns with, stores in
``communicator_dims.layout_conflicts`` and gives as the ledger's reason.

Three things in the traces can contradict a layout, each checked per communicator:

- its rank set (a communicator that ran collectives and is no group of the layout over any
  of its dimensions, nor the first and last stages of a pipeline: Megatron's embedding group);
- its name (a process group named for one dimension, ``GROUP_NAME_DIMS``, that the layout
  makes another's);
- its send/recv (point-to-point calls on a group the layout makes tensor- or data-parallel:
  they pair pipeline stages, context-parallel ring neighbours or expert ranks).

A statement names no rank, so the groups of one kind (every tensor-parallel pair) make one
statement; the communicators' ``ranks`` say which groups.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from ..vocab import DIMS, GROUP_NAME_DIMS

if TYPE_CHECKING:
    from ..model.config import Job

#: Dimensions whose groups carry send/recv (pipeline stages, ring attention, expert exchange).
P2P_DIMS = ("pp", "cp", "ep", "a2a", "world")


@dataclass(frozen=True)
class TracedGroup:
    """One communicator as link sees it: its members, the dimension job.yaml's layout gives
    it (``unknown`` where none), its name in the traces."""

    comm: str
    members: tuple[int, ...]
    dim: str
    name: str | None


def layout_text(job: Job) -> str:
    """``tp=4 x dp=2``: the layout's dimensions of more than one rank."""
    sizes = {d: getattr(job.parallel, d) for d in DIMS}
    return " x ".join(f"{d}={n}" for d, n in sizes.items() if n > 1) or "one rank"


def conflicts(
    con: duckdb.DuckDBPyConnection, job: str, spec: Job, groups: Iterable[TracedGroup]
) -> dict[str, list[str]]:
    """Per communicator, what in the traces contradicts ``spec``'s layout (communicators
    without a contradiction are left out)."""
    groups = list(groups)
    traffic = dict(
        con.execute(
            "SELECT comm, bool_or(op IN ('send', 'recv')) FROM collectives "
            "WHERE job = ? AND comm IS NOT NULL GROUP BY comm",
            [job],
        ).fetchall()
    )
    # an NCCL log's or Nsight's communicator takes the name of the process group of the
    # same ranks
    names: dict[tuple[int, ...], str] = {}
    for g in sorted(groups, key=lambda g: g.name or ""):
        if g.name and g.members not in names:
            names[g.members] = g.name
    layout = layout_text(spec)
    out: dict[str, list[str]] = {}
    for g in groups:
        name = g.name or names.get(g.members)
        found = _conflicts(spec, g, name, layout, traffic.get(g.comm))
        if found:
            out[g.comm] = found
    return out


def _conflicts(
    spec: Job, g: TracedGroup, name: str | None, layout: str, p2p: bool | None
) -> list[str]:
    """The statements of one communicator; ``p2p`` is None where it ran no collective."""
    size = len(g.members)
    named = f" ({name})" if name else ""
    if g.dim == "unknown":
        if p2p is None or _in_layout(spec, g.members):
            return []
        return [f"groups of {size} ranks{named} are no group of the layout {layout}"]
    found = []
    dims = g.dim.split("|")
    said = GROUP_NAME_DIMS.get(name or "")
    if said is not None and said not in dims and g.dim != "world":
        found.append(f"groups named {name} ({said}) are {g.dim} groups of the layout {layout}")
    if p2p and not set(dims) & set(P2P_DIMS):
        found.append(
            f"send/recv run in groups of {size} ranks{named} that the layout {layout} makes "
            f"{g.dim} groups, not pipeline stages"
        )
    return found


def _in_layout(spec: Job, members: tuple[int, ...]) -> bool:
    """Whether ``members`` is a group of the layout over some of its dimensions (tp x pp:
    Megatron's model-parallel group), or the first and last stages of a pipeline."""
    from ..model.predict import group

    active = [d for d in ("tp", "cp", "dp", "pp") if getattr(spec.parallel, d) > 1]
    for n in range(2, len(active) + 1):
        for dims in itertools.combinations(active, n):
            if tuple(group(spec, members[0], dims)) == members:
                return True
    if spec.parallel.pp > 2:
        stages = group(spec, members[0], ("pp",))
        return (members[0], members[-1]) == (stages[0], stages[-1]) and set(members) <= set(stages)
    return False
