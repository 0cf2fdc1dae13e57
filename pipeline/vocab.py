"""The field's vocabulary: collective op names, element types and sizes, the bus-bandwidth
factor, the parallel dimensions.

Every source spells these its own way (``ncclKernel_AllReduce_...``, ``c10d::allreduce_``,
``Collective name: _allgather_base``, ``gloo:all_to_all``; ``BFloat16``, ``c10::Half``,
``long int``); the dataset holds one spelling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (Polars is imported by the expressions' builders only: link and the model
    # read the names and factors, and Polars with the ingest package costs 0.1 s to import)
    import polars as pl

#: Substring (of the lower-cased name, underscores removed) -> op; first match wins, so the
#: compound names come before the words they contain.
_OP_PATTERNS: list[tuple[str, str]] = [
    # c10d's barrier runs as an all-reduce of one element and is named so
    # (``nccl:all_reduce_barrier``, ProcessGroupNCCL.cpp): it is a barrier
    ("allreducebarrier", "barrier"),
    ("allreduce", "all_reduce"),
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
    # DeepEP's exchanges of token counts and its barrier before a cached dispatch or combine
    # (``notify_dispatch``, ``cached_notify``, csrc/kernels/internode.cu): a few integers
    # per rank and expert, no token data
    ("notify", "notify"),
    # DeepEP's MoE token exchange (dpsk::ep::dispatch / combine) is an all-to-all
    ("dispatch", "all_to_all"),
    ("combine", "all_to_all"),
]

#: Ops that exchange a collective's metadata (counts, flags) rather than its data: tiny and
#: sizeless in every trace, so neither the model nor the wire counts them.
METADATA_OPS: tuple[str, ...] = ("barrier", "notify")

#: The kernels of an MoE communication library that move tokens, by direction: towards the
#: experts (DeepEP's ``dispatch``, forward, and the backward of combine) or back from them
#: (``combine``, and the backward of dispatch). The keys are what the kernel's name holds
#: (lower case); link gives such a kernel without a size the model's item of that direction
#: (:data:`pipeline.model.predict.EP_DIRECTIONS`).
MOE_EXCHANGE_KERNELS: dict[str, str] = {"dispatch": "towards", "combine": "back"}

#: The parallel dimensions, in the order tables show them: tensor, context, expert,
#: pipeline, data.
DIMS: tuple[str, ...] = ("tp", "cp", "ep", "pp", "dp")
#: The dimensions whose degrees multiply to the world size (the experts' ranks are the data x
#: context ranks).
WORLD_DIMS: tuple[str, ...] = tuple(d for d in DIMS if d != "ep")

#: Process-group names (``pg_desc``) that say the one dimension their group serves ->
#: that dimension: Megatron-Core's ``parallel_state`` group descriptions, and DeviceMesh's
#: ``mesh_<dim name>`` (torch.distributed.device_mesh) for the usual dimension names.
#: A name not listed says nothing (MODEL_PARALLEL_GROUP spans tp x pp, EMBEDDING_GROUP
#: the first and last stages).
GROUP_NAME_DIMS: dict[str, str] = {
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "DATA_PARALLEL_GROUP": "dp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "mesh_tp": "tp",
    "mesh_pp": "pp",
    "mesh_cp": "cp",
    "mesh_ep": "ep",
    "mesh_dp": "dp",
    "mesh_dp_shard": "dp",
    "mesh_dp_replicate": "dp",
}

#: Names sources write whole -> op: looked up exactly (case and underscores as written), where
#: :data:`_OP_PATTERNS` reads names that hold an op inside a longer one.
OP_NAMES: dict[str, str] = {
    # NCCL's function names (ncclFuncToString, src/collectives.cc): the ``<Func>: opCount``
    # INFO lines and the kernel symbols (``ncclDevKernel_<Func>_...``). SendRecv, the kernel
    # of both sides of a send/recv, is neither and stays unknown.
    "AllReduce": "all_reduce",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Send": "send",
    "Recv": "recv",
    "AlltoAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
    # NCCL's API (nccl.h), the names of its NVTX ranges; ncclBcast is the in-place broadcast
    "ncclAllReduce": "all_reduce",
    "ncclBroadcast": "broadcast",
    "ncclBcast": "broadcast",
    "ncclReduce": "reduce",
    "ncclAllGather": "all_gather",
    "ncclReduceScatter": "reduce_scatter",
    "ncclSend": "send",
    "ncclRecv": "recv",
    "ncclAlltoAll": "all_to_all",
    "ncclGather": "gather",
    "ncclScatter": "scatter",
    # nccl-tests' binaries (``<name>_perf``); sendrecv sends to one peer and receives from
    # another in one call, hypercube is a test of its own
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
    # PyTorch c10d profiling names (ProcessGroupGloo.cpp) the patterns would read otherwise:
    # gloo's receive from any rank names no source, so it is no recv a send pairs with
    "recvAnySource": "unknown",
}

#: XLA's HLO opcodes of collectives (openxla/xla, ``hlo_opcode.h``), the instructions a JAX
#: program runs -> op. A map of its own: XLA's ``reduce``, ``broadcast``, ``gather`` and
#: ``scatter`` are local array ops, not the collectives :data:`OP_NAMES` reads those words
#: as. An async collective is its ``-start`` (its ``-done`` only waits); collective-permute
#: sends to one peer and receives from another, as NCCL's SendRecv does.
XLA_COLLECTIVES: dict[str, str] = {
    "all-reduce": "all_reduce",
    "all-reduce-start": "all_reduce",
    "all-gather": "all_gather",
    "all-gather-start": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all",
    "ragged-all-to-all": "all_to_all",
    "collective-permute": "send_recv",
    "collective-permute-start": "send_recv",
    "collective-broadcast": "broadcast",
}

#: Every op name the dataset's tables hold, the one list (``collectives``,
#: ``collective_instances``, ``wire``, ``token_wire``, ``ledger``, ``predictions`` alike; the
#: instance of a send and its recv is the transfer, ``send``): the names above map into it.
#: ``send_recv`` is NCCL's grouped send/recv where nothing says the direction, ``hypercube``
#: an nccl-tests test, ``notify`` an MoE library's metadata exchange (METADATA_OPS).
OPS: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
    "send", "recv", "send_recv", "barrier", "notify", "gather", "scatter", "hypercube",
    "unknown",
)  # fmt: skip

#: Bytes per element of every dtype name the dataset holds: the one table of element sizes
#: (the parsers map their spellings to these names; sizes are looked up here).
DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "float8_e4m3": 1,
    "float8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2fnuz": 1,
    "float8_e4m3fnuz": 1,
    "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
    "qint8": 1,
    "quint8": 1,
    "qint32": 4,
}

#: Spelling of an element type (lower-cased) -> (dataset name, bytes per element).
DTYPES: dict[str, tuple[str, int]] = {}
for _names, _canon in [
    (("float", "float32", "c10::float", "fp32"), "float32"),
    (("bfloat16", "c10::bfloat16", "bf16"), "bfloat16"),
    (("half", "float16", "c10::half", "fp16"), "float16"),
    (("double", "float64", "fp64"), "float64"),
    (("long", "long int", "int64", "long long", "int64_t"), "int64"),
    (("int", "int32", "int32_t"), "int32"),
    (("short", "short int", "int16"), "int16"),
    (("char", "signed char", "int8", "int8_t"), "int8"),
    (("byte", "unsigned char", "uint8", "uint8_t"), "uint8"),
    (("bool",), "bool"),
    (("float8_e4m3fn", "float8_e4m3fnuz", "float8e4m3", "fp8_e4m3"), "float8_e4m3"),
    (("float8_e5m2", "float8_e5m2fnuz", "float8e5m2", "fp8_e5m2"), "float8_e5m2"),
    (("complexfloat", "complex64"), "complex64"),
    (("complexdouble", "complex128"), "complex128"),
]:
    for _n in _names:
        DTYPES[_n] = (_canon, DTYPE_SIZES[_canon])


def op_expr(name: pl.Expr) -> pl.Expr:
    """The dataset's op name (``all_reduce``...) for a source's spelling; ``unknown`` if none."""
    import polars as pl

    key = name.str.to_lowercase().str.replace_all("_", "")
    expr = pl.when(name.is_null()).then(pl.lit(None, pl.String))
    for pattern, op in _OP_PATTERNS:
        expr = expr.when(key.str.contains(pattern, literal=True)).then(pl.lit(op))
    return expr.otherwise(pl.lit("unknown"))


def op_name_expr(name: pl.Expr, default: str | None = "unknown") -> pl.Expr:
    """The dataset's op for a name a source writes whole (:data:`OP_NAMES`); ``default`` for
    any other name."""
    import polars as pl

    return name.replace_strict(OP_NAMES, default=default, return_dtype=pl.String)


def op_of(name: str) -> str:
    """The dataset's op for one name: :data:`OP_NAMES` if it is one of them, else the first of
    :data:`_OP_PATTERNS` it holds (what :func:`op_expr` gives), else ``unknown``."""
    if name in OP_NAMES:
        return OP_NAMES[name]
    key = name.lower().replace("_", "")
    return next((op for pattern, op in _OP_PATTERNS if pattern in key), "unknown")


def dtype_expr(name: pl.Expr) -> pl.Expr:
    """The dataset's dtype name; unknown spellings are kept as written."""
    import polars as pl

    key = name.str.to_lowercase().str.strip_chars()
    mapping = {k: v[0] for k, v in DTYPES.items()}
    return key.replace_strict(mapping, default=name, return_dtype=pl.String)


def dtype_size_expr(dtype: pl.Expr) -> pl.Expr:
    """Bytes per element of a dataset dtype name, null when unknown."""
    import polars as pl

    sizes = {canon: size for canon, size in DTYPES.values()}
    return dtype.replace_strict(sizes, default=None, return_dtype=pl.Int64)


#: Ops of which each of n ranks moves (n - 1)/n of the message over the bus.
_SHARE_OPS = ("all_gather", "reduce_scatter", "all_to_all")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``op`` on ``n`` ranks (nccl-tests
    doc/PERFORMANCE.md: busbw = algbw x factor): all_reduce 2(n - 1)/n; all_gather,
    reduce_scatter, all_to_all (n - 1)/n; others 1. It is also what a ring sends from each
    rank per byte of message. The dataset's views have it as the SQL macro ``bus_factor``
    (``pipeline/dataset/sources.sql``), tested equal to this."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in _SHARE_OPS:
        return (n - 1) / n
    return 1.0


def bus_factor_expr(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    """:func:`bus_factor` of columns (``n`` as a float)."""
    import polars as pl

    return (
        pl.when(op == "all_reduce")
        .then(2 * (n - 1) / n)
        .when(op.is_in(_SHARE_OPS))
        .then((n - 1) / n)
        .otherwise(1.0)
    )


def message_bytes_expr(
    op: pl.Expr, in_count: pl.Expr, out_count: pl.Expr, size: pl.Expr
) -> pl.Expr:
    """Message size M (``docs/dataset.md``) from per-rank input and output element counts.

    all_gather and gather: the gathered output; every other op: this rank's input (the full
    buffer for all_reduce and reduce_scatter, all it contributes for all_to_all, the tensor
    for send/recv).
    """
    import polars as pl

    from .ingest.values import product_fits

    elements = pl.when(op.is_in(["all_gather", "gather"])).then(out_count).otherwise(in_count)
    # a product beyond int64 would wrap (a negative byte count): unknown, like a bad args value
    known = ~op.is_in(["send_recv", "unknown"]) & product_fits(elements, size) & (elements >= 0)
    return pl.when(known).then(elements * size)


#: Communication kernels (case-insensitive), the one list: NCCL and RCCL (``ncclKernel_*``,
#: ``ncclDevKernel_*``), MSCCL and MSCCL++ (``mscclpp``), PyTorch symmetric memory
#: (``multimem_all_reduce_kernel``, ``one_shot_all_reduce_kernel``, ``symm_mem``), NVSHMEM
#: (``nvshmem*``), vLLM's custom all-reduce (``cross_device_reduce_1stage``), TensorRT-LLM's
#: (``oneShotAllReduceKernel``, ``twoShotAllReduceKernel``, ``allreduce_fusion_kernel*``,
#: ``lamport*``) and DeepEP's dispatch/combine (``deep_ep::``, ``dpsk::ep::``).
#: The kernels of an expert-parallel communication library (case-insensitive): DeepEP's
#: (``deep_ep::``; ``dpsk::ep::`` in DeepSeek's own builds). Their all-to-alls and
#: metadata exchanges are the ``ep`` dimension wherever nothing else says.
MOE_LIBRARY_KERNEL = r"deep_?ep::|dpsk::ep::"
COMM_KERNEL = (
    r"nccl|rccl|msccl|multimem|symm_mem|nvshmem|one_?shot_?all_?reduce|two_?shot_?all_?reduce"
    r"|cross_device_reduce|custom_?all_?reduce|allreduce_?fusion|lamport|" + MOE_LIBRARY_KERNEL
)
#: Host ops that launch a collective and record its buffers in ``Input Dims``: PyTorch's
#: c10d ops, the functional collectives, symmetric memory (``symm_mem::multimem_all_reduce_``).
COLLECTIVE_LAUNCH_OP = r"^(?:c10d|_?c10d_functional|symm_mem)::"
#: Kernel name pattern (case-insensitive) -> kind; first match wins.
_KERNEL_KINDS: list[tuple[str, str]] = [
    # DeepEP's layout kernel counts the tokens each rank and expert gets, on the GPU alone
    # (``get_dispatch_layout``, csrc/kernels/layout.cu): no data between ranks
    ("other", r"get_dispatch_layout"),
    ("comm", COMM_KERNEL),
    ("attention", r"flash|fmha|attention|attn|sdpa|mha_"),
    # (Cijk_: the GEMMs of AMD's Tensile and hipBLASLt)
    ("gemm", r"gemm|cijk_|cutlass|xmma|nvjet|cublas|matmul|gemv|wgmma|[sh](?:884|1688|16816)"),
    ("conv", r"conv|cudnn|winograd|implicit"),
    ("norm", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|norm_kernel|bn_fw|bn_bw"),
    ("reduction", r"reduce|reduction|softmax|sum_kernel|argmax|cross_entropy|nll_loss"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|triton_poi|fill"),
]


def kernel_kind_expr(name: pl.Expr) -> pl.Expr:
    """Classify a GPU kernel by its name: comm, attention, gemm, conv, norm, reduction,
    elementwise or other. Copies and memsets are classified by their source, not here."""
    import polars as pl

    lower = name.str.to_lowercase()
    expr = pl.when(name.is_null()).then(pl.lit("other"))
    for kind, pattern in _KERNEL_KINDS:
        expr = expr.when(lower.str.contains(pattern)).then(pl.lit(kind))
    return expr.otherwise(pl.lit("other"))


def per_distinct(frame: pl.DataFrame, keys: list[str], expr: pl.Expr) -> pl.Series:
    """``expr``, an expression of the ``keys`` columns alone, for each row of ``frame``, worked
    out once per distinct value of the keys and joined back in row order.

    A trace's kernels repeat a few dozen names: classifying each distinct name once
    (:func:`kernel_kind_expr`: a lowercase copy and eight regexes of names of 200 bytes) takes
    8 ms where classifying every kernel takes 32 ms, for the 30,000 kernels of a 62 MB trace.
    """
    distinct = frame.select(keys).unique()
    values = distinct.with_columns(expr.alias("_value"))
    joined = frame.select(keys).join(
        values, on=keys, how="left", maintain_order="left", nulls_equal=True
    )
    return joined.get_column("_value")


#: Phase hints from the names of enclosing ops and ranges, after :func:`phase_name_expr`
#: (lower case, ``[pl][profile]``-style prefixes and ``#`` fences removed). Names are hints
#: only: the structure (an enclosing autograd ``evaluate_function``, the autograd engine's
#: thread) decides first. Megatron's ``forward-backward`` encloses both phases and is no hint.
PHASE_HINTS: dict[str, str] = {
    # Optimizer.step#AdamW.step, Optimizer.zero_grad#..., Lightning's optimizer_step,
    # an NVTX or record_function range named after the optimizer
    "optimizer": r"^optimizer\.(?:step|zero_grad)|(?:^|[^a-z0-9_])optimizer(?:$|[^a-z0-9_])"
    r"|optimizer_step|optimizer_zero_grad",
    # `## backward ##`, Lightning's [Strategy]DDPStrategy.backward, an NVTX `backward` range
    "backward": r"(?:^|[^a-z0-9_])backward(?:$|[^a-z0-9_])",
    # `## forward ##`, DistributedDataParallel.forward, FSDP's forward; TorchRec's
    # `## sparse_data_dist ##` (the input distribution that feeds the sparse arch's forward)
    "forward": r"(?:^|[^a-z0-9_])forward(?:$|[^a-z0-9_])|sparse_data_dist",
}


#: TorchRec's record_function ranges around the all-to-alls of its sharded embeddings, by
#: their whole name (torchrec/distributed/train_pipeline.py ``## sparse_data_dist ##``, the
#: input features sent to the ranks holding their tables; torchrec/distributed/comm_ops.py
#: ``## alltoall_fwd_single ##`` and ``## alltoall_bwd_single ##``, the pooled embeddings and
#: their gradients, ``## alltoall_seq_embedding_fwd_single ##``; dist_data.py's
#: ``## all2all_data:... ##``). The group is the layer's name, a hint read only where the
#: trace has no module path and no NVTX range (:mod:`pipeline.ingest.derive.attribution`).
EMBEDDING_EXCHANGE_RANGE = (
    r"^##\s*(?:start_|wait_)?(sparse_data_dist|alltoall_\w+|all2all_[^#]*?)\s*##$"
)


#: A pipeline schedule's chunk annotation, ``<part>(<pass>)``: DualPipe's (DeepSeek-V3,
#: arXiv:2412.19437 section 3.2.1; github.com/deepseek-ai/DualPipe and the record_function
#: ranges of its public profiles, ``attn(F)``, ``dispatch(F)``, ``mlp(B)``, ``combine(B)``,
#: ``mlp(W)``): groups 1 and 2 are the part of a layer and the pass.
CHUNK_ANNOTATION = r"^([A-Za-z_][\w.]*)\(([FBW])\)$"
#: A chunk annotation's pass -> phase. F is the forward; B the backward for inputs and W the
#: backward for weights (zero-bubble's split of the backward, arXiv:2401.10241) are both the
#: backward: W computes the weight gradients the optimizer step later reduces.
CHUNK_PASS_PHASES: dict[str, str] = {"F": "forward", "B": "backward", "W": "backward"}


def chunk_annotation_expr(name: pl.Expr) -> pl.Expr:
    """A struct of ``part`` and ``phase`` (:data:`CHUNK_ANNOTATION`,
    :data:`CHUNK_PASS_PHASES`) of each name that is a chunk annotation; null fields
    elsewhere."""
    import polars as pl

    found = name.str.extract_groups(CHUNK_ANNOTATION)
    return pl.struct(
        found.struct.field("1").alias("part"),
        found.struct.field("2").replace_strict(CHUNK_PASS_PHASES, default=None).alias("phase"),
    )


def phase_name_expr(name: pl.Expr) -> pl.Expr:
    """An op or range name as :data:`PHASE_HINTS` reads it."""
    return (
        name.str.to_lowercase()
        .str.replace_all(r"^(?:\[[^\]]*\])+", "")
        .str.replace_all(r"forward[-_ ]?backward", " ")
        .str.replace_all("#", " ", literal=True)
        .str.strip_chars()
    )


#: Ranges and ops that a communication library opens around its own calls: NCCL's NVTX
#: ranges (``ncclAllReduce``, ``ncclSend``, ``ncclGroupStart``; NCCL's src/include/nvtx.h),
#: PyTorch's ``record_param_comms`` and ``nccl:all_reduce``-style annotations
#: (torch/csrc/distributed/c10d/ParamCommsUtils.hpp), the ``c10d::`` and
#: ``_c10d_functional::`` dispatcher ops and gloo's work (``gloo:all_reduce``). They say which
#: call runs, never which layer issued it, so they are never a layer.
LIBRARY_RANGE = (
    r"^(?:nccl[A-Z]\w*|nccl:\w+|record_param_comms|c10d::\w+|_?c10d_functional::\w+|gloo:\w+)"
)


#: Names of the ops that compute a loss, lower-cased: Megatron's ``_VocabParallelCrossEntropy``
#: (an autograd Function, recorded under its class name), ``aten::cross_entropy_loss``,
#: ``aten::nll_loss``, a ``loss`` range. A collective inside one (the vocab-parallel cross
#: entropy's max, target-logit and sum-of-exponentials all-reduces) belongs to the loss.
LOSS_OP = r"cross_?entropy|nll_?loss|(?:^|[^a-z0-9])loss(?:$|[^a-z0-9])"
