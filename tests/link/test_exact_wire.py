"""wire.sql on hand-made rows, a job with no NCCL log (every ring and chain in rank order):
the bytes each instance puts on each directed pair, by the model docs/wire.md gives,
including an MoE exchange on the layout's expert-parallel group whose size is the model's."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from pipeline.dataset.schema import table_schema
from tests.link.sql_harness import created, rows

CALL = ("collective_links", "collectives")


def _empty(table: str) -> pl.DataFrame:
    return rows(table, **{c.name: [] for c in table_schema(table).columns})


def test_rank_order_models_of_a_job_without_logs() -> None:
    # Job j, the profiler's instances (comm, seq, op, bytes M, members, root):
    #   c#0 all_reduce of 1,000 B on ranks 0-3; a#0 all_to_all of 100 B on 0, 1;
    #   b#0 broadcast of 300 B on 0, 1, 2 from rank 1; a send of 64 B from 0 to 2;
    #   job.yaml:ep:0#0, a DeepEP dispatch whose 300 B are the model's (size_source
    #   estimated) on the layout's expert-parallel group 0, 1, 2 (_layout_comm_sets: no
    #   source names its communicator, nor its group size).
    # Ranks 0, 1 on host A, 2, 3 on host B.
    ep = "job.yaml:ep:0"
    instances = [
        ("c", 0, "all_reduce", 1000, [0, 1, 2, 3], None),
        ("a", 0, "all_to_all", 100, [0, 1], None),
        ("b", 0, "broadcast", 300, [0, 1, 2], 1),
        ("c p2p 0->2", 0, "send_recv", 64, None, None),
        (ep, 0, "all_to_all", 300, [0, 1, 2], None),
    ]
    n = len(instances)
    source_instances = rows(
        "_source_instances",
        like=("collective_instances",),
        job=["j"] * n,
        source=["kineto"] * n,
        comm=[i[0] for i in instances],
        seq=[i[1] for i in instances],
        op=[i[2] for i in instances],
        bytes=[i[3] for i in instances],
        group_size=[2 if i[4] is None else None if i[0] == ep else len(i[4]) for i in instances],
        last_start_ns=[100] * n,
        min_dur_ns=[10] * n,
        step=[1] * n,
        phase=["forward"] * n,
        layer=[None] * n,
        parallel_dim=["ep" if i[0] == ep else "dp" for i in instances],
        size_source=["estimated" if i[0] == ep else "kernel_args" for i in instances],
    )
    # each member's call (the send's two sides), with its instance key
    calls = [(r, i[0], i[1], i[5]) for i in instances if i[4] for r in i[4]]
    calls += [(0, "c p2p 0->2", 0, None), (2, "c p2p 0->2", 0, None)]
    m = len(calls)
    key = {
        "job": ["j"] * m,
        "rank": [c[0] for c in calls],
        "source": ["kineto"] * m,
        "file_id": [f"k{c[0]}" for c in calls],
        "collective_id": list(range(m)),
    }
    instance_rows = rows(
        "_instance_rows",
        like=CALL,
        **key,
        instance_comm=[c[1] for c in calls],
        instance_seq=[c[2] for c in calls],
        start_ns=[100] * m,
    )
    collectives = rows(
        "collectives",
        **key,
        comm=[None if c[1] == ep else c[1].split(" ")[0] for c in calls],
        algorithm=[None] * m,
        protocol=[None] * m,
        root=[c[3] for c in calls],
    )
    links = rows("collective_links", **key, step=[1] * m)
    comm_sets = rows(
        "_comm_sets",
        like=("communicators",),
        job=["j"] * 3,
        source=["kineto"] * 3,
        comm=["c", "a", "b"],
        nranks=[4, 2, 3],
        ranks=[[0, 1, 2, 3], [0, 1], [0, 1, 2]],
    )
    layout_comm_sets = rows(
        "_layout_comm_sets",
        like=("communicators",),
        job=["j"],
        source=["kineto"],
        comm=[ep],
        nranks=[3],
        ranks=[[0, 1, 2]],
    )
    hosts = rows("ranks", job=["j"] * 4, rank=[0, 1, 2, 3], host=["A", "A", "B", "B"])
    got = created(
        "wire.sql",
        {
            "_comm_sets": comm_sets,
            "_instance_rows": instance_rows,
            "_layout_comm_sets": layout_comm_sets,
            "_rank_hosts": hosts,
            "_source_instances": source_instances,
            "collective_links": links,
            "collective_matches": _empty("collective_matches"),
            "collectives": collectives,
            "communicators": _empty("communicators"),
            "topology": _empty("topology"),
        },
        "wire",
        order_by=["comm", "src_rank", "dst_rank"],
    ).select("comm", "op", "algorithm", "path", "estimated", "src_rank", "dst_rank",
             "inter_host", "bytes")  # fmt: skip

    # a: all_to_all, M/n = 50 from each to the other (no guess: it is point-to-point).
    # b: broadcast as a chain along the rank-order ring 0 -> 1 -> 2 -> 0 from the root,
    #    rank 1: 1 -> 2 and 2 -> 0 carry M = 300; a ring no log named: estimated.
    # c: ring all-reduce in rank order, each rank sends 2 (n - 1) / n x M = 1,500 to the
    #    next: estimated.
    # the send: 64 B from 0 to 2.
    # job.yaml:ep:0: all_to_all over the layout's members, M/n = 100 from each to each
    #    other; estimated, its size being the model's.
    expected = pl.DataFrame(
        [
            ("a", "all_to_all", "p2p", "peers", False, 0, 1, False, 50.0),
            ("a", "all_to_all", "p2p", "peers", False, 1, 0, False, 50.0),
            ("b", "broadcast", "ring", "rank_order", True, 1, 2, True, 300.0),
            ("b", "broadcast", "ring", "rank_order", True, 2, 0, True, 300.0),
            ("c", "all_reduce", "ring", "rank_order", True, 0, 1, False, 1500.0),
            ("c", "all_reduce", "ring", "rank_order", True, 1, 2, True, 1500.0),
            ("c", "all_reduce", "ring", "rank_order", True, 2, 3, False, 1500.0),
            ("c", "all_reduce", "ring", "rank_order", True, 3, 0, True, 1500.0),
            ("c p2p 0->2", "send_recv", "p2p", "peers", False, 0, 2, True, 64.0),
            (ep, "all_to_all", "p2p", "peers", True, 0, 1, False, 100.0),
            (ep, "all_to_all", "p2p", "peers", True, 0, 2, True, 100.0),
            (ep, "all_to_all", "p2p", "peers", True, 1, 0, False, 100.0),
            (ep, "all_to_all", "p2p", "peers", True, 1, 2, True, 100.0),
            (ep, "all_to_all", "p2p", "peers", True, 2, 0, True, 100.0),
            (ep, "all_to_all", "p2p", "peers", True, 2, 1, True, 100.0),
        ],
        schema=["comm", "op", "algorithm", "path", "estimated", "src_rank", "dst_rank",
                "inter_host", "bytes"],
        orient="row",
    )  # fmt: skip
    assert_frame_equal(got, expected)
