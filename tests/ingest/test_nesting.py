"""Range nesting and scope paths (pipeline/ingest/derive/nesting.py) on hand-made ranges."""

from __future__ import annotations

import polars as pl

from pipeline.ingest.derive.nesting import add_nesting, add_scope_path


def _ranges(rows: list[tuple[int, int, int, int, str, bool]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "op_id": pl.Int64,
            "tid": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "name": pl.String,
            "is_module": pl.Boolean,
        },
        orient="row",
    ).with_columns(pl.lit(1, pl.Int64).alias("pid"))


def test_scope_paths_skip_ranges_that_are_no_scope() -> None:
    """Modules (scopes) nest with plain ops between them, deeper than one level: each range
    takes the path of its innermost enclosing module, a module includes itself, a range
    outside every module has none, and another thread nests on its own."""
    ranges = _ranges(
        [
            (10, 1, 0, 100, "Model", True),
            (11, 1, 1, 90, "aten::op", False),
            (12, 1, 2, 80, "Block_0", True),
            (13, 1, 3, 70, "aten::linear", False),
            (14, 1, 4, 60, "aten::addmm", False),
            (15, 1, 5, 50, "Attention", True),
            (16, 1, 6, 40, "aten::mm", False),
            (17, 1, 81, 85, "aten::add", False),
            (18, 1, 200, 300, "optimizer.step", False),
            (19, 2, 5, 50, "Other", True),
            (20, 2, 6, 7, "aten::copy_", False),
        ]
    )
    nested = add_nesting(ranges)
    out = add_scope_path(nested, scope=pl.col("is_module"), label=pl.col("name"), out="path")
    out = out.sort("op_id")
    assert out.get_column("path").to_list() == [
        "Model",
        "Model",
        "Model/Block_0",
        "Model/Block_0",
        "Model/Block_0",
        "Model/Block_0/Attention",
        "Model/Block_0/Attention",
        "Model",
        None,
        "Other",
        "Other",
    ]
    assert out.get_column("parent_id").to_list() == [
        None, 10, 11, 12, 13, 14, 15, 11, None, None, 19
    ]  # fmt: skip


def test_scope_paths_of_no_ranges() -> None:
    empty = add_nesting(_ranges([]))
    out = add_scope_path(empty, scope=pl.col("is_module"), label=pl.col("name"), out="path")
    assert out.height == 0 and "path" in out.columns
