"""A synthetic Megatron-style GPT training job, simulated rank by rank on one clock.

This module owns *what runs when*: the job's knobs (:class:`JobSpec`), the process groups in
Megatron's rank order (tp-cp-ep-dp-pp: ``rank = tp_rank + tp*dp_rank + tp*dp*pp_rank``), the
per-rank programs (1F1B pipeline schedule, per-layer compute, tensor/pipeline/data-parallel
communication) and a small discrete-event simulation that matches every collective across the
ranks of its communicator: each rank's NCCL kernel starts when that rank reaches it and all of
them end together, ``alpha + beta * bytes`` after the last one arrived. The trace shape is
:mod:`pipeline.synth.kineto`'s business.

Each rank program is a Python generator: it emits trace events as it goes and yields a
:class:`CommRequest` whenever it enqueues a collective; the scheduler sends back the time the
collective ends once every participant has enqueued it. Everything derives from ``seed``, so a
given spec always produces the same bytes.

The communication each rank issues per step is documented in ``docs/sample-job.md`` (and
checked by ``tests/synth/test_kineto_synth.py`` against formulas, not against this code).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..gcpause import gc_paused
from ..synth.kineto import Event, KinetoTrace, render_trace
from ..vocab import DTYPE_SIZES, bus_factor

COMPUTE_STREAM = 7
NCCL_VERSION = "2.26.2"
BASE_TIME_NS = 1764547200000000000  # 2025-12-01T00:00:00Z, Kineto rounds it to a second
#: GPUs per host: rank r runs on host ``r // GPUS_PER_HOST``, device ``r % GPUS_PER_HOST``.
GPUS_PER_HOST = 8


def host_name(rank: int) -> str:
    """The host rank ``rank`` runs on, as every source of the job names it."""
    return f"node{rank // GPUS_PER_HOST}"


TRACE_START_US = 2_315_420_000_000  # first ``ts``: Kineto ts are large µs offsets

DTYPE = {  # torch dtype -> (record_param_comms dtype, Input type, bytes, NCCL kernel type)
    "bf16": ("BFloat16", "c10::BFloat16", DTYPE_SIZES["bfloat16"], "bf16"),
    "fp32": ("Float", "float", DTYPE_SIZES["float32"], "f32"),
    "int32": ("Int", "int", DTYPE_SIZES["int32"], "u32"),  # NCCL sums ints in the u32 kernel
}


@dataclass(frozen=True)
class JobSpec:
    """The knobs of a synthetic job. Defaults are the bundled ``sample_traces/`` job."""

    tp: int = 2
    pp: int = 2
    dp: int = 2
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    ffn_hidden: int = 1024
    vocab: int = 8192
    seq_len: int = 128
    micro_batch: int = 2
    global_batch: int = 16
    steps: int = 2
    first_step: int = 2
    bucket_size: int = 0  # DP bucket in elements; 0: Megatron's max(40M, 1M * dp)
    seed: int = 20251201
    straggler_rank: int | None = 5

    def __post_init__(self) -> None:
        checks = [
            (min(self.tp, self.pp, self.dp, self.layers, self.steps) >= 1, "sizes must be >= 1"),
            (self.layers % self.pp == 0, "layers must divide by pp"),
            (self.heads % self.tp == 0, "heads must divide by tp"),
            (self.hidden % self.heads == 0, "hidden must divide by heads"),
            (self.ffn_hidden % self.tp == 0, "ffn_hidden must divide by tp"),
            (self.vocab % self.tp == 0, "vocab must divide by tp"),
            (
                self.global_batch % (self.dp * self.micro_batch) == 0,
                "global_batch must divide by dp * micro_batch",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def layers_per_stage(self) -> int:
        return self.layers // self.pp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp_rank, dp_rank, pp_rank) of a global rank in Megatron's tp-cp-ep-dp-pp order."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def rank_of(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * dp_rank + self.tp * self.dp * pp_rank


@dataclass(frozen=True)
class Group:
    """A process group as ``pg_config`` lists it, plus which parallel dimension it serves."""

    name: str
    desc: str
    ranks: tuple[int, ...]
    dim: str  # world, dp, mp, tp, pp

    @property
    def stride(self) -> int:
        if len(self.ranks) == 1:
            return 0
        steps = {b - a for a, b in zip(self.ranks, self.ranks[1:], strict=False)}
        return steps.pop() if len(steps) == 1 else -1


def process_groups(spec: JobSpec) -> list[Group]:
    """All groups, in the order Megatron creates them (so names agree on every rank)."""
    t, d, p = spec.tp, spec.dp, spec.pp
    r = spec.rank_of
    sets: list[tuple[str, str, list[tuple[int, ...]]]] = [
        (
            "dp",
            "DATA_PARALLEL_GROUP",
            [tuple(r(i, k, j) for k in range(d)) for j in range(p) for i in range(t)],
        ),
        (
            "mp",
            "MODEL_PARALLEL_GROUP",
            [tuple(sorted(r(i, k, j) for j in range(p) for i in range(t))) for k in range(d)],
        ),
        (
            "tp",
            "TENSOR_MODEL_PARALLEL_GROUP",
            [tuple(r(i, k, j) for i in range(t)) for j in range(p) for k in range(d)],
        ),
        (
            "pp",
            "PIPELINE_MODEL_PARALLEL_GROUP",
            [tuple(r(i, k, j) for j in range(p)) for k in range(d) for i in range(t)],
        ),
    ]
    groups = [Group("0", "default_pg", tuple(range(spec.world)), "world")]
    for dim, desc, rank_sets in sets:
        for ranks in sorted(rank_sets):
            groups.append(Group(str(len(groups)), desc, ranks, dim))
    return groups


def stage_params(spec: JobSpec, pp_rank: int) -> list[tuple[str, int]]:
    """Parameters one TP rank of a stage holds, in registration order, as (name, elements)."""
    h, f, t, v = spec.hidden, spec.ffn_hidden, spec.tp, spec.vocab
    out: list[tuple[str, int]] = []
    if pp_rank == 0:
        out += [
            ("embedding.word_embeddings.weight", v * h // t),
            ("embedding.position_embeddings.weight", spec.seq_len * h),
        ]
    for i in range(spec.layers_per_stage):
        pre = f"decoder.layers.{i}."
        out += [
            (pre + "input_layernorm.weight", h),
            (pre + "input_layernorm.bias", h),
            (pre + "self_attention.linear_qkv.weight", 3 * h * h // t),
            (pre + "self_attention.linear_qkv.bias", 3 * h // t),
            (pre + "self_attention.linear_proj.weight", h * h // t),
            (pre + "self_attention.linear_proj.bias", h),
            (pre + "pre_mlp_layernorm.weight", h),
            (pre + "pre_mlp_layernorm.bias", h),
            (pre + "mlp.linear_fc1.weight", f * h // t),
            (pre + "mlp.linear_fc1.bias", f // t),
            (pre + "mlp.linear_fc2.weight", h * f // t),
            (pre + "mlp.linear_fc2.bias", h),
        ]
    if pp_rank == spec.pp - 1:
        out += [
            ("decoder.final_layernorm.weight", h),
            ("decoder.final_layernorm.bias", h),
            ("output_layer.weight", v * h // t),
        ]
    return out


def dp_buckets(spec: JobSpec, pp_rank: int) -> list[int]:
    """Gradient buckets (elements) in the order they are all-reduced.

    Megatron's DDP rule: a bucket holds ``bucket_size`` elements (default
    ``max(40_000_000, 1_000_000 * dp)``); full buckets, then the remainder; no padding.
    """
    total = sum(n for _, n in stage_params(spec, pp_rank))
    size = spec.bucket_size or max(40_000_000, 1_000_000 * spec.dp)
    full, rest = divmod(total, size)
    return [size] * full + ([rest] if rest else [])


# -- simulation ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommCall:
    """One NCCL call a rank made, for writers of other formats (NCCL log, Nsight)."""

    group: Group
    op: str  # all_reduce, broadcast, send, recv
    dtype: str  # torch dtype key of DTYPE
    count: int  # elements
    peer: int | None  # group-local peer of send/recv
    root: int | None  # group-local root of broadcast
    stream: int
    start_ns: int  # kernel start
    end_ns: int


@dataclass
class CommRequest:
    """A rank enqueues one collective (or one side of a send/recv)."""

    key: tuple[Any, ...]  # identical on every participant
    participants: int
    arrival_ns: int  # when this rank's NCCL kernel starts
    op: str
    nbytes: int
    group_size: int


def comm_duration_ns(op: str, nbytes: int, n: int, key: tuple[Any, ...]) -> int:
    """Alpha-beta time of one NCCL kernel on NVLink (H100-like), with a little fixed jitter."""
    if op == "all_reduce":
        alpha = 7_000 + 1_500 * (n - 1)
    elif op == "broadcast":
        alpha = 6_000 + 1_000 * (n - 1)
    else:  # send / recv
        alpha = 5_500
    wire = bus_factor(op, n) * nbytes
    busbw = 280e9 * nbytes / (nbytes + 512 * 1024)  # small messages reach less bandwidth
    jitter = zlib.crc32(repr(key).encode()) % 900
    return int(alpha + wire / busbw * 1e9) + jitter


def simulate(
    programs: dict[int, Generator[CommRequest, int, None]],
    after: Callable[[int], None] | None = None,
) -> dict[tuple[Any, ...], int]:
    """Run rank programs to completion, matching collectives across ranks; return the end
    time of every collective by its key.

    A collective completes when all its participants have enqueued it; it ends at the last
    arrival plus its duration, and that end time is sent back to every participant.
    ``after(rank)`` is called each time a rank's program has run up to its next collective.
    """
    arrivals: dict[tuple[Any, ...], dict[int, CommRequest]] = {}
    done: dict[tuple[Any, ...], int] = {}
    waiting: dict[int, tuple[Any, ...]] = {}
    live = dict(programs)

    def advance(rank: int, value: int | None) -> None:
        try:
            req = live[rank].send(value)  # type: ignore[arg-type]
        except StopIteration:
            del live[rank]
            return
        finally:
            if after is not None:
                after(rank)
        seen = arrivals.setdefault(req.key, {})
        seen[rank] = req
        waiting[rank] = req.key
        if len(seen) == req.participants:
            del arrivals[req.key]
            last = max(r.arrival_ns for r in seen.values())
            done[req.key] = last + comm_duration_ns(req.op, req.nbytes, req.group_size, req.key)

    with gc_paused():
        for rank in sorted(live):
            advance(rank, None)
        while live:
            progressed = False
            for rank in sorted(live):
                key = waiting.get(rank)
                if key is not None and key in done:
                    del waiting[rank]
                    advance(rank, done[key])
                    progressed = True
            if not progressed:
                raise RuntimeError(f"rank programs deadlock waiting on {sorted(waiting.items())}")
    return done


def replay(program: Generator[CommRequest, int, None], done: dict[tuple[Any, ...], int]) -> None:
    """Run one rank's program alone, each collective ending at its time in ``done`` (from
    :func:`simulate` of the whole job): the rank does what it did in the whole job's run."""
    value = None
    with gc_paused():
        while True:
            try:
                req = program.send(value)  # type: ignore[arg-type]
            except StopIteration:
                return
            value = done[req.key]


# -- kernels ---------------------------------------------------------------------------------
GEMM_FWD = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
GEMM_DGRAD = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
GEMM_WGRAD = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x64x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<{d}, 128, 128, 4, "
    "false, false, cutlass::bfloat16_t, Flash_kernel_traits<{d}, 128, 128, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
FLASH_BWD = (
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<"
    "Flash_bwd_kernel_traits<{d}, 128, 128, 8, 4, 4, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<{d}, 128, 128, 8, cutlass::bfloat16_t> >, "
    "true, false, false, false, false, true, false>(pytorch_flash::Flash_bwd_params)"
)
LN_FWD = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
    "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
    "float*, float*, c10::BFloat16*)"
)
LN_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<"
    "c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, "
    "float const*, c10::BFloat16 const*, c10::BFloat16*, int)"
)
LN_BWD_GAMMA = (
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<"
    "c10::BFloat16, float>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, "
    "float const*, float const*, c10::BFloat16*, c10::BFloat16*)"
)


def _elementwise(functor: str, arity: int) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, "
        f"{arity}ul> >(int, {functor}, std::array<char*, {arity}ul>)"
    )


ADD = _elementwise("at::native::CUDAFunctor_add<c10::BFloat16>", 3)
GELU = _elementwise(
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}",
    2,
)
GELU_BWD = _elementwise(
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
    "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}",
    3,
)
MASKED_FILL = _elementwise(
    "at::native::(anonymous namespace)::masked_fill_kernel("
    "at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() "
    "const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16, "
    "bool)#1}",
    3,
)
EXP = _elementwise(
    "at::native::exp_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
    "operator()() const::{lambda()#1}::operator()() const::{lambda(float)#1}",
    2,
)
EMBED = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
    "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
    "at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
    "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
    "unsigned int, long)"
)
EMBED_BWD = (
    "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<"
    "c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, "
    "long, int, int)"
)
REDUCE_MAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::MaxOps<float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
    "at::native::MaxOps<float>, unsigned int, float, 4>)"
)
REDUCE_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
    "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
    "float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
    "{lambda(float, float)#1}>, unsigned int, float, 4>)"
)
L2NORM = (
    "void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float>, float*, "
    "float*, bool, int>(long, int volatile*, TensorListMetadata<1>, L2NormFunctor<float>, "
    "float*, float*, bool, int)"
)
ADAM = (
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, int>, "
    "float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, "
    "TensorListMetadata<4>, AdamFunctor<float, float, int>, float, float, float, float, "
    "float, float, adamMode_t, float)"
)

# name -> (grid, block, registers per thread, shared memory)
LAUNCH = {
    "gemm": ((2, 4, 1), (384, 1, 1), 168, 213248),
    "flash": ((4, 8, 2), (128, 1, 1), 255, 49152),
    "ln": ((256, 1, 1), (128, 1, 1), 40, 0),
    "elementwise": ((128, 1, 1), (128, 1, 1), 26, 0),
    "reduce": ((256, 1, 1), (32, 16, 1), 32, 16),
    "mta": ((320, 1, 1), (512, 1, 1), 64, 0),
    "nccl": ((16, 1, 1), (512, 1, 1), 96, 103808),
    "nccl_p2p": ((2, 1, 1), (512, 1, 1), 96, 103808),
}


def nccl_kernel_name(op: str, dtype: str) -> str:
    """NCCL >= 2.22 names (``src/device/generate.py``): reductions run in the Sum kernel of
    their type, signed ints in the unsigned one; broadcast and p2p have one kernel each."""
    arg = "(ncclDevKernelArgsStorage<4096ul>)"
    if op == "all_reduce":
        return f"ncclDevKernel_AllReduce_Sum_{DTYPE[dtype][3]}_RING_LL{arg}"
    if op == "broadcast":
        return f"ncclDevKernel_Broadcast_RING_LL{arg}"
    return f"ncclDevKernel_SendRecv{arg}"


def _strides(dims: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


def shapes(
    *inputs: tuple[list[int] | None, str], concrete: list[str] | None = None
) -> dict[str, Any]:
    """record_shapes args in PyTorch's order; ``None`` dims stand for a non-tensor input."""
    dims = [d if d is not None else [] for d, _ in inputs]
    return {
        "Concrete Inputs": concrete if concrete is not None else ["" for _ in inputs],
        "Input type": [t for _, t in inputs],
        "Input Strides": [_strides(d) if d else [] for d in dims],
        "Input Dims": dims,
    }


# -- one rank ------------------------------------------------------------------------------
@dataclass
class Rank:
    """State of one rank while its program runs: clocks, streams, counters, its trace."""

    spec: JobSpec
    rank: int
    groups: list[Group]
    trace: KinetoTrace
    rng: random.Random
    cpu_ns: int
    main_tid: int
    autograd_tid: int
    streams: dict[int, int] = field(default_factory=dict)  # stream -> busy until (ns)
    seq: dict[str, int] = field(default_factory=dict)  # per-group collective counter
    calls: list[CommCall] = field(default_factory=list)  # every NCCL call, in issue order
    tid: int = 0
    autograd_seq: int = 0  # the last autograd sequence number given to a node
    # the nodes the running forward created, then those of each micro-batch's forward that
    # awaits its backward (oldest first), and those of the running backward
    forward_nodes: list[int] = field(default_factory=list)
    awaiting_backward: list[list[int]] = field(default_factory=list)
    backward_nodes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tid = self.main_tid
        self.tp_rank, self.dp_rank, self.pp_rank = self.spec.coords(self.rank)
        mine = [g for g in self.groups if self.rank in g.ranks]
        self.group = {g.dim: g for g in mine}
        self.stream_of = {"dp": 20, "mp": 24, "tp": 28, "pp": 32}
        self.streams[COMPUTE_STREAM] = self.cpu_ns
        for s in self.stream_of.values():
            self.streams[s] = self.cpu_ns

    # -- CPU time --------------------------------------------------------------------------
    def cpu(self, base_ns: int) -> None:
        self.cpu_ns += int(base_ns * (0.9 + 0.2 * self.rng.random()))

    @contextmanager
    def op(
        self,
        name: str,
        extra: dict[str, Any] | None = None,
        cat: str = "cpu_op",
        autograd: int | None = None,
        cost: int = 6_000,
        node: bool = False,
    ) -> Iterator[int]:
        """A host op; ``node``: a forward op that creates an autograd node (it takes the
        next sequence number, as PyTorch records it, with forward thread id 0); ``autograd``:
        the sequence number of the node a backward op runs (its forward thread id is 1)."""
        seqno = None
        if node:
            self.autograd_seq += 1
            self.forward_nodes.append(self.autograd_seq)
            seqno = (self.autograd_seq, 0)
        elif autograd is not None:
            seqno = (autograd, 1)
        ev, ext = self.trace.range_event(cat, name, self.tid, self.cpu_ns, extra, seqno)
        self.cpu(cost // 2)
        yield ext
        self.cpu(cost // 2)
        self.trace.close(ev, self.cpu_ns)

    @contextmanager
    def function(self, name: str) -> Iterator[None]:
        """A custom ``autograd.Function``'s forward: PyTorch records a range named after the
        class, with the sequence number of the node it creates, around what it runs (it
        takes no time of its own here, so the job's timings do not depend on it)."""
        self.autograd_seq += 1
        self.forward_nodes.append(self.autograd_seq)
        ev, _ = self.trace.range_event(
            "cpu_op", name, self.tid, self.cpu_ns, None, (self.autograd_seq, 0)
        )
        yield
        self.trace.close(ev, self.cpu_ns)

    @contextmanager
    def module(self, name: str) -> Iterator[None]:
        module_id = int(name.rsplit("_", 1)[1])
        ev = self.trace.module_event(name, module_id, self.tid, self.cpu_ns)
        self.cpu(3_000)
        yield
        self.cpu(2_000)
        self.trace.end_module(ev, self.cpu_ns)

    # -- GPU work --------------------------------------------------------------------------
    def kernel(self, ext: int, name: str, kind: str, dur_ns: int) -> None:
        grid, block, regs, smem = LAUNCH[kind]
        call = int(4_500 * (0.9 + 0.2 * self.rng.random()))
        start = max(self.cpu_ns + call - 1_000, self.streams[COMPUTE_STREAM] + 1_000)
        dur = int(dur_ns * (0.95 + 0.1 * self.rng.random()))
        self.trace.launch_kernel(
            api="cudaLaunchKernel",
            tid=self.tid,
            call_ts=self.cpu_ns,
            call_dur=call,
            external_id=ext,
            kernel=name,
            stream=COMPUTE_STREAM,
            start=start,
            dur=dur,
            grid=grid,
            block=block,
            regs=regs,
            smem=smem,
        )
        self.streams[COMPUTE_STREAM] = start + dur
        self.cpu_ns += call + 800

    def gemm(self, name: str, m: int, n: int, k: int, extra: dict[str, Any]) -> None:
        with self.op("aten::addmm" if "bias" in extra else "aten::mm", extra.get("shapes")) as ext:
            flops = 2 * m * n * k
            self.kernel(ext, name, "gemm", 3_500 + flops * 1_000 // 400_000)

    def simple(
        self,
        op: str,
        kernel: str,
        kind: str,
        dur_ns: int,
        extra: dict[str, Any] | None = None,
        node: bool = False,
    ) -> None:
        with self.op(op, extra, node=node) as ext:
            self.kernel(ext, kernel, kind, dur_ns)

    def sync_cpu_to_gpu(self) -> None:
        self.cpu_ns = max(self.cpu_ns, max(self.streams.values())) + 2_000

    # -- communication ---------------------------------------------------------------------
    def collective(
        self,
        dim: str,
        op: str,
        dtype: str,
        dims: list[int],
        *,
        peer: int | None = None,
        root: int | None = None,
        blocking: bool = True,
        key_extra: Any = None,
    ) -> Generator[CommRequest, int, int]:
        """Emit one collective the way ProcessGroupNCCL records it and wait for its end time.

        ``peer`` (group-local) makes it a send (op ``send``) or recv (op ``recv``).
        """
        g = self.group[dim]
        nelems = 1
        for d in dims:
            nelems *= d
        call = _c10d_call(op, g.ranks.index(self.rank), peer, root)
        stream = self.stream_of[dim]
        participants, key = self._comm_key(g, peer)
        with self.op(call.c10d, _c10d_args(call, dims), cost=14_000):
            rpc_args = _record_param_comms_args(g, call, dtype, dims, nelems)
            with self.op("record_param_comms", rpc_args, cost=10_000) as rpc_ext:
                self.trace.runtime_call("cudaEventRecord", self.tid, self.cpu_ns, 1_800, rpc_ext)
                self.cpu(2_500)
                self.trace.runtime_call(
                    "cudaStreamWaitEvent", self.tid, self.cpu_ns, 1_200, rpc_ext
                )
                self.cpu(2_000)
                with self.op(call.title, cat="user_annotation", cost=4_000) as ann_ext:
                    launch = int(16_000 * (0.9 + 0.2 * self.rng.random()))
                    arrival = max(
                        self.cpu_ns + launch - 2_000,
                        self.streams[stream] + 1_000,
                        self.streams[COMPUTE_STREAM] + 1_500,
                    )
                    end = yield CommRequest(
                        key=(*key, key_extra),
                        participants=participants,
                        arrival_ns=arrival,
                        op=op,
                        nbytes=nelems * DTYPE[dtype][2],
                        group_size=len(g.ranks),
                    )
                    comm = CommCall(g, op, dtype, nelems, peer, root, stream, arrival, end)
                    self._launch_comm(comm, call.title, launch, (rpc_ext, ann_ext), rpc_args)
                self.streams[stream] = end
        if blocking:
            self.streams[COMPUTE_STREAM] = max(self.streams[COMPUTE_STREAM], end + 1_200)
        return end

    def _comm_key(self, g: Group, peer: int | None) -> tuple[int, tuple[str, int]]:
        """(participants, (group key, sequence number)) of this rank's next call on ``g``,
        identical on every participant; send/recv pairs count per pair of ranks."""
        if peer is None:
            participants, key_group = len(g.ranks), g.name
        else:
            participants = 2
            lo, hi = sorted((self.rank, g.ranks[peer]))
            key_group = f"p2p:{lo}:{hi}"
        seq = self.seq.get(key_group, 0)
        self.seq[key_group] = seq + 1
        return participants, (key_group, seq)

    def _launch_comm(
        self,
        comm: CommCall,
        title: str,
        launch_ns: int,
        ext: tuple[int, int],
        rpc_args: dict[str, Any],
    ) -> None:
        """The NCCL kernel of ``comm`` (its launch taking ``launch_ns`` of CPU time) and the
        GPU annotation around it; ``ext``: the record_param_comms and annotation ids."""
        rpc_ext, ann_ext = ext
        grid, block, regs, smem = LAUNCH["nccl" if comm.peer is None else "nccl_p2p"]
        arrival, end = comm.start_ns, comm.end_ns
        self.trace.launch_kernel(
            api="cuLaunchKernelEx",
            tid=self.tid,
            call_ts=self.cpu_ns,
            call_dur=launch_ns,
            external_id=rpc_ext,
            kernel=nccl_kernel_name(comm.op, comm.dtype),
            stream=comm.stream,
            start=arrival,
            dur=end - arrival,
            grid=grid,
            block=block,
            regs=regs,
            smem=smem,
            extra=_kernel_meta(rpc_args),
        )
        self.trace.gpu_annotation(
            title, comm.stream, arrival - 1_000, end - arrival + 1_500, ann_ext
        )
        self.calls.append(comm)
        self.cpu_ns += launch_ns + 1_000


@dataclass(frozen=True)
class _C10dCall:
    """How ProcessGroupNCCL names one call: its c10d op, collective name, profiling title,
    the op's concrete inputs and their types, and the ``Rank`` record_param_comms gives."""

    c10d: str
    coll: str
    title: str
    concrete: list[str]
    types: list[str]
    rank_arg: int | None


def _c10d_call(op: str, local_rank: int, peer: int | None, root: int | None) -> _C10dCall:
    if op == "all_reduce":
        return _C10dCall(
            "c10d::allreduce_", "allreduce", "nccl:all_reduce",
            ["", "", "", "", "False", "-1"], ["TensorList", "", "", "", "Scalar", "Scalar"],
            local_rank,
        )  # fmt: skip
    if op == "broadcast":
        return _C10dCall(
            "c10d::broadcast_", "broadcast", "nccl:broadcast",
            ["", "", str(root), "0", "False", "-1"],
            ["TensorList", "", "Scalar", "Scalar", "Scalar", "Scalar"],
            root,
        )  # fmt: skip
    concrete, types = ["", "", str(peer), "0"], ["TensorList", "", "Scalar", "Scalar"]
    if op == "send":
        return _C10dCall("c10d::send", "send", f"nccl:send {local_rank}->{peer}", concrete,
                         types, peer)  # fmt: skip
    return _C10dCall("c10d::recv_", "recv", f"nccl:recv {local_rank}<-{peer}", concrete, types,
                     peer)  # fmt: skip


def _c10d_args(call: _C10dCall, dims: list[int]) -> dict[str, Any]:
    """The c10d op's shapes: the tensor list first, scalars after it."""
    rest = [[] for _ in call.concrete[1:]]
    return {
        "Concrete Inputs": call.concrete,
        "Input type": call.types,
        "Input Strides": [[_strides(dims)]] + rest,
        "Input Dims": [[dims]] + [[] for _ in call.concrete[1:]],
    }


def _record_param_comms_args(
    g: Group, call: _C10dCall, dtype: str, dims: list[int], nelems: int
) -> dict[str, Any]:
    """The record_param_comms op's args, in the order PyTorch writes them."""
    rpc_dtype, input_type, _, _ = DTYPE[dtype]
    return {
        "Collective name": call.coll,
        "Process Group Description": g.desc,
        "dtype": rpc_dtype,
        "Rank": call.rank_arg,
        "Input Strides": [_strides(dims)],
        "Concrete Inputs": [""],
        "Out msg nelems": nelems,
        "Process Group Name": g.name,
        "Input type": [input_type],
        "Global rank stride": g.stride,
        "Out split size": "[]",
        "In split size": "[]",
        "Process Group Ranks": "[" + ", ".join(map(str, g.ranks)) + "]",
        "Group size": len(g.ranks),
        "Input Dims": [dims],
        "Global rank start": g.ranks[0],
        "In msg nelems": nelems,
    }


def _kernel_meta(rpc: dict[str, Any]) -> dict[str, Any]:
    """The NCCL kernel's args: the collective's, as record_param_comms gave them."""
    keys = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
            "In split size", "Out split size", "Process Group Name",
            "Process Group Description", "Process Group Ranks")  # fmt: skip
    return {k: rpc[k] for k in keys}


def rank_trace_name(spec: JobSpec, rank: int) -> str:
    return f"rank{rank}.{BASE_TIME_NS + 4_000_000_000 + 1_000_003 * rank}.pt.trace.json"


def job_traces(spec: JobSpec) -> dict[str, str]:
    """Simulate the whole job; return {file name: trace JSON text} for every rank."""
    groups, ranks, starts = simulate_job(spec)
    out: dict[str, str] = {}
    for r, state in ranks.items():
        out[rank_trace_name(spec, r)] = _render(spec, state, groups, starts[r])
    return out


def simulate_job(spec: JobSpec) -> tuple[list[Group], dict[int, Rank], dict[int, int]]:
    """Run every rank's program on one clock: (groups, rank states, first CPU time per rank)."""
    groups = process_groups(spec)
    ranks = {r: new_rank(spec, r, groups) for r in range(spec.world)}
    from ..synth.program import rank_program  # the schedule lives next door

    starts = {r: ranks[r].cpu_ns for r in ranks}
    simulate({r: rank_program(ranks[r]) for r in ranks})
    return groups, ranks, starts


def new_rank(spec: JobSpec, r: int, groups: list[Group]) -> Rank:
    """Rank ``r`` before its program runs (its random numbers derive from ``spec.seed``)."""
    pid = 48_211 + 97 * r
    trace = KinetoTrace(pid=pid, device=r % 8, base_time_ns=BASE_TIME_NS)
    rng = random.Random(spec.seed * 1_000 + r)
    start = TRACE_START_US * 1_000 + rng.randrange(20_000, 60_000)
    return Rank(spec, r, groups, trace, rng, start, pid, pid + 113)


def trace_window(state: Rank, start_ns: int) -> tuple[int, int]:
    """(begin, end) of the profiler's window around a rank's events."""
    return start_ns - 150_000, max(state.cpu_ns, max(state.streams.values())) + 80_000


def metadata_events(spec: JobSpec, state: Rank, begin: int) -> list[Event]:
    """The ``ph: M`` events naming the rank's process, threads and streams."""
    threads = {state.main_tid: "pt_main_thread", state.autograd_tid: "pt_autograd_0"}
    streams = [COMPUTE_STREAM] + sorted(set(state.stream_of.values()))
    return state.trace.metadata_events(begin + 3_000, threads, streams, min(spec.world, 8))


def _render(spec: JobSpec, state: Rank, groups: list[Group], start_ns: int) -> str:
    tr = state.trace
    begin, end = trace_window(state, start_ns)
    events = metadata_events(spec, state, begin)
    events += sorted(tr.events, key=lambda e: e.head["ts"].ns) + tr.span_events(begin, end)
    return render_trace(trace_top(spec, state, groups), events, rank_trace_name(spec, state.rank))


def trace_top(spec: JobSpec, state: Rank, groups: list[Group]) -> dict[str, Any]:
    """The top-level keys of a rank's trace, in PyTorch's order."""
    mine = [g for g in groups if state.rank in g.ranks]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, **_props()} for i in range(min(spec.world, 8))],
        "cupti_version": 24,
        "cuda_runtime_version": 12060,
        "cuda_driver_version": 12080,
        "distributedInfo": {
            "backend": "nccl",
            "rank": state.rank,
            "world_size": spec.world,
            "pg_count": len(groups),
            "pg_config": [
                {
                    "pg_name": g.name,
                    "pg_desc": g.desc,
                    "backend_config": "cuda:nccl",
                    "pg_size": len(g.ranks),
                    "ranks": list(g.ranks),
                }
                for g in mine
            ],
            "nccl_version": NCCL_VERSION,
        },
        "record_shapes": 1,
        "with_stack": 0,
        "with_modules": 1,
        "trace_id": f"{zlib.crc32(f'{spec.seed}:{state.rank}'.encode()):08X}" * 4,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
    }


def _props() -> dict[str, Any]:
    from ..synth.kineto import H100_PROPERTIES

    return dict(H100_PROPERTIES)
