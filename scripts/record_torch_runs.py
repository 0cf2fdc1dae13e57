"""Record small real PyTorch runs that use torch.distributed's own parallel APIs (DTensor
tensor parallelism, torch.distributed.pipelining), on CPU with gloo, as test data for
tokenwire's ledger.

The model, batch, steps and profiler schedule are those of ``scripts/record_cpu_runs.py``
(a 2-layer GPT, hidden 64, fp32, micro-batches of 4 x 32 tokens, ``ProfilerStep#2`` and
``#3`` profiled); each run writes, per rank, ``rank<r>.pt.trace.json.gz`` and
``rank<r>.flight_recorder.json.gz`` into ``OUT/<run>/``, and one ``job.yaml`` with
``conventions: {framework: torch}`` (and the run's own convention keys).

==========  =====  ==========================================================================
run         ranks  layout
==========  =====  ==========================================================================
tp_dtensor  2      ``torch.distributed.tensor.parallel.parallelize_module`` on each block:
                   ``ColwiseParallel`` on Q, K, V and FC1, ``RowwiseParallel`` on O and FC2;
                   embedding and head whole on both ranks; no loss report
pp_1f1b     2      ``torch.distributed.pipelining``: one block per stage (embedding with the
                   first, head with the last), ``Schedule1F1B`` over 4 micro-batches of 4
ddp4        4      DistributedDataParallel over 4 ranks, one gradient bucket; no loss report
fsdp1       2      FSDP1 ``FullyShardedDataParallel``, each block wrapped
                   (``ModuleWrapPolicy``), then the root (embedding and head); no loss report
tp_dtensor4 4      tp_dtensor over 4 ranks (one head each)
pp_1f1b4    4      pp_1f1b with 4 layers over 4 stages, one block each
fsdp1_4     4      fsdp1 over 4 ranks
infer_cpu   1      inference, no process group: greedy decoding of 4 tokens after a prompt of
                   2 x 16 under ``torch.no_grad``, each token in ``record_function("decode
                   <i>")``; profiled whole, without a schedule (so no ``ProfilerStep#N``),
                   one trace ``rank0.pt.trace.json.gz`` and no flight recorder or job.yaml
ddp_bucket  2      DistributedDataParallel with ``bucket_cap_mb=0.1``: every bucket, the first
                   too, closed at 0.1 MiB (several buckets); no loss report
ddp_nobias  2      DistributedDataParallel of the model without linear biases (Q, K, V, O,
                   FC1, FC2 weights alone), one bucket; no loss report
hsdp        4      FSDP2 ``fully_shard`` over a 2 x 2 ``DeviceMesh`` (``dp_replicate``,
                   ``dp_shard``: HSDP) on the embedding, each block and the head, then the root
tp_sp       2      DTensor tensor and sequence parallelism as torchtitan plans it, on the model
                   without linear biases: ``SequenceParallel`` on every LayerNorm,
                   ``PrepareModuleInput`` (sequence shards -> replicated) before attention, MLP
                   and the LM head (whole on both ranks, as the embedding), ``ColwiseParallel``
                   on Q, K, V and FC1, ``RowwiseParallel(output_layouts=Shard(1))`` on O and
                   FC2; AdamW (foreach)
pp_interleaved
            2      ``torch.distributed.pipelining``, 4 layers in 4 stages, 2 a rank (stages 0
                   and 2 on rank 0, 1 and 3 on rank 1), ``ScheduleInterleaved1F1B`` over 2
                   micro-batches of 4
recsys_a2a  2      a recommendation model as TorchRec shards it: one embedding table per rank
                   (table-wise), the input ids sent to the table's rank in ``## sparse_data_dist
                   ##``, the pooled embeddings back in ``## alltoall_fwd_single ##`` (their
                   gradients in ``## alltoall_bwd_single ##``), a dense MLP under DDP; recorded
                   without ``with_modules``, as the public DLRM traces are; no job.yaml
==========  =====  ==========================================================================

Usage (needs ``torch`` with gloo; it is not a tokenwire dependency)::

    python scripts/record_torch_runs.py -o tests/data/cpu_gloo
    python scripts/record_torch_runs.py -o /tmp/runs --runs pp_1f1b
    python scripts/record_torch_runs.py -o tests/data --runs infer_cpu
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_cpu_runs import (  # noqa: E402
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    MICRO,
    SEQ,
    VOCAB,
    Block,
    TinyGPT,
    _batch,
    _dp_step,
    _free_port,
    _gzip_file,
    record_steps,
)

RUNS = {"tp_dtensor": 2, "pp_1f1b": 2, "ddp4": 4, "fsdp1": 2, "tp_dtensor4": 4, "pp_1f1b4": 4,
        "fsdp1_4": 4, "infer_cpu": 1, "recsys_a2a": 2, "ddp_bucket": 2, "ddp_nobias": 2,
        "hsdp": 4, "pp_interleaved": 2, "tp_sp": 2}  # fmt: skip
#: Transformer layers of each run: LAYERS, but one per stage of pp_1f1b4 and pp_interleaved
RUN_LAYERS = {"pp_1f1b4": 4, "pp_interleaved": 4}
DDP_BUCKET_MB = 0.1  # ddp_bucket's bucket_cap_mb: 26,214 fp32 elements, several buckets
HSDP_MESH = (2, 2)  # hsdp's mesh: (dp_replicate, dp_shard)
PP_STAGES_PER_RANK = 2  # pp_interleaved's virtual stages per rank
PP_INTERLEAVED_MICRO = 2  # pp_interleaved's micro-batches per step (a round: one per rank)
PP_MICRO = 4  # micro-batches per step of pp_1f1b


def _tp_dtensor(rank: int, world: int):
    """DTensor TP on each block's attention and MLP; the step function."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    model = TinyGPT(range(LAYERS), first=True, last=True)
    plan = {
        "attn.q_proj": ColwiseParallel(),
        "attn.k_proj": ColwiseParallel(),
        "attn.v_proj": ColwiseParallel(),
        "attn.o_proj": RowwiseParallel(),
        "mlp.fc1": ColwiseParallel(),
        "mlp.fc2": RowwiseParallel(),
    }
    for block in model.blocks:
        parallelize_module(block, mesh, plan)
        block.attn.heads = HEADS // world  # the local heads of the column-parallel Q K V
    return _dp_step(model, 0, None)  # (no data parallel: no loss report)


class _First(nn.Module):
    """Stage 0: embedding and its blocks."""

    def __init__(self, gpt: TinyGPT) -> None:
        super().__init__()
        self.embed, self.blocks = gpt.embed, gpt.blocks

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return x


class _Middle(nn.Module):
    """A stage between the first and the last: its blocks alone."""

    def __init__(self, gpt: TinyGPT) -> None:
        super().__init__()
        self.blocks = gpt.blocks

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class _Last(nn.Module):
    """The last stage: its blocks, final LayerNorm and LM head (the loss is the schedule's)."""

    def __init__(self, gpt: TinyGPT) -> None:
        super().__init__()
        self.blocks, self.head = gpt.blocks, gpt.head

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head.lm_head(self.head.ln_f(x))


def _loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def _pp_1f1b(rank: int, world: int, layers: int = LAYERS):
    """torch.distributed.pipelining, ``layers // world`` blocks per stage, Schedule1F1B; the
    step function."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    torch.manual_seed(0)
    half = layers // world
    first, last = rank == 0, rank == world - 1
    gpt = TinyGPT(range(rank * half, rank * half + half), first=first, last=last)
    module = _First(gpt) if first else _Last(gpt) if last else _Middle(gpt)
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    sched = Schedule1F1B(stage, n_microbatches=PP_MICRO, loss_fn=_loss)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)

    def step(i: int) -> None:
        batches = [_batch(i, 0, m) for m in range(PP_MICRO)]
        ids = torch.cat([b[0] for b in batches])
        target = torch.cat([b[1] for b in batches])
        with record_function("forward_backward"):
            if first:
                sched.step(ids)
            elif last:
                sched.step(target=target)
            else:
                sched.step()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def _ddp4(rank: int, world: int):
    """DistributedDataParallel over every rank; the step function (no loss report)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(TinyGPT(range(LAYERS), first=True, last=True))
    return _dp_step(model, rank, None)


def _fsdp1(rank: int, world: int):
    """FSDP1, one unit per block plus the root; the step function (no loss report)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(0)
    model = TinyGPT(range(LAYERS), first=True, last=True)
    model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu"))
    return _dp_step(model, rank, None)


def _pp_1f1b4(rank: int, world: int):
    """pp_1f1b over 4 stages of a 4-layer model; the step function."""
    return _pp_1f1b(rank, world, RUN_LAYERS["pp_1f1b4"])


def _ddp_bucket(rank: int, world: int):
    """DDP with an explicit ``bucket_cap_mb`` (which also sets the first bucket's cap,
    torch/nn/parallel/distributed.py ``_BucketCapacityConfig``); the step function."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(TinyGPT(range(LAYERS), first=True, last=True), bucket_cap_mb=DDP_BUCKET_MB)
    return _dp_step(model, rank, None)


def _ddp_nobias(rank: int, world: int):
    """DDP of the model without linear biases; the step function."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(TinyGPT(range(LAYERS), first=True, last=True, bias=False))
    return _dp_step(model, rank, None)


def _hsdp(rank: int, world: int):
    """FSDP2 over a 2-D mesh (replicate x shard): each unit sharded over ``dp_shard`` and
    replicated over ``dp_replicate``; the step function (no loss report)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", HSDP_MESH, mesh_dim_names=("dp_replicate", "dp_shard"))
    model = TinyGPT(range(LAYERS), first=True, last=True)
    for unit in (model.embed, *model.blocks, model.head):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _dp_step(model, rank, None)


def _pp_interleaved(rank: int, world: int):
    """torch.distributed.pipelining, one block per stage, ``PP_STAGES_PER_RANK`` stages per
    rank (stage ``rank + k·world``), ScheduleInterleaved1F1B; the step function."""
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

    torch.manual_seed(0)
    n = world * PP_STAGES_PER_RANK
    stages, modules = [], []
    for k in range(PP_STAGES_PER_RANK):
        i = rank + k * world
        gpt = TinyGPT(range(i, i + 1), first=i == 0, last=i == n - 1)
        module = _First(gpt) if i == 0 else _Last(gpt) if i == n - 1 else _Middle(gpt)
        modules.append(module)
        stages.append(PipelineStage(module, i, n, torch.device("cpu")))
    sched = ScheduleInterleaved1F1B(stages, n_microbatches=PP_INTERLEAVED_MICRO, loss_fn=_loss)
    opt = torch.optim.AdamW([p for m in modules for p in m.parameters()], lr=1e-3)

    def step(i: int) -> None:
        batches = [_batch(i, 0, m) for m in range(PP_INTERLEAVED_MICRO)]
        ids = torch.cat([b[0] for b in batches])
        target = torch.cat([b[1] for b in batches])
        with record_function("forward_backward"):
            if rank == 0:
                sched.step(ids)
            elif rank == (n - 1) % world:
                sched.step(target=target)
            else:
                sched.step()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def _tp_sp(rank: int, world: int):
    """DTensor TP with sequence parallelism (torchtitan's plan, torchtitan/models/llama3/
    infra/parallelize.py): the residual stream in sequence shards between the blocks'
    gathers; the step function."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    model = TinyGPT(range(LAYERS), first=True, last=True, bias=False)

    def gather():  # sequence shards -> the whole sequence on every rank
        return PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))

    plan = {
        # the embedding's whole output cut into this rank's sequence shard (no communication)
        "blocks.0": PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True
        ),
        "head.ln_f": SequenceParallel(),
        "head.lm_head": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        ),
    }
    for i in range(LAYERS):
        plan |= {
            f"blocks.{i}.ln1": SequenceParallel(),
            f"blocks.{i}.attn": gather(),
            f"blocks.{i}.attn.q_proj": ColwiseParallel(),
            f"blocks.{i}.attn.k_proj": ColwiseParallel(),
            f"blocks.{i}.attn.v_proj": ColwiseParallel(),
            f"blocks.{i}.attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            f"blocks.{i}.ln2": SequenceParallel(),
            f"blocks.{i}.mlp": gather(),
            f"blocks.{i}.mlp.fc1": ColwiseParallel(),
            f"blocks.{i}.mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
        }
    parallelize_module(model, mesh, plan)
    for block in model.blocks:
        block.attn.heads = HEADS // world  # the local heads of the column-parallel Q K V
    return _dp_step(model, 0, None)  # (no data parallel: no loss report)


# ------------------------------------------------------------- recommendation model (a2a)
REC_ROWS, REC_DIM, REC_BAG = 100, 16, 3  # rows and width of each rank's table; ids per bag


class _PooledExchange(torch.autograd.Function):
    """TorchRec's pooled-embedding all-to-all (torchrec/distributed/comm_ops.py): each rank's
    pooled rows to the rank of their samples, the gradients back, in its named ranges."""

    @staticmethod
    def forward(ctx, pooled):
        out = torch.empty_like(pooled)
        with record_function("## alltoall_fwd_single ##"):
            dist.all_to_all_single(out, pooled.contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        out = torch.empty_like(grad)
        with record_function("## alltoall_bwd_single ##"):
            dist.all_to_all_single(out, grad.contiguous())
        return out


def _recsys_a2a(rank: int, world: int):
    """Table-wise sharded embeddings (table r on rank r) and a DDP dense MLP; the step."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    table = nn.EmbeddingBag(REC_ROWS, REC_DIM, mode="sum")  # this rank's table
    dense = DDP(nn.Sequential(nn.Linear(world * REC_DIM, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD([*table.parameters(), *dense.parameters()], lr=0.1)

    def step(i: int) -> None:
        g = torch.Generator().manual_seed(100 * i + rank)
        # this rank's samples: one bag of REC_BAG ids per table, ordered by the table's rank
        ids = torch.randint(0, REC_ROWS, (world, MICRO * REC_BAG), generator=g)
        target = torch.rand(MICRO, 1, generator=g)
        with record_function("## sparse_data_dist ##"):
            mine = torch.empty_like(ids)  # every rank's ids for this rank's table
            dist.all_to_all_single(mine, ids)
        with record_function("## forward ##"):
            pooled = table(mine.view(world * MICRO, REC_BAG))  # (world * MICRO, REC_DIM)
            rows = _PooledExchange.apply(pooled)  # this rank's samples, one block per table
            features = rows.view(world, MICRO, REC_DIM).transpose(0, 1).reshape(MICRO, -1)
            loss = F.mse_loss(dense(features), target)
        with record_function("## backward ##"):
            loss.backward()
        with record_function("## optimizer ##"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


_BUILD = {"tp_dtensor": _tp_dtensor, "pp_1f1b": _pp_1f1b, "ddp4": _ddp4, "fsdp1": _fsdp1,
          "tp_dtensor4": _tp_dtensor, "pp_1f1b4": _pp_1f1b4, "fsdp1_4": _fsdp1,
          "recsys_a2a": _recsys_a2a, "ddp_bucket": _ddp_bucket, "ddp_nobias": _ddp_nobias,
          "hsdp": _hsdp, "pp_interleaved": _pp_interleaved, "tp_sp": _tp_sp}  # fmt: skip
#: Runs recorded without ``with_modules`` (as the public DLRM traces are)
NO_MODULES = {"recsys_a2a"}
#: Runs with no job.yaml (a model tokenwire's analytic model does not describe)
NO_JOB_YAML = {"recsys_a2a"}


def _worker(rank: int, run: str, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="4096")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    step = _BUILD[run](rank, world)
    record_steps(rank, out, step, with_modules=run not in NO_MODULES)


def job_yaml(run: str) -> str:
    """The job description tokenwire's model reads for ``run``."""
    par, accum = {
        "tp_dtensor": ("tp: 2", 1),
        "pp_1f1b": ("pp: 2", PP_MICRO),
        "ddp4": ("dp: 4", 1),
        "fsdp1": ("dp: 2, fsdp: true", 1),
        "tp_dtensor4": ("tp: 4", 1),
        "pp_1f1b4": ("pp: 4", PP_MICRO),
        "fsdp1_4": ("dp: 4, fsdp: true", 1),
        "ddp_bucket": ("dp: 2", 1),
        "ddp_nobias": ("dp: 2", 1),
        "hsdp": ("mesh: {dp_replicate: 2, dp_shard: 2}, fsdp: true", 1),
        "pp_interleaved": (f"pp: 2, vpp: {PP_STAGES_PER_RANK}", PP_INTERLEAVED_MICRO),
        "tp_sp": ("tp: 2, sequence_parallel: true", 1),
    }[run]
    # (Q, K, V are separate projections; FSDP1's root unit holds the embedding and head;
    # DDP's bucket_cap_mb)
    extra = dict.fromkeys(("tp_dtensor", "tp_dtensor4"), ", separate_qkv: true")
    extra.update(dict.fromkeys(("fsdp1", "fsdp1_4"), ", fsdp_root_unit: true"))
    extra["ddp_bucket"] = f", ddp_bucket_mb: {DDP_BUCKET_MB}"
    model_extra = dict.fromkeys(("ddp_nobias", "tp_sp"), ", linear_bias: none").get(run, "")
    return (
        f"# {run}: recorded by scripts/record_torch_runs.py ({RUNS[run]} ranks, gloo, CPU)\n"
        f"model: {{layers: {RUN_LAYERS.get(run, LAYERS)}, hidden: {HIDDEN}, heads: {HEADS}, "
        f"ffn_hidden: {FFN}, vocab: {VOCAB}, seq_len: {SEQ}{model_extra}}}\n"
        f"parallel: {{{par}, world_size: {RUNS[run]}}}\n"
        f"batch: {{micro_batch: {MICRO}, grad_accum: {accum}}}\n"
        "dtypes: {params: fp32, activations: fp32, grad_reduce: fp32}\n"
        "network: {gpus_per_node: 8}\n"
        f"conventions: {{framework: torch{extra.get(run, '')}}}\n"
    )


INFER_PROMPT = (2, 16)  # sequences x tokens of infer_cpu's prompt
INFER_TOKENS = 4  # tokens infer_cpu decodes


def _record_inference(dest: Path) -> None:
    """infer_cpu: greedy decoding with the tiny GPT on one CPU thread, profiled whole."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyGPT(range(LAYERS), first=True, last=True).eval()
    ids = torch.randint(0, VOCAB, INFER_PROMPT, generator=torch.Generator().manual_seed(7))
    dest.mkdir(parents=True)
    trace = dest / "rank0.pt.trace.json"
    with (
        torch.no_grad(),
        profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            with_stack=True,
            with_modules=True,
        ) as prof,
    ):
        for i in range(INFER_TOKENS):
            with record_function(f"decode {i}"):
                x = model.embed(ids)
                for block in model.blocks:
                    x = block(x)
                logits = model.head.lm_head(model.head.ln_f(x[:, -1:]))
                ids = torch.cat([ids, logits.argmax(-1)], dim=1)
    prof.export_chrome_trace(str(trace))
    _gzip_file(trace)


def record(run: str, out: Path) -> Path:
    """Record ``run`` into ``out/<run>`` (replacing what is there); returns the folder."""
    dest = out / run
    if run == "infer_cpu":
        shutil.rmtree(dest, ignore_errors=True)
        _record_inference(dest)
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(run, RUNS[run], _free_port(), tmp), nprocs=RUNS[run], join=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(tmp, dest)
    if run not in NO_JOB_YAML:
        (dest / "job.yaml").write_text(job_yaml(run))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument(
        "--runs", default=",".join(RUNS), help="comma-separated, of: " + ", ".join(RUNS)
    )
    args = ap.parse_args()
    for run in args.runs.split(","):
        dest = record(run, args.out)
        print(dest.name, sum(f.stat().st_size for f in dest.iterdir()), "bytes")


if __name__ == "__main__":
    main()
