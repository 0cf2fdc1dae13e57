"""size_estimates.sql on hand-made rows: DeepEP's dispatch and combine kernels, which record
no size, take the message size of their rank's predicted expert-parallel item of the same
phase and direction (size_source 'estimated'), the ep dimension and the layout's EP group
as their communicator; without predictions (no job.yaml) their size stays unknown."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from pipeline.model.predict import EP_DIRECTIONS
from pipeline.vocab import MOE_EXCHANGE_KERNELS, MOE_LIBRARY_KERNEL
from tests.link.sql_harness import created, model_input, rows

CALL = ("collective_links", "collectives")
EP = "job.yaml:ep:0"
# DeepEP's kernels as the profiler names them (tests/data/deepep)
DISPATCH = "void deep_ep::internode::dispatch<false, 2, false, 8>(int4*, float*, long*)"
COMBINE = "void deep_ep::internode::combine<false, 2, __nv_bfloat16, 8, 2, 16, 24>(int4*)"
NOTIFY = "void deep_ep::internode::notify_dispatch<false, 2>(int const*, long*, int)"
NCCL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"

# Job j, ranks 0 and 1 traced (rank 0's calls in MoE layers: their evidence said ep; rank
# 1's without chunk annotations or module scopes: a2a, and unknown for the metadata
# exchange). (rank, collective_id, op_name, op, phase, parallel_dim, bytes, size_source,
# comm):
CALLS = [
    (0, 0, DISPATCH, "all_to_all", "forward", "ep", None, None, None),
    (0, 1, COMBINE, "all_to_all", "forward", "ep", None, None, None),
    (0, 2, NOTIFY, "notify", "forward", "ep", None, None, None),
    (0, 3, DISPATCH, "all_to_all", "backward", "ep", None, None, None),
    (0, 4, COMBINE, "all_to_all", "backward", "ep", None, None, None),
    (1, 0, DISPATCH, "all_to_all", "forward", "a2a", None, None, None),
    # a size the trace gives is kept
    (1, 1, COMBINE, "all_to_all", "forward", "a2a", 8000, "input_dims", None),
    (1, 2, NOTIFY, "notify", "forward", "unknown", None, None, None),
    # no phase: no item of its phase
    (1, 3, DISPATCH, "all_to_all", None, "a2a", None, None, None),
    # NCCL's all-to-all on a process group of its own: no MoE library's kernel
    (1, 5, NCCL, "all_to_all", "forward", "a2a", None, None, "pg:3"),
]


def _inputs(*, job_yaml: bool) -> dict[str, pl.DataFrame]:
    n = len(CALLS)
    key = {
        "job": ["j"] * n,
        "rank": [c[0] for c in CALLS],
        "source": ["kineto"] * n,
        "file_id": [f"k{c[0]}" for c in CALLS],
        "collective_id": [c[1] for c in CALLS],
    }
    collectives = rows(
        "collectives", **key, op_name=[c[2] for c in CALLS], op=[c[3] for c in CALLS]
    )
    links = rows(
        "_links_dimmed",
        like=CALL,
        **key,
        op=[c[3] for c in CALLS],
        phase=[c[4] for c in CALLS],
        parallel_dim=[c[5] for c in CALLS],
        bytes=[c[6] for c in CALLS],
        size_source=[c[7] for c in CALLS],
        comm=[c[8] for c in CALLS],
    )
    # Each rank's items (job.yaml: top-2 of the experts, 32 tokens, h = 64, two MoE
    # layers): the forward dispatch in FP8, 2 x 4,096 B (towards the experts); the forward
    # combine in BF16, 2 x 8,192 (back); the backward's gradients one item of both ways,
    # 4 x 8,192; and a dp gradient all-reduce, no expert-parallel item.
    items = [("ep", "all_to_all", "forward", "expert dispatch", 2, 8192),
             ("ep", "all_to_all", "forward", "expert combine", 2, 16384),
             ("ep", "all_to_all", "backward", "dispatch and combine gradients", 4, 32768),
             ("dp", "all_reduce", "backward", "gradient all-reduce", 1, 1000)]  # fmt: skip
    pred = [(r, *i) for r in (0, 1) for i in items] if job_yaml else []
    cols = ["rank", "parallel_dim", "op", "phase", "purpose", "calls", "bytes"]
    predictions = rows(
        "predictions",
        job=["j"] * len(pred),
        **{c: [p[i] for p in pred] for i, c in enumerate(cols)},
    )
    # the runner's tables: the exchange kernels and the library always; the directions of
    # the model's items and the layout's EP groups (ep = 4: ranks 0-3, and 4-7, none of
    # whose ranks was traced) only with a job.yaml
    directions = EP_DIRECTIONS if job_yaml else {}
    ep_groups = [(0, EP), (1, EP)] if job_yaml else []
    ep_members = [(EP, [0, 1, 2, 3]), ("job.yaml:ep:4", [4, 5, 6, 7])] if job_yaml else []
    return {
        "_ep_directions": pl.DataFrame(
            {"purpose": list(directions), "direction": list(directions.values())},
            schema={"purpose": pl.String, "direction": pl.String},
        ),
        "_layout_ep_groups": model_input(
            "_layout_ep_groups",
            job=["j"] * len(ep_groups),
            rank=[g[0] for g in ep_groups],
            comm=[g[1] for g in ep_groups],
        ),
        "_layout_ep_members": model_input(
            "_layout_ep_members",
            job=["j"] * len(ep_members),
            comm=[m[0] for m in ep_members],
            ranks=[m[1] for m in ep_members],
        ),
        "_links_dimmed": links,
        "_moe_exchange_kernels": pl.DataFrame(
            {
                "pattern": list(MOE_EXCHANGE_KERNELS),
                "direction": list(MOE_EXCHANGE_KERNELS.values()),
            }
        ),  # fmt: skip
        "_moe_library": pl.DataFrame({"pattern": [MOE_LIBRARY_KERNEL]}),
        "collectives": collectives,
        "predictions": predictions,
    }


def _sized(job_yaml: bool) -> pl.DataFrame:
    return created(
        "size_estimates.sql",
        _inputs(job_yaml=job_yaml),
        "_links_sized",
        order_by=["rank", "collective_id"],
    ).select("rank", "collective_id", "parallel_dim", "bytes", "size_source", "comm")


def _expected(sized: list[tuple]) -> pl.DataFrame:
    return rows(
        "_links_sized",
        like=CALL,
        **{
            c: [s[i] for s in sized]
            for i, c in enumerate(
                ["rank", "collective_id", "parallel_dim", "bytes", "size_source", "comm"]
            )
        },
    )


def test_sizeless_exchanges_take_their_predicted_items_size_and_the_layouts_group() -> None:
    got = _sized(job_yaml=True)
    # Every DeepEP kernel is ep (rank 1's, a2a or unknown, by the library's name) on the
    # layout's EP group of its rank, job.yaml:ep:0. Sizes, by phase and direction:
    # dispatch forward (towards): 8,192 / 2 = 4,096; combine forward (back): 16,384 / 2 =
    # 8,192; backward dispatch and combine: the item of both ways, 32,768 / 4 = 8,192.
    # Rank 1's combine keeps its own 8,000 B; its phase-less dispatch no size; the metadata
    # exchanges (notify) none (only all-to-alls are sized). NCCL's all-to-all is untouched.
    expected = _expected(
        [
            (0, 0, "ep", 4096, "estimated", EP),
            (0, 1, "ep", 8192, "estimated", EP),
            (0, 2, "ep", None, None, EP),
            (0, 3, "ep", 8192, "estimated", EP),
            (0, 4, "ep", 8192, "estimated", EP),
            (1, 0, "ep", 4096, "estimated", EP),
            (1, 1, "ep", 8000, "input_dims", EP),
            (1, 2, "ep", None, None, EP),
            (1, 3, "ep", None, None, EP),
            (1, 5, "a2a", None, None, "pg:3"),
        ]
    )
    assert_frame_equal(got, expected)


def test_the_layouts_ep_group_is_listed_with_its_members_for_the_wire() -> None:
    got = created(
        "size_estimates.sql", _inputs(job_yaml=True), "_layout_comm_sets", order_by=["comm"]
    )
    # the group the calls took, with the layout's members (ranks 2 and 3 untraced); the
    # group of ranks 4-7, which no call took, is not listed
    expected = rows(
        "_layout_comm_sets",
        like=("communicators",),
        job=["j"],
        source=["kineto"],
        comm=[EP],
        nranks=[4],
        ranks=[[0, 1, 2, 3]],
    )
    assert_frame_equal(got, expected, check_dtypes=False)


def test_without_predictions_the_size_stays_unknown() -> None:
    got = _sized(job_yaml=False)
    # no job.yaml: no item to size by and no layout group; the library's kernels are still
    # ep (DeepEP serves expert parallelism alone)
    expected = _expected(
        [
            (0, 0, "ep", None, None, None),
            (0, 1, "ep", None, None, None),
            (0, 2, "ep", None, None, None),
            (0, 3, "ep", None, None, None),
            (0, 4, "ep", None, None, None),
            (1, 0, "ep", None, None, None),
            (1, 1, "ep", 8000, "input_dims", None),
            (1, 2, "ep", None, None, None),
            (1, 3, "ep", None, None, None),
            (1, 5, "a2a", None, None, "pg:3"),
        ]
    )
    assert_frame_equal(got, expected)
    layout_sets = created(
        "size_estimates.sql", _inputs(job_yaml=False), "_layout_comm_sets", order_by=["comm"]
    )
    assert layout_sets.is_empty()
