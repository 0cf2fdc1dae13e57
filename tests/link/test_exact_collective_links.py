"""collective_links.sql on hand-made rows: the layer kind, index and label of a path (the
model's number where a pipeline stage numbers its layers from 0), a send/recv's layer cut
at a pipeline boundary, the named owner of a call no layer placed, the phase of a send/recv
by its direction, each call's evidence of its dimension, a log peer's global rank, and a
matched log call taking the profiler's context and a filled size."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, no_gradient_plan, rows

ATTN, MOE = "model/layers.1/attn", "model/layers.0/moe/experts"
FC2 = "model/layers.1/mlp/fc2"  # (a send at the pipeline boundary after layers.1's fc2)


def test_each_calls_context_and_evidence() -> None:
    # Rank 0 of job j, the second of two pipeline stages.
    # (source, id, step, phase, op, peer, layer, backward_op, comm, bytes, attributed_by)
    calls = [
        ("kineto", 1, 1, "forward", "all_reduce", None, ATTN, None, "pg:1", 100, "module"),
        ("kineto", 2, 1, "backward", "all_reduce", None, None, "AccumulateGrad", "pg:2", 4000,
         None),
        ("kineto", 3, 1, None, "send", 4, None, None, "pg:3", 64, None),
        ("kineto", 4, 1, None, "all_to_all", None, MOE, None, "pg:4", 512, "module"),
        ("kineto", 5, 1, "forward", "all_reduce", None, "loss_fn", None, "pg:2", None,
         "module"),
        # 6: an all-reduce between backward and the optimizer (a metric); 7: an all-gather
        # in backward that no layer placed; 8: a send at the pipeline boundary
        ("kineto", 6, 1, None, "all_reduce", None, None, None, "pg:2", 8, None),
        ("kineto", 7, 1, "backward", "all_gather", None, None, None, "pg:2", 256, None),
        ("kineto", 8, 1, None, "send", 4, FC2, None, "pg:3", 64, "pp_boundary"),
        # the log: 11 is call 1 (matched); 12 a recv from its communicator's place 1; 13 an
        # all_gather that matched nothing
        ("nccl_log", 11, None, None, "all_reduce", None, None, None, "0xabc", 100, None),
        ("nccl_log", 12, None, None, "recv", 1, None, None, "0xdef", 64, None),
        ("nccl_log", 13, None, None, "all_gather", None, None, None, "0xabc", 32, None),
    ]  # fmt: skip
    cols = ["source", "collective_id", "step", "phase", "op", "peer", "layer", "backward_op"]
    cols += ["comm", "bytes", "attributed_by"]
    n = len(calls)
    collectives = rows(
        "collectives",
        job=["j"] * n,
        rank=[0] * n,
        file_id=[c[0] for c in calls],
        # (the op each profiler call was launched from)
        launch_op_id=[70 + c[1] if c[0] == "kineto" else None for c in calls],
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
    # job.yaml's gradient plan of rank 0's stage: the model's layers 2 and 3 are the
    # stage's 0 and 1 (and the final norm, no layer)
    plan = pl.DataFrame(
        [("j", 0, 0, "norm", None, None, 0, 16),
         ("j", 0, 1, "transformer", 3, 1, 16, 1016),
         ("j", 0, 2, "transformer", 2, 0, 1016, 2016)],
        schema=no_gradient_plan().schema,
        orient="row",
    )  # fmt: skip
    got = created(
        "collective_links.sql",
        {
            "_gradient_plan": plan,
            "_adopted_groups": adopted,
            "_filled_sizes": filled,
            "collective_matches": matches,
            "collectives": collectives,
            "communicators": communicators,
        },
        "_links_attributed",
        order_by=["collective_id"],
        secondary=True,
    ).select("collective_id", "step", "step_from", "phase", "layer", "layer_index",
             "layer_kind", "layer_label", "attributed_by", "peer", "bytes", "size_source",
             "evidence")  # fmt: skip
    # The job's layer paths: ATTN, MOE, loss_fn and FC2 cut after its layer, model/layers.1.
    # Labels, the shortest tail unique among them from the innermost layer's component on:
    # layers.1/attn, layers.0/moe/experts, loss_fn (no layer: from its one component),
    # layers.1. Rank 0 numbers layers 0 and 1 (MOE's, ATTN's and the cut path's), exactly
    # its stage's local numbers in the plan, not the model's (2, 3): the model's stand,
    # local 0 -> 2, 1 -> 3.
    # 1: a layer's all-reduce: tp; layers.1/attn: model layer 3, attention.
    # 2: backward all-reduce from a gradient-accumulation hook, no layer: owner
    #    gradient_bucket (its layer, label and evidence), dp.
    # 3: a send to a higher rank: forward, pp; no owner (not a reduction).
    # 4: an all-to-all in an expert layer: ep; model layer 2. 5: the loss's all-reduce: dp
    #    (kind loss), label loss_fn; its size from the log.
    # 6: an all-reduce in a step, outside any phase, launched by an op: owner metrics, dp.
    # 7: a backward all-gather no layer placed: owner parameter_gather, dp.
    # 8: pp_boundary: its layer cut after layers.1 (model layer 3, kind transformer, label
    #    layers.1); a send to a higher rank: forward, pp.
    # 11: call 1's context, matched. 12: a recv from place 1 = rank 4, a higher rank:
    #    backward (gradients flow down), pp. 13: nothing: other, dp; an all-gather outside
    #    backward has no owner.
    L1 = "model/layers.1"
    expected = pl.DataFrame(
        {
            "collective_id": [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13],
            "step": [1] * 8 + [1, None, None],
            "step_from": ["trace"] * 8 + ["matched", None, None],
            "phase": ["forward", "backward", "forward", "other", "forward", "other",
                      "backward", "forward", "forward", "backward", "other"],
            "layer": [ATTN, "gradient_bucket", None, MOE, "loss_fn", "metrics",
                      "parameter_gather", L1, ATTN, None, None],
            "layer_index": [3, None, None, 2, None, None, None, 3, 3, None, None],
            "layer_kind": ["attention", None, None, "moe", "loss", None, None, "transformer",
                           "attention", None, None],
            "layer_label": ["layers.1/attn", "gradient_bucket", None, "layers.0/moe/experts",
                            "loss_fn", "metrics", "parameter_gather", "layers.1",
                            "layers.1/attn", None, None],
            "attributed_by": ["module", "gradient_bucket", "none", "module", "module",
                              "metrics", "parameter_gather", "pp_boundary", "matched:module",
                              "none", "none"],
            "peer": [None, None, 4, None, None, None, None, 4, None, 4, None],
            "bytes": [100, 4000, 64, 512, 8, 8, 256, 64, 100, 64, 32],
            "size_source": ["kernel_args"] * 4 + ["nccl_log"] + ["kernel_args"] * 3
                           + ["nccl_log"] * 3,
            "evidence": ["tp", "dp", "pp", "ep", "dp", "dp", "dp", "pp", "tp", "pp", "dp"],
        },
        schema_overrides={"step": pl.Int64, "layer_index": pl.Int64, "peer": pl.Int64},
    )  # fmt: skip
    assert_frame_equal(got, expected)
