"""gradient_bucket_layers.sql on hand-made rows: each bucket split over the plan's units it
covers, its rows adding up to it exactly."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, no_gradient_plan, rows

LINKS = ("collective_links", "collectives")


def _buckets(spec: list[tuple[int, int, int, int]]) -> dict[str, pl.DataFrame]:
    """collective_links and collectives of (rank, collective_id, start_ns, bytes) buckets of
    step 1, all owned 'gradient_bucket'."""
    n = len(spec)
    key = dict(job=["j"] * n, rank=[s[0] for s in spec], source=["kineto"] * n,
               file_id=["f"] * n, collective_id=[s[1] for s in spec])  # fmt: skip
    links = rows("collective_links", **key, step=[1] * n, layer=["gradient_bucket"] * n,
                 bytes=[s[3] for s in spec])  # fmt: skip
    calls = rows("collectives", **key, start_ns=[s[2] for s in spec])
    return {"collective_links": links, "collectives": calls}


def _names() -> pl.DataFrame:
    return pl.DataFrame(schema={"job": pl.String, "layer": pl.String, "layer_index": pl.Int64,
                                "layer_kind": pl.String, "layer_label": pl.String})  # fmt: skip


def _plan() -> pl.DataFrame:
    # rank 0's gradients in reduction order: the LM head [0, 300), layer 1 [300, 700),
    # layer 0 [700, 1000), the embedding [1000, 1050)
    units = [("lm_head", None, 0, 300), ("transformer", 1, 300, 700),
             ("transformer", 0, 700, 1000), ("embedding", None, 1000, 1050)]  # fmt: skip
    return no_gradient_plan().vstack(
        pl.DataFrame(
            {"job": ["j"] * 4, "rank": [0] * 4, "position": list(range(4)),
             "unit_kind": [u[0] for u in units], "layer_index": [u[1] for u in units],
             "local_index": [u[1] for u in units], "lo_bytes": [u[2] for u in units],
             "hi_bytes": [u[3] for u in units]},
            schema=no_gradient_plan().schema,
        )
    )  # fmt: skip


def test_buckets_split_over_the_units_they_cover_and_add_up() -> None:
    # Rank 0, issued in this order: bucket 1 (600 B) is [0, 600): the LM head's 300 and
    # layer 1's first 300. Bucket 2 (500 B) is [600, 1100): layer 1's last 100, layer 0's
    # 300, the embedding's 50 and the 50 past the plan's end, which go to its last unit:
    # 100. Rank 1 has no plan: its bucket (700 B) is one row under its own name.
    inputs = _buckets([(0, 1, 10, 600), (0, 2, 20, 500), (1, 3, 10, 700)])
    got = created(
        "gradient_bucket_layers.sql",
        {**inputs, "_gradient_plan": _plan(), "_layer_names": _names()},
        "gradient_bucket_layers",
        order_by=["rank", "collective_id", "bytes", "layer"],
    ).select("rank", "collective_id", "layer", "layer_index", "layer_kind", "layer_label",
             "bytes", "attributed_by")  # fmt: skip
    expected = pl.DataFrame(
        [
            (0, 1, "layers.1", 1, "transformer", "layers.1", 300, "bucket_plan"),
            (0, 1, "lm_head", None, "lm_head", "lm_head", 300, "bucket_plan"),
            (0, 2, "embedding", None, "embedding", "embedding", 100, "bucket_plan"),
            (0, 2, "layers.1", 1, "transformer", "layers.1", 100, "bucket_plan"),
            (0, 2, "layers.0", 0, "transformer", "layers.0", 300, "bucket_plan"),
            (1, 3, "gradient_bucket", None, None, "gradient_bucket", 700, "gradient_bucket"),
        ],
        schema=got.schema,
        orient="row",
    )
    assert_frame_equal(got, expected)
    sums = got.group_by("collective_id").agg(pl.col("bytes").sum()).sort("collective_id")
    assert sums["bytes"].to_list() == [600, 500, 700]


def test_without_a_plan_every_bucket_is_one_row() -> None:
    inputs = _buckets([(0, 1, 10, 600), (0, 2, 20, 500)])
    got = created(
        "gradient_bucket_layers.sql",
        {**inputs, "_gradient_plan": no_gradient_plan(), "_layer_names": _names()},
        "gradient_bucket_layers",
        order_by=["collective_id"],
    )
    assert got.select("collective_id", "layer", "bytes").rows() == [
        (1, "gradient_bucket", 600),
        (2, "gradient_bucket", 500),
    ]
