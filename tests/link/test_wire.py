"""The wire table: bytes per directed rank pair of every collective instance (link/wire.sql),
checked against the formulas of docs/wire.md written out here."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT, edit_parts

# A hand-written job: 4 ranks, 2 hosts (ranks 0,1 on hostA; 2,3 on hostB), one communicator
# of all four with two ring channels and two tree channels, as NCCL 2.26 logs them.
HOSTS = {0: ("hostA", 0), 1: ("hostA", 1), 2: ("hostB", 0), 3: ("hostB", 1)}
RINGS = [[0, 1, 2, 3], [0, 1, 3, 2]]  # channel -> ring order
TREES = [{1: 0, 2: 1, 3: 2}, {3: 2, 0: 2, 1: 0}]  # channel -> {child: parent}
N = 4
F32 = 4
# (op, count as NCCL logs it, root or peer, TUNING algorithm or None)
CALLS = [
    ("AllReduce", 1024, 0, "RING"),
    ("AllReduce", 2048, 0, "TREE"),
    ("AllGather", 256, 0, "RING"),
    ("ReduceScatter", 128, 0, "RING"),
    ("Broadcast", 512, 1, "RING"),
    ("AllReduce", 64, 0, None),
    ("Reduce", 512, 2, "RING"),
    ("AlltoAll", 64, 0, None),
]
SEND_COUNT = 256  # rank 0 sends to rank 2


def _prefix(rank: int, tid: int | None = None) -> str:
    host, dev = HOSTS[rank]
    pid = 1000 + rank
    return f"{host}:{pid}:{tid or pid} [{dev}] NCCL INFO "


def _conn(a: int, b: int, channel: int, conn: int = 0) -> list[tuple[int, str]]:
    """The connection lines NCCL prints for a -> b: P2P inside a host, NET/IB [send] on the
    sender and [receive] on the receiver across hosts (nic = the device index)."""
    head = f"Channel {channel:02d}/{conn} : {a}[{HOSTS[a][1]}] -> {b}[{HOSTS[b][1]}]"
    if HOSTS[a][0] == HOSTS[b][0]:
        return [(a, f"{head} via P2P/CUMEM/read")]
    return [
        (a, f"{head} [send] via NET/IB/{HOSTS[a][1]}/GDRDMA"),
        (b, f"{head} [receive] via NET/IB/{HOSTS[b][1]}/GDRDMA"),
    ]


def _topology_lines(r: int, form: str) -> list[str]:
    """Rank r's ring and tree lines: ``own`` as NCCL 2.26 prints them (each rank's `Ring c :
    prev -> me -> next` and `Trees [c] d0/d1/d2->me->up`), ``order`` the other shapes
    (rank 0's `Channel c/N : r0 r1 ...` order of each ring, `Tree c : up -> me -> d0/d1/d2`)."""
    out = []
    for c, ring in enumerate(RINGS):
        i = ring.index(r)
        if form == "own":
            out.append(f"Ring {c:02d} : {ring[i - 1]} -> {r} -> {ring[(i + 1) % N]}")
        elif r == 0:
            out.append(f"Channel {c:02d}/{len(RINGS):02d} : " + " ".join(map(str, ring)))
    items = []
    for c, parent in enumerate(TREES):
        kids = [k for k, p in parent.items() if p == r] + [-1, -1, -1]
        up = parent.get(r, -1)
        if form == "own":
            items.append(f"[{c}] {kids[0]}/{kids[1]}/{kids[2]}->{r}->{up}")
        else:
            out.append(f"Tree {c} : {up} -> {r} -> {kids[0]}/{kids[1]}/{kids[2]}")
    if items:
        out.append("Trees " + " ".join(items))
    return out


def _write_logs(folder: Path, form: str = "own") -> None:
    lines: dict[int, list[str]] = defaultdict(list)
    init: dict[int, list[str]] = defaultdict(list)
    for r in range(N):
        t = 2000 + r
        lines[r].append(_prefix(r) + "NCCL version 2.26.2+cuda12.6")
        head = (
            f"ncclCommInitRankConfig comm 0x55000{r}0000a0 rank {r} nranks {N} cudaDev "
            f"{HOSTS[r][1]} nvmlDev {HOSTS[r][1]} busId {r + 1}8000 commId 0x1234abcd"
        )
        lines[r].append(_prefix(r, t) + head + " - Init START")
        lines[r].extend(_prefix(r, t) + text for text in _topology_lines(r, form))
        init[r] = [_prefix(r, t) + head + " - Init COMPLETE"]
    for c, ring in enumerate(RINGS):
        for i, a in enumerate(ring):
            for who, text in _conn(a, ring[(i + 1) % N], c):
                lines[who].append(_prefix(who, 2000 + who) + text)
    for who, text in _conn(0, 2, 2, conn=1):
        lines[who].append(_prefix(who, 2000 + who) + text)
    for r in range(N):
        lines[r].extend(init[r])
        comm = f"0x55000{r}0000a0"
        for k, (op, count, root, algo) in enumerate(CALLS):
            lines[r].append(
                _prefix(r) + f"{op}: opCount {k:x} sendbuff 0x7f0000{k}00000 recvbuff "
                f"0x7f0001{k}00000 count {count} datatype 7 op 0 root {root} comm {comm} "
                f"[nranks={N}] stream 0x5500000001"
            )
            if r == 0 and algo:
                lines[r].append(
                    _prefix(r) + f"{op}: {count * F32} Bytes -> Algo {algo} proto SIMPLE "
                    "channel{Lo..Hi}={0..1}"
                )
        if r in (0, 2):
            op, peer = ("Send", 2) if r == 0 else ("Recv", 0)
            lines[r].append(
                _prefix(r) + f"{op}: opCount {len(CALLS):x} sendbuff (nil) recvbuff "
                f"0x7f0002000000 count {SEND_COUNT} datatype 7 op 0 root {peer} comm {comm} "
                f"[nranks={N}] stream 0x5500000002"
            )
    for r, text in lines.items():
        (folder / f"rank{r}.nccl.log").write_text("\n".join(text) + "\n")


@pytest.fixture(scope="module", params=["own", "order"])
def hand_job(request, tmp_path_factory: pytest.TempPathFactory) -> pipeline.dataset.handle.Dataset:
    """The hand-written job with its rings and trees in each shape NCCL prints them."""
    root = tmp_path_factory.mktemp("wire")
    (root / "logs").mkdir()
    _write_logs(root / "logs", request.param)
    summary = ingest([root / "logs"], root / "ds", job="hand", jobs=1)
    assert not summary.errors
    link(root / "ds")
    return pipeline.open(root / "ds")


def _edges(ds, where: str) -> dict[tuple[int, int], float]:
    rows = ds.sql(f"SELECT src_rank, dst_rank, bytes FROM wire WHERE {where}").rows()
    assert len({(s, d) for s, d, _ in rows}) == len(rows)  # one row per directed pair
    return {(s, d): b for s, d, b in rows}


def _ring_shares(per_rank: float) -> dict[tuple[int, int], float]:
    """Every rank sends per_rank bytes to its successor, split evenly over the channels."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    for ring in RINGS:
        for i, r in enumerate(ring):
            out[(r, ring[(i + 1) % N])] += per_rank / len(RINGS)
    return dict(out)


def _one(ds, where: str) -> tuple:
    rows = ds.sql(f"SELECT DISTINCT algorithm, path, estimated FROM wire WHERE {where}").rows()
    assert len(rows) == 1, rows
    return rows[0]


def test_ring_all_reduce_sends_2_n_minus_1_over_n_m_to_the_successor(hand_job) -> None:
    m = 1024 * F32
    got = _edges(hand_job, "op = 'all_reduce' AND seq = 0")
    assert got == pytest.approx(_ring_shares(2 * (N - 1) / N * m))
    assert _one(hand_job, "op = 'all_reduce' AND seq = 0") == ("ring", "topology", False)
    # 0 -> 1 is the successor on both channels; every other pair on one
    assert got[(0, 1)] == pytest.approx(6144.0)
    assert sum(got.values()) == pytest.approx(2 * (N - 1) * m)


def test_tree_all_reduce_goes_up_and_down_every_tree_edge(hand_job) -> None:
    m = 2048 * F32
    want: dict[tuple[int, int], float] = defaultdict(float)
    for parent in TREES:  # half the message per tree channel, up then down
        for child, up in parent.items():
            want[(child, up)] += m / len(TREES)
            want[(up, child)] += m / len(TREES)
    got = _edges(hand_job, "op = 'all_reduce' AND seq = 1")
    assert got == pytest.approx(dict(want))
    assert sum(got.values()) == pytest.approx(2 * (N - 1) * m)
    assert _one(hand_job, "op = 'all_reduce' AND seq = 1") == ("tree", "topology", False)


def test_ring_all_gather_and_reduce_scatter_send_n_minus_1_over_n_m(hand_job) -> None:
    gathered = 256 * F32 * N  # M of an all-gather: the gathered output
    got = _edges(hand_job, "op = 'all_gather'")
    assert got == pytest.approx(_ring_shares((N - 1) / N * gathered))
    full = 128 * F32 * N  # M of a reduce-scatter: the full input
    got = _edges(hand_job, "op = 'reduce_scatter'")
    assert got == pytest.approx(_ring_shares((N - 1) / N * full))


def test_broadcast_runs_down_the_ring_from_the_root(hand_job) -> None:
    m, root = 512 * F32, 1
    want: dict[tuple[int, int], float] = defaultdict(float)
    for ring in RINGS:  # every link of the ring but the one into the root carries M
        for i, r in enumerate(ring):
            nxt = ring[(i + 1) % N]
            if nxt != root:
                want[(r, nxt)] += m / len(RINGS)
    assert _edges(hand_job, "op = 'broadcast'") == pytest.approx(dict(want))
    assert sum(want.values()) == pytest.approx((N - 1) * m)


def test_send_recv_moves_m_over_one_connection(hand_job) -> None:
    rows = hand_job.sql(
        "SELECT op, src_rank, dst_rank, bytes, transport, src_nic, dst_nic, inter_host, "
        "algorithm, estimated FROM wire WHERE op IN ('send', 'recv', 'send_recv')"
    ).rows()
    assert rows == [("send", 0, 2, SEND_COUNT * F32, "NET/IB", "0", "0", True, "p2p", False)]


def test_a_call_no_log_names_the_algorithm_of_is_an_estimated_ring(hand_job) -> None:
    m = 64 * F32
    got = _edges(hand_job, "op = 'all_reduce' AND seq = 5")
    assert got == pytest.approx(_ring_shares(2 * (N - 1) / N * m))
    assert _one(hand_job, "op = 'all_reduce' AND seq = 5") == ("ring", "topology", True)


def test_transports_and_hosts_come_from_the_connection_lines(hand_job) -> None:
    rows = hand_job.sql(
        "SELECT DISTINCT src_rank, dst_rank, transport, src_nic, dst_nic, inter_host "
        "FROM wire WHERE op = 'all_reduce' AND seq = 0 ORDER BY ALL"
    ).rows()
    for src, dst, transport, src_nic, dst_nic, inter in rows:
        crosses = HOSTS[src][0] != HOSTS[dst][0]
        assert inter is crosses
        if crosses:
            assert (transport, src_nic, dst_nic) == (
                "NET/IB",
                str(HOSTS[src][1]),
                str(HOSTS[dst][1]),
            )
        else:
            assert (transport, src_nic, dst_nic) == ("P2P", None, None)


def test_the_traffic_views_add_up(hand_job) -> None:
    total = hand_job.sql("SELECT sum(bytes) FROM wire").item()
    inter = hand_job.sql("SELECT sum(bytes) FROM wire WHERE inter_host").item()
    split = hand_job.sql("SELECT sum(intra_host_bytes), sum(inter_host_bytes) FROM wire_split")
    assert split.row(0) == pytest.approx((total - inter, inter))
    hosts = dict(
        ((s, d), b)
        for s, d, b in hand_job.sql(
            "SELECT src_host, dst_host, sum(bytes) FROM wire_host_matrix GROUP BY ALL"
        ).rows()
    )
    assert hosts[("hostA", "hostB")] + hosts[("hostB", "hostA")] == pytest.approx(inter)
    flows = hand_job.sql("SELECT sum(flows), sum(bytes) FROM wire_flow_sizes").row(0)
    assert flows == pytest.approx((hand_job.sql("SELECT count(*) FROM wire").item(), total))


# --- the sample job -----------------------------------------------------------------------

#: Bytes the whole group moves for one instance of M bytes on n ranks (docs/wire.md).
FORMULA = """
CASE WHEN op = 'all_reduce' THEN 2.0 * (n - 1) * bytes
     WHEN op IN ('all_gather', 'reduce_scatter', 'all_to_all', 'broadcast', 'reduce')
         THEN (n - 1.0) * bytes
     WHEN op IN ('send', 'recv') THEN bytes END
"""


def _formula_check(ds) -> None:
    rows = ds.sql(
        f"""SELECT i.comm, i.seq, i.op, {FORMULA} AS want, w.got
        FROM (SELECT *, coalesce(group_size, ranks_seen) AS n FROM collective_instances) i
        JOIN (SELECT DISTINCT job, source FROM wire) USING (job, source)
        LEFT JOIN (SELECT job, comm, seq, sum(bytes) AS got FROM wire GROUP BY ALL) w
            USING (job, comm, seq)
        WHERE i.bytes > 0"""
    ).rows()
    assert rows
    for comm, seq, op, want, got in rows:
        assert got == pytest.approx(want), (comm, seq, op)


def test_every_sample_instance_moves_what_the_formula_says(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    _formula_check(ds)
    # three sources of every call, each instance once: the profiler's
    assert ds.sql("SELECT DISTINCT source FROM wire").rows() == [("kineto",)]
    # the logs give rings but no TUNING lines: ring assumed (estimated), along the log's rings
    rows = ds.sql("SELECT DISTINCT op, path, estimated FROM wire ORDER BY ALL").rows()
    assert rows == [("all_reduce", "topology", True), ("send", "peers", False)]
    # one host: nothing crosses hosts
    assert ds.sql("SELECT sum(inter_host_bytes) FROM wire_split").item() == 0


def test_sample_wire_per_step_is_the_models_wire_bytes(linked_sample: Path) -> None:
    """The analytic model's wire bytes (pipeline/model, a formula per op and algorithm, summed
    over every rank) equal the wire table's bytes per step and dimension on the sample job."""
    from pipeline.model.config import load_job
    from pipeline.model.predict import predict_ranks

    job = load_job(REPO_ROOT / "sample_traces" / "job.yaml")
    want: dict[str, float] = defaultdict(float)
    for pred in predict_ranks(job, range(job.parallel.world_size)):
        for row in pred.rows:
            want[row.parallel_dim] += row.wire_bytes
    rows = (
        pipeline.open(linked_sample)
        .sql("SELECT step, parallel_dim, sum(bytes) FROM wire GROUP BY ALL ORDER BY ALL")
        .rows()
    )
    assert {s for s, _, _ in rows} == {2, 3}
    for _, dim, got in rows:
        assert got == pytest.approx(want[dim]), dim
    assert {d for _, d, _ in rows} == set(want)


def _pp_bytes_per_step() -> int:
    """Pipeline traffic of the sample job per step, from its layout (sample_traces/job.yaml):
    4 pipelines (tp x dp), 16 / (2 x 2) = 4 micro-batches, an activation forward and a
    gradient backward per micro-batch, each b x s x h bf16 values."""
    b, s, h, bf16 = 2, 128, 256, 2
    pipelines, micro_batches, directions = 2 * 2, 16 // (2 * 2), 2
    return pipelines * micro_batches * directions * b * s * h * bf16


def test_sample_on_two_hosts_only_the_pipeline_crosses(linked_sample: Path, tmp_path) -> None:
    """The sample job with ranks 0-3 on one host and 4-7 on another (tp and dp groups inside a
    host, pipeline stages across): the inter-host bytes per step are the pipeline's."""
    dataset = tmp_path / "ds"
    shutil.copytree(linked_sample, dataset)
    edit_parts(
        dataset,
        "ranks",
        lambda f: f.with_columns(
            pl.when(pl.col("rank") < 4)
            .then(pl.lit("node-a"))
            .otherwise(pl.lit("node-b"))
            .alias("host")
        ),
    )
    link(dataset, config=REPO_ROOT / "sample_traces" / "job.yaml")
    ds = pipeline.open(dataset)
    _formula_check(ds)
    rows = ds.sql("SELECT step, parallel_dim, inter_host_bytes FROM wire_split ORDER BY ALL").rows()
    assert rows == [
        (step, dim, {"dp": 0, "tp": 0, "pp": _pp_bytes_per_step()}[dim])
        for step in (2, 3)
        for dim in ("dp", "pp", "tp")
    ]
    hosts = ds.sql(
        "SELECT src_host, dst_host, sum(bytes) FROM wire_host_matrix WHERE step = 2 "
        "AND src_host <> dst_host GROUP BY ALL ORDER BY ALL"
    ).rows()
    half = _pp_bytes_per_step() // 2  # activations one way, gradients the other
    assert hosts == [("node-a", "node-b", half), ("node-b", "node-a", half)]
    peaks = ds.sql(
        "SELECT host, direction, peak_gbps > 0 FROM wire_demand_peaks "
        "WHERE scope = 'inter_host' ORDER BY ALL"
    ).rows()
    assert peaks == [(h, d, True) for h in ("node-a", "node-b") for d in ("in", "out")]
    from pipeline.report import build_report

    page = build_report(dataset, output=tmp_path / "r.html")
    assert {"wire_host_heatmap", "wire_host_demand"} <= set(page.charts)
    assert "to other hosts (the NICs" in (tmp_path / "r.html").read_text()


def test_a_job_profiled_on_some_ranks_puts_every_rank_on_the_wire(
    linked_sample: Path, tmp_path: Path
) -> None:
    """Ranks 0-3 profiled, all 8 logged: the logs are the one source that sees every rank, so
    the wire per step and dimension is that of the fully profiled job."""
    folder = tmp_path / "traces"
    folder.mkdir()
    sample = REPO_ROOT / "sample_traces"
    for path in [*sample.glob("rank[0-3].*.pt.trace.json.gz"), *sample.glob("*.nccl.log")]:
        (folder / path.name).symlink_to(path)
    dataset = tmp_path / "ds"
    assert not ingest([folder], dataset, job="sample", jobs=1).errors
    link(dataset, config=sample / "job.yaml")
    totals = "SELECT step, parallel_dim, sum(bytes) FROM wire GROUP BY ALL ORDER BY ALL"
    partial, full = pipeline.open(dataset), pipeline.open(linked_sample)
    assert partial.sql("SELECT DISTINCT source FROM wire").rows() == [("nccl_log",)]
    assert partial.sql(totals).rows() == full.sql(totals).rows()


# --- real NCCL logs -----------------------------------------------------------------------


def test_reduce_runs_up_the_ring_to_the_root(hand_job) -> None:
    m, root = 512 * F32, 2
    want: dict[tuple[int, int], float] = defaultdict(float)
    for ring in RINGS:  # every link of the ring but the one out of the root carries M
        for i, r in enumerate(ring):
            if r != root:
                want[(r, ring[(i + 1) % N])] += m / len(RINGS)
    assert _edges(hand_job, "op = 'reduce'") == pytest.approx(dict(want))


def test_all_to_all_sends_m_over_n_to_every_peer(hand_job) -> None:
    rows = hand_job.sql("SELECT op, bytes FROM collectives WHERE op = 'all_to_all'").rows()
    m = rows[0][1]  # the message size ingest gives an AlltoAll call (all a rank contributes)
    want = {(a, b): m / N for a in range(N) for b in range(N) if a != b}
    assert _edges(hand_job, "op = 'all_to_all'") == pytest.approx(want)
    assert _one(hand_job, "op = 'all_to_all'") == ("p2p", "peers", False)


def test_a_kineto_only_job_gets_an_estimated_ring_in_rank_order(
    linked_sample: Path, tmp_path: Path
) -> None:
    """Without NCCL logs there are no rings and no algorithm: a ring over the sorted members,
    every collective row estimated; the bytes are the same (a ring's are, whatever its order)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for path in (REPO_ROOT / "sample_traces").glob("*.pt.trace.json.gz"):
        (folder / path.name).symlink_to(path)
    dataset = tmp_path / "ds"
    assert not ingest([folder], dataset, job="sample", jobs=1).errors
    link(dataset, config=REPO_ROOT / "sample_traces" / "job.yaml")
    ds = pipeline.open(dataset)
    rows = ds.sql("SELECT DISTINCT op, algorithm, path, estimated FROM wire ORDER BY ALL")
    assert rows.rows() == [
        ("all_reduce", "ring", "rank_order", True),
        ("send", "p2p", "peers", False),
    ]
    assert ds.sql("SELECT count(*) FROM wire WHERE transport IS NOT NULL").item() == 0
    totals = "SELECT step, parallel_dim, sum(bytes) FROM wire GROUP BY ALL ORDER BY ALL"
    assert ds.sql(totals).rows() == pipeline.open(linked_sample).sql(totals).rows()
