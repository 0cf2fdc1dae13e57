"""collective_links.sql on hand-made rows: the layer kind and index of a path, the phase of a
send/recv by its direction, each call's evidence of its dimension, a log peer's global
rank, and a matched log call taking the profiler's context and a filled size."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, no_gradient_plan, rows

ATTN, MOE = "model/layers.1/attn", "model/layers.0/moe/experts"


def test_each_calls_context_and_evidence() -> None:
    # Rank 0 of job j. (source, id, step, phase, op, peer, layer, backward_op, comm, bytes)
    calls = [
        ("kineto", 1, 1, "forward", "all_reduce", None, ATTN, None, "pg:1", 100),
        ("kineto", 2, 1, "backward", "all_reduce", None, None, "AccumulateGrad", "pg:2", 4000),
        ("kineto", 3, 1, None, "send", 4, None, None, "pg:3", 64),
        ("kineto", 4, 1, None, "all_to_all", None, MOE, None, "pg:4", 512),
        ("kineto", 5, 1, "forward", "all_reduce", None, "loss_fn", None, "pg:2", None),
        # the log: 11 is call 1 (matched); 12 a recv from its communicator's place 1; 13 an
        # all_gather that matched nothing
        ("nccl_log", 11, None, None, "all_reduce", None, None, None, "0xabc", 100),
        ("nccl_log", 12, None, None, "recv", 1, None, None, "0xdef", 64),
        ("nccl_log", 13, None, None, "all_gather", None, None, None, "0xabc", 32),
    ]  # fmt: skip
    cols = ["source", "collective_id", "step", "phase", "op", "peer", "layer", "backward_op"]
    cols += ["comm", "bytes"]
    n = len(calls)
    collectives = rows(
        "collectives",
        job=["j"] * n,
        rank=[0] * n,
        file_id=[c[0] for c in calls],
        attributed_by=["module" if c[0] == "kineto" else None for c in calls],
        size_source=["kernel_args" if c[0] == "kineto" else "nccl_log" for c in calls],
        dtype=["float32"] * n,
        seq=list(range(n)),
        group_size=[2] * n,
        enqueue_ns=[None] * n,
        start_ns=[None] * n,
        end_ns=[None] * n,
        dur_ns=[None] * n,
        **{c: [x[i] for x in calls] for i, c in enumerate(cols)},
    )
    # the log's 0xdef: place 0 is rank 0, place 1 rank 4
    communicators = rows(
        "communicators",
        job=["j", "j"],
        source=["nccl_log"] * 2,
        comm=["0xdef"] * 2,
        rank=[0, 4],
        rank_in_comm=[0, 1],
    )
    matches = rows(
        "collective_matches",
        job=["j"],
        rank=[0],
        source=["nccl_log"],
        file_id=["nccl_log"],
        collective_id=[11],
        primary_source=["kineto"],
        primary_file_id=["kineto"],
        primary_collective_id=[1],
    )
    key = {"job": ["j"], "rank": [0], "source": ["kineto"], "file_id": ["kineto"]}
    filled = pl.DataFrame(
        {**key, "collective_id": [5], "bytes": [8], "dtype": ["float32"],
         "filled_from": ["nccl_log"]}
    )  # fmt: skip
    adopted = pl.DataFrame(
        {"job": [], "rank": [], "source": [], "file_id": [], "collective_id": [], "comm": [],
         "seq": []},
        schema={"job": pl.String, "rank": pl.Int64, "source": pl.String, "file_id": pl.String,
                "collective_id": pl.Int64, "comm": pl.String, "seq": pl.Int64},
    )  # fmt: skip
    got = created(
        "collective_links.sql",
        {
            "_adopted_groups": adopted,
            "_filled_sizes": filled,
            "collective_matches": matches,
            "collectives": collectives,
            "communicators": communicators,
            "_gradient_plan": no_gradient_plan(),
        },
        "_links_attributed",
        order_by=["collective_id"],
        secondary=True,
    ).select("collective_id", "step", "step_from", "phase", "layer_index", "layer_kind",
             "attributed_by", "peer", "bytes", "size_source", "evidence")  # fmt: skip
    # 1: a layer's all-reduce: tp; layers.1/attn: index 1, attention.
    # 2: from a gradient-accumulation hook: dp. 3: a send to a higher rank: forward, pp.
    # 4: an all-to-all in an expert layer: ep. 5: the loss's all-reduce: dp; its size
    #    from the log. 11: call 1's context, matched. 12: a recv from place 1 = rank 4, a
    #    higher rank: backward (gradients flow down), pp. 13: nothing: other, dp.
    expected = pl.DataFrame(
        {
            "collective_id": [1, 2, 3, 4, 5, 11, 12, 13],
            "step": [1, 1, 1, 1, 1, 1, None, None],
            "step_from": ["trace"] * 5 + ["matched", None, None],
            "phase": ["forward", "backward", "forward", "other", "forward", "forward",
                      "backward", "other"],
            "layer_index": [1, None, None, 0, None, 1, None, None],
            "layer_kind": ["attention", None, None, "moe", "loss", "attention", None, None],
            # (2: a backward all-reduce with no layer, from gradient accumulation: the named
            # owner gradient_bucket, _named_owner)
            "attributed_by": ["module", "gradient_bucket"] + ["module"] * 3
            + ["matched:module", "none", "none"],
            "peer": [None, None, 4, None, None, None, 4, None],
            "bytes": [100, 4000, 64, 512, 8, 100, 64, 32],
            "size_source": ["kernel_args"] * 4 + ["nccl_log"] * 4,
            "evidence": ["tp", "dp", "pp", "ep", "dp", "tp", "pp", "dp"],
        },
        schema_overrides={"step": pl.Int64, "layer_index": pl.Int64, "peer": pl.Int64},
    )  # fmt: skip
    assert_frame_equal(got, expected)
