"""step_stragglers.sql on hand-made rows: the rank that caused the most wait in a step, the
share of the step's wait that was, and what it ran (ops by their own time, kernels) while
the others waited, in its merged windows on its own clock."""

from __future__ import annotations

from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows


def _inputs() -> dict:
    # Step 1 of job j, ranks 0, 1, 2 (rank 2's clock reads 500 ahead). Waits, aligned:
    #   X (c#0, layer attn, tp): rank 2 arrived last; ranks 0, 1 waited 30, 20 (caused 50)
    #   Y (e#0, layer mlp, tp):  rank 2 arrived last; rank 0 waited 20 (caused 20)
    #   Z (d#0, layer mlp, dp):  rank 0 arrived last; ranks 1, 2 waited 30, 30 (caused 60)
    #   a recv of rank 1 waited 1000 for rank 0's send: the schedule, nobody's fault
    calls = [
        # rank, comm, seq, op, layer, dim, wait, late
        (0, "c", 0, "all_reduce", "attn", "tp", 30, 2),
        (1, "c", 0, "all_reduce", "attn", "tp", 20, 2),
        (2, "c", 0, "all_reduce", "attn", "tp", 0, 2),
        (0, "e", 0, "all_reduce", "mlp", "tp", 20, 2),
        (2, "e", 0, "all_reduce", "mlp", "tp", 0, 2),
        (0, "d", 0, "all_reduce", "mlp", "dp", 0, 0),
        (1, "d", 0, "all_reduce", "mlp", "dp", 30, 0),
        (2, "d", 0, "all_reduce", "mlp", "dp", 30, 0),
        (0, "p2p", 0, "send", None, "pp", 0, 0),
        (1, "p2p", 0, "recv", None, "pp", 1000, 0),
    ]
    cols = ["rank", "comm", "seq", "op", "layer", "parallel_dim", "wait_ns", "late_rank"]
    n = len(calls)
    waits = rows(
        "collective_waits",
        job=["j"] * n,
        source=["kineto"] * n,
        step=[1] * n,
        **{c: [call[i] for call in calls] for i, c in enumerate(cols)},
    )
    # the instances rank 2 was late at, aligned: X from 1000 to 1030, Y from 1020 to 1040;
    # on rank 2's clock 1500..1530 and 1520..1540, which overlap: one window 1500..1540
    instances = rows(
        "_source_instances",
        like=("collective_instances",),
        job=["j"] * 3,
        source=["kineto"] * 3,
        comm=["c", "e", "d"],
        seq=[0, 0, 0],
        first_start_ns=[1000, 1020, 3000],
        last_start_ns=[1030, 1040, 3030],
    )
    offsets = rows("clock_offsets", job=["j"] * 3, rank=[0, 1, 2], offset_ns=[0, 0, 500])
    # rank 2's ops: forward (1400..1600) holds aten::sleep (1510..1535). Rank 0's op and
    # Nsight's op of rank 2 in the window are not the straggler's timed records.
    ops = rows(
        "ops",
        job=["j"] * 4,
        source=["kineto", "kineto", "kineto", "nsys"],
        file_id=["f2", "f2", "f0", "n2"],
        rank=[2, 2, 0, 2],
        op_id=[1, 2, 1, 9],
        parent_id=[None, 1, None, None],
        name=["forward", "aten::sleep", "rank0_op", "nsys_op"],
        module_path=["model.attn", "model.attn.inner", "model", "model"],
        start_ns=[1400, 1510, 1400, 1500],
        end_ns=[1600, 1535, 1600, 1540],
    )
    kernels = rows(
        "kernels",
        job=["j"] * 2,
        source=["kineto"] * 2,
        rank=[2, 2],
        name=["flash_fwd", "late_kernel"],
        nvtx_range=["attn", None],
        start_ns=[1490, 1540],
        end_ns=[1520, 1600],
    )
    # the labels link gave the layers of the job's collectives: attn's and the inner module's
    # (a module path no collective came from, model.attn, has none)
    labels = [("attn", "attention"), ("model.attn.inner", "inner"), ("mlp", None)]
    links = rows(
        "collective_links",
        job=["j"] * 3,
        rank=[0] * 3,
        layer=[x[0] for x in labels],
        layer_label=[x[1] for x in labels],
    )
    return {
        "collective_links": links,
        "collective_waits": waits,
        "_source_instances": instances,
        "clock_offsets": offsets,
        "ops": ops,
        "kernels": kernels,
    }


def test_the_rank_that_caused_most_wait_is_the_steps_straggler() -> None:
    got = created("step_stragglers.sql", _inputs(), "step_stragglers", order_by=["job", "step"])
    # rank 2 caused 30 + 20 (X) + 20 (Y) = 70 in 2 collectives, rank 0 60 (the recv's 1000
    # is left out). The step's wait: 30 + 20 + 20 + 30 + 30 + 1000 = 1130. Rank 2's layer:
    # attn (50) over mlp (20); its dimension tp (70). Busy layer: its op of most own time
    # in the windows, aten::sleep's module (25 ns, below). Each by its collectives' label.
    expected = rows(
        "step_stragglers",
        job=["j"],
        step=[1],
        rank=[2],
        delayed_collectives=[2],
        caused_wait_ns=[70],
        step_wait_ns=[1130],
        wait_share=[70 / 1130],
        layer=["attn"],
        layer_label=["attention"],
        parallel_dim=["tp"],
        busy_layer=["model.attn.inner"],
        busy_layer_label=["inner"],
    )
    assert_frame_equal(got, expected)


def test_what_the_straggler_ran_in_its_window() -> None:
    got = created(
        "step_stragglers.sql",
        _inputs(),
        "straggler_ops",
        order_by=["overlap_ns", "name"],
    ).reverse()
    # the window 1500..1540 (40 ns): aten::sleep overlaps 1510..1535 = 25 (no child);
    # forward overlaps 1500..1540 = 40, less its child's 25 = 15; flash_fwd 1500..1520 = 20;
    # late_kernel starts at the window's end (no overlap). Shares of 40.
    expected = rows(
        "straggler_ops",
        job=["j"] * 3,
        step=[1] * 3,
        rank=[2] * 3,
        what=["op", "kernel", "op"],
        name=["aten::sleep", "flash_fwd", "forward"],
        layer=["model.attn.inner", "attn", "model.attn"],
        layer_label=["inner", "attention", None],
        overlap_ns=[25, 20, 15],
        window_share=[25 / 40, 20 / 40, 15 / 40],
    )
    assert_frame_equal(got, expected)
