"""instance_context.sql on hand-made rows: an unprofiled rank's log calls take the step,
phase and layer of their instance (the layer's label from _layer_names); the calls between
and after those are placed by their order in the log, the edges only as far as the rank's
fullest step reaches."""

from __future__ import annotations

from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, rows

LINKS = ("collective_links", "collectives")


def test_log_calls_take_their_instances_step_and_then_their_order() -> None:
    # Rank 0 was profiled: its call 0 is in step 1 (by the trace); its call 5, the
    # profiler's with no step, is in no instance and no log: it stays unplaced.
    # Rank 1 has only its NCCL log, calls 100..106 in issue order, none with a step:
    #   102 is instance c#0 (step 1, forward, model/layers.3/attn on the profiled ranks)
    #   104 is instance c#1 (step 2, backward, model/layers.2/mlp)
    #   100, 101, 103, 105, 106 are in no instance with a step.
    ids = [(0, "kineto", "k0", 0), (0, "kineto", "k0", 5)]
    ids += [(1, "nccl_log", "log1", i) for i in range(100, 107)]
    n = len(ids)
    links = rows(
        "_links_keyed",
        like=LINKS,
        job=["j"] * n,
        rank=[r for r, *_ in ids],
        source=[s for _, s, *_ in ids],
        file_id=[f for *_, f, _ in ids],
        collective_id=[c for *_, c in ids],
        step=[1] + [None] * (n - 1),
        step_from=["trace"] + [None] * (n - 1),
        phase=["forward"] + ["other"] * (n - 1),
        layer=["model/layers.3/attn"] + [None] * (n - 1),
        layer_index=[3] + [None] * (n - 1),
        layer_kind=["attention"] + [None] * (n - 1),
        layer_label=["layers.3/attn"] + [None] * (n - 1),
        parallel_dim=["dp"] * n,
        attributed_by=["trace"] + [None] * (n - 1),
        bytes=[64] * n,
        dtype=["float32"] * n,
        size_source=["trace"] * n,
        instance_comm=["c", None] + [None, None, "c", None, "c", None, None],
        instance_seq=[0, None] + [None, None, 0, None, 1, None, None],
    )
    instance_rows = rows(
        "_instance_rows",
        like=LINKS,
        job=["j"] * 3,
        rank=[0, 1, 1],
        source=["kineto", "nccl_log", "nccl_log"],
        file_id=["k0", "log1", "log1"],
        collective_id=[0, 102, 104],
        instance_comm=["c", "c", "c"],
        instance_seq=[0, 0, 1],
    )
    instances = rows(
        "_source_instances",
        like=("collective_instances",),
        job=["j"] * 3,
        source=["kineto", "nccl_log", "nccl_log"],
        comm=["c", "c", "c"],
        seq=[0, 0, 1],
        step=[1, 1, 2],
        phase=["forward", "forward", "backward"],
        layer=["model/layers.3/attn", "model/layers.3/attn", "model/layers.2/mlp"],
        layer_kind=["attention", "attention", "mlp"],
    )
    # The job's layer paths as collective_links.sql names them: the shortest unique tail
    # from the innermost layer's component (layers.3, layers.2) on.
    names = rows(
        "_layer_names",
        like=LINKS,
        job=["j", "j"],
        layer=["model/layers.3/attn", "model/layers.2/mlp"],
        layer_index=[3, 2],
        layer_kind=["attention", "mlp"],
        layer_label=["layers.3/attn", "layers.2/mlp"],
    )
    got = created(
        "instance_context.sql",
        {
            "_links_keyed": links,
            "_instance_rows": instance_rows,
            "_source_instances": instances,
            "_layer_names": names,
        },
        "collective_links",
        order_by=["rank", "collective_id"],
    ).select("rank", "collective_id", "step", "step_from", "phase", "layer", "layer_index",
             "layer_kind", "layer_label", "attributed_by")  # fmt: skip
    # 102 and 104 take their instances' context (layer index 3 and 2 from the paths, the
    # label of the layer from _layer_names).
    # Then the log's order: 103 lies between a step 1 call and a step 2 call: step 1.
    # Steps of the record: step 1 holds 102, 103 (2 calls, the fullest), step 2 holds 104
    # (1 call). Before 102, step 1 takes 2 - 2 = 0 more calls: 100, 101 stay unplaced.
    # After 104, step 2 takes 2 - 1 = 1 more, the closest: 105; 106 stays unplaced.
    m, a = "model/layers.3/attn", "model/layers.2/mlp"
    expected = rows(
        "collective_links",
        rank=[0, 0, 1, 1, 1, 1, 1, 1, 1],
        collective_id=[0, 5, 100, 101, 102, 103, 104, 105, 106],
        step=[1, None, None, None, 1, 1, 2, 2, None],
        step_from=["trace", None, None, None, "instance", "log_order", "instance",
                   "log_order", None],
        phase=["forward", "other", "other", "other", "forward", "other", "backward", "other",
               "other"],
        layer=[m, None, None, None, m, None, a, None, None],
        layer_index=[3, None, None, None, 3, None, 2, None, None],
        layer_kind=["attention", None, None, None, "attention", None, "mlp", None, None],
        layer_label=["layers.3/attn", None, None, None, "layers.3/attn", None, "layers.2/mlp",
                     None, None],
        attributed_by=["trace", None, None, None, "instance", None, "instance", None, None],
    )  # fmt: skip
    assert_frame_equal(got, expected)
