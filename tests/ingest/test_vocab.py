"""The shared vocabulary's kernel classification, worked out per distinct name."""

from __future__ import annotations

import polars as pl

from pipeline.ingest.vocab import kernel_kind_expr, per_distinct

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
