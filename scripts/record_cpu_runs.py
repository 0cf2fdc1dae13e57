"""Record small real PyTorch training runs on CPU with gloo, as test data for tokenwire.

Each run trains a tiny GPT-like decoder for 5 steps in ``world`` local processes
(``torch.multiprocessing.spawn``, gloo backend) and writes, per rank, into
``OUT/<run>/``:

- ``rank<r>.pt.trace.json.gz``: the Kineto trace of the profiler's 2 active steps
  (``torch.profiler``, CPU activity, ``record_shapes``, ``with_modules`` and ``with_stack``
  on, ``schedule(wait=1, warmup=1, active=2, repeat=1)``: ``ProfilerStep#2`` and ``#3``).
  torch emits the ``nn.Module:`` scopes only through its Python tracer, which ``with_modules``
  alone does not start; the other Python frames are dropped before gzip to keep the file
  small;
- ``rank<r>.flight_recorder.json.gz``: PyTorch's flight recorder
  (``torch._C._distributed_c10d._dump_fr_trace_json()``, buffer sized by
  ``TORCH_FR_BUFFER_SIZE``), which records gloo collectives but no send/recv;

and one ``job.yaml`` describing the run for ``tokenwire link --config``.

Runs (fp32 everywhere, micro-batch 4 x 32 tokens):

==========  =====  ==========================================================================
run         ranks  layout
==========  =====  ==========================================================================
ddp         2      DistributedDataParallel, one gradient bucket
fsdp        2      FSDP2 ``fully_shard`` on the embedding, each block and the head
tp          2      Megatron-LM tensor parallel by hand: vocab-parallel embedding, f/g
                   all-reduces around attention and MLP, column-parallel LM head with the
                   vocab-parallel cross entropy (3 all-reduces)
tp_dp       4      the same TP (groups {0,1}, {2,3}) x DDP over {0,2}, {1,3}
pp          2      one block per stage, 2 micro-batches (GPipe order), send/recv
moe         2      every MLP is a 4-expert top-1 MoE with capacity factor 1 (fixed-size
                   buffers), 2 experts per rank, all_to_all_single dispatch and combine;
                   the other parameters under DDP
straggler   2      ddp, with rank 1 sleeping 30 ms in ``blocks.1``'s forward in every step
straggler_step
            2      ddp, with rank 1 sleeping 200 ms in ``blocks.0``'s forward in step 3 only
                   (long enough to outlast the other rank's forward and backward on a loaded
                   machine: the wait it causes starts only when that rank is done)
tp4         4      tp over 4 ranks (one head each)
fsdp4       4      fsdp over 4 ranks
tp_fsdp     4      the TP of tp_dp (groups {0,1}, {2,3}) x FSDP2 over {0,2}, {1,3}: each rank's
                   TP shard of the embedding, each block and the head a unit
pp4         4      pp over 4 stages of a 4-layer model, one block each
moe4        4      moe with one expert per rank (ep 4, the other parameters under DDP over 4)
==========  =====  ==========================================================================

Data-parallel runs end each step with Megatron's loss report: an all-reduce of
``[loss sum, tokens]`` (2 fp32) outside the forward, backward and optimizer ranges.

Usage (needs ``torch`` with gloo; it is not a tokenwire dependency)::

    python scripts/record_cpu_runs.py -o tests/data/cpu_gloo            # every run
    python scripts/record_cpu_runs.py -o /tmp/runs --runs ddp,tp        # some
    python scripts/record_cpu_runs.py -o tests/data/cpu_gloo --runs ddp --micro-batch 8
                                                # into ddp_mb8/: the same job, 8 sequences

``--micro-batch N`` records the runs with N sequences per micro-batch instead of 4, each into
``<run>_mb<N>/`` beside the others, so that two runs differ in the batch alone (tokenwire
diff's tests).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812
from torch.profiler import ProfilerActivity, profile, record_function, schedule

VOCAB, HIDDEN, HEADS, FFN, LAYERS, SEQ, MICRO = 256, 64, 4, 256, 2, 32, 4
EXPERTS, CAPACITY = 4, 32  # capacity = ceil(1.0 * top_k(1) * tokens(128) / experts)
STEPS = 5
STRAGGLER_RANK, STRAGGLER_LAYER, STRAGGLER_SLEEP_S = 1, 1, 0.030
#: The slowed runs: run -> (rank that sleeps, block it sleeps in, step it sleeps in or None
#: for every step, seconds)
SLOWED = {
    "straggler": (STRAGGLER_RANK, STRAGGLER_LAYER, None, STRAGGLER_SLEEP_S),
    "straggler_step": (1, 0, 3, 0.200),
}
_STEP = [0]  # the step the worker is running (a slowed block reads it)

RUNS = {"ddp": 2, "fsdp": 2, "tp": 2, "tp_dp": 4, "pp": 2, "moe": 2, "straggler": 2,
        "straggler_step": 2, "tp4": 4, "pp4": 4, "moe4": 4, "fsdp4": 4, "tp_fsdp": 4}  # fmt: skip
#: Transformer layers of each run: LAYERS, but one per stage of pp4
RUN_LAYERS = {"pp4": 4}


# ----------------------------------------------------------------------- tensor parallel


class _CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _VocabParallelCE(torch.autograd.Function):
    """Megatron-LM's vocab-parallel cross entropy
    (megatron/core/tensor_parallel/cross_entropy.py): all-reduces of the max, the target
    logit and the sum of exponentials, each [b, s] fp32; the backward is local."""

    @staticmethod
    def forward(ctx, logits, target, group, lo):
        logits = logits.clone()
        vmax = logits.max(dim=-1)[0]
        dist.all_reduce(vmax, op=dist.ReduceOp.MAX, group=group)
        logits -= vmax.unsqueeze(-1)
        part = logits.shape[-1]
        local = target - lo
        mask = (local < 0) | (local >= part)
        local = local.masked_fill(mask, 0)
        picked = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(mask, 0.0)
        dist.all_reduce(picked, group=group)
        exp = logits.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        exp /= sum_exp.unsqueeze(-1)
        ctx.save_for_backward(exp, local, mask)
        return (sum_exp.log() - picked).mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local, mask = ctx.saved_tensors
        g = softmax.clone()
        onehot = torch.zeros_like(g).scatter_(-1, local.unsqueeze(-1), 1.0)
        g -= onehot * (~mask).unsqueeze(-1).float()
        return g * grad / local.numel(), None, None, None


# ----------------------------------------------------------------------- expert parallel


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with even splits; its gradient goes back the same way."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad.contiguous(), group=ctx.group)
        return out, None


class MoE(nn.Module):
    """Top-1 MoE over ``EXPERTS`` experts, ``EXPERTS / ep`` on each rank, fixed capacity."""

    def __init__(self, ep_group, ep: int) -> None:
        super().__init__()
        self.group, self.ep = ep_group, ep
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(HIDDEN, FFN), nn.GELU(), nn.Linear(FFN, HIDDEN))
            for _ in range(EXPERTS // ep)
        )

    def forward(self, x):
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        probs = self.router(flat).softmax(-1)
        weight, expert = probs.max(-1)
        # slot of each token in its expert's buffer; tokens past the capacity are dropped
        onehot = F.one_hot(expert, EXPERTS)
        slot = (onehot.cumsum(0) * onehot).sum(-1) - 1
        keep = slot < CAPACITY
        index = (expert * CAPACITY + slot.clamp(max=CAPACITY - 1))[keep]
        buf = flat.new_zeros(EXPERTS * CAPACITY, h).index_copy(0, index, flat[keep])
        got = _AllToAll.apply(buf, self.group)  # [ep, local experts, C, h] after the exchange
        local = EXPERTS // self.ep
        got = got.view(self.ep, local, CAPACITY, h)
        out = torch.stack([self.experts[e](got[:, e]) for e in range(local)], dim=1)
        back = _AllToAll.apply(out.reshape(EXPERTS * CAPACITY, h), self.group)
        y = flat.new_zeros(b * s, h)
        y = y.index_copy(0, keep.nonzero().squeeze(-1), back[index] * weight[keep].unsqueeze(-1))
        return y.view(b, s, h)


# ----------------------------------------------------------------------- model


class Attention(nn.Module):
    def __init__(self, tp: int, tp_group, bias: bool = True) -> None:
        super().__init__()
        self.tp, self.group = tp, tp_group
        self.heads = HEADS // tp
        self.q_proj = nn.Linear(HIDDEN, HIDDEN // tp, bias=bias)
        self.k_proj = nn.Linear(HIDDEN, HIDDEN // tp, bias=bias)
        self.v_proj = nn.Linear(HIDDEN, HIDDEN // tp, bias=bias)
        self.o_proj = nn.Linear(HIDDEN // tp, HIDDEN, bias=False)
        self.o_bias = nn.Parameter(torch.zeros(HIDDEN)) if bias else None

    def forward(self, x):
        b, s, _ = x.shape
        if self.tp > 1:
            x = _CopyToTP.apply(x, self.group)
        q, k, v = (
            p(x).view(b, s, self.heads, -1).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        y = (
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            .transpose(1, 2)
            .reshape(b, s, -1)
        )
        y = self.o_proj(y)
        if self.tp > 1:
            y = _ReduceFromTP.apply(y, self.group)
        return y if self.o_bias is None else y + self.o_bias


class MLP(nn.Module):
    def __init__(self, tp: int, tp_group, bias: bool = True) -> None:
        super().__init__()
        self.tp, self.group = tp, tp_group
        self.fc1 = nn.Linear(HIDDEN, FFN // tp, bias=bias)
        self.fc2 = nn.Linear(FFN // tp, HIDDEN, bias=False)
        self.fc2_bias = nn.Parameter(torch.zeros(HIDDEN)) if bias else None

    def forward(self, x):
        if self.tp > 1:
            x = _CopyToTP.apply(x, self.group)
        y = self.fc2(F.gelu(self.fc1(x)))
        if self.tp > 1:
            y = _ReduceFromTP.apply(y, self.group)
        return y if self.fc2_bias is None else y + self.fc2_bias


class Block(nn.Module):
    def __init__(self, tp: int, tp_group, moe: MoE | None, slow_rank: int | None,
                 slow_step: int | None = None, sleep_s: float = STRAGGLER_SLEEP_S,
                 bias: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.slow_rank, self.slow_step, self.sleep_s = slow_rank, slow_step, sleep_s
        self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.attn = Attention(tp, tp_group, bias)
        self.mlp = moe if moe is not None else MLP(tp, tp_group, bias)

    def forward(self, x):
        if (
            self.slow_rank is not None
            and dist.get_rank() == self.slow_rank
            and self.slow_step in (None, _STEP[0])
        ):
            time.sleep(self.sleep_s)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embed(nn.Module):
    """Word embedding (vocab-parallel under TP: Megatron's VocabParallelEmbedding) + learned
    positions (replicated)."""

    def __init__(self, tp: int, tp_rank: int, tp_group) -> None:
        super().__init__()
        self.tp, self.group, self.lo = tp, tp_group, tp_rank * VOCAB // tp
        self.tok = nn.Embedding(VOCAB // tp, HIDDEN)
        self.pos = nn.Embedding(SEQ, HIDDEN)

    def forward(self, ids):
        if self.tp > 1:
            local = ids - self.lo
            mask = (local < 0) | (local >= VOCAB // self.tp)
            x = self.tok(local.masked_fill(mask, 0)).masked_fill(mask.unsqueeze(-1), 0.0)
            x = _ReduceFromTP.apply(x, self.group)
        else:
            x = self.tok(ids)
        return x + self.pos(torch.arange(ids.shape[1]))


class Head(nn.Module):
    """Final LayerNorm, LM head (column-parallel under TP) and the loss."""

    def __init__(self, tp: int, tp_rank: int, tp_group) -> None:
        super().__init__()
        self.tp, self.group, self.lo = tp, tp_group, tp_rank * VOCAB // tp
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB // tp, bias=False)

    def forward(self, x, target):
        x = self.ln_f(x)
        if self.tp > 1:
            logits = self.lm_head(_CopyToTP.apply(x, self.group))
            return _VocabParallelCE.apply(logits, target, self.group, self.lo)
        return F.cross_entropy(self.lm_head(x).reshape(-1, VOCAB), target.reshape(-1))


class TinyGPT(nn.Module):
    def __init__(self, layers: range, *, first: bool, last: bool, tp=1, tp_rank=0, tp_group=None,
                 ep_group=None, ep=1, slow_rank=None, slow_layer=STRAGGLER_LAYER,
                 slow_step=None, sleep_s=STRAGGLER_SLEEP_S, bias=True) -> None:  # fmt: skip
        super().__init__()
        self.embed = Embed(tp, tp_rank, tp_group) if first else None
        self.blocks = nn.ModuleList(
            Block(tp, tp_group, MoE(ep_group, ep) if ep_group is not None else None,
                  slow_rank if i == slow_layer else None, slow_step, sleep_s, bias)
            for i in layers
        )  # fmt: skip
        self.head = Head(tp, tp_rank, tp_group) if last else None

    def forward(self, x, target=None):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x, target) if self.head is not None else x


# ----------------------------------------------------------------------- one rank


def _batch(step: int, dp_rank: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + 10 * dp_rank + micro)
    ids = torch.randint(0, VOCAB, (MICRO, SEQ + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def _loss_report(loss: torch.Tensor, group) -> None:
    """Megatron's loss report: [loss sum, tokens] all-reduced over DP, outside the phases."""
    stats = torch.tensor([loss.item() * MICRO * SEQ, float(MICRO * SEQ)])
    dist.all_reduce(stats, group=group)


def _new_groups(rank: int, world: int, tp: int) -> tuple:
    """TP groups of consecutive ranks and DP groups across them (Megatron's tp-dp order)."""
    tp_group = dp_group = None
    for d in range(world // tp):
        g = dist.new_group(list(range(d * tp, d * tp + tp)), group_desc=f"tp_{d}")
        if rank // tp == d:
            tp_group = g
    for t in range(tp):
        g = dist.new_group(list(range(t, world, tp)), group_desc=f"dp_{t}")
        if rank % tp == t:
            dp_group = g
    return tp_group, dp_group


def _build(run: str, rank: int, world: int):
    """(model to step, optimizer, step function) for ``run`` on ``rank``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    if run in ("ddp", *SLOWED):
        slow = SLOWED.get(run, (None, STRAGGLER_LAYER, None, 0.0))
        model = DDP(TinyGPT(range(LAYERS), first=True, last=True, slow_rank=slow[0],
                            slow_layer=slow[1], slow_step=slow[2], sleep_s=slow[3]))  # fmt: skip
        return model, _dp_step(model, rank, dist.group.WORLD)
    if run in ("fsdp", "fsdp4"):
        from torch.distributed.fsdp import fully_shard

        model = TinyGPT(range(LAYERS), first=True, last=True)
        for unit in (model.embed, *model.blocks, model.head):
            fully_shard(unit)
        fully_shard(model)
        return model, _dp_step(model, rank, dist.group.WORLD)
    if run in ("tp", "tp_dp", "tp4"):
        tp = 4 if run == "tp4" else 2
        tp_group, dp_group = _new_groups(rank, world, tp)
        torch.manual_seed(rank % tp)  # each TP rank its own shard
        model = TinyGPT(
            range(LAYERS), first=True, last=True, tp=tp, tp_rank=rank % tp, tp_group=tp_group
        )
        if world > tp:
            model = DDP(model, process_group=dp_group)
            return model, _dp_step(model, rank // tp, dp_group)
        return model, _dp_step(model, 0, None)
    if run == "tp_fsdp":
        return _tp_fsdp(rank, world)
    if run in ("moe", "moe4"):
        model = TinyGPT(range(LAYERS), first=True, last=True, ep_group=dist.group.WORLD, ep=world)
        torch.manual_seed(1 + rank)  # each rank its own experts
        for name, p in model.named_parameters():
            if ".experts." in name:
                nn.init.normal_(p, std=0.02)
        experts = [n for n, _ in model.named_parameters() if ".experts." in n]
        DDP._set_params_and_buffers_to_ignore_for_model(model, experts)
        model = DDP(model)
        return model, _dp_step(model, rank, dist.group.WORLD)
    if run in ("pp", "pp4"):
        half = RUN_LAYERS.get(run, LAYERS) // world
        model = TinyGPT(
            range(rank * half, rank * half + half), first=rank == 0, last=rank == world - 1
        )
        return model, _pp_step(model, rank, world)
    raise ValueError(run)


def _tp_fsdp(rank: int, world: int):
    """TP over consecutive ranks, FSDP2 over the DP group of each TP rank; the step."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    tp_group, dp_group = _new_groups(rank, world, 2)
    torch.manual_seed(rank % 2)  # each TP rank its own shard
    model = TinyGPT(range(LAYERS), first=True, last=True, tp=2, tp_rank=rank % 2, tp_group=tp_group)
    mesh = DeviceMesh.from_group(dp_group, "cpu")
    for unit in (model.embed, *model.blocks, model.head):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, _dp_step(model, rank // 2, dp_group)


def _dp_step(model, dp_rank: int, dp_group):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(i: int) -> None:
        ids, target = _batch(i, dp_rank)
        with record_function("forward"):
            loss = model(ids, target)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if dp_group is not None:
            _loss_report(loss.detach(), dp_group)

    return step


def _pp_step(model, rank: int, world: int, micro: int = 2):
    """GPipe order: every micro-batch's forward, then every backward."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    first, last = rank == 0, rank == world - 1

    def step(i: int) -> None:
        keep = []
        with record_function("forward"):
            for m in range(micro):
                ids, target = _batch(i, 0, m)
                if first:
                    x = ids
                else:
                    x = torch.empty(MICRO, SEQ, HIDDEN)
                    dist.recv(x, rank - 1)
                    x.requires_grad_()
                y = model(x, target)
                if not last:
                    dist.send(y.detach(), rank + 1)
                keep.append((x, y))
        with record_function("backward"):
            for x, y in keep:
                if last:
                    (y / micro).backward()
                else:
                    grad = torch.empty_like(y)
                    dist.recv(grad, rank + 1)
                    y.backward(grad)
                if not first:
                    dist.send(x.grad, rank - 1)
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def _worker(rank: int, run: str, world: int, port: int, out: str, micro: int = MICRO) -> None:
    global MICRO  # (a spawned process imports this module afresh: its own MICRO)
    MICRO = micro
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="4096")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model, step = _build(run, rank, world)
    record_steps(rank, out, step, with_modules=True)


def record_steps(rank: int, out: str, step, *, with_modules: bool) -> None:
    """Profile :data:`STEPS` calls of ``step`` on this rank (the middle two recorded), then
    write its trace and flight recorder dump into ``out``, gzipped, and leave the group."""
    tmp = Path(out) / f"rank{rank}.pt.trace.json"

    def ready(prof) -> None:
        prof.export_chrome_trace(str(tmp))

    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
        with_modules=with_modules,
        schedule=schedule(wait=1, warmup=1, active=2, repeat=1), on_trace_ready=ready,
    ) as prof:  # fmt: skip
        for i in range(STEPS):
            _STEP[0] = i
            step(i)
            prof.step()
    dist.barrier()
    fr = torch._C._distributed_c10d._dump_fr_trace_json()
    _gzip_bytes(
        fr if isinstance(fr, bytes) else fr.encode(),
        Path(out) / f"rank{rank}.flight_recorder.json.gz",
    )
    _gzip_file(tmp)
    dist.destroy_process_group()


def _gzip_bytes(data: bytes, path: Path) -> None:
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz,
    ):
        gz.write(data)


def _kept(event: dict) -> bool:
    """Python frames other than ``nn.Module:`` scopes are dropped: ``with_stack`` is on only
    because torch emits the module scopes through the Python tracer, and the other frames
    would triple the file."""
    return event.get("cat") != "python_function" or event.get("name", "").startswith("nn.Module: ")


def _gzip_file(path: Path) -> None:
    """Gzip ``path`` to ``path.gz``: the absolute traceName cut to the bare file name, Python
    frames other than module scopes dropped."""
    trace = json.loads(path.read_text())
    trace["traceName"] = path.name
    trace["traceEvents"] = [e for e in trace["traceEvents"] if _kept(e)]
    _gzip_bytes(
        json.dumps(trace, separators=(",", ":")).encode(), path.with_name(path.name + ".gz")
    )
    path.unlink()


# ----------------------------------------------------------------------- job.yaml


def job_yaml(run: str, micro: int = MICRO) -> str:
    """The job description tokenwire's model reads for ``run`` at ``micro`` sequences per
    micro-batch."""
    world = RUNS[run]
    par = {
        "ddp": "dp: 2",
        "straggler": "dp: 2",
        "straggler_step": "dp: 2",
        "fsdp": "dp: 2, fsdp: true",
        "fsdp4": "dp: 4, fsdp: true",
        "tp_fsdp": "tp: 2, dp: 2, fsdp: true, order: tp-dp",
        "tp": "tp: 2",
        "tp_dp": "tp: 2, dp: 2, order: tp-dp",
        "pp": "pp: 2",
        "moe": "dp: 2, ep: 2",
        "tp4": "tp: 4",
        "pp4": "pp: 4",
        "moe4": "dp: 4, ep: 4",
    }[run]
    moe = ""
    if run.startswith("moe"):
        moe = f", moe: {{experts: {EXPERTS}, top_k: 1, capacity_factor: 1.0}}"
    accum = 2 if run.startswith("pp") else 1
    layers = RUN_LAYERS.get(run, LAYERS)
    return (
        f"# {_folder(run, micro)}: recorded by scripts/record_cpu_runs.py ({world} ranks, "
        "gloo, CPU)\n"
        f"model: {{layers: {layers}, hidden: {HIDDEN}, heads: {HEADS}, ffn_hidden: {FFN}, "
        f"vocab: {VOCAB}, seq_len: {SEQ}{moe}}}\n"
        f"parallel: {{{par}, world_size: {world}}}\n"
        f"batch: {{micro_batch: {micro}, grad_accum: {accum}}}\n"
        "dtypes: {params: fp32, activations: fp32, grad_reduce: fp32}\n"
        "network: {gpus_per_node: 8}\n"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _folder(run: str, micro: int) -> str:
    """The folder of ``run`` at ``micro`` sequences per micro-batch: ``run`` at the default,
    else ``<run>_mb<micro>``."""
    return run if micro == MICRO else f"{run}_mb{micro}"


def record(run: str, out: Path, micro: int = MICRO) -> Path:
    """Record ``run`` at ``micro`` sequences per micro-batch into its folder of ``out``
    (replacing what is there); returns the folder."""
    dest = out / _folder(run, micro)
    with tempfile.TemporaryDirectory() as tmp:
        args = (run, RUNS[run], _free_port(), tmp, micro)
        mp.spawn(_worker, args=args, nprocs=RUNS[run], join=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(tmp, dest)
    (dest / "job.yaml").write_text(job_yaml(run, micro))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument(
        "--runs", default=",".join(RUNS), help="comma-separated, of: " + ", ".join(RUNS)
    )
    ap.add_argument(
        "--micro-batch", type=int, default=MICRO,
        help=f"sequences per micro-batch (default {MICRO}); another value records each run "
        "into <run>_mb<N>/",
    )  # fmt: skip
    args = ap.parse_args()
    if args.micro_batch < 1:
        ap.error("--micro-batch must be at least 1")
    if args.micro_batch != MICRO and {"moe", "moe4"} & set(args.runs.split(",")):
        ap.error("moe's expert capacity is sized for 4 sequences; record it at the default")
    for run in args.runs.split(","):
        dest = record(run, args.out, args.micro_batch)
        print(dest.name, sum(f.stat().st_size for f in dest.iterdir()), "bytes")


if __name__ == "__main__":
    main()
