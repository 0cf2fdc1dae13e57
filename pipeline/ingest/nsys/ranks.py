"""Which rank each process (and GPU) of an Nsight report is.

One report often holds several processes (``nsys profile torchrun ...`` captures the 8 of a
node). A *unit* is one (pid, CUDA device) pair that ran kernels, or one pid without kernels.
Each unit's rank comes from the first source that knows it, in this order:

1. ``mpi``: the ``MPI_RANKS`` table (``--trace=mpi``);
2. ``nccl_nvtx``: NCCL's ``ncclCommInitRank*``/``ncclCommSplit`` NVTX payloads (NCCL >= 2.25:
   rank and size in the communicator). The world communicator is the one of the world's
   size: the environment's world size where known, else the largest communicator of the
   whole report; a unit with several such inits takes its first. A unit not in the world
   communicator (only subgroups traced) gets no rank here: its rank in a subgroup is not
   its global rank;
3. ``environment``: RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / PMIX_RANK / SLURM_PROCID /
   MV2_COMM_WORLD_RANK in the process's environment (json export ``CommEvent``), or in the
   capture's environment when the report holds one process;
4. ``command_line``: a ``--rank N`` / ``--rank=N`` argument;
5. ``file_name``: the rank the file name states (``rank<N>``, ``..._<N>.sqlite``; the one rule of
   every format, :func:`pipeline.ingest.values.rank_from_file_name`), one unit only;
6. ``process_order``: the unit's index in (pid, device) order, with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ...ingest.nsys.raw import NsysRaw, ProcessInfo
from ...ingest.result import Warnings
from ...ingest.values import rank_from_file_name

_RANK_VARS = (
    "RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "MV2_COMM_WORLD_RANK",
)
_LOCAL_VARS = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
)
_SIZE_VARS = (
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
    "MV2_COMM_WORLD_SIZE",
)
_RANK_ARG = re.compile(r"^--?rank(?:=(\d+))?$")

UNIT_SCHEMA = {
    "pid": pl.Int64,
    "device": pl.Int64,
    "rank": pl.Int64,
    "local_rank": pl.Int64,
    "world_size": pl.Int64,
    "rank_source": pl.Utf8,
}


@dataclass
class _Unit:
    pid: int
    device: int | None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    source: str | None = None


def assign(
    raw: NsysRaw,
    unit_keys: pl.DataFrame,
    comm_inits: pl.DataFrame,
    path: Path,
    warnings: Warnings,
) -> pl.DataFrame:
    """One row per unit: pid, device, rank, local_rank, world_size, rank_source.

    ``unit_keys`` holds the distinct (pid, device) pairs; ``comm_inits`` the decoded NCCL
    communicator-init payloads (pid, cuda_dev, comm_hash, rank, nranks, start_ns).
    """
    largest = comm_inits["nranks"].max() if comm_inits.height else None
    units = [_Unit(pid, dev) for pid, dev in unit_keys.sort(["pid", "device"]).iter_rows()]
    single = len(units) == 1
    for u in units:
        proc = raw.processes.get(u.pid, ProcessInfo())
        env = proc.env or (raw.capture_env if single else {})
        args = proc.args or (raw.capture_args if single else [])
        u.local_rank = _first_int(env, _LOCAL_VARS)
        u.world_size = _first_int(env, _SIZE_VARS)
        if u.pid in raw.mpi_ranks:
            u.rank, u.source = raw.mpi_ranks[u.pid], "mpi"
        elif (hit := _from_nccl(u, comm_inits, u.world_size or largest)) is not None:
            u.rank, u.world_size, u.source = hit[0], hit[1], "nccl_nvtx"
        elif (r := _first_int(env, _RANK_VARS)) is not None:
            u.rank, u.source = r, "environment"
        elif (r := _from_args(args)) is not None:
            u.rank, u.source = r, "command_line"
        elif single and (r := rank_from_file_name(path.name)) is not None:
            u.rank, u.source = r, "file_name"
    unknown = [u for u in units if u.rank is None]
    if unknown:
        taken = {u.rank for u in units if u.rank is not None}
        free = (r for r in range(len(units) + len(taken) + 1) if r not in taken)
        for u in unknown:
            u.rank, u.source = next(free), "process_order"
        warnings.add(
            "rank not found in the report (no MPI/NCCL/env/argv/file name): "
            "numbered by process order",
            len(unknown),
        )
    ranks = [u.rank for u in units]
    if len(set(ranks)) != len(ranks):
        warnings.add("two processes/devices of the report claim the same rank")
    rows = [(u.pid, u.device, u.rank, u.local_rank, u.world_size, u.source) for u in units]
    return pl.DataFrame(rows, schema=UNIT_SCHEMA, orient="row")


def _first_int(env: dict[str, str], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = env.get(k, "").strip()
        if v.isdigit():
            return int(v)
    return None


def _from_args(args: list[str]) -> int | None:
    for i, a in enumerate(args):
        m = _RANK_ARG.match(a)
        if not m:
            continue
        value = m.group(1) if m.group(1) is not None else (args[i + 1] if i + 1 < len(args) else "")
        if value.isdigit():
            return int(value)
    return None


def _from_nccl(u: _Unit, inits: pl.DataFrame, world: int | None) -> tuple[int, int] | None:
    """(rank, world size) from the unit's init of the world communicator (``world`` ranks)."""
    if world is None:
        return None
    mine = inits.filter(pl.col("pid") == u.pid)
    if u.device is not None and mine.height and mine["cuda_dev"].n_unique() > 1:
        mine = mine.filter(pl.col("cuda_dev") == u.device)
    # a process in a TP/DP/PP subgroup has a rank in it too: only the world's counts
    mine = mine.drop_nulls(["rank", "nranks"]).filter(pl.col("nranks") == world)
    if not mine.height:
        return None
    # first init: the default group's communicator comes first; the hash breaks exact ties
    best = mine.sort("start_ns", "comm_hash", nulls_last=True).row(0, named=True)
    return int(best["rank"]), int(best["nranks"])
