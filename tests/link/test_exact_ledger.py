"""ledger.sql on hand-made rows: each status (matched aside: calls differ, size differs,
missing, unpredicted) and each reason, from a few calls of two ranks against their items,
with the observed sizes' source; and where job.yaml's layout contradicts the traces, that
statement as the reason of every row that differs."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, job_facts, no_alternatives, rows

#: (the key that sets torch DDP's buckets, _job_facts.bucket_key)
BUCKETS = (
    "the same bytes in other calls: gradient buckets cut elsewhere (conventions.ddp_bucket_mb)"
)
ALTERNATIVE_COLUMNS = no_alternatives().schema


def _alternatives(rows_: list[tuple]) -> pl.DataFrame:
    """_alternative_bytes (the runner's): (job, key, value, what, ranks, parallel_dim, op,
    phase, bytes of each rank listed)."""
    return pl.DataFrame(rows_, schema=ALTERNATIVE_COLUMNS, orient="row")


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
    # all_gather of 64 B on rank 0 in layer L. Rank 0's log holds one call again. Sizes:
    # rank 0's tp backward is the model's (estimated); the log's call is estimated too, but
    # the log is not rank 0's primary source.
    calls = [(0, "kineto", "dp", "all_reduce", "backward", 600, None, "kernel_args"),
             (0, "kineto", "dp", "all_reduce", "backward", 400, None, "kernel_args"),
             (1, "kineto", "dp", "all_reduce", "backward", 600, None, "kernel_args"),
             (1, "kineto", "dp", "all_reduce", "backward", 400, None, "kernel_args"),
             (0, "kineto", "tp", "all_reduce", "forward", 100, None, "record_param_comms"),
             (0, "kineto", "tp", "all_reduce", "forward", 100, None, "record_param_comms"),
             (1, "kineto", "tp", "all_reduce", "forward", 100, None, "kernel_args"),
             (0, "kineto", "tp", "all_reduce", "backward", 800, None, "estimated"),
             (1, "kineto", "tp", "all_reduce", "backward", 800, None, "kernel_args"),
             (0, "kineto", "tp", "all_gather", "forward", 64, "L", "kernel_args"),
             (0, "nccl_log", "tp", "all_reduce", "forward", 100, None, "estimated")]  # fmt: skip
    cols = ["rank", "source", "parallel_dim", "op", "phase", "bytes", "layer", "size_source"]
    n = len(calls)
    links = rows(
        "collective_links",
        job=["j"] * n,
        step=[1] * n,
        instance_comm=[f"{x[2]}0" for x in calls],
        # (a label only where there is a layer, as collective_links has)
        layer_label=[None if x[6] is None else f"{x[6]} label" for x in calls],
        **{c: [x[i] for x in calls] for i, c in enumerate(cols)},
    )
    collectives = rows(
        "collectives", job=["j"] * n, rank=[x[0] for x in calls], source=[x[1] for x in calls]
    )
    # Were model.linear_bias 'all', each rank's items would be: tp forward 150 B, the rest
    # as predicted (and no all_gather).
    alt = ("j", "model.linear_bias", "all", "the linear layers' biases", [0, 1])
    alternatives = _alternatives(
        [(*alt, "dp", "all_reduce", "backward", 1000),
         (*alt, "tp", "all_reduce", "forward", 150),
         (*alt, "tp", "all_reduce", "backward", 400),
         (*alt, "pp", "send", "forward", 50)]
    )  # fmt: skip
    # job.yaml's layout agrees with j's traces; job k's contradict it (no row of j's says so)
    dims = rows(
        "communicator_dims",
        job=["j", "j", "k"],
        comm=["dp0", "tp0", "tp0"],
        parallel_dim=["dp", "tp", "tp"],
        layout_conflicts=[None, None, ["groups named dp (data) are tp groups of the layout"]],
    )
    got = created(
        "ledger.sql",
        {
            "_alternative_bytes": alternatives,
            "_job_facts": job_facts("j", "conventions.ddp_bucket_mb", ["dp", "tp"]),
            "collective_links": links,
            "collectives": collectives,
            "communicator_dims": dims,
            "predictions": predictions,
        },
        "ledger",
        order_by=["parallel_dim", "op", "phase", "status"],
    )
    # dp: 1,000 B predicted twice; seen 600 twice and 400 twice: 600 pairs with 1,000 (size
    #     differs), 400 is left (unpredicted); 2,000 B on both sides: buckets cut elsewhere,
    #     named by the key that sets them (_job_facts.bucket_key). (linear_bias 'all' gives
    #     2,000 B too, but so does the prediction: no reason of its.)
    # pp send: predicted on both ranks, never seen: missing.
    # all_gather: seen, no item: unpredicted, named by its layer and that layer's label.
    # tp backward: 800 B against 400: size differs, twice the size.
    # tp forward: 100 B seen 3 times, predicted 4 (2 a rank): calls differ; 300 B in all,
    #     which linear_bias 'all' gives (150 B on each of the 2 ranks) and the prediction
    #     (400 B) does not: that key is the reason. (tp backward's 1,600 B, pp's 0 and the
    #     all_gather's 64 are not what it gives: 800, 100, none.)
    # size_source: estimated where any call's is (tp backward, rank 0's), else the first by
    # name of its calls' (tp forward: kernel_args before record_param_comms); none where
    # nothing was seen (pp send).
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
        layer_label=[None, None, None, "L label", None, None],
        predicted_calls=[2, 0, 2, 0, 2, 4],
        predicted_message_bytes=[1000, None, 50, None, 400, 100],
        predicted_bytes=[2000, 0, 100, 0, 800, 400],
        calls=[2, 2, 0, 1, 2, 3],
        message_bytes=[600, 400, None, 64, 800, 100],
        bytes=[1200, 800, 0, 64, 1600, 300],
        ranks=[2, 2, None, 1, 2, 2],
        reason=[BUCKETS, BUCKETS, None, None, "twice the predicted size: check the dtypes",
                "the linear layers' biases: the bytes match model.linear_bias: all"],
        size_source=["kernel_args", "kernel_args", None, "kernel_args", "estimated",
                     "kernel_args"],
    )  # fmt: skip
    assert_frame_equal(got, expected)


LAYOUT = "tp=2 x dp=2 x pp=2"
# What layout_check found, per communicator (communicator_dims.layout_conflicts), in the
# order of their names: C < T1 < T0 < D1 < P7.
C = f"groups named dp (data) are cp groups of the layout {LAYOUT}"  # cp0, no calls
T1 = f"groups named ep (expert) are tp groups of the layout {LAYOUT}"  # tp1, no calls
T0 = f"groups named pp (pipeline) are tp groups of the layout {LAYOUT}"  # tp0
D1 = f"groups named sp (sequence) are dp groups of the layout {LAYOUT}"  # dp1, no calls
P7 = (
    f"send/recv run in groups of 2 ranks (pipeline) that the layout {LAYOUT} makes dp "
    "groups, not pipeline stages"
)  # pg:7


def test_a_layout_the_traces_contradict_is_the_reason_of_every_row_that_differs() -> None:
    # Step 1 of ranks 0 and 1. Items of each rank: tp all_reduce forward 1 x 100 (g),
    # backward 1 x 400 (f); dp all_reduce backward 1 x 1,000 (gradient bucket); rank 0's
    # pp send forward 1 x 50, rank 1's recv (activations).
    items = [("tp", "all_reduce", "forward", 1, 100, "g"),
             ("tp", "all_reduce", "backward", 1, 400, "f"),
             ("dp", "all_reduce", "backward", 1, 1000, "gradient bucket")]  # fmt: skip
    pred = [(r, *i) for r in (0, 1) for i in items]
    pred += [(0, "pp", "send", "forward", 1, 50, "activations"),
             (1, "pp", "recv", "forward", 1, 50, "activations")]  # fmt: skip
    cols = ["rank", "parallel_dim", "op", "phase", "calls", "bytes", "purpose"]
    predictions = rows(
        "predictions",
        job=["j"] * len(pred),
        **{c: [p[i] for p in pred] for i, c in enumerate(cols)},
    )
    # Observed on each rank: tp forward 100 B and tp backward 800 B on tp0; gradients of
    # 600 and 400 B on dp0; rank 0 an all_gather of 64 B (tp) on the world group; the
    # activations sent 0 -> 1 on pg:7, which job.yaml makes a dp group (so the calls are dp).
    # (rank, dim, op, phase, bytes, instance_comm):
    calls = [(r, "tp", "all_reduce", "forward", 100, "tp0") for r in (0, 1)]
    calls += [(r, "tp", "all_reduce", "backward", 800, "tp0") for r in (0, 1)]
    calls += [(r, "dp", "all_reduce", "backward", b, "dp0") for r in (0, 1) for b in (600, 400)]
    calls += [(0, "tp", "all_gather", "forward", 64, "world"),
              (0, "dp", "send", "forward", 50, "pg:7 p2p 0->1"),
              (1, "dp", "recv", "forward", 50, "pg:7 p2p 0->1")]  # fmt: skip
    cols = ["rank", "parallel_dim", "op", "phase", "bytes", "instance_comm"]
    n = len(calls)
    links = rows(
        "collective_links",
        job=["j"] * n,
        step=[1] * n,
        source=["kineto"] * n,
        layer=[None] * n,
        size_source=["kernel_args"] * n,
        **{c: [x[i] for x in calls] for i, c in enumerate(cols)},
    )
    collectives = rows("collectives", job=["j", "j"], rank=[0, 1], source=["kineto"] * 2)
    dims = [("tp0", "tp", [T0]), ("tp1", "tp", [T1]), ("dp0", "dp", None),
            ("dp1", "dp", [D1]), ("pg:7", "dp", [P7]), ("cp0", "cp", [C]),
            ("world", "world", None)]  # fmt: skip
    communicator_dims = rows(
        "communicator_dims",
        job=["j"] * len(dims),
        comm=[d[0] for d in dims],
        parallel_dim=[d[1] for d in dims],
        layout_conflicts=[d[2] for d in dims],
    )
    got = created(
        "ledger.sql",
        {
            "_alternative_bytes": no_alternatives(),
            "_job_facts": job_facts("j", "conventions.ddp_bucket_mb", ["dp", "tp"]),
            "collective_links": links,
            "collectives": collectives,
            "communicator_dims": communicator_dims,
            "predictions": predictions,
        },
        "ledger",
        order_by=["parallel_dim", "op", "phase", "status"],
    ).select("parallel_dim", "op", "phase", "status", "predicted_message_bytes", "calls",
             "message_bytes", "reason")  # fmt: skip
    # tp forward: 100 B twice as predicted: matched, no reason though tp0 is contradicted.
    # tp backward: 800 B against 400: size differs; the statement on tp0, where its calls
    #     ran (not T1, its dimension's first; nor "twice the predicted size").
    # tp all_gather: unpredicted, on a group with no statement: its dimension's first, T1.
    # dp all_reduce: 600 pairs with 1,000 (size differs), 400 unpredicted; on dp0, with no
    #     statement: dp's first, D1 (not "buckets cut elsewhere", though 2,000 B each side).
    # dp send and recv: unpredicted, on pg:7: its statement, P7 (not dp's first, D1).
    # pp send and recv: missing; no statement on pp: the job's first, C.
    contradicts = "job.yaml contradicts the traces: "
    expected = pl.DataFrame(
        [
            ("dp", "all_reduce", "backward", "size differs", 1000, 2, 600, contradicts + D1),
            ("dp", "all_reduce", "backward", "unpredicted", None, 2, 400, contradicts + D1),
            ("dp", "recv", "forward", "unpredicted", None, 1, 50, contradicts + P7),
            ("dp", "send", "forward", "unpredicted", None, 1, 50, contradicts + P7),
            ("pp", "recv", "forward", "missing", 50, 0, None, contradicts + C),
            ("pp", "send", "forward", "missing", 50, 0, None, contradicts + C),
            ("tp", "all_gather", "forward", "unpredicted", None, 1, 64, contradicts + T1),
            ("tp", "all_reduce", "backward", "size differs", 400, 2, 800, contradicts + T0),
            ("tp", "all_reduce", "forward", "matched", 100, 2, 100, None),
        ],
        schema=["parallel_dim", "op", "phase", "status", "predicted_message_bytes", "calls",
                "message_bytes", "reason"],
        orient="row",
    )  # fmt: skip
    assert_frame_equal(got, expected)


def test_an_item_never_seen_is_explained_by_a_value_that_does_not_predict_it() -> None:
    # Step 1 of rank 0. Items: dp all_reduce backward 1 x 1,000 (gradient bucket); tp
    # all_reduce forward 1 x 200 (vocab-parallel loss), never seen: 0 B observed.
    # Were conventions.framework 'torch', or model.linear_bias 'none', the model would issue
    # the same gradients and no tp all-reduce at all (no row in _alternative_bytes); with
    # model.linear_bias 'all' a tp all-reduce of 300 B.
    items = [("dp", "all_reduce", "backward", 1, 1000, "gradient bucket"),
             ("tp", "all_reduce", "forward", 1, 200, "loss")]  # fmt: skip
    cols = ["rank", "parallel_dim", "op", "phase", "calls", "bytes", "purpose"]
    pred = [(0, *i) for i in items]
    predictions = rows(
        "predictions", job=["j"] * 2, **{c: [p[k] for p in pred] for k, c in enumerate(cols)}
    )
    links = rows("collective_links", job=["j"], step=[1], rank=[0], source=["kineto"],
                 parallel_dim=["dp"], op=["all_reduce"], phase=["backward"], bytes=[1000],
                 instance_comm=["dp0"], layer=[None], size_source=["kernel_args"])  # fmt: skip
    collectives = rows("collectives", job=["j"], rank=[0], source=["kineto"])
    torch = ("j", "conventions.framework", "torch", "what the framework issues", [0])
    no_bias = ("j", "model.linear_bias", "none", "the linear layers' biases", [0])
    all_bias = ("j", "model.linear_bias", "all", "the linear layers' biases", [0])
    alternatives = _alternatives(
        [(*torch, "dp", "all_reduce", "backward", 1000),
         (*no_bias, "dp", "all_reduce", "backward", 1000),
         (*all_bias, "dp", "all_reduce", "backward", 1000),
         (*all_bias, "tp", "all_reduce", "forward", 300)]
    )  # fmt: skip
    got = created(
        "ledger.sql",
        {
            "_alternative_bytes": alternatives,
            "_job_facts": job_facts("j", "conventions.ddp_bucket_mb", ["dp", "tp"]),
            "collective_links": links,
            "collectives": collectives,
            "communicator_dims": rows("communicator_dims", job=[]),
            "predictions": predictions,
        },
        "ledger",
        order_by=["parallel_dim", "op", "phase", "status"],
    ).select("parallel_dim", "op", "status", "predicted_bytes", "bytes", "reason")
    # dp: matched, no reason. tp: missing, 200 B predicted, 0 B seen: the framework 'torch'
    # and linear_bias 'none' give 0 B there (they issue no such call; _alternative_bytes
    # lists every item a value predicts), linear_bias 'all' 300 B. Of the two that give
    # the 0 B seen, the first by key: conventions.framework.
    expected = pl.DataFrame(
        [("dp", "all_reduce", "matched", 1000, 1000, None),
         ("tp", "all_reduce", "missing", 200, 0,
          "what the framework issues: the bytes match conventions.framework: torch")],
        schema=got.schema,
        orient="row",
    )  # fmt: skip
    assert_frame_equal(got, expected)
