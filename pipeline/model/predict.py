"""Predicted traffic of one rank per training step: the rows ``tokenwire predict`` prints.

This module turns a :class:`~pipeline.model.config.Job` and a global rank into rows of
(parallel_dim, op, phase, layer_kind, calls, bytes, wire_bytes, est_time_s): it places the
rank in the layout (:func:`coordinates`, Megatron's ``RankGenerator`` rule for the ``order``
string), finds its communicator groups and whether each stays inside one node, and lists
the collectives that rank issues per step, dimension by dimension (which call is which, and
the published source of each formula, is spelled out in ``docs/model.md``). Every row holds
``calls`` collectives of one message size, so ``bytes / calls`` is the message size ``M`` and
``wire_bytes`` is what this rank sends for them under the configured algorithm.
:func:`predictions_table` gives every rank's rows as the ``predictions`` table.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..dataset.arrow_convert import table_from_lists
from ..errors import ConfigError
from ..gcpause import gc_paused
from ..model import params as P
from ..model.config import (
    DTYPE_BYTES,
    LINEAR_BIAS,
    MAX_INT64,
    Conventions,
    Job,
    job_from_dict,
    load_job,
)
from ..model.timing import call_time, choose
from ..model.traffic import ep_a2a_message
from ..vocab import DIMS

#: Display and sort order of phases (of dimensions: vocab.DIMS).
PHASES = ("forward", "backward", "optimizer", "other")

#: Which way each expert-parallel item's tokens go: ``towards`` the experts (the forward
#: dispatch, the backward of combine), ``back`` from them, or ``both`` (one item of dispatch
#: and combine of one size). Link sizes an MoE library's kernel that records no size by it
#: (``pipeline/link/size_estimates.sql``, :data:`pipeline.vocab.MOE_EXCHANGE_KERNELS`).
EP_DIRECTIONS: dict[str, str] = {
    "expert dispatch and combine": "both",
    "dispatch and combine gradients": "both",
    "recomputed dispatch and combine": "both",
    "expert dispatch": "towards",
    "expert combine": "back",
    "combine gradients (towards the experts)": "towards",
    "dispatch gradients (back from the experts)": "back",
    "recomputed dispatch": "towards",
    "recomputed combine": "back",
}

#: Bytes of the loss-reporting all-reduce: loss sum and token count in fp32 (Megatron-LM).
LOSS_REPORT_BYTES = 8
#: Bytes per element of the vocab-parallel cross-entropy reductions (fp32, Megatron-LM
#: ``megatron/core/tensor_parallel/cross_entropy.py``).
CE_BYTES = 4

_ROW_COLUMNS = (
    "parallel_dim", "op", "phase", "layer_kind", "purpose", "calls", "bytes", "wire_bytes",
    "intra_node_bytes", "inter_node_bytes", "est_time_s", "algorithm",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """``calls`` collectives of one kind, purpose and message size, issued by one rank per
    step: one item of the prediction, which link's ledger matches to observed calls.

    ``bytes = calls · message`` (payload), ``wire_bytes`` = bytes this rank sends for them
    (0 for recv), split into ``intra_node_bytes`` and ``inter_node_bytes`` (over links inside
    the node and across nodes, :func:`~pipeline.model.traffic.node_split`), ``est_time_s`` =
    transfer time at the link's bandwidth (recv: the time of the transfer it waits for).
    ``algorithm`` is the one the time model picked (``ring``, ``tree``, ``nvls``,
    ``hierarchical``; ``pairwise`` all-to-all, ``p2p`` send/recv).
    ``message``, ``group_size``, ``link`` (``intra``/``inter`` node) and ``timing`` (``model``
    or ``fit``: which figures gave ``est_time_s``) are kept for the requirements and the
    docs but are not output columns.
    """

    parallel_dim: str
    op: str
    phase: str
    layer_kind: str
    purpose: str
    calls: int
    bytes: int
    wire_bytes: float
    intra_node_bytes: float
    inter_node_bytes: float
    est_time_s: float
    message: int
    group_size: int
    link: str
    timing: str = "model"
    algorithm: str = "ring"

    def public(self) -> dict[str, Any]:
        """The row as the ``predictions`` table and the JSON output carry it."""
        return {k: getattr(self, k) for k in _ROW_COLUMNS}


@dataclass(frozen=True)
class Prediction:
    """One rank's predicted traffic per step, with the job it came from."""

    job: Job
    rank: int
    coords: dict[str, int]
    layers: tuple[int, ...]
    rows: tuple[Row, ...] = field(default=())

    @property
    def totals(self) -> dict[str, Any]:
        """Bytes, wire bytes and their split inside and across nodes, overall, per token and
        per parallel dimension."""
        sums = ("wire_bytes", "intra_node_bytes", "inter_node_bytes")
        by_dim: dict[str, dict[str, float]] = {}
        for r in self.rows:
            d = by_dim.setdefault(r.parallel_dim, {"bytes": 0} | dict.fromkeys(sums, 0.0))
            d["bytes"] += r.bytes
            for k in sums:
                d[k] += getattr(r, k)
        total = sum(r.bytes for r in self.rows)
        return {
            "bytes": total,
            **{k: sum(getattr(r, k) for r in self.rows) for k in sums},
            "bytes_per_token": total / self.job.tokens_per_step,
            "by_dim": by_dim,
        }

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape of ``tokenwire predict --format json``."""
        return {
            "model": model_summary(self.job),
            "layout": layout_summary(self.job) | {"coordinates": self.coords,
                                                  "layers": list(self.layers)},
            "tokens_per_step": self.job.tokens_per_step,
            "rank": self.rank,
            "rows": [r.public() for r in self.rows],
            "totals": self.totals,
        }  # fmt: skip


def model_summary(job: Job) -> dict[str, Any]:
    """Resolved model dims plus ``params``, ``active_params`` and ``flops_per_token``."""
    m = job.model
    out: dict[str, Any] = {
        "name": m.name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
        "kv_heads": m.kv_heads, "ffn_hidden": m.ffn_hidden, "vocab": m.vocab,
        "seq_len": m.seq_len, "tied_embeddings": m.tied_embeddings, "mlp": m.mlp,
        "norm": m.norm, "position": m.position,
        "moe": None if m.moe is None else vars(m.moe).copy(),
        "mla": None if m.mla is None else vars(m.mla).copy(),
    }  # fmt: skip
    out["params"] = P.total_params(m)
    out["active_params"] = P.active_params(m)
    out["flops_per_token"] = P.flops_per_token(m)
    return out


def layout_summary(job: Job) -> dict[str, Any]:
    """Parallel layout, batch, dtypes, recomputation and network of the job."""
    p = job.parallel
    return {
        "tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep, "vpp": p.vpp,
        "sequence_parallel": p.sequence_parallel, "zero_stage": p.zero_stage, "fsdp": p.fsdp,
        "reshard_after_forward": p.reshard_after_forward,
        "distributed_optimizer": p.distributed_optimizer, "dp_scheme": p.dp_scheme,
        "order": p.order, "world_size": p.world_size, "micro_batch": job.batch.micro_batch,
        "global_batch": job.batch.global_batch, "microbatches": job.microbatches,
        "forward_only": job.batch.forward_only,
        "recompute": job.recompute, "dtypes": vars(job.dtypes).copy(),
        "network": vars(job.network).copy(),
    }  # fmt: skip


# --------------------------------------------------------------------------- placement


def _sizes(job: Job, *, expert: bool) -> dict[str, int]:
    p = job.parallel
    if expert:
        # Megatron's expert RankGenerator: tp=ETP(=tp), cp=1, ep, dp=expert-DP.
        return {"tp": p.tp, "cp": 1, "ep": p.ep, "dp": p.dp * p.cp // p.ep, "pp": p.pp}
    return {"tp": p.tp, "cp": p.cp, "ep": 1, "dp": p.dp, "pp": p.pp}


def _layout(job: Job, *, expert: bool) -> tuple[str, dict[str, int]]:
    """The order and sizes groups are worked out over: with HSDP, dp is two dimensions,
    ``dps`` (its shard groups, the inner part) and ``dpr`` (its replicas)."""
    order, sizes = job.parallel.order, _sizes(job, expert=expert)
    par = job.parallel
    if expert or not par.hsdp:
        return order, sizes
    assert par.dp_shard is not None
    split = "-".join("dps-dpr" if d == "dp" else d for d in order.split("-"))
    return split, sizes | {"dps": par.dp_shard, "dpr": par.dp // par.dp_shard}


def _group_dims(dims: tuple[str, ...], order: str) -> tuple[str, ...]:
    """``dims`` over a layout order: dp is ``dps`` and ``dpr`` where HSDP splits it."""
    if "dpr" not in order.split("-"):
        return dims
    return tuple(x for d in dims for x in (("dps", "dpr") if d == "dp" else (d,)))


def _decompose(rank: int, order: str, sizes: Mapping[str, int]) -> dict[str, int]:
    out = {}
    for dim in order.split("-"):
        out[dim] = rank % sizes[dim]
        rank //= sizes[dim]
    return out


def _compose(coords: Mapping[str, int], order: str, sizes: Mapping[str, int]) -> int:
    rank, stride = 0, 1
    for dim in order.split("-"):
        rank += coords[dim] * stride
        stride *= sizes[dim]
    return rank


def coordinates(job: Job, rank: int) -> dict[str, int]:
    """Coordinates of global ``rank``: ``tp, cp, dp, pp`` and, for experts, ``ep, edp``.

    The first dimension of ``order`` varies fastest (Megatron: ``tp-cp-ep-dp-pp`` puts a TP
    group on consecutive ranks). Dense groups use the order with ``ep = 1``; expert groups
    use it with ``cp = 1``, ``ep`` and ``dp`` = expert-data-parallel size, as
    ``megatron.core.parallel_state`` does.
    """
    order = job.parallel.order
    dense = _decompose(rank, order, _sizes(job, expert=False))
    expert = _decompose(rank, order, _sizes(job, expert=True))
    return {
        "tp": dense["tp"], "cp": dense["cp"], "dp": dense["dp"], "pp": dense["pp"],
        "ep": expert["ep"], "edp": expert["dp"],
    }  # fmt: skip


def group(job: Job, rank: int, dims: tuple[str, ...], *, expert: bool = False) -> list[int]:
    """Global ranks of the communicator over ``dims`` that contains ``rank`` (sorted)."""
    order, sizes = _layout(job, expert=expert)
    dims = _group_dims(tuple(dims), order)
    base = _decompose(rank, order, sizes)
    fixed = tuple((d, c) for d, c in base.items() if d not in dims)
    return list(_members(job, dims, expert, fixed))


@functools.lru_cache(maxsize=65536)
def _members(
    job: Job, dims: tuple[str, ...], expert: bool, fixed: tuple[tuple[str, int], ...]
) -> tuple[int, ...]:
    """The ranks whose coordinates are ``fixed`` outside ``dims``, sorted. Cached: every rank
    of a group asks for the same members (at 16,384 ranks, each of the 16,384 ranks' data
    parallel groups of 512 was worked out again: 22 million compositions, 53 s of link)."""
    order, sizes = _layout(job, expert=expert)
    base = dict(fixed)
    out = []
    for combo in itertools.product(*(range(sizes[d]) for d in dims)):
        out.append(_compose(base | dict(zip(dims, combo, strict=True)), order, sizes))
    return tuple(sorted(out))


def layout_groups(
    job: Job, dims: tuple[str, ...], *, expert: bool = False
) -> list[tuple[int, ...]]:
    """Every communicator of the layout over ``dims``: each one's global ranks, sorted (none
    when the dimensions have size 1, where each rank would be a group of its own)."""
    order, sizes = _layout(job, expert=expert)
    dims = _group_dims(dims, order)
    if math.prod(sizes[d] for d in dims) == 1:
        return []
    others = [d for d in order.split("-") if d not in dims]
    return [
        _members(job, tuple(dims), expert, tuple(zip(others, combo, strict=True)))
        for combo in itertools.product(*(range(sizes[d]) for d in others))
    ]


@dataclass(frozen=True)
class _Span:
    """A communicator as the rows need it: its size, its lowest and highest ranks and how
    many of its ranks share the predicted rank's node (``local``, that rank included)."""

    size: int
    lo: int
    hi: int
    local: int

    def __len__(self) -> int:
        return self.size


def span(job: Job, rank: int, dims: tuple[str, ...], *, expert: bool = False) -> _Span:
    """:func:`group`'s size, ends and members on ``rank``'s node in closed form, without
    listing its members.

    A rank is a mixed-radix number over ``order`` (:func:`_compose`), increasing in every
    coordinate, so the group's lowest member has its ``dims`` coordinates at 0 and its
    highest at their sizes minus 1: O(dimensions) at any scale. Members on the node are
    counted as members below the node's two ends (:func:`_count_below`).
    """
    order, sizes = _layout(job, expert=expert)
    dims = _group_dims(dims, order)
    base = _decompose(rank, order, sizes)
    lo = _compose(base | {d: 0 for d in dims}, order, sizes)
    hi = _compose(base | {d: sizes[d] - 1 for d in dims}, order, sizes)
    gpn = job.network.gpus_per_node
    if lo // gpn == hi // gpn:
        local = math.prod(sizes[d] for d in dims)
    else:
        digits = _digits(order, sizes, dims)
        start = rank // gpn * gpn
        local = _count_below(digits, start + gpn - lo) - _count_below(digits, start - lo)
    return _Span(math.prod(sizes[d] for d in dims), lo, hi, local)


def _digits(
    order: str, sizes: Mapping[str, int], dims: tuple[str, ...]
) -> list[tuple[int, int, int]]:
    """(stride, size, members per step) of each of ``dims``, largest stride first: a member's
    offset from the group's lowest rank is ``Σ c_d·stride_d``."""
    out, stride = [], 1
    for d in order.split("-"):
        if d in dims:
            out.append((stride, sizes[d]))
        stride *= sizes[d]
    digits, below = [], 1
    for stride, size in out:
        digits.append((stride, size, below))
        below *= size
    return digits[::-1]


def _count_below(digits: list[tuple[int, int, int]], y: int) -> int:
    """Members whose offset from the group's lowest rank is below ``y``. Each stride is a
    multiple of the span of the digits below it (``stride_d ≥ Σ (size_i−1)·stride_i`` over
    the faster dimensions), so the count is read off digit by digit, largest first, as one
    counts the numbers below ``y`` in a mixed radix."""
    if y <= 0:
        return 0
    count = 0
    for stride, size, below in digits:
        q = y // stride
        if q >= size:
            return count + size * below
        count += q * below
        y -= q * stride
    return count + (1 if y > 0 else 0)


def _pair(job: Job, a: int, b: int) -> _Span:
    gpn = job.network.gpus_per_node
    return _Span(2, min(a, b), max(a, b), 2 if a // gpn == b // gpn else 1)


def _peer(job: Job, rank: int, pp_rank: int) -> int:
    sizes = _sizes(job, expert=False)
    coords = _decompose(rank, job.parallel.order, sizes)
    return _compose(coords | {"pp": pp_rank}, job.parallel.order, sizes)


def _link(job: Job, ranks: _Span) -> str:
    # a rank's node (rank // gpus_per_node) grows with the rank, so the group is on one node
    # when its lowest and highest ranks are
    gpn = job.network.gpus_per_node
    return "intra" if ranks.lo // gpn == ranks.hi // gpn else "inter"


# --------------------------------------------------------------------------- rows


@functools.lru_cache(maxsize=4096)
def _stage(job: Job, pp_rank: int) -> tuple[tuple[int, ...], int, tuple[P.Unit, ...], int]:
    layers = tuple(P.stage_layers(job, pp_rank))
    n_moe = sum(job.model.is_moe_layer(i) for i in layers)
    return layers, n_moe, tuple(P.rank_units(job, pp_rank)), P.rank_sp_params(job, pp_rank)


class _Rows:
    """Accumulates rows of one rank, merging calls of the same kind, purpose and size."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.rows: dict[tuple, list[int]] = {}

    def add(
        self, dim: str, op: str, phase: str, kind: str, calls: int, message: int,
        ranks: _Span, purpose: str, *, limit: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        """``limit``: ``(k, x)`` for an expert all-to-all under node-limited routing, each
        token sent across to ``x`` other nodes and forwarded inside them to its ``k``
        experts."""
        if calls <= 0 or message <= 0 or len(ranks) < 2:
            return
        key = (dim, op, phase, kind, purpose, int(message), len(ranks), ranks.local,
               _link(self.job, ranks), limit)  # fmt: skip
        self.rows.setdefault(key, [0])[0] += calls

    def build(self) -> tuple[Row, ...]:
        net = self.job.network
        out = []
        for key, (calls,) in self.rows.items():
            dim, op, phase, kind, purpose, msg, n, local, link, limit = key
            if calls * msg > MAX_INT64:
                raise _beyond_int64(self.job, dim, op, calls * msg)
            # (a recv takes as long as the send it waits for, and sends nothing itself)
            algo, w, intra, inter, t, how = choose(net, "send" if op == "recv" else op, msg,
                                                   n, local)  # fmt: skip
            if limit is not None:
                # message = k·T·h·e: T·x·h·e across nodes, T·k·h·e forwarded inside them
                k, x = limit
                intra, inter = float(msg), msg * x / k
                w = intra + inter
                t, how = call_time(net, op, n, local, wire=w, intra=intra, inter=inter,
                                   message=msg, algorithm=algo)  # fmt: skip
            if op == "recv":
                w = intra = inter = 0.0
            out.append(
                Row(dim, op, phase, kind, purpose, calls, calls * msg, calls * w, calls * intra,
                    calls * inter, calls * t, msg, n, link, how, algo)
            )  # fmt: skip
        return tuple(sorted(out, key=lambda r: (DIMS.index(r.parallel_dim), PHASES.index(r.phase))))


def _beyond_int64(job: Job, dim: str, op: str, size: int) -> ConfigError:
    # Dims and batch each within their limits (pipeline.model.config) can still multiply to
    # more bytes than the predictions table's 64-bit columns hold (and float arithmetic on
    # them would overflow); no real job comes near: its busiest rank sends terabytes a step.
    where = f"{job.source}: " if job.source else ""
    return ConfigError(
        f"{where}model and batch: {dim} {op} traffic of one rank would be about "
        f"2^{size.bit_length() - 1} bytes per step, past 64-bit byte counts; the model and "
        "batch are far larger than any real job's"
    )


def predict(job: Job, rank: int = 0) -> Prediction:
    """Predicted traffic of global ``rank`` per training step (``docs/model.md``).

    Raises
    ------
    ConfigError
        ``rank`` outside ``0 .. world_size-1``, or a row of more bytes per step than 64-bit
        integers hold.
    """
    world = job.parallel.world_size
    if not 0 <= rank < world:
        raise ConfigError(f"rank: {rank} is outside the job's ranks 0..{world - 1}")
    coords = coordinates(job, rank)
    layers, n_moe, units, sp_params = _stage(job, coords["pp"])
    acc = _Rows(job)
    _tensor_parallel(job, rank, coords, len(layers), sp_params, acc)
    _context_parallel(job, rank, len(layers), acc)
    _expert_parallel(job, rank, n_moe, acc)
    _pipeline_parallel(job, rank, coords, acc)
    if job.batch.forward_only:
        # a serving step: the forward's items only (no backward, gradients or optimizer)
        rows = tuple(r for r in acc.build() if r.phase == "forward")
        return Prediction(job, rank, coords, layers, rows)
    _data_parallel(job, rank, coords, units, acc)
    return Prediction(job, rank, coords, layers, acc.build())


def _tensor_parallel(
    job: Job, rank: int, coords: dict[str, int], n_layers: int, sp_params: int, acc: _Rows
) -> None:
    """TP collectives: Megatron-LM without SP, Korthikanti et al. 2022 (arXiv:2205.05198) with
    SP as Megatron-core runs it, and full recomputation."""
    par, m = job.parallel, job.model
    if par.tp == 1:
        return
    g = span(job, rank, ("tp",))
    mb = job.microbatches
    s_c = m.seq_len // par.cp
    msg = job.batch.micro_batch * s_c * m.hidden * job.dtypes.e_a
    # (without vocab-parallel layers the embedding, LM head and loss issue no TP collective)
    vocab = job.conventions.vocab_parallel
    first, last = vocab and coords["pp"] == 0, vocab and coords["pp"] == par.pp - 1
    full = job.recompute == "full"
    torch_sp = par.sequence_parallel and job.conventions.framework == "torch"
    if torch_sp:
        stage = (coords["pp"] == 0, coords["pp"] == par.pp - 1)
        items = _tp_sp_torch_items(n_layers * mb, mb, full, *stage, vocab)
    else:
        items = (_tp_sp_items if par.sequence_parallel else _tp_items)(
            n_layers * mb, mb, full, first, last
        )
    for op, phase, kind, calls, purpose in items:
        acc.add("tp", op, phase, kind, calls, msg, g, purpose)
    if job.conventions.separate_qkv:
        # three column-parallel projections where Megatron has one fused QKV: each replicates
        # its input and all-reduces its input gradient (f) on its own
        acc.add("tp", "all_reduce", "backward", "attention", 2 * n_layers * mb, msg, g,
                "K and V input gradients (separate projections)")  # fmt: skip
    if torch_sp:
        _torch_sp_norms(job, coords, n_layers, g, acc)
    elif par.sequence_parallel:
        norms = sp_params * job.dtypes.e_g
        acc.add("tp", "all_reduce", "optimizer", "norm", 1, norms, g,
                "sequence-parallel norm gradients")  # fmt: skip
    if last:
        ce = job.batch.micro_batch * s_c * CE_BYTES
        acc.add("tp", "all_reduce", "forward", "loss", 3 * mb, ce, g,
                "vocab-parallel cross-entropy (max, sum of exp, target logit)")  # fmt: skip


_Item = tuple[str, str, str, int, str]  # op, phase, layer_kind, calls, purpose


def _tp_items(n: int, mb: int, full: bool, first: bool, last: bool) -> list[_Item]:
    """TP without SP, ``n`` = layers x micro-batches: the f and g all-reduces of Megatron-LM
    (Shoeybi et al. 2019, arXiv:1909.08053), the vocab-parallel embedding and LM head."""
    items = [
        ("all_reduce", "forward", "transformer", 2 * n, "attention and MLP outputs (g)"),
        ("all_reduce", "backward", "transformer", 2 * n, "QKV and FC1 input gradients (f)"),
    ]
    if full:
        items.append(("all_reduce", "backward", "transformer", 2 * n,
                      "recomputed attention and MLP outputs (g)"))  # fmt: skip
    if first:
        items.append(("all_reduce", "forward", "embedding", mb, "vocab-parallel embedding output"))
    if last:
        items.append(("all_reduce", "backward", "lm_head", mb, "LM head input gradient"))
    return items


def _tp_sp_items(n: int, mb: int, full: bool, first: bool, last: bool) -> list[_Item]:
    """TP with SP as Megatron-core runs it: gathers before QKV and FC1, scatters after the
    attention and MLP outputs, their transposes backward and the re-gathered inputs of the
    weight gradients."""
    items = [
        ("all_gather", "forward", "transformer", 2 * n, "sequence-parallel gathers"),
        ("reduce_scatter", "forward", "transformer", 2 * n, "sequence-parallel scatters"),
        ("all_gather", "backward", "transformer", 4 * n,
         "scatter transposes and re-gathered QKV and FC1 inputs"),
        ("reduce_scatter", "backward", "transformer", 2 * n, "gather transposes"),
    ]  # fmt: skip
    if full:
        items += [
            ("all_gather", "backward", "transformer", 2 * n, "recomputed gathers"),
            ("reduce_scatter", "backward", "transformer", 2 * n, "recomputed scatters"),
        ]
    if first:
        items += [
            ("reduce_scatter", "forward", "embedding", mb, "embedding output scatter"),
            ("all_gather", "backward", "embedding", mb, "embedding gradient gather"),
        ]
    if last:
        items += [
            ("all_gather", "forward", "lm_head", mb, "LM head input gather"),
            ("all_gather", "backward", "lm_head", mb, "LM head input re-gather"),
            ("reduce_scatter", "backward", "lm_head", mb, "LM head input-gradient scatter"),
        ]
    return items


def _tp_sp_torch_items(
    n: int, mb: int, full: bool, first: bool, last: bool, vocab: bool
) -> list[_Item]:
    """TP with SP as DTensor runs it (``SequenceParallel`` on the norms, ``PrepareModuleInput``
    from sequence shards to replicated before attention and MLP, ``ColwiseParallel`` in,
    ``RowwiseParallel(output_layouts=Shard(1))`` out; torch/distributed/tensor/parallel/
    style.py, v2.13.0): the gathered input is kept for backward, so the backward has only
    the transposes (no re-gather, unlike Megatron). Before the LM head the sequence is
    gathered once more (a whole or a column-parallel head); the first stage's embedding
    output is cut into sequence shards, locally when the embedding is whole (its gradient
    gathered backward), by a reduce-scatter when it is vocab-parallel (``RowwiseParallel``)."""
    items = [
        ("all_gather", "forward", "transformer", 2 * n, "sequence-parallel gathers"),
        ("reduce_scatter", "forward", "transformer", 2 * n, "sequence-parallel scatters"),
        ("all_gather", "backward", "transformer", 2 * n, "scatter transposes"),
        ("reduce_scatter", "backward", "transformer", 2 * n, "gather transposes"),
    ]  # fmt: skip
    if full:
        items += [
            ("all_gather", "backward", "transformer", 2 * n, "recomputed gathers"),
            ("reduce_scatter", "backward", "transformer", 2 * n, "recomputed scatters"),
        ]
    if first:
        items.append(("all_gather", "backward", "embedding", mb, "embedding gradient gather"))
        if vocab:
            items.append(("reduce_scatter", "forward", "embedding", mb,
                          "embedding output scatter"))  # fmt: skip
    if last:
        items.append(("all_gather", "forward", "lm_head", mb, "LM head input gather"))
        if vocab:
            items.append(("reduce_scatter", "backward", "lm_head", mb,
                          "LM head input-gradient scatter"))  # fmt: skip
    return items


def _torch_sp_norms(job: Job, coords: dict[str, int], n_layers: int, g: _Span, acc: _Rows) -> None:
    """The norms' weight gradients under DTensor SP: each norm tensor (``SequenceParallel``
    makes it a replicated DTensor) gets a partial gradient, all-reduced wherever an op first
    needs it whole and again at each later use: in a foreach AdamW (torch/optim/adamw.py runs
    torch/optim/adam.py's ``_multi_tensor_adam``, v2.13.0) once in ``_foreach_lerp_`` and
    twice in ``_foreach_addcmul_`` (grad x grad): 3 all-reduces of each tensor a step."""
    m = job.model
    per_norm = 2 if m.norm == "layernorm" else 1
    norms = 2 * n_layers + (coords["pp"] == job.parallel.pp - 1)  # + the final norm
    acc.add("tp", "all_reduce", "optimizer", "norm", 3 * norms * per_norm,
            m.hidden * job.dtypes.e_g, g,
            "norm gradients (DTensor partials, foreach AdamW)")  # fmt: skip


def _kv_width(job: Job) -> int:
    """K+V elements per token on one TP rank (MLA: a/t·(d_qk + d_v))."""
    m, t = job.model, job.parallel.tp
    if m.mla is not None:
        la = m.mla
        return m.heads // t * (la.qk_nope_dim + la.qk_rope_dim + la.v_head_dim)
    return 2 * (m.kv_hidden // t if m.kv_heads >= t else m.head_dim)


def _context_parallel(job: Job, rank: int, n_layers: int, acc: _Rows) -> None:
    """CP KV exchange per layer per microbatch: AG fwd, AG + RS(dKV) bwd (Megatron-LM
    ``docs/source/api-guide/context_parallel.rst``)."""
    if job.parallel.cp == 1:
        return
    g = span(job, rank, ("cp",))
    msg = job.batch.micro_batch * job.model.seq_len * _kv_width(job) * job.dtypes.e_a
    calls = n_layers * job.microbatches
    acc.add("cp", "all_gather", "forward", "attention", calls, msg, g, "KV gather")
    acc.add("cp", "all_gather", "backward", "attention", calls, msg, g, "KV re-gather")
    acc.add("cp", "reduce_scatter", "backward", "attention", calls, msg, g, "KV gradient scatter")
    if job.recompute == "full":
        acc.add("cp", "all_gather", "backward", "attention", calls, msg, g, "recomputed KV gather")


def _expert_parallel(job: Job, rank: int, n_moe: int, acc: _Rows) -> None:
    """EP all-to-alls: dispatch + combine forward, their transposes backward; with
    ``model.moe.dispatch_dtype``/``combine_dtype`` or ``max_nodes`` (DeepSeek-V3) dispatch
    and combine are items of their own."""
    par, m = job.parallel, job.model
    moe = m.moe
    if par.ep == 1 or n_moe == 0 or moe is None:
        return
    g = span(job, rank, ("ep",), expert=True)
    tokens = job.batch.micro_batch * m.seq_len // par.cp
    if par.sequence_parallel:
        tokens //= par.tp
    calls = n_moe * job.microbatches
    full = job.recompute == "full"
    if moe.max_nodes is None and moe.dispatch_dtype is None and moe.combine_dtype is None:
        msg = ep_a2a_message(
            k=moe.top_k, tokens=tokens, h=m.hidden, e=job.dtypes.e_a,
            capacity_factor=moe.capacity_factor, experts=moe.experts,
        )  # fmt: skip
        for phase, purpose in (
            ("forward", "expert dispatch and combine"),
            ("backward", "dispatch and combine gradients"),
            *((("backward", "recomputed dispatch and combine"),) if full else ()),
        ):
            acc.add("ep", "all_to_all", phase, "moe", 2 * calls, msg, g, purpose)
        return
    e_d = DTYPE_BYTES[moe.dispatch_dtype or job.dtypes.activations]
    e_c = DTYPE_BYTES[moe.combine_dtype or job.dtypes.activations]
    limit = None
    if moe.max_nodes is not None and _link(job, g) == "inter":
        limit = (moe.top_k, min(moe.max_nodes, -(-len(g) // g.local) - 1))
    # (DeepSeek-V3 section 3.3.4: what flows towards the experts, forward dispatch and the
    # backward of combine, in the dispatch type; what flows back in the combine type)
    for phase, e, purpose in (
        ("forward", e_d, "expert dispatch"),
        ("forward", e_c, "expert combine"),
        ("backward", e_d, "combine gradients (towards the experts)"),
        ("backward", e_c, "dispatch gradients (back from the experts)"),
        *((("backward", e_d, "recomputed dispatch"), ("backward", e_c, "recomputed combine"))
          if full else ()),
    ):  # fmt: skip
        msg = ep_a2a_message(
            k=moe.top_k, tokens=tokens, h=m.hidden, e=e,
            capacity_factor=moe.capacity_factor, experts=moe.experts,
        )  # fmt: skip
        acc.add("ep", "all_to_all", phase, "moe", calls, msg, g, purpose, limit=limit)


def _pipeline_parallel(job: Job, rank: int, coords: dict[str, int], acc: _Rows) -> None:
    """PP send/recv per microbatch and chunk boundary (Narayanan et al. 2021,
    arXiv:2104.04473), tied-embedding grad all-reduce."""
    par, m = job.parallel, job.model
    p, v, r = par.pp, par.vpp, coords["pp"]
    if p == 1:
        return
    mb = job.microbatches
    t_sg = par.tp if par.sequence_parallel else 1
    msg = job.batch.micro_batch * (m.seq_len // par.cp) // t_sg * m.hidden * job.dtypes.e_a
    nxt, prv = _peer(job, rank, (r + 1) % p), _peer(job, rank, (r - 1) % p)
    last, first = int(r == p - 1), int(r == 0)
    for op, phase, calls, pair, purpose in (
        ("send", "forward", mb * (v - last), _pair(job, rank, nxt),
         "activations to the next stage"),
        ("recv", "forward", mb * (v - first), _pair(job, prv, rank),
         "activations from the previous stage"),
        ("send", "backward", mb * (v - first), _pair(job, rank, prv),
         "activation gradients to the previous stage"),
        ("recv", "backward", mb * (v - last), _pair(job, nxt, rank),
         "activation gradients from the next stage"),
    ):  # fmt: skip
        acc.add("pp", op, phase, "boundary", calls, msg, pair, purpose)
    if m.tied_embeddings and (first or last):
        pair = _pair(job, _peer(job, rank, 0), _peer(job, rank, p - 1))
        size = P.embedding_params(m, tp=P.vocab_tp(job)) * job.dtypes.e_g
        acc.add("pp", "all_reduce", "optimizer", "embedding", 1, size, pair,
                "tied embedding gradients of the first and last stage")  # fmt: skip


def _fsdp_units(job: Job, units: tuple[P.Unit, ...]) -> tuple[P.Unit, ...]:
    """The units FSDP gathers: one per layer, embedding and LM head; or, with
    ``conventions.fsdp_root_unit``, the embedding and LM head in one ``root`` unit, as FSDP1
    wraps a model whose wrap policy names only the transformer layers. FSDP1 keeps the root
    unsharded from forward to backward (``_post_forward_reshard``,
    torch/distributed/fsdp/_runtime_utils.py), so the root is gathered once a step."""
    if not job.conventions.fsdp_root_unit:
        return units
    outer = ("embedding", "lm_head")
    root = [u for u in units if u.layer_kind in outer]
    rest = tuple(u for u in units if u.layer_kind not in outer)
    if not root:
        return rest
    return (P.Unit("root", sum(u.elements for u in root), "dense"), *rest)


def _buckets(elements: int, bucket: int) -> list[tuple[int, int, str]]:
    """(calls, elements per call, purpose): full buckets, then the remainder."""
    full, rest = divmod(elements, bucket)
    if full == 0:
        return [(1, rest, "bucket")]
    return [(full, bucket, "buckets"), (1, rest, "bucket (the rest)")]


def _data_parallel(
    job: Job, rank: int, coords: dict[str, int], units: tuple[P.Unit, ...], acc: _Rows
) -> None:
    """Gradient and parameter collectives over DP x CP and expert-DP (DDP; ZeRO, arXiv:1910.02054;
    FSDP) and the loss-reporting all-reduce."""
    par, dt = job.parallel, job.dtypes
    groups = {
        "dense": span(job, rank, ("dp", "cp")),
        "expert": span(job, rank, ("dp",), expert=True),
    }
    scheme = par.dp_scheme
    if scheme in ("zero3", "fsdp_no_reshard") and par.hsdp:
        _hsdp(job, rank, units, acc)
    elif scheme in ("zero3", "fsdp_no_reshard"):
        for u in _fsdp_units(job, units):
            g, grads, params = groups[u.group], u.elements * dt.e_g, u.elements * dt.e_p
            acc.add("dp", "all_gather", "forward", u.layer_kind, 1, params, g, "parameter gather")
            if scheme == "zero3" and u.layer_kind != "root":
                acc.add("dp", "all_gather", "backward", u.layer_kind, 1, params, g,
                        "parameter re-gather")  # fmt: skip
            acc.add("dp", "reduce_scatter", "backward", u.layer_kind, 1, grads, g,
                    "gradient reduce-scatter")  # fmt: skip
    else:
        for kind, gname in (("all", "dense"), ("moe", "expert")):
            g = groups[gname]
            if gname == "dense" and scheme == "ddp" and job.conventions.torch_buckets:
                for size, calls, what in _torch_buckets(job, coords["pp"]):
                    acc.add("dp", "all_reduce", "backward", kind, calls, size, g, what)
                continue
            n_el = sum(u.elements for u in units if u.group == gname)
            bucket = par.bucket_size or max(40_000_000, 1_000_000 * len(g))
            for calls, el, what in _buckets(n_el, bucket):
                _gradient_bucket(acc, scheme, kind, calls, el * dt.e_g, el * dt.e_p, g, what)
    if coords["pp"] == par.pp - 1 and job.conventions.loss_all_reduce:
        acc.add("dp", "all_reduce", "other", "loss", 1, LOSS_REPORT_BYTES, groups["dense"],
                "loss report")  # fmt: skip


def _hsdp(job: Job, rank: int, units: tuple[P.Unit, ...], acc: _Rows) -> None:
    """HSDP (``fully_shard`` over a replicate x shard mesh): each unit gathered in its shard
    group (dp's ``dp_shard`` ranks x cp) forward and again backward, its gradient
    reduce-scattered there and the shard all-reduced across the replicas
    (``foreach_reduce``, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, v2.13.0:
    ``reduce_scatter`` on the shard group, then ``all_reduce`` of its output on the
    replicate group). Expert units shard over their expert-data-parallel group whole."""
    par, dt = job.parallel, job.dtypes
    shard, replicas = span(job, rank, ("dps", "cp")), span(job, rank, ("dpr",))
    expert = span(job, rank, ("dp",), expert=True)
    for u in _fsdp_units(job, units):
        g = shard if u.group == "dense" else expert
        grads, params = u.elements * dt.e_g, u.elements * dt.e_p
        acc.add("dp", "all_gather", "forward", u.layer_kind, 1, params, g, "parameter gather")
        if par.dp_scheme == "zero3" and u.layer_kind != "root":
            acc.add("dp", "all_gather", "backward", u.layer_kind, 1, params, g,
                    "parameter re-gather")  # fmt: skip
        acc.add("dp", "reduce_scatter", "backward", u.layer_kind, 1, grads, g,
                "gradient reduce-scatter")  # fmt: skip
        if u.group == "dense":
            acc.add("dp", "all_reduce", "backward", u.layer_kind, 1,
                    -(-u.elements // shard.size) * dt.e_g, replicas,
                    "gradient shard all-reduce across replicas")  # fmt: skip


@dataclass(frozen=True)
class GradientUnit:
    """One block of a stage's dense gradients, in the order the data-parallel reduction
    carries them: ``kind`` is ``embedding``, ``transformer``, ``lm_head`` or ``root`` (FSDP1's
    root unit); a transformer layer has its global ``layer`` and its ``local`` place on the
    stage."""

    kind: str
    layer: int | None
    local: int | None
    bytes: int


def gradient_plan(job: Job, pp_rank: int) -> list[GradientUnit]:
    """The dense gradients a rank of stage ``pp_rank`` reduces over data parallel, in the
    order its buckets or units carry them: reverse registration order, as gradients become
    ready in backward (PyTorch DDP's and Megatron's buffers walk the parameters in reverse;
    FSDP reduce-scatters each unit as its backward ends). Buckets cut this sequence into
    consecutive pieces, so a bucket's bytes fall on the units its range covers."""
    units = [u for u in P.rank_units(job, pp_rank) if u.group == "dense"]
    if job.parallel.dp_scheme in ("zero3", "fsdp_no_reshard"):
        units = [u for u in _fsdp_units(job, tuple(units)) if u.group == "dense"]
    layers = iter(P.stage_layers(job, pp_rank))
    out = []
    for u in units:
        layer = next(layers) if u.layer_kind == "transformer" else None
        local = P.stage_layers(job, pp_rank).index(layer) if layer is not None else None
        out.append(GradientUnit(u.layer_kind, layer, local, u.elements * job.dtypes.e_g))
    return out[::-1]


@functools.lru_cache(maxsize=64)
def _torch_buckets(job: Job, pp_rank: int) -> tuple[tuple[int, int, str], ...]:
    """(bytes, calls, purpose) of the gradient buckets PyTorch DDP all-reduces: it walks the
    parameters in reverse order and closes a bucket once it holds 1 MiB, then 25 MiB
    (``ddp_first_bucket_mb``, ``ddp_bucket_mb``), never splitting a tensor
    (``compute_bucket_assignment_by_size``, torch/csrc/distributed/c10d/reducer.cpp, called
    by torch/nn/parallel/distributed.py with ``_DEFAULT_FIRST_BUCKET_BYTES`` and
    ``bucket_cap_mb``). Cached per stage: every rank of a stage has the same buckets."""
    conv, e_g = job.conventions, job.dtypes.e_g
    limit = int(conv.ddp_first_bucket_mb * 2**20)
    sizes, size = [], 0
    for elements in reversed(P.rank_tensors(job, pp_rank)):
        size += elements * e_g
        if size >= limit:
            sizes.append(size)
            size, limit = 0, int(conv.ddp_bucket_mb * 2**20)
    if size:
        sizes.append(size)
    first, rest = sizes[:1], sizes[1:]
    out = [(b, 1, "first gradient bucket") for b in first]
    out += [(b, rest.count(b), "gradient buckets") for b in sorted(set(rest))]
    return tuple(out)


def _gradient_bucket(
    acc: _Rows, scheme: str, kind: str, calls: int, grads: int, params: int, g: list[int],
    what: str,
) -> None:  # fmt: skip
    """One size of gradient bucket: all-reduced (DDP), or reduce-scattered and its parameters
    all-gathered after the optimizer (ZeRO-1/2, the distributed optimizer)."""
    if scheme == "ddp":
        acc.add("dp", "all_reduce", "backward", kind, calls, grads, g, f"gradient {what}")
        return
    acc.add("dp", "reduce_scatter", "backward", kind, calls, grads, g, f"gradient {what}")
    acc.add("dp", "all_gather", "optimizer", kind, calls, params, g, f"parameter {what}")


# --------------------------------------------------------------------------- tables


def _as_job(config: Job | str | Path | Mapping[str, Any], world_size: int | None) -> Job:
    if isinstance(config, Job):
        if world_size is not None and world_size != config.parallel.world_size:
            p = config.parallel
            raise ConfigError(
                f"world size: {world_size} ranks, but tp*pp*dp*cp = {p.tp}*{p.pp}*{p.dp}*{p.cp}"
                f" = {p.world_size}; the layout's product must equal the world size"
            )
        return config
    if isinstance(config, Mapping):
        return job_from_dict(config, world_size=world_size)
    job = load_job(config)
    return _as_job(job, world_size)


def predict_ranks(job: Job, ranks: Iterable[int]) -> list[Prediction]:
    """:func:`predict` for each rank of ``ranks``, worked out once per class of ranks.

    A rank's rows depend on it only through its pipeline stage and the link class (one node
    or several) of each communicator and pipeline peer pair it uses (:func:`_class_key`):
    ranks of one class share the rows of the first one predicted.
    """
    seen: dict[tuple, Prediction] = {}
    out = []
    for r in ranks:
        key = _class_key(job, r)
        first = seen.get(key)
        if first is None:
            first = seen[key] = predict(job, r)
            out.append(first)
        else:
            out.append(dataclasses.replace(first, rank=r, coords=coordinates(job, r)))
    return out


def _class_key(job: Job, rank: int) -> tuple:
    """The pipeline stage and the link class and members on the rank's node of every group and
    peer pair ``rank`` may use."""
    pp, p = coordinates(job, rank)["pp"], job.parallel.pp
    spans = [span(job, rank, d) for d in (("tp",), ("cp",), ("dp", "cp"))]
    spans += [span(job, rank, d, expert=True) for d in (("ep",), ("dp",))]
    if job.parallel.hsdp:
        spans += [span(job, rank, d) for d in (("dps", "cp"), ("dpr",))]
    peers = [_peer(job, rank, x) for x in ((pp + 1) % p, (pp - 1) % p, 0, p - 1)]
    pairs = [_pair(job, rank, peers[0]), _pair(job, rank, peers[1]), _pair(job, peers[2], peers[3])]
    return (pp, *((_link(job, g), g.local) for g in spans + pairs))


def predictions_table(
    config: Job | str | Path | Mapping[str, Any],
    ranks: Iterable[int] | int,
    *,
    world_size: int | None = None,
) -> pa.Table:
    """The ``predictions`` table (``schemas/predictions.yaml``) for the ranks of a job.

    Parameters
    ----------
    config
        A :class:`Job`, a ``job.yaml`` path or its parsed mapping.
    ranks
        The job's global ranks (e.g. the ``ranks`` table of a dataset), or their number.
        Without ``world_size`` they are the whole world: their count must equal
        ``tp·pp·dp·cp``.
    world_size
        The job's world size when ``ranks`` is only some of its ranks (a dataset with traces
        of a few ranks); it must equal ``tp·pp·dp·cp``.

    Returns
    -------
    pa.Table
        Columns ``rank`` and those of :class:`Row`'s public part; ``job`` is left to the writer
        (``schema.conform("predictions", table, job=...)``).

    Raises
    ------
    ConfigError
        A bad job, a layout whose product is not the world size, a rank outside it.
    """
    rank_list = list(range(ranks)) if isinstance(ranks, int) else sorted(set(ranks))
    job = _as_job(config, world_size if world_size is not None else len(rank_list))
    world = job.parallel.world_size
    bad = [r for r in rank_list if not 0 <= r < world]
    if bad:
        raise ConfigError(f"rank: {bad[0]} is outside the job's ranks 0..{world - 1}")
    cols: dict[str, list[Any]] = {"rank": [], **{c: [] for c in _ROW_COLUMNS}}
    # 16,384 ranks make 114,688 rows out of half a million objects: 1.4 to 1.9 s of CPU so,
    # against 2.0 to 2.2 s with the collector's passes over them
    with gc_paused():
        for pred in predict_ranks(job, rank_list):
            for row in pred.rows:
                cols["rank"].append(pred.rank)
                for c in _ROW_COLUMNS:
                    cols[c].append(getattr(row, c))
    types = {"rank": pa.int64(), "calls": pa.int64(), "bytes": pa.int64(),
             "wire_bytes": pa.float64(), "intra_node_bytes": pa.float64(),
             "inter_node_bytes": pa.float64(), "est_time_s": pa.float64()}  # fmt: skip
    return table_from_lists(cols, pa.schema([(c, types.get(c, pa.string())) for c in cols]))


def alternative_totals(job: Job, ranks: Iterable[int]) -> list[tuple]:
    """(key, value, what it sets, ranks, parallel_dim, op, phase, bytes): the bytes per
    dimension, op and phase of each of ``ranks`` were ``job`` given another value of one key
    the ledger can name where observed bytes equal these and not the prediction:
    ``model.linear_bias`` (which linear layers have biases), ``conventions.framework``
    (with that framework's defaults for the other conventions), for FSDP ``parallel.mesh``
    (HSDP over the same dp) and for pipelines ``parallel.vpp`` (up to 8 stages a rank).
    A rank's bytes depend on its pipeline stage alone (not on where its groups lie), so
    each alternative is predicted once per stage, for the ranks listed."""
    stages: dict[int, list[int]] = {}
    for r in sorted(set(ranks)):
        stages.setdefault(coordinates(job, r)["pp"], []).append(r)
    out = []
    for key, value, what, alt in _alternative_jobs(job):
        for members in stages.values():
            totals: dict[tuple, int] = {}
            for row in predict(alt, members[0]).rows:
                at = (row.parallel_dim, row.op, row.phase)
                totals[at] = totals.get(at, 0) + row.bytes
            out += [(key, value, what, members, *k, b) for k, b in totals.items()]
    return out


def _alternative_jobs(job: Job) -> list[tuple[str, str, str, Job]]:
    """(key, value, what it sets, the job with it) for :func:`alternative_totals`."""
    out = []
    m, conv = job.model, job.conventions
    if m.mla is None:  # (MLA's projections carry no biases in the model)
        for value in LINEAR_BIAS:
            if value != m.biases:
                alt = dataclasses.replace(job, model=dataclasses.replace(m, linear_bias=value))
                out.append(("model.linear_bias", value, "the linear layers' biases", alt))
    par = job.parallel
    if par.dp_scheme in ("zero3", "fsdp_no_reshard") and not par.hsdp:
        # HSDP meshes of the same dp (a few: the divisors of dp up to 64)
        for shard in (n for n in range(2, min(par.dp, 65)) if par.dp % n == 0):
            alt = dataclasses.replace(job, parallel=dataclasses.replace(par, dp_shard=shard))
            value = f"{{replicate: {par.dp // shard}, shard: {shard}}}"
            out.append(("parallel.mesh", value, "HSDP's replicate groups", alt))
    if par.pp > 1:
        # interleaved schedules: a rank's sends and receives grow with its virtual stages
        for vpp in range(1, min(m.layers // par.pp, 8) + 1):
            if vpp != par.vpp:
                alt = dataclasses.replace(job, parallel=dataclasses.replace(par, vpp=vpp))
                out.append(("parallel.vpp", str(vpp), "the stages per rank", alt))
    other = "megatron" if conv.framework == "torch" else "torch"
    mega = other == "megatron"
    alt_conv = Conventions(framework=other, vocab_parallel=mega, loss_all_reduce=mega,
                           fsdp_root_unit=conv.fsdp_root_unit)  # fmt: skip
    out.append(("conventions.framework", other, "what the framework issues",
                dataclasses.replace(job, conventions=alt_conv)))  # fmt: skip
    return out


def format_table(pred: Prediction) -> str:
    """A plain-text report of one rank's prediction (``--format table``)."""
    j, t = pred.job, pred.totals
    ms = model_summary(j)
    c = pred.coords
    lines = [
        f"model {ms['name']}: {ms['params']:,} params, {ms['flops_per_token']:.4g} FLOPs/token",
        f"layout tp={j.parallel.tp} pp={j.parallel.pp} dp={j.parallel.dp} cp={j.parallel.cp} "
        f"ep={j.parallel.ep} vpp={j.parallel.vpp} sp={j.parallel.sequence_parallel} "
        f"dp_scheme={j.parallel.dp_scheme} order={j.parallel.order} "
        f"world={j.parallel.world_size}",
        f"batch micro={j.batch.micro_batch} global={j.batch.global_batch} "
        f"microbatches={j.microbatches} tokens/step={j.tokens_per_step:,} "
        f"recompute={j.recompute} conventions={j.conventions.framework}",
        f"rank {pred.rank}: tp={c['tp']} cp={c['cp']} dp={c['dp']} pp={c['pp']} ep={c['ep']} "
        f"layers {_ranges(pred.layers)}",
        "",
    ]
    head = ("dim", "op", "phase", "layer_kind", "calls", "message_B", "n", "link",
            "bytes", "wire_bytes", "intra_node_B", "inter_node_B", "est_time_s",
            "algorithm", "purpose")  # fmt: skip
    body = [
        (r.parallel_dim, r.op, r.phase, r.layer_kind, f"{r.calls:,}", f"{r.message:,}",
         str(r.group_size), r.link, f"{r.bytes:,}", f"{r.wire_bytes:,.0f}",
         f"{r.intra_node_bytes:,.0f}", f"{r.inter_node_bytes:,.0f}", f"{r.est_time_s:.6f}",
         r.algorithm, r.purpose)
        for r in pred.rows
    ]  # fmt: skip
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    right = {4, 5, 6, 8, 9, 10, 11, 12}
    for rec in [head, *body]:
        cells = [x.rjust(w) if i in right else x.ljust(w) for i, (x, w) in
                 enumerate(zip(rec, widths, strict=True))]  # fmt: skip
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    lines.append(
        f"total: {t['bytes']:,} bytes, {t['wire_bytes']:,.0f} wire bytes per step "
        f"({t['intra_node_bytes']:,.0f} inside the node, {t['inter_node_bytes']:,.0f} across "
        f"nodes); {t['bytes_per_token']:.4g} bytes per token"
    )
    for dim, d in t["by_dim"].items():
        lines.append(
            f"  {dim}: {d['bytes']:,} bytes, {d['wire_bytes']:,.0f} wire bytes "
            f"({d['intra_node_bytes']:,.0f} inside, {d['inter_node_bytes']:,.0f} across)"
        )
    return "\n".join(lines)


def _ranges(xs: Iterable[int]) -> str:
    xs = list(xs)
    if not xs:
        return "none"
    parts, start, prev = [], xs[0], xs[0]
    for x in [*xs[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(parts)
