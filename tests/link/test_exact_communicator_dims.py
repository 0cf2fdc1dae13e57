"""communicator_dims.sql on hand-made rows: a communicator's dimension from job.yaml's layout
(through the process group a log's communicator maps to), else from its process group's
name, else from its traffic and its rank set; what of the traces contradicts the layout;
and each collective's dimension after it (none the layout lacks)."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from tests.link.sql_harness import created, job_facts, rows, run_file

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
        ("j", "mesh", [0, 2], ["dp"]),  # a stride, but its process group is named mesh_tp
        # Job y has a job.yaml: pg:1 is the group of both dp and ep (dp = ep); the NCCL
        # communicator 0xabc is pg:1 (collective_matches mapped it); the traces contradict
        # the layout on pg:1 (two statements), on pg:2, its dp group, nothing. pg:0 is the
        # layout's world group, carrying a dp and a tp all-reduce; the layout has no tp
        ("y", "pg:1", [0, 1], ["ep", "tp"]),
        ("y", "pg:2", [0, 1], ["dp"]),
        ("y", "pg:0", [0, 1], ["dp", "tp"]),
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
            "job": ["y", "y", "y"],
            "comm": ["pg:1", "pg:2", "pg:0"],
            "parallel_dim": ["dp|ep", "dp", "world"],
            "conflicts": [[NAMED, SEND_RECV], [], []],
        }
    )
    # process group names: mesh_tp says tp; default_pg says nothing; job.yaml outranks tp_0
    communicators = rows(
        "communicators",
        job=["j", "j", "y"],
        comm=["mesh", "dp0", "pg:2"],
        pg_desc=["mesh_tp", "default_pg", "tp_0"],
    )
    # job y's job.yaml: dp = ep = 2, every other degree 1
    facts = job_facts("y", "conventions.ddp_bucket_mb", ["ep", "dp"])
    return {
        "_comm_sets": comm_sets,
        "_comm_map": comm_map,
        "_job_layout": layout,
        "_links_attributed": links_attributed,
        "_job_facts": facts,
        "collectives": collectives,
        "communicators": communicators,
        "ranks": ranks,
    }


def test_each_communicators_dimension_and_why() -> None:
    got = created(
        "communicator_dims.sql", _inputs(), "communicator_dims", order_by=["job", "comm"]
    ).select("job", "comm", "nranks", "parallel_dim", "dim_source", "layout_conflicts")
    # j/all: every rank, two kinds of traffic: world. dp0: strided: dp. moe: only ep traffic.
    # odd: neither block nor stride: dp, its most common evidence (2 of 3). pp0: only pp
    # traffic (before its stride). tp0: a block with tp traffic. mesh: its group's name,
    # mesh_tp, says tp (before its stride and its dp traffic); dp0's name default_pg says
    # nothing. y: job.yaml's dp|ep, for pg:1 and for 0xabc, the log's name of it; pg:2
    # job.yaml's dp (before its name tp_0); pg:0 job.yaml's world. Conflicts: pg:1's two
    # statements, on 0xabc too (the same group); none (null) on pg:0 and pg:2, whose lists
    # are empty, nor where no job.yaml speaks (job j).
    expected = pl.DataFrame(
        {
            "job": ["j"] * 7 + ["y"] * 4,
            "comm": ["all", "dp0", "mesh", "moe", "odd", "pp0", "tp0",
                     "0xabc", "pg:0", "pg:1", "pg:2"],
            "nranks": [4, 2, 2, 2, 3, 2, 2, 2, 2, 2, 2],
            "parallel_dim": ["world", "dp", "tp", "ep", "dp", "pp", "tp",
                             "dp|ep", "world", "dp|ep", "dp"],
            "dim_source": ["rank_sets", "rank_sets", "name", "ops", "ops", "ops", "rank_sets",
                           "job.yaml", "job.yaml", "job.yaml", "job.yaml"],
            "layout_conflicts": [None] * 7 + [[NAMED, SEND_RECV], None, [NAMED, SEND_RECV], None],
        }
    )  # fmt: skip
    assert_frame_equal(got, expected, check_dtypes=False)


def test_each_collective_takes_its_communicators_dimension() -> None:
    con = run_file("communicator_dims.sql", _inputs())
    got = con.sql(
        "SELECT job, comm, evidence, parallel_dim FROM _links_dimmed "
        "WHERE comm IN ('all', 'odd', 'mesh', '0xabc', 'pg:0') ORDER BY job, comm, evidence"
    ).pl()
    # on 'all' (world) each keeps its evidence; on 'odd' every call is dp; on 'mesh' (tp by
    # name) the dp call is tp; on 0xabc (dp|ep) the ep call keeps ep, the tp one takes the
    # first of the two, dp; on y's pg:0 (world) each keeps its evidence, but tp is not a
    # dimension of y's layout (degree 1): that call is unknown
    expected = pl.DataFrame(
        {
            "job": ["j"] * 6 + ["y"] * 4,
            "comm": ["all", "all", "mesh", "odd", "odd", "odd", "0xabc", "0xabc", "pg:0", "pg:0"],
            "evidence": ["dp", "tp", "dp", "dp", "dp", "tp", "ep", "tp", "dp", "tp"],
            "parallel_dim": ["dp", "tp", "tp", "dp", "dp", "dp", "ep", "dp", "dp", "unknown"],
        }
    )
    assert_frame_equal(got, expected)
