"""The shared vocabulary: kernel classification worked out per distinct name, and element
sizes written once."""

from __future__ import annotations

import ast
from pathlib import Path

import polars as pl

import pipeline
from pipeline.ingest.vocab import DTYPE_SIZES, DTYPES, kernel_kind_expr, op_expr, per_distinct

NAMES = [
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
    None,
    "flash_fwd_kernel",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    "void at::native::vectorized_elementwise_kernel<4>",
    None,
    "some_custom_kernel",
    "flash_fwd_kernel",
]


def test_per_distinct_gives_each_row_the_value_of_its_own_key_in_row_order() -> None:
    frame = pl.DataFrame(
        {"name": NAMES, "activity": ["kernel"] * 8 + ["memcpy"]},
        schema={"name": pl.String, "activity": pl.String},
    )
    expr = (
        pl.when(pl.col("activity") != "kernel")
        .then(pl.col("activity"))
        .otherwise(kernel_kind_expr(pl.col("name")))
    )
    kinds = per_distinct(frame, ["activity", "name"], expr)
    assert kinds.to_list() == frame.select(expr).to_series().to_list()
    assert kinds.to_list() == [
        "comm", "gemm", "other", "attention", "comm", "elementwise", "other", "other", "memcpy",
    ]  # fmt: skip
    assert per_distinct(frame.head(0), ["name"], kernel_kind_expr(pl.col("name"))).len() == 0


#: Collective kernels as their libraries name them, with the op each is.
COMM_KERNELS = [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(...)",
     "all_reduce"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(...)",
     "all_reduce"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", "reduce"),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(...)",
     "all_reduce"),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport(...)",
     "all_reduce"),
    ("mscclpp::allreduce7<__half>", "all_reduce"),
    ("nvshmemi_transfer_rma_kernel", "unknown"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(...)", "all_to_all"),
    ("void dpsk::ep::internode::combine<true>(...)", "all_to_all"),
]  # fmt: skip


def test_collective_kernels_beyond_nccl_are_comm() -> None:
    frame = pl.DataFrame({"name": [n for n, _ in COMM_KERNELS]})
    got = frame.select(
        kernel_kind_expr(pl.col("name")).alias("kind"), op_expr(pl.col("name")).alias("op")
    )
    assert got["kind"].to_list() == ["comm"] * len(COMM_KERNELS)
    assert got["op"].to_list() == [op for _, op in COMM_KERNELS]


def _literals(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.Dict))]


def _copies_of_sizes(node: ast.AST) -> bool:
    """A ``("bfloat16", 2)`` pair, or a dict of dataset dtype names to their sizes."""
    if isinstance(node, ast.Tuple) and len(node.elts) == 2:
        name, size = node.elts
        return (
            isinstance(name, ast.Constant)
            and name.value in DTYPE_SIZES
            and isinstance(size, ast.Constant)
            and size.value == DTYPE_SIZES[name.value]
        )
    if isinstance(node, ast.Dict):
        pairs = [
            (k.value, v.value)
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
        ]
        return sum(DTYPE_SIZES.get(k) == v for k, v in pairs) >= 2
    return False


def test_element_sizes_are_written_once():
    """Bytes per element live in vocab.DTYPE_SIZES only: a parser maps its spellings to the
    dataset's names and looks the size up, so no other module of the package restates one."""
    package = Path(pipeline.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "vocab.py" and path.parent.name == "ingest":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            f"{path.relative_to(package)}:{n.lineno}"
            for n in _literals(tree)
            if _copies_of_sizes(n)
        ]
    assert not found


def test_every_dtype_a_parser_names_has_a_size():
    from pipeline.ingest.flight_recorder.parse import _DTYPES as RECORDER
    from pipeline.ingest.nccl.log import _DTYPES as NCCL_LOG

    for names in (RECORDER.values(), NCCL_LOG.values(), (c for c, _ in DTYPES.values())):
        assert set(names) <= set(DTYPE_SIZES)
