"""The shared vocabulary: kernel classification worked out per distinct name; element sizes,
op names and the bus-bandwidth factor written once."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pytest

import pipeline
from pipeline.vocab import (
    DTYPE_SIZES,
    DTYPES,
    OP_NAMES,
    bus_factor,
    bus_factor_expr,
    chunk_annotation_expr,
    kernel_kind_expr,
    op_expr,
    op_of,
    per_distinct,
)

PACKAGE = Path(pipeline.__file__).parent
VOCAB = PACKAGE / "vocab.py"
#: The sample generator states these facts again on its own, from their public sources
#: (pipeline/synth/wire.py): it is the witness the package's output is tested against, so
#: it takes none of them from the package (tests/synth/test_wire_facts.py: they agree).
SYNTH = PACKAGE / "synth"


def _checked(path: Path) -> bool:
    """Whether ``path`` is a module that must take these facts from the vocabulary."""
    return path != VOCAB and SYNTH not in path.parents


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
    # DeepEP's exchanges of token counts and its barrier: metadata, no token data
    ("void dpsk::ep::internode::cached_notify<false>(int, int, ...)", "notify"),
    ("void deep_ep::internode::notify_dispatch<false, 8>(int const*, ...)", "notify"),
]  # fmt: skip


def test_deepeps_layout_kernel_is_local_work() -> None:
    names = [
        "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)",
        "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)",
    ]
    kinds = pl.DataFrame({"name": names}).select(kernel_kind_expr(pl.col("name")).alias("k"))
    assert kinds["k"].to_list() == ["other", "other"]


@pytest.mark.parametrize(
    ("name", "part", "phase"),
    [("attn(F)", "attn", "forward"), ("dispatch(B)", "dispatch", "backward"),
     ("mlp(W)", "mlp", "backward"), ("1F1B", None, None), ("ProfilerStep#1", None, None),
     ("aten::mm(F)", None, None), ("combine(X)", None, None)],
)  # fmt: skip
def test_chunk_annotations_name_part_and_phase(name, part, phase) -> None:
    got = pl.DataFrame({"n": [name]}).select(chunk_annotation_expr(pl.col("n")).alias("c"))
    assert got["c"].struct.unnest().row(0) == (part, phase)


def test_collective_kernels_beyond_nccl_are_comm() -> None:
    frame = pl.DataFrame({"name": [n for n, _ in COMM_KERNELS]})
    got = frame.select(
        kernel_kind_expr(pl.col("name")).alias("kind"), op_expr(pl.col("name")).alias("op")
    )
    assert got["kind"].to_list() == ["comm"] * len(COMM_KERNELS)
    assert got["op"].to_list() == [op for _, op in COMM_KERNELS]


def _literals(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.Dict))]


def _size_of(name: object) -> int | None:
    """The element size of a dtype spelling the vocabulary knows (any case), else None."""
    if not isinstance(name, str):
        return None
    if name in DTYPE_SIZES:
        return DTYPE_SIZES[name]
    return DTYPES[name.lower()][1] if name.lower() in DTYPES else None


def _is_size_of(name: ast.AST, size: ast.AST) -> bool:
    return (
        isinstance(name, ast.Constant)
        and isinstance(size, ast.Constant)
        and type(size.value) is int
        and _size_of(name.value) == size.value
    )


def _copies_of_sizes(node: ast.AST) -> bool:
    """A tuple holding a dtype's name and its size (``("bfloat16", 2)``, ``("BFloat16",
    "c10::BFloat16", 2)``), or a dict of dtype names to their sizes."""
    if isinstance(node, ast.Tuple):
        return any(_is_size_of(n, s) for n in node.elts for s in node.elts)
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return sum(k is not None and _is_size_of(k, v) for k, v in pairs) >= 2
    return False


def _copies_of_op_names(node: ast.AST) -> bool:
    """A dict of two or more names sources write to the ops they are, or of ops to names."""
    if not isinstance(node, ast.Dict):
        return False
    pairs = [
        (k.value, v.value)
        for k, v in zip(node.keys, node.values, strict=True)
        if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
        and isinstance(k.value, str) and isinstance(v.value, str)
    ]  # fmt: skip
    ops = set(OP_NAMES.values())
    return sum(v in ops and op_of(k) == v or k in ops and op_of(v) == k for k, v in pairs) >= 2


def _package_literals(found: Callable[[ast.AST], bool]) -> list[str]:
    """``file:line`` of each tuple or dict literal of the package (the vocabulary and the
    sample generator aside) that ``found`` picks."""
    package = Path(pipeline.__file__).parent
    hits = []
    for path in sorted(package.rglob("*.py")):
        if not _checked(path):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hits += [f"{path.relative_to(package)}:{n.lineno}" for n in _literals(tree) if found(n)]
    return hits


def test_element_sizes_are_written_once():
    """Bytes per element live in vocab.DTYPE_SIZES only: a parser maps its spellings to the
    dataset's names and looks the size up, so no other module of the package restates one."""
    assert not _package_literals(_copies_of_sizes)


def test_op_names_are_written_once():
    """Which op a source's name is lives in the vocabulary only (OP_NAMES and the patterns of
    op_expr / op_of): no other module maps names to ops, or ops to names, of its own."""
    assert not _package_literals(_copies_of_op_names)


def test_bus_factor_is_written_once():
    """The bus-bandwidth factor, ``(n - 1) / n`` in some form, is vocab.bus_factor's (and the
    SQL macro's, tested equal below) only."""
    ratio = re.compile(r"\(\s*(\w+)\s*-\s*1(?:\.0)?\s*\)\s*/\s*\1\b")
    package = Path(pipeline.__file__).parent
    hits = [
        f"{path.relative_to(package)}:{i}"
        for path in sorted(package.rglob("*.py"))
        if _checked(path)
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ratio.search(line.split("#")[0])
    ]
    assert not hits


def test_bus_factor_of_the_views_is_the_vocabulary_s():
    ops = [*sorted(set(OP_NAMES.values())), "unknown"]
    con = duckdb.connect()
    macro = (PACKAGE / "dataset" / "sources.sql").read_text(encoding="utf-8")
    start = macro.index("CREATE MACRO bus_factor")
    con.execute(macro[start : macro.index(";", start) + 1])
    for op in ops:
        for n in (1, 2, 3, 8, 1000):
            (got,) = con.execute("select bus_factor(?, ?)", [op, n]).fetchone()
            assert got == pytest.approx(bus_factor(op, n), rel=1e-12), (op, n)
    frame = pl.DataFrame({"op": ops * 2, "n": [2.0] * len(ops) + [8.0] * len(ops)})
    got = frame.select(bus_factor_expr(pl.col("op"), pl.col("n"))).to_series().to_list()
    assert got == [bus_factor(op, int(n)) for op, n in frame.iter_rows()]


def test_every_dtype_a_parser_names_has_a_size():
    from pipeline.ingest.flight_recorder.parse import _DTYPES as RECORDER
    from pipeline.ingest.nccl.log import _DTYPES as NCCL_LOG

    for names in (RECORDER.values(), NCCL_LOG.values(), (c for c, _ in DTYPES.values())):
        assert set(names) <= set(DTYPE_SIZES)


def test_ops_is_every_op_the_names_map_to():
    from pipeline.vocab import _OP_PATTERNS, OPS

    named = {*OP_NAMES.values(), *(op for _, op in _OP_PATTERNS), "unknown"}
    assert set(OPS) == named and len(OPS) == len(named)
