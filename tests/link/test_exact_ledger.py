"""ledger.sql on hand-made rows: each status (matched aside: calls differ, size differs,
missing, unpredicted) and each reason, from a few calls of two ranks against their items."""

from __future__ import annotations

from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows

BUCKETS = "the same bytes in other calls: gradient buckets cut elsewhere"


def test_every_status_and_reason() -> None:
    # Step 1 of ranks 0 and 1. Each rank's items: dp all_reduce backward 1 x 1,000 B
    # (gradient bucket); tp all_reduce forward 2 x 100 (g); tp all_reduce backward 1 x 400
    # (f); pp send forward 1 x 50 (activations).
    items = [("dp", "all_reduce", "backward", 1, 1000, "gradient bucket"),
             ("tp", "all_reduce", "forward", 2, 200, "g"),
             ("tp", "all_reduce", "backward", 1, 400, "f"),
             ("pp", "send", "forward", 1, 50, "activations")]  # fmt: skip
    pred = [(r, *i) for r in (0, 1) for i in items]
    cols = ["rank", "parallel_dim", "op", "phase", "calls", "bytes", "purpose"]
    predictions = rows(
        "predictions",
        job=["j"] * len(pred),
        **{c: [p[i] for p in pred] for i, c in enumerate(cols)},
    )
    # Observed, the profiler's: each rank's gradients in two buckets, 600 and 400 B; tp
    # forward 100 B twice on rank 0, once on rank 1; tp backward 800 B once each; an
    # all_gather of 64 B on rank 0 in layer L. Rank 0's log holds one call again.
    calls = [(0, "kineto", "dp", "all_reduce", "backward", 600, None),
             (0, "kineto", "dp", "all_reduce", "backward", 400, None),
             (1, "kineto", "dp", "all_reduce", "backward", 600, None),
             (1, "kineto", "dp", "all_reduce", "backward", 400, None),
             (0, "kineto", "tp", "all_reduce", "forward", 100, None),
             (0, "kineto", "tp", "all_reduce", "forward", 100, None),
             (1, "kineto", "tp", "all_reduce", "forward", 100, None),
             (0, "kineto", "tp", "all_reduce", "backward", 800, None),
             (1, "kineto", "tp", "all_reduce", "backward", 800, None),
             (0, "kineto", "tp", "all_gather", "forward", 64, "L"),
             (0, "nccl_log", "tp", "all_reduce", "forward", 100, None)]  # fmt: skip
    cols = ["rank", "source", "parallel_dim", "op", "phase", "bytes", "layer"]
    n = len(calls)
    links = rows(
        "collective_links",
        job=["j"] * n,
        step=[1] * n,
        **{c: [x[i] for x in calls] for i, c in enumerate(cols)},
    )
    collectives = rows(
        "collectives", job=["j"] * n, rank=[x[0] for x in calls], source=[x[1] for x in calls]
    )
    got = created(
        "ledger.sql",
        {"collective_links": links, "collectives": collectives, "predictions": predictions},
        "ledger",
        order_by=["parallel_dim", "op", "phase", "status"],
    )
    # dp: 1,000 B predicted twice; seen 600 twice and 400 twice: 600 pairs with 1,000 (size
    #     differs), 400 is left (unpredicted); 2,000 B on both sides: buckets cut elsewhere.
    # pp send: predicted on both ranks, never seen: missing.
    # all_gather: seen, no item: unpredicted, named by its layer.
    # tp backward: 800 B against 400: size differs, twice the size.
    # tp forward: 100 B seen 3 times, predicted 4 (2 a rank): calls differ.
    expected = rows(
        "ledger",
        job=["j"] * 6,
        step=[1] * 6,
        parallel_dim=["dp", "dp", "pp", "tp", "tp", "tp"],
        op=["all_reduce", "all_reduce", "send", "all_gather", "all_reduce", "all_reduce"],
        phase=["backward", "backward", "forward", "forward", "backward", "forward"],
        status=["size differs", "unpredicted", "missing", "unpredicted", "size differs",
                "calls differ"],
        purpose=["gradient bucket", None, "activations", None, "f", "g"],
        layer=[None, None, None, "L", None, None],
        predicted_calls=[2, 0, 2, 0, 2, 4],
        predicted_message_bytes=[1000, None, 50, None, 400, 100],
        predicted_bytes=[2000, 0, 100, 0, 800, 400],
        calls=[2, 2, 0, 1, 2, 3],
        message_bytes=[600, 400, None, 64, 800, 100],
        bytes=[1200, 800, 0, 64, 1600, 300],
        ranks=[2, 2, None, 1, 2, 2],
        reason=[BUCKETS, BUCKETS, None, None, "twice the predicted size: check the dtypes",
                None],
    )  # fmt: skip
    assert_frame_equal(got, expected)
