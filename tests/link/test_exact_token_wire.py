"""token_wire.sql on hand-made rows: each rank's calls counted once from its most trusted
source, a rank seen only in its log counted where a step places its calls, predicted items
never seen listed with 0 calls, tokens counted once per tensor-parallel group, and the bytes
whose size is the model's estimate."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows


def test_bytes_per_step_dimension_op_and_phase_beside_the_prediction() -> None:
    # Job j, ranks 0-3, TP groups {0, 1} and {2, 3}; ranks 0-2 profiled, rank 3 only logged.
    # Rank 0's log holds its calls again. Sizes marked estimated are the model's
    # (size_estimates.sql). (rank, source, step, dim, op, phase, bytes, size_source):
    links = [
        (0, "kineto", 1, "tp", "all_reduce", "forward", 100, "kernel_args"),
        (0, "kineto", 1, "dp", "all_reduce", "backward", 1000, "kernel_args"),
        # rank 0's twice: not counted
        (0, "nccl_log", 1, "tp", "all_reduce", "forward", 100, "estimated"),
        (1, "kineto", 1, "tp", "all_reduce", "forward", 100, "estimated"),
        (2, "kineto", 1, "tp", "all_reduce", "forward", 100, "kernel_args"),
        # placed in step 1: counted
        (3, "nccl_log", 1, "tp", "all_reduce", "forward", 100, "nccl_log"),
        # outside the window: not counted
        (3, "nccl_log", None, "tp", "all_reduce", "forward", 100, "estimated"),
    ]
    cols = ["rank", "source", "step", "parallel_dim", "op", "phase", "bytes", "size_source"]
    n = len(links)
    collective_links = rows(
        "collective_links", job=["j"] * n, **{c: [x[i] for x in links] for i, c in enumerate(cols)}
    )
    collectives = rows(
        "collectives",
        job=["j"] * n,
        rank=[x[0] for x in links],
        source=[x[1] for x in links],
    )
    communicators = rows(
        "communicators",
        job=["j"] * 4,
        comm=["tp0", "tp0", "tp1", "tp1"],
        rank=[0, 1, 2, 3],
        rank_in_comm=[0, 1, 0, 1],
    )
    dims = rows("communicator_dims", job=["j", "j"], comm=["tp0", "tp1"], parallel_dim=["tp"] * 2)
    # each profiled rank embedded 256 tokens in step 1 (ranks 1 the TP follower of rank 0)
    steps = rows(
        "steps",
        job=["j"] * 3,
        source=["kineto"] * 3,
        rank=[0, 1, 2],
        step=[1, 1, 1],
        tokens=[256, 256, 256],
    )
    predictions = rows(
        "predictions",
        job=["j"] * 3,
        rank=[0, 0, 0],
        parallel_dim=["tp", "dp", "pp"],
        op=["all_reduce", "all_reduce", "send"],
        phase=["forward", "backward", "forward"],
        calls=[4, 2, 2],
        bytes=[400, 2000, 50],
    )
    facts = pl.DataFrame(schema={"job": pl.String, "tokens_per_step": pl.Int64})
    got = created(
        "token_wire.sql",
        {
            "_job_facts": facts,
            "collective_links": collective_links,
            "collectives": collectives,
            "communicator_dims": dims,
            "communicators": communicators,
            "predictions": predictions,
            "steps": steps,
        },
        "token_wire",
        order_by=["step", "parallel_dim"],
    )
    # tp forward: ranks 0, 1, 2 (profiler) and 3 (its log, in step 1): 4 calls, 400 B.
    # dp backward: rank 0's 1,000 B against 2,000 predicted: ratio 0.5.
    # pp send forward: predicted, never seen: 0 calls.
    # tokens: ranks 0 and 2 (TP leaders) 256 each = 512; rank 1 follows rank 0.
    # estimated_bytes: of the counted calls, rank 1's tp forward (100 B) alone is the
    # model's; dp's are the trace's, pp's none were seen: 0.
    expected = rows(
        "token_wire",
        job=["j"] * 3,
        step=[1, 1, 1],
        parallel_dim=["dp", "pp", "tp"],
        op=["all_reduce", "send", "all_reduce"],
        phase=["backward", "forward", "forward"],
        calls=[1, 0, 4],
        bytes=[1000, 0, 400],
        tokens=[512, 512, 512],
        bytes_per_token=[1000 / 512, 0.0, 400 / 512],
        predicted_calls=[2, 2, 4],
        predicted_bytes=[2000, 50, 400],
        ratio=[0.5, 0.0, 1.0],
        estimated_bytes=[0, 0, 100],
    )
    assert_frame_equal(got, expected)
