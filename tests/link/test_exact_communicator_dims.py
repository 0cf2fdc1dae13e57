"""communicator_dims.sql on hand-made rows: a communicator's dimension from job.yaml's layout
(through the process group a log's communicator maps to), else from its traffic and its
rank set; what of the traces contradicts the layout; and each collective's dimension after
it."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, no_job_facts, rows, run_file

COMMS = ("communicators",)
NAMED = "groups named tp (tp) are dp|ep groups of the layout dp=2 x ep=2"
SEND_RECV = "send/recv run in groups of 2 ranks that the layout dp=2 x ep=2 makes dp|ep groups"


def _inputs() -> dict[str, pl.DataFrame]:
    # Job j (no job.yaml), 4 ranks. (comm, ranks, the evidence of its collectives):
    sets = [
        ("j", "tp0", [0, 1], ["tp", "tp"]),  # consecutive, tensor-parallel traffic
        ("j", "dp0", [0, 2], ["dp"]),  # a stride
        ("j", "pp0", [1, 3], ["pp", "pp"]),  # a stride, only send/recv
        ("j", "all", [0, 1, 2, 3], ["dp", "tp"]),  # every rank, two kinds of traffic
        ("j", "moe", [2, 3], ["ep"]),  # consecutive, only MoE all-to-all
        ("j", "odd", [0, 1, 3], ["dp", "dp", "tp"]),  # no shape: its most common evidence
        # Job y has a job.yaml: pg:1 is the group of both dp and ep (dp = ep); the NCCL
        # communicator 0xabc is pg:1 (collective_matches mapped it); the traces contradict
        # the layout on pg:1 (two statements), on pg:2, its dp group, nothing
        ("y", "pg:1", [0, 1], ["ep", "tp"]),
        ("y", "pg:2", [0, 1], ["dp"]),
    ]
    comm_sets = rows(
        "_comm_sets",
        like=COMMS,
        job=[s[0] for s in sets] + ["y"],
        source=["kineto"] * len(sets) + ["nccl_log"],
        comm=[s[1] for s in sets] + ["0xabc"],
        nranks=[len(s[2]) for s in sets] + [2],
        ranks=[s[2] for s in sets] + [[0, 1]],
    )
    links = [(job, comm, e) for job, comm, _, evidence in sets for e in evidence]
    links += [("y", "0xabc", "ep"), ("y", "0xabc", "tp")]
    n = len(links)
    links_attributed = pl.DataFrame(
        {
            "job": [x[0] for x in links],
            "collective_id": list(range(n)),
            "comm": [x[1] for x in links],
            "evidence": [x[2] for x in links],
            "parallel_dim": [x[2] for x in links],
        }
    )
    collectives = rows(
        "collectives",
        job=[s[0] for s in sets],
        source=["kineto"] * len(sets),
        comm=[s[1] for s in sets],
        rank=[s[2][0] for s in sets],
        group_size=[len(s[2]) for s in sets],
    )
    ranks = rows(
        "ranks",
        job=["j"] * 4 + ["y"] * 2,
        rank=[0, 1, 2, 3, 0, 1],
        world_size=[4] * 4 + [2] * 2,
    )
    comm_map = pl.DataFrame(
        {"job": ["y"], "source": ["nccl_log"], "comm": ["0xabc"], "primary_comm": ["pg:1"]}
    )
    layout = pl.DataFrame(
        {
            "job": ["y", "y"],
            "comm": ["pg:1", "pg:2"],
            "parallel_dim": ["dp|ep", "dp"],
            "conflicts": [[NAMED, SEND_RECV], []],
        }
    )
    return {
        "_comm_sets": comm_sets,
        "_comm_map": comm_map,
        "_job_layout": layout,
        "_job_facts": no_job_facts(),
        "_links_attributed": links_attributed,
        "communicators": rows("communicators", job=[]),  # (no process group names)
        "collectives": collectives,
        "ranks": ranks,
    }


def test_each_communicators_dimension_and_why() -> None:
    got = created(
        "communicator_dims.sql", _inputs(), "communicator_dims", order_by=["job", "comm"]
    ).select("job", "comm", "nranks", "parallel_dim", "dim_source", "layout_conflicts")
    # j/all: every rank, two kinds of traffic: world. dp0: strided: dp. moe: only ep traffic.
    # odd: neither block nor stride: dp, its most common evidence (2 of 3). pp0: only pp
    # traffic (before its stride). tp0: a block with tp traffic. y: job.yaml's dp|ep, for
    # pg:1 and for 0xabc, the log's name of it; pg:2 job.yaml's dp. Conflicts: pg:1's two
    # statements, on 0xabc too (the same group); none (null) on pg:2, whose list is empty,
    # nor where no job.yaml speaks (job j).
    expected = pl.DataFrame(
        {
            "job": ["j"] * 6 + ["y"] * 3,
            "comm": ["all", "dp0", "moe", "odd", "pp0", "tp0", "0xabc", "pg:1", "pg:2"],
            "nranks": [4, 2, 2, 3, 2, 2, 2, 2, 2],
            "parallel_dim": ["world", "dp", "ep", "dp", "pp", "tp", "dp|ep", "dp|ep", "dp"],
            "dim_source": ["rank_sets", "rank_sets", "ops", "ops", "ops", "rank_sets",
                           "job.yaml", "job.yaml", "job.yaml"],
            "layout_conflicts": [None] * 6 + [[NAMED, SEND_RECV]] * 2 + [None],
        }
    )  # fmt: skip
    assert_frame_equal(got, expected, check_dtypes=False)


def test_each_collective_takes_its_communicators_dimension() -> None:
    con = run_file("communicator_dims.sql", _inputs())
    got = con.sql(
        "SELECT job, comm, evidence, parallel_dim FROM _links_dimmed "
        "WHERE comm IN ('all', 'odd', '0xabc') ORDER BY job, comm, evidence"
    ).pl()
    # on 'all' (world) each keeps its evidence; on 'odd' every call is dp; on 0xabc (dp|ep)
    # the ep call keeps ep, the tp one takes the first of the two, dp
    expected = pl.DataFrame(
        {
            "job": ["j", "j", "j", "j", "j", "y", "y"],
            "comm": ["all", "all", "odd", "odd", "odd", "0xabc", "0xabc"],
            "evidence": ["dp", "tp", "dp", "dp", "tp", "ep", "tp"],
            "parallel_dim": ["dp", "tp", "dp", "dp", "dp", "ep", "dp"],
        }
    )
    assert_frame_equal(got, expected)
