"""gradient_bucket_layers.sql on hand-made rows: a rank's gradient buckets, in issue order,
lie end to end on its _gradient_plan and split over the units they cover, adding up to each
bucket exactly; bytes past the plan's end go to its last unit; parameter gathers lie on a
sequence of their own; a unit takes the module path of its layer on the rank (by the
stage's own numbers where the rank's paths use them), else the model's name; a rank with
no plan keeps each bucket whole, one row under its owner's name."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, no_gradient_plan, rows

LINKS = ("collective_links", "collectives")
ATTN, MLP, EMBED = "model/layers.0/attn", "model/layers.1/mlp", "model/embed_tokens"
L0, L1 = "model/layers.0", "model/layers.1"


def _inputs() -> dict[str, pl.DataFrame]:
    # Job j, step 1. (rank, collective_id, layer, bytes, start_ns):
    calls = [
        # rank 0's own layers, numbered by its stage (0 and 1), and its embedding
        (0, 1, ATTN, 64, 10), (0, 2, MLP, 64, 20), (0, 3, EMBED, 64, 30),
        # its buckets in issue order: 12, 10, 11 (ids need not follow time)
        (0, 12, "gradient_bucket", 1000, 100),
        (0, 10, "gradient_bucket", 1000, 200),
        (0, 11, "gradient_bucket", 1200, 300),
        # a parameter gather, before the buckets
        (0, 13, "parameter_gather", 600, 50),
        # rank 1: no plan
        (1, 20, "gradient_bucket", 500, 100),
        (1, 21, "parameter_gather", 300, 200),
    ]  # fmt: skip
    n = len(calls)
    key = {
        "job": ["j"] * n,
        "rank": [c[0] for c in calls],
        "source": ["kineto"] * n,
        "file_id": [f"k{c[0]}" for c in calls],
        "collective_id": [c[1] for c in calls],
    }
    links = rows(
        "collective_links",
        **key,
        step=[1] * n,
        layer=[c[2] for c in calls],
        bytes=[c[3] for c in calls],
    )
    collectives = rows("collectives", **key, start_ns=[c[4] for c in calls])
    # The job's layer paths as collective_links.sql names them.
    names = rows(
        "_layer_names",
        like=LINKS,
        job=["j"] * 3,
        layer=[ATTN, MLP, EMBED],
        layer_index=[0, 1, None],
        layer_kind=["attention", "mlp", "embedding"],
        layer_label=["layers.0/attn", "layers.1/mlp", "embed_tokens"],
    )
    # Rank 0's plan, in reduction order: the LM head [0, 400), the model's layer 3 (the
    # stage's 1) [400, 1400), layer 2 (the stage's 0) [1400, 2400), the embedding
    # [2400, 2800), the last unit.
    plan = pl.DataFrame(
        [("j", 0, 0, "lm_head", None, None, 0, 400),
         ("j", 0, 1, "transformer", 3, 1, 400, 1400),
         ("j", 0, 2, "transformer", 2, 0, 1400, 2400),
         ("j", 0, 3, "embedding", None, None, 2400, 2800)],
        schema=no_gradient_plan().schema,
        orient="row",
    )  # fmt: skip
    return {
        "_gradient_plan": plan,
        "_layer_names": names,
        "collective_links": links,
        "collectives": collectives,
    }


def _created() -> pl.DataFrame:
    return created(
        "gradient_bucket_layers.sql",
        _inputs(),
        "gradient_bucket_layers",
        order_by=["rank", "owner", "collective_id", "bytes"],
    )


def test_a_bucket_splits_over_the_plan_and_adds_up_exactly() -> None:
    got = _created().select(
        "rank", "collective_id", "owner", "layer", "layer_index", "bytes", "attributed_by"
    )
    # Rank 0's buckets in issue order lie end to end: 12 [0, 1000), 10 [1000, 2000),
    # 11 [2000, 3200). Each takes the part of each unit's range it covers:
    #   12: LM head 400 - 0 = 400; layer 3 1000 - 400 = 600            (1000)
    #   10: layer 3 1400 - 1000 = 400; layer 2 2000 - 1400 = 600        (1000)
    #   11: layer 2 2400 - 2000 = 400; the embedding 2800 - 2400 = 400, and the 400 past
    #       the plan's end (2800..3200), which go to its last unit: 800  (1200)
    # The gather 13 lies on its own sequence [0, 600): LM head 400, layer 3 200 (600).
    # Names: rank 0's paths number layers 0 and 1, the plan's stage numbers (not the
    # model's 2 and 3): layer 3 is its layers.1 path, layer 2 its layers.0 path; the
    # embedding its embedding path; no path of rank 0 is an LM head: the model's name,
    # lm_head. layer_index: the model's number.
    # Rank 1 has no plan: each call is one row under its owner's name.
    lm, g, pg = "lm_head", "gradient_bucket", "parameter_gather"
    expected = pl.DataFrame(
        [(0, 10, g, L1, 3, 400, "bucket_plan"),
         (0, 10, g, L0, 2, 600, "bucket_plan"),
         (0, 11, g, L0, 2, 400, "bucket_plan"),
         (0, 11, g, EMBED, None, 800, "bucket_plan"),
         (0, 12, g, lm, None, 400, "bucket_plan"),
         (0, 12, g, L1, 3, 600, "bucket_plan"),
         (0, 13, pg, L1, 3, 200, "bucket_plan"),
         (0, 13, pg, lm, None, 400, "bucket_plan"),
         (1, 20, g, g, None, 500, g),
         (1, 21, pg, pg, None, 300, pg)],
        schema=got.schema,
        orient="row",
    )  # fmt: skip
    assert_frame_equal(got, expected)
    # every call's rows add up to its bytes
    sums = got.group_by("collective_id").agg(pl.col("bytes").sum()).sort("collective_id")
    assert sums.rows() == [(10, 1000), (11, 1200), (12, 1000), (13, 600), (20, 500), (21, 300)]


def test_the_kind_and_label_of_units_named_by_the_model_or_a_known_path() -> None:
    got = (
        _created()
        .filter(~pl.col("layer").is_in([L0, L1]))
        .select("collective_id", "layer", "layer_kind", "layer_label")
    )
    # The embedding's path: its kind and label in _layer_names. lm_head: the model's name,
    # its own kind and label. Without a plan: the owner's name, no kind.
    g, pg = "gradient_bucket", "parameter_gather"
    expected = pl.DataFrame(
        [(11, EMBED, "embedding", "embed_tokens"),
         (12, "lm_head", "lm_head", "lm_head"),
         (13, "lm_head", "lm_head", "lm_head"),
         (20, g, None, g),
         (21, pg, None, pg)],
        schema=got.schema,
        orient="row",
    )  # fmt: skip
    assert_frame_equal(got, expected)


def test_the_kind_and_label_of_a_unit_named_by_its_layers_path() -> None:
    got = (
        _created()
        .filter(pl.col("layer").is_in([L0, L1]))
        .unique(["layer"])
        .sort("layer")
        .select("layer", "layer_kind", "layer_label")
    )
    # The rank's layers are named by its paths cut after the layer (model/layers.0 and
    # model/layers.1), which no collective names itself: kind transformer (_layer_kind: the
    # component layers.N), label that of the paths under it cut after the same layer
    # (layers.0/attn -> layers.0, layers.1/mlp -> layers.1), as collective_links names a
    # send cut at a pipeline boundary.
    expected = pl.DataFrame(
        [(L0, "transformer", "layers.0"), (L1, "transformer", "layers.1")],
        schema=got.schema,
        orient="row",
    )
    assert_frame_equal(got, expected)


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


def _no_names() -> pl.DataFrame:
    return pl.DataFrame(schema={"job": pl.String, "layer": pl.String, "layer_index": pl.Int64,
                                "layer_kind": pl.String, "layer_label": pl.String})  # fmt: skip


def _model_named_plan() -> pl.DataFrame:
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
        {**inputs, "_gradient_plan": _model_named_plan(), "_layer_names": _no_names()},
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
        {**inputs, "_gradient_plan": no_gradient_plan(), "_layer_names": _no_names()},
        "gradient_bucket_layers",
        order_by=["collective_id"],
    )
    assert got.select("collective_id", "layer", "bytes").rows() == [
        (1, "gradient_bucket", 600),
        (2, "gradient_bucket", 500),
    ]
