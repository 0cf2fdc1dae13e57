"""Every query of docs/sql.md runs on the linked sample job and returns the rows worked out
by hand from the sample's documented shape (docs/model.md, "The sample job": every
collective a rank issues per step, 2 profiled steps, 8 ranks on one host); the queries over
timings, which no shape fixes, are held to what their rows must satisfy."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "sql.md"

#: the activation message of every TP and PP call, bytes ([128, 2, 256] bf16)
ACT = 131_072
#: a DP gradient all-reduce per rank and step: stage 0 (ranks 0-3), stage 1 (ranks 4-7)
GRAD0, GRAD1 = 3_745_280, 3_680_768
#: the steps the sample's profiler recorded
STEPS = [2, 3]
#: tokens per step (global batch 16 x 128)
TOKENS = 2048


def _queries() -> list[tuple[str, str]]:
    text = DOC.read_text()
    # (a section may explain itself in a paragraph between its title and its query)
    found = re.findall(r"^## ([^\n]+)\n(?:(?!^## ).)*?```sql\n(.+?)```", text, flags=re.S | re.M)
    return [(title.strip(), sql) for title, sql in found]


def _ints(frame: pl.DataFrame) -> pl.DataFrame:
    """Sums come back as decimals: integers to compare with."""
    return frame.with_columns(pl.col(pl.Decimal).cast(pl.Int64))


def _per_step(rows: list[tuple], schema: list[str]) -> pl.DataFrame:
    """``rows`` repeated for each profiled step, ``step`` first."""
    return pl.DataFrame(
        [(s, *r) for s in STEPS for r in rows], schema=["step", *schema], orient="row"
    )


#: The layer paths of the sample, cut to what tells them apart (PyTorch numbers modules per
#: process: stage 1's layers are TransformerLayer_0 and _1 again).
_TAIL = r"(TransformerLayer_\d(?:/\w+?_\d/\w+?_\d)?$|VocabParallelEmbedding_0$|gradient_bucket)"


def _top_layers(frame: pl.DataFrame, ds) -> None:
    # 2 steps, 8 ranks. The gradient buckets (named owner): 8 per step, 4 x GRAD0 + 4 x GRAD1.
    # Then ten owners of 64 calls of ACT (4 micro-batches x 8 ranks x 2 steps, or 4 x 2 x 4
    # ranks x 2 for a pipeline boundary): each layer's attention and MLP output all-reduce
    # forward (RowParallelLinear, module scope) and input-gradient all-reduce backward
    # (ColumnParallelLinear, through the forward op); the pp sends and receives at the stage
    # boundary, TransformerLayer_1 on stage 0 and TransformerLayer_0 on stage 1 (2 a rank
    # and micro-batch, 4 ranks). Ties by path: the last of the ten is left out by LIMIT 10.
    got = _ints(frame).select(pl.col("layer").str.extract(_TAIL), "calls", "bytes")
    eight = sorted(
        [f"TransformerLayer_{i}/Parallel{p}_{i}/{k}ParallelLinear_{2 * i + j}"
         for i in (0, 1) for j, p in ((0, "Attention"), (1, "MLP")) for k in ("Row", "Column")]
    )  # fmt: skip
    assert len(eight) == 8
    boundary = ["TransformerLayer_0", "TransformerLayer_1"]
    expected = pl.DataFrame(
        {
            "layer": ["gradient_bucket", *sorted(boundary + eight)[:9]],
            "calls": [16] + [64] * 9,
            "bytes": [8 * (GRAD0 + GRAD1)] + [64 * ACT] * 9,
        }
    )
    assert_frame_equal(got, expected, check_dtypes=False)


def _bytes_per_layer(frame: pl.DataFrame, ds) -> None:
    # step 2, one source per rank, buckets split over their layers (GRAD0 = the two layers'
    # 791,296 B each + the embedding's 2,162,688 B; GRAD1 = two layers + the LM head's
    # 2,098,176 B), 4 ranks a stage:
    layer, emb, head = 791_296, 2_162_688, 2_098_176
    assert (2 * layer + emb, 2 * layer + head) == (GRAD0, GRAD1)
    tp_row = 4 * 8 * ACT  # an all-reduce of each of 4 micro-batches on 8 ranks
    boundary = 4 * 4 * ACT  # a send or recv of each of 4 micro-batches on 4 ranks
    expected = {
        ("VocabParallelEmbedding_0", "backward"): 4 * emb,
        # a layer's bucket share on both stages, and the pipeline boundary backward
        ("TransformerLayer_0", "backward"): 8 * layer + boundary,
        ("TransformerLayer_1", "backward"): 8 * layer + boundary,
        ("lm_head", "backward"): 4 * head,
        ("TransformerLayer_0", "forward"): boundary,
        ("TransformerLayer_1", "forward"): boundary,
        ("ColumnParallelLinear_4", "backward"): 4 * 4 * ACT,  # LM head input gradient, stage 1
        ("VocabParallelEmbedding_0", "forward"): 4 * 4 * ACT,  # embedding output, stage 0
        ("loss", "forward"): 4 * 12 * 1024,  # 3 cross-entropy all-reduces a micro-batch
        ("metrics", "other"): 4 * 8,  # the loss report, stage 1
    }
    for i in (0, 1):
        for j, part in ((0, "Attention"), (1, "MLP")):
            expected[f"TransformerLayer_{i}/Parallel{part}_{i}/RowParallelLinear_{2 * i + j}",
                     "forward"] = tp_row  # fmt: skip
            expected[f"TransformerLayer_{i}/Parallel{part}_{i}/ColumnParallelLinear_{2 * i + j}",
                     "backward"] = tp_row  # fmt: skip
    got = {(r["layer"], r["phase"]): r["bytes"] for r in frame.iter_rows(named=True)}
    assert got == expected


def _bytes_per_step(frame: pl.DataFrame, ds) -> None:
    # per step, 4 ranks of each stage: dp backward 4 x GRAD0 + 4 x GRAD1 in 8 calls; dp
    # other the loss report, 8 B on ranks 4-7; pp 4 sends and 4 recvs per rank in each
    # direction: 32 calls of ACT each phase; tp backward (16 x 4) + (20 x 4) = 144 calls of
    # ACT; tp forward (20 x 4) + (16 x 4) of ACT and 12 x 4 loss all-reduces of 1,024 B.
    expected = _per_step(
        [
            ("dp", "backward", 4 * GRAD0 + 4 * GRAD1, 8),
            ("dp", "other", 4 * 8, 4),
            ("pp", "backward", 32 * ACT, 32),
            ("pp", "forward", 32 * ACT, 32),
            ("tp", "backward", 144 * ACT, 144),
            ("tp", "forward", 144 * ACT + 48 * 1024, 192),
        ],
        ["parallel_dim", "phase", "bytes", "calls"],
    )
    assert_frame_equal(_ints(frame), expected, check_dtypes=False)


def _bytes_per_token(frame: pl.DataFrame, ds) -> None:
    # the step's bytes of each dimension (above) over its 2,048 tokens, as predicted
    per_token = {
        "dp": (4 * GRAD0 + 4 * GRAD1 + 32) / TOKENS,  # 14,504.015625
        "pp": 64 * ACT / TOKENS,  # 4,096
        "tp": (288 * ACT + 48 * 1024) / TOKENS,  # 18,456
    }
    expected = pl.DataFrame(
        {
            "parallel_dim": list(per_token),
            "bytes_per_token": list(per_token.values()),
            "predicted_bytes_per_token": list(per_token.values()),
            "ratio": [1.0] * 3,
        }
    )
    assert_frame_equal(frame, expected)


def _differ(frame: pl.DataFrame, ds) -> None:
    assert frame.is_empty()  # the sample follows the model exactly


def _item_by_item(frame: pl.DataFrame, ds) -> None:
    assert set(frame["status"]) == {"matched"}
    assert (frame["calls"] == frame["predicted_calls"]).all()
    assert (frame["message_bytes"] == frame["predicted_message_bytes"]).all()


def _slowest(frame: pl.DataFrame, ds) -> None:
    assert frame.height == 10  # (LIMIT 10 of 412 instances)
    assert frame["max_dur_ns"].to_list() == sorted(frame["max_dur_ns"], reverse=True)
    assert (frame["max_dur_ns"] >= frame["min_dur_ns"]).all()


def _straggler(frame: pl.DataFrame, ds) -> None:
    # every instance has one last rank: 206 instances a step (TP 144 of ACT + 24 of 1,024;
    # DP 2 + 2 gradient buckets + 2 loss reports; 32 send/recv pairs), 2 steps
    assert frame["times_last"].sum() == 412
    assert sorted(frame["late_rank"]) == list(range(8))


def _where_late(frame: pl.DataFrame, ds) -> None:
    # the longest skews: stage 1's backward sends, which stage 0's recv, posted before
    # stage 1 has run the micro-batch's forward and backward (1F1B), always waits for; 4 a
    # step on each stage 1 rank: 8
    top = frame.head(4).select("late_rank", "parallel_dim", "op", "phase", "times").rows()
    assert sorted(top) == [(r, "pp", "send", "backward", 8) for r in range(4, 8)]
    assert frame.height == 10


def _wait_vs_transfer(frame: pl.DataFrame, ds) -> None:
    # calls per rank, dimension and step: dp 1 on stage 0, 2 on stage 1 (gradient, loss);
    # pp 8 (4 sends, 4 recvs); tp 36 on stage 0, 48 on stage 1 (36 + 12 loss)
    calls = {"dp": (1, 2), "pp": (8, 8), "tp": (36, 48)}
    expected = _per_step(
        [(d, r, calls[d][r // 4]) for d in ("dp", "pp", "tp") for r in range(8)],
        ["parallel_dim", "rank", "calls"],
    )
    got = frame.select("step", "parallel_dim", "rank", "calls")
    assert_frame_equal(got.sort("step", "parallel_dim", "rank"), expected)
    # wait + transfer: the calls' own time, from the raw trace
    dur = ds.sql(
        "SELECT sum(dur_ns) FROM collectives WHERE source = 'kineto' AND step IS NOT NULL"
    ).item()
    assert _ints(frame).select(pl.sum("wait_ns") + pl.sum("transfer_ns")).item() == dur


def _whom_waited(frame: pl.DataFrame, ds) -> None:
    assert frame.height == 10
    # one waits only for the other member of a 2-rank group: its TP, DP or PP peer
    peer = {"tp": 1, "dp": 2, "pp": 4}
    for rank, late, dim in frame.select("rank", "late_rank", "parallel_dim").rows():
        assert abs(rank - late) == peer[dim], (rank, late, dim)


def _held_back(frame: pl.DataFrame, ds) -> None:
    # the generator slows rank 5 (pipeline/synth/program.py): each step's straggler, and
    # its top five activities listed per step
    assert frame["step"].to_list() == [2] * 5 + [3] * 5
    assert set(frame["rank"]) == {5}


def _critical_path(frame: pl.DataFrame, ds) -> None:
    shares = frame.group_by("step").agg(pl.sum("share")).sort("step")
    assert shares["step"].to_list() == STEPS
    assert shares["share"].to_list() == pytest.approx([1.0, 1.0])
    assert set(frame["segment"]) == {"compute", "transfer"}


def _faster_transfers(frame: pl.DataFrame, ds) -> None:
    path = _ints(ds.sql(
        "SELECT parallel_dim, count(*) AS n, sum(dur_ns) AS ns FROM critical_path "
        "WHERE segment = 'transfer' GROUP BY ALL ORDER BY parallel_dim"
    ))  # fmt: skip
    got = frame.sort("parallel_dim")
    assert got["parallel_dim"].to_list() == path["parallel_dim"].to_list()
    assert got["transfers_on_path"].to_list() == path["n"].to_list()
    # per step: the path's transfer time over the 2 steps
    assert got["bound_saving_ns_per_step"].to_list() == (path["ns"] / 2).to_list()


def _busbw(frame: pl.DataFrame, ds) -> None:
    # instances over 2 steps: the loss report on 2 DP groups (4); the 12 loss all-reduces
    # of 2 TP groups (48); 36 TP all-reduces of ACT on each of 4 TP groups (288); one
    # gradient bucket per DP group of each stage (4 and 4); 32 send/recv pairs a step (64)
    expected = pl.DataFrame(
        {
            "op": ["all_reduce"] * 5 + ["send"],
            "group_size": [2] * 6,
            "bytes": [8, 1024, ACT, GRAD1, GRAD0, ACT],
            "instances": [4, 48, 288, 4, 4, 64],
        }
    )
    assert_frame_equal(frame.select("op", "group_size", "bytes", "instances"), expected)
    assert (frame["best_busbw_gbps"] >= frame["median_busbw_gbps"]).all()


def _exposed(frame: pl.DataFrame, ds) -> None:
    assert frame.select("step", "timeline").rows() == [(2, "gpu"), (3, "gpu")]


def _comm_dims(frame: pl.DataFrame, ds) -> None:
    # each 2-rank group of the placement (rank = tp + 2 dp + 4 pp), under its profiler and
    # its NCCL name; the world
    groups = {
        "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
        "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
    }
    pairs = frame.filter(pl.col("nranks") == 2)
    got = sorted((d, r) for r, d in pairs.select("ranks", "parallel_dim").rows())
    assert got == sorted((d, g) for d, gs in groups.items() for g in gs for _ in range(2))
    world = frame.filter(pl.col("nranks") == 8)
    assert world["parallel_dim"].to_list() == ["world", "world"]


def _unattributed(frame: pl.DataFrame, ds) -> None:
    # none: every collective of the sample has an owner (the loss-report all-reduce after
    # the step, which the model also puts in 'other', is 'metrics')
    assert frame.is_empty()


def _hosts(frame: pl.DataFrame, ds) -> None:
    # one node of 8 H100s, named the same in every source (node0)
    assert frame.rows() == [(1, 8, 8, "NVIDIA H100 80GB HBM3")]


def _tokens(frame: pl.DataFrame, ds) -> None:
    # stage 0 embeds 4 micro-batches of 2 x 128 tokens a step: 1,024 a rank; stage 1 sees none
    expected = pl.DataFrame(
        [(r, s, 1024 if r < 4 else None) for r in range(8) for s in STEPS],
        schema={"rank": pl.Int64, "step": pl.Int64, "tokens": pl.Int64},
        orient="row",
    )
    assert_frame_equal(frame.select("rank", "step", "tokens"), expected)


def _size_sources(frame: pl.DataFrame, ds) -> None:
    # every call in each of the three sources: (45 a rank on stage 0 + 58 on stage 1) x 4
    # ranks x 2 steps = 824; bytes (9,512,448 + 9,460,232) x 4 x 2
    expected = pl.DataFrame(
        {
            "source": ["kineto", "nccl_log", "nsys"],
            "size_source": ["kernel_args", "nccl_log", "nvtx_payload"],
            "collectives": [824] * 3,
            "bytes": [(9_512_448 + 9_460_232) * 8] * 3,
        }
    )
    assert_frame_equal(_ints(frame), expected)


#: bytes each rank sends per step (docs/model.md: every 2-rank all-reduce sends M)
SENT0 = 8_988_160
SENT1 = 8_935_944


def _between_hosts(frame: pl.DataFrame, ds) -> None:
    # one host; every call but a recv is a flow: 412 - 32 = 380 a step
    expected = pl.DataFrame(
        {
            "step": STEPS,
            "src_host": ["node0"] * 2,
            "dst_host": ["node0"] * 2,
            "bytes": [4.0 * (SENT0 + SENT1)] * 2,
            "flows": [380, 380],
            "estimated": [True, True],
        }
    )
    assert_frame_equal(frame, expected)


def _rank_matrix(frame: pl.DataFrame, ds) -> None:
    # stage 0: to its TP peer 36 x ACT, its DP peer GRAD0, its PP peer 4 x ACT; stage 1: to
    # its TP peer 36 x ACT + 12 x 1,024, its DP peer GRAD1 + 8, its PP peer 4 x ACT
    rows = []
    for r in range(8):
        stage1 = r >= 4
        rows += [
            (r, r ^ 1, 36.0 * ACT + (12 * 1024 if stage1 else 0)),
            (r, r ^ 2, float(GRAD1 + 8 if stage1 else GRAD0)),
            (r, r ^ 4, 4.0 * ACT),
        ]
    expected = pl.DataFrame(rows, schema=["src_rank", "dst_rank", "bytes"], orient="row")
    got = frame.sort("src_rank", "dst_rank")
    assert_frame_equal(
        got.select("src_rank", "dst_rank", "bytes"), expected.sort("src_rank", "dst_rank")
    )
    assert not got["inter_host"].any()


def _intra_inter(frame: pl.DataFrame, ds) -> None:
    expected = _per_step(
        [
            ("dp", 4.0 * (GRAD0 + GRAD1 + 8), 0.0),
            ("pp", 32.0 * ACT, 0.0),
            ("tp", 288.0 * ACT + 48 * 1024, 0.0),
        ],
        ["parallel_dim", "intra_host_bytes", "inter_host_bytes"],
    ).with_columns(tokens=pl.lit(TOKENS, pl.Int64), inter_host_bytes_per_token=pl.lit(0.0))
    assert_frame_equal(frame, expected)


def _link_peaks(frame: pl.DataFrame, ds) -> None:
    # one host: whatever leaves a rank of it arrives at a rank of it
    assert frame.select("host", "direction", "scope").sort("direction").rows() == [
        ("node0", "in", "intra_host"),
        ("node0", "out", "intra_host"),
    ]
    assert frame["peak_gbps"].n_unique() == 1 and frame["p99_gbps"].n_unique() == 1


def _flow_sizes(frame: pl.DataFrame, ds) -> None:
    # flows over 2 steps, by power-of-two size: the loss report (8 B, 4 a step); the loss
    # all-reduces (1,024 B, 48 a step); ACT (288 TP all-reduces and 32 PP sends a step:
    # 320); the gradient buckets (8 a step, 2 MiB and up)
    sizes = [(8, 8, 64.0), (1024, 96, 96 * 1024.0), (ACT, 640, 640.0 * ACT),
             (2_097_152, 16, 2.0 * 4 * (GRAD0 + GRAD1))]  # fmt: skip
    total = sum(b for *_, b in sizes)
    expected = pl.DataFrame(
        [(s, n, b, b / total) for s, n, b in sizes],
        schema=["size_from", "flows", "bytes", "share_of_bytes"],
        orient="row",
    )
    assert_frame_equal(frame, expected)


def _busiest(frame: pl.DataFrame, ds) -> None:
    # over 2 steps: stage 1's TP pairs 2 x (36 ACT + 12 x 1,024) in 96 flows, then stage 0's
    # 2 x 36 ACT in 72, then the stage 0 DP gradient (2 x GRAD0, 2 flows), a tie of four
    # links of which LIMIT keeps two
    top = sorted(frame.head(8).select("src_rank", "dst_rank", "bytes", "flows").rows())
    tp1, tp0 = 2.0 * (36 * ACT + 12 * 1024), 2.0 * 36 * ACT
    assert top == sorted(
        [(r, r ^ 1, tp1, 96) for r in range(4, 8)] + [(r, r ^ 1, tp0, 72) for r in range(4)]
    )
    assert frame.tail(2)["bytes"].to_list() == [2.0 * GRAD0] * 2
    assert set(frame["transport"]) == {"P2P"}


CHECKS: dict[str, Callable[[pl.DataFrame, object], None]] = {
    "Top layers by bytes": _top_layers,
    "Bytes per step by parallel dimension and phase": _bytes_per_step,
    "Bytes per token per dimension, observed next to predicted": _bytes_per_token,
    "Where observed and predicted traffic differ": _differ,
    "Observed against the model, item by item": _item_by_item,
    "The slowest collectives": _slowest,
    "The straggler: who arrives last, and how often": _straggler,
    "Where the straggler is late": _where_late,
    "Waiting versus transferring, per step, dimension and rank": _wait_vs_transfer,
    "Whom each rank waited for": _whom_waited,
    "Who held each step back, and doing what": _held_back,
    "What set each step's length: the critical path": _critical_path,
    "What faster transfers of one dimension could save at most": _faster_transfers,
    "Achieved bus bandwidth by message size": _busbw,
    "Exposed communication per step": _exposed,
    "Hosts, ranks and devices, each counted once across sources": _hosts,
    "Which parallel dimension each communicator serves": _comm_dims,
    "Bytes per layer, gradient buckets split over the layers they carry": _bytes_per_layer,
    "Collectives that could not be attributed to a layer or phase": _unattributed,
    "Tokens and step time per rank": _tokens,
    "Where the sizes came from": _size_sources,
    "Bytes on the wire between hosts, per step": _between_hosts,
    "The rank x rank traffic matrix of one step": _rank_matrix,
    "Bytes that stay in a host and bytes that cross hosts, per dimension and token": _intra_inter,
    "How hard each host (or NIC) drives its links: peak and percentiles": _link_peaks,
    "Flow sizes": _flow_sizes,
    "The busiest links": _busiest,
}


def test_every_question_of_the_doc_is_checked() -> None:
    assert [t for t, _ in _queries()] == list(CHECKS)


@pytest.mark.parametrize(("title", "query"), _queries(), ids=[t for t, _ in _queries()])
def test_query_gives_the_hand_derived_rows(title: str, query: str, linked_sample: Path) -> None:
    import pipeline

    ds = pipeline.open(linked_sample)
    CHECKS[title](ds.sql(query), ds)


def _readme_python_queries() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.+?)```", text, flags=re.S)
    return [q for block in blocks for q in re.findall(r'\.sql\("([^"]+)"\)', block)]


def _exact_bytes(dataset: Path) -> int:
    """The sample's collective bytes counted once: the profiler's calls (every rank has a
    profiler trace), the same total token_wire reports."""
    import pipeline

    ds = pipeline.open(dataset)
    kineto = ds.sql("SELECT sum(bytes) FROM collectives WHERE source = 'kineto'").item()
    assert ds.sql("SELECT sum(bytes) FROM token_wire").item() == kineto
    return int(kineto)


def test_readme_python_query_counts_each_byte_once(linked_sample: Path) -> None:
    """The README's first query, summed, is the job's bytes, not once per source."""
    import pipeline

    queries = _readme_python_queries()
    assert queries
    for query in queries:
        frame = pipeline.open(linked_sample).sql(query)
        assert frame["bytes"].dtype.is_integer(), query
        assert frame["bytes"].sum() == _exact_bytes(linked_sample), query


def test_doc_totals_count_each_byte_once(linked_sample: Path) -> None:
    import pipeline

    ds = pipeline.open(linked_sample)
    in_layers = ds.sql(
        "SELECT sum(bytes) FROM collectives_linked WHERE source = 'kineto' AND layer IS NOT NULL"
    ).item()
    exact = {
        "Top layers by bytes": in_layers,
        "Bytes per step by parallel dimension and phase": _exact_bytes(linked_sample),
    }
    queries = dict(_queries())
    for title, total in exact.items():
        frame = ds.sql(queries[title].replace("LIMIT 10", ""))
        assert frame["bytes"].sum() == total > 0, title
