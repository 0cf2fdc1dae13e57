"""NCCL debug-log parser: every real log, plus inline cases for wrappers and damage."""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.dataset.schema import conform
from pipeline.errors import TraceFormatError
from pipeline.ingest.nccl import log as nccl_log

COLL_LINE = re.compile(
    r"\b(?:AllReduce|Broadcast|Reduce|AllGather|ReduceScatter|Send|Recv|AlltoAll|Gather|Scatter)"
    r": opCount [0-9a-fA-F]+ sendbuff "
)
INIT_LINE = re.compile(
    r"([^\s:\[\]]+):(\d+):\d+ \[\d+\] NCCL INFO (?:\w+ )?comm (0x[0-9a-f]+) rank (\d+) n[rR]anks (\d+)"  # noqa: E501
    r"(?:.*commId (0x[0-9a-f]+))?"
)
CONN_LINE = re.compile(
    r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : \d+\[\w+\] -> \d+\[\w+\].* via (.+?)\s*$"
)


def _logs(real_traces: Path) -> list[Path]:
    files = sorted((real_traces / "nccl_logs").glob("*.log"))
    assert len(files) == 26
    return files


def _parse(path: Path) -> dict[str, pl.DataFrame]:
    result = nccl_log.parse(path)
    assert result.format == "nccl_log"
    out = {}
    for name, table in result.tables.items():
        conform(name, table, job="j", source="nccl_log", file_id="f")
        out[name] = pl.from_arrow(table)
    return out


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def test_every_real_log_collectives_comms_transports(real_traces):
    for path in _logs(real_traces):
        lines = _lines(path)
        t = _parse(path)
        # One collectives row per COLL line, counted here independently.
        assert t["collectives"].height == sum(bool(COLL_LINE.search(x)) for x in lines), path.name
        # Communicators: every Init / nRanks line's (comm, rank in comm, nranks) is a row.
        inits = [m for x in lines if (m := INIT_LINE.search(x))]
        comm_id = {
            (m[1], m[2], m[3]): m[6] for m in inits if m[6]
        }  # the 2.20+ nRanks line has none
        expected = {(comm_id.get((m[1], m[2], m[3]), m[3]), int(m[4]), int(m[5])) for m in inits}
        got = set(
            t["communicators"]
            .filter(pl.col("rank_in_comm").is_not_null())
            .select("comm", "rank_in_comm", "nranks")
            .iter_rows()
        )
        assert got == expected, path.name
        # Connection lines: the transports exactly as printed.
        printed = Counter(m[1] for x in lines if (m := CONN_LINE.search(x)))
        conn = (
            t["topology"].filter(pl.col("kind") == "connection") if t["topology"].height else None
        )
        rows = (
            Counter(re.sub(r" \[(?:send|receive)\]$", "", d) for d in conn["detail"])
            if conn is not None
            else Counter()
        )
        assert rows == printed, path.name
        # WARN lines are all kept.
        warns = sum(" NCCL WARN " in x for x in lines)
        kept = (
            t["log_messages"].filter(pl.col("level") == "WARN").height
            if t["log_messages"].height
            else 0
        )
        assert kept == warns, path.name


def test_ranks_from_init_lines(real_traces):
    for name in (
        "nccl-issue-1189.log",
        "nccl-tests-issue-29.log",
        "nccl-tests-issue-252.log",
        "nccl-issue-952.log",
    ):
        path = real_traces / "nccl_logs" / name
        lines = _lines(path)
        inits = [m for x in lines if (m := INIT_LINE.search(x))]
        world = max(int(m[5]) for m in inits)
        expected = {(m[1], int(m[2]), int(m[4])) for m in inits if int(m[5]) == world}
        ranks = _parse(path)["ranks"]
        got = set(ranks.select("host", "pid", "rank").iter_rows())
        assert expected <= got, name
        assert ranks.filter(pl.col("world_size") != world).height == 0


def test_1189_world_comm_and_net_ib(real_traces):
    t = _parse(real_traces / "nccl_logs" / "nccl-issue-1189.log")
    comms = t["communicators"]
    assert comms["comm"].unique().to_list() == ["0xf021d9037f9243d8"]
    assert comms.sort("rank")["ranks"].to_list() == [[0, 1, 2, 3]] * 4
    ranks = t["ranks"].sort("rank")
    assert ranks.select("host", "pid").rows()[2] == ("H20-GPU-06", 4015539)
    assert ranks["bus_id"].to_list() == ["0000:18:00.0", "0000:38:00.0"] * 2
    topo = t["topology"]
    recv = topo.filter((pl.col("kind") == "connection") & (pl.col("rank") == 2))
    assert recv.select("channel", "peer", "transport", "detail").rows() == [
        (7, 0, "NET/IB", "NET/IB/3/GDRDMA [receive]")
    ]
    # Rank 1's P2P lines follow its thread's Init COMPLETE (connections made at the first
    # collective): they belong to that thread's communicator, as every other line does.
    conns = topo.filter(pl.col("kind") == "connection")
    assert conns.height == 14 and conns["comm"].to_list() == ["0xf021d9037f9243d8"] * 14
    trees = topo.filter(
        (pl.col("kind") == "tree") & (pl.col("rank") == 0) & (pl.col("channel") == 0)
    )
    assert trees["peers"].to_list() == [[-1, 1, 2, -1]]  # '[0] 1/2/-1->0->-1': up -1, down 1/2/-1


def test_transport_families(real_traces):
    cases = {
        "nccl-issue-687.log": {"NET/IB", "P2P"},
        "nccl-tests-issue-166.log": {"NET/Socket", "SHM"},
        "nccl-issue-392.log": {"NET/IB", "P2P", "SHM"},
        "nccl-tests-issue-252.log": {"P2P"},
        "tinygrad-open-gpu-kernel-modules-pr-22.log": {"P2P"},
        "nccl-issue-1453.log": {"NET/IBext_v8"},
    }
    for name, families in cases.items():
        topo = _parse(real_traces / "nccl_logs" / name)["topology"]
        assert set(topo.filter(pl.col("kind") == "connection")["transport"]) == families, name
    topo = _parse(real_traces / "nccl_logs" / "nccl-issue-392.log")["topology"]
    shm = topo.filter(pl.col("transport") == "SHM")
    assert shm["detail"].to_list() == ["direct shared memory"] and shm["peer"].to_list() == [7]
    assert set(topo["rank"]) == {
        0
    }  # prefix trimmed to ' [0] NCCL INFO': rank 0 from its ring lines


def test_collective_lines(real_traces):
    d = real_traces / "nccl_logs"
    send = _parse(d / "nccl-issue-584.log")["collectives"]
    assert set(send["op"]) == {"send", "recv"}
    assert send["op_count"].to_list()[-3:] == [0xD60, 0xD62, 0xD60]
    assert set(send["bytes"]) == {2420736 * 4} and set(send["dtype"]) == {"float32"}
    assert send["peer"].to_list()[:2] == [1, 1] and send["root"].is_null().all()
    assert send.filter(pl.col("comm") == "0x7f5128002e10")["seq"].to_list() == [0, 1, 2, 3, 4]

    ar = _parse(d / "nccl-issue-1238.log")["collectives"]
    assert ar.select("rank", "op", "dtype", "bytes", "group_size", "redop").unique().rows() == [
        (0, "all_reduce", "float32", 33554432 * 4, 1, "sum")
    ]
    bc = _parse(d / "nccl-issue-147.log")["collectives"].sort("collective_id")
    assert bc["op"].unique().to_list() == ["broadcast"]
    assert bc["bytes"].to_list() == [
        53 * 8,
        53 * 8,
        25503912 * 2,
        53 * 8,
        25503912 * 2,
        25503912 * 2,
    ]
    assert bc["root"].to_list() == [0] * 6
    one = _parse(d / "nccl-issue-734.log")
    assert one["collectives"].select("rank", "op", "peer", "bytes").rows() == [
        (-1, "send", 1, 257536 * 4)
    ]


def test_version_banner_and_shapes(real_traces):
    d = real_traces / "nccl_logs"
    expect = {
        "nccl-issue-392.log": "2.5.7",
        "nccl-issue-857.log": "2.10.3",
        "nccl-issue-952.log": "2.18-2.20",
        "nccl-issue-1189.log": "2.20",
        "nccl-issue-584.log": "2.7-2.11",
        "nccl-issue-1453.log": "2.21-2.22",
        "nccl-tests-issue-29.log": "2.4",
    }
    for name, version in expect.items():
        assert nccl_log.parse(d / name).format_version == version, name


def test_launcher_rank_prefix(real_traces):
    t = _parse(real_traces / "nccl_logs" / "nccl-issue-1713.log")
    ranks = set(t["ranks"].select("rank", "host", "pid").iter_rows())
    assert (3, "aiplatform-wlf2-ge78-70", 102987) in ranks and (
        0,
        "aiplatform-wlf2-ge78-72",
        58070,
    ) in ranks


def test_warn_lines_kept(real_traces):
    r = nccl_log.parse(real_traces / "nccl_logs" / "nccl-issue-857.log")
    msgs = pl.from_arrow(r.tables["log_messages"])
    assert msgs.select("level", "location").unique().rows() == [("WARN", "misc/ibvwrap.cc:63")]
    path = real_traces / "nccl_logs" / "nccl-issue-857.log"
    assert msgs["line"].to_list() == [
        i for i, x in enumerate(_lines(path), 1) if " NCCL WARN " in x
    ]
    assert "NCCL WARN line (x3)" in r.warnings.messages()


def _synthetic() -> bytes:
    a = "[1,0]<stdout>:n1:100:100 [0] NCCL INFO "
    b = "[1,1]<stdout>:n1:101:101 [1] NCCL INFO "
    init = "ncclCommInitRank comm {p} rank {r} nranks 2 cudaDev {r} nvmlDev {r} busId {bus} commId 0xabc - Init COMPLETE"  # noqa: E501
    coll = "{op}: opCount {oc} sendbuff 0x7f0000000000 recvbuff 0x7f0000100000 count {c} datatype {dt} op 0 root 0 comm {p} [nranks=2] stream 0x5500"  # noqa: E501
    lines = [
        "Epoch 0 starting",
        b + init.format(p="0x2000", r=1, bus="1c000"),
        a + init.format(p="0x1000", r=0, bus="1b000"),
        a + coll.format(op="AllReduce", oc=0, c=1024, dt=9, p="0x1000"),
        b + coll.format(op="AllReduce", oc=0, c=1024, dt=9, p="0x2000"),
        a + "AllReduce: 2048 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
        a + coll.format(op="AllGather", oc=1, c=100, dt=7, p="0x1000"),
        "loss: 0.25 \xe9t\xe9",  # other output, later written as latin-1 bytes
        b + coll.format(op="AllGather", oc=1, c=100, dt=7, p="0x2000"),
        a + "AllGather: 400 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}",
        b + coll.format(op="ReduceScatter", oc=2, c=50, dt=6, p="0x2000"),
        "[rank1]:n1:101:101 [1] NCCL INFO Something new in NCCL 9.9",
        b + "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
        a + "AllReduce: opCount 3 sendbuff 0x7f0000000000 recvbuff 0x7f00",  # cut mid-line
    ]
    text = "\r\n".join(lines)
    return text.encode("latin-1")


def test_interleaved_prefixed_crlf_latin1_cut(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(_synthetic())
    r = nccl_log.parse(path)
    t = {k: pl.from_arrow(v) for k, v in r.tables.items()}
    for k, v in r.tables.items():
        conform(k, v, job="j", source="nccl_log", file_id="f")
    c = t["collectives"].sort("collective_id")
    assert c.select("rank", "op", "dtype", "count", "out_count", "bytes", "comm").rows() == [
        (0, "all_reduce", "bfloat16", 1024, 1024, 2048, "0xabc"),
        (1, "all_reduce", "bfloat16", 1024, 1024, 2048, "0xabc"),
        (0, "all_gather", "float32", 100, 200, 800, "0xabc"),
        (1, "all_gather", "float32", 100, 200, 800, "0xabc"),
        (1, "reduce_scatter", "float16", 100, 50, 200, "0xabc"),
    ]
    assert c["algorithm"].to_list() == ["ring", None, "ring", None, None]
    assert c["protocol"].to_list() == ["ll", None, "simple", None, None]
    assert c["stream"].unique().to_list() == [0x5500]
    assert t["communicators"]["ranks"].to_list() == [[0, 1], [0, 1]]
    assert t["ranks"].select("rank", "host", "pid", "device", "bus_id").rows() == [
        (0, "n1", 100, "cuda:0", "0000:1b:00.0"),
        (1, "n1", 101, "cuda:1", "0000:1c:00.0"),
    ]
    msgs = t["log_messages"].sort("line")
    assert msgs.select("rank", "line", "recognized").rows() == [(1, 12, False), (0, 14, False)]
    assert msgs["subsys"].to_list() == [None, "COLL"]
    text = " | ".join(r.warnings.messages())
    for needle in (
        "last line cut",
        "damaged line",
        "non-UTF-8 bytes replaced",
        "unrecognised NCCL line",
    ):
        assert needle in text
    assert r.format_version == ">=2.24"


def test_timestamps_and_torchrun_prefix(tmp_path):
    path = tmp_path / "ts.log"
    path.write_text(
        "[rank1]:[2026-03-02 14:07:55.104233] h:7:7 [1] NCCL INFO comm 0x10 rank 1 nranks 2 cudaDev 1 busId 1c000 - Init COMPLETE\n"  # noqa: E501
        "[rank1]:[2026-03-02 14:07:56.000001] h:7:7 [1] NCCL INFO Broadcast: opCount 5 sendbuff 0x1 recvbuff 0x1 count 10 datatype 0 op 0 root 0 comm 0x10 [nranks=2] stream 0x0\n"  # noqa: E501
        "\n"
        "[2026-03-02 14:07:57] h:7:9 [1] transport/net_ib.cc:1456 (ncclIbTest) NCCL WARN NET/IB : Got completion\n"  # noqa: E501
    )
    t = {k: pl.from_arrow(v) for k, v in nccl_log.parse(path).tables.items()}
    assert t["collectives"].select("rank", "op", "root", "bytes", "op_count").rows() == [
        (1, "broadcast", 0, 10, 5)
    ]
    assert t["log_messages"].select("rank", "line", "level", "location").rows() == [
        (1, 4, "WARN", "transport/net_ib.cc:1456 (ncclIbTest)")
    ]


def test_not_an_nccl_log(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\nthis is not a log\n")
    with pytest.raises(TraceFormatError, match=re.escape(str(path))):
        nccl_log.parse(path)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        nccl_log.parse(empty)
    with pytest.raises(TraceFormatError, match="cannot read"):
        nccl_log.parse(tmp_path / "missing.log")


def test_sniff(real_traces, tmp_path):
    for path in _logs(real_traces):
        head = path.read_bytes()[: 64 * 1024]
        assert nccl_log.sniff(path, head), path.name
    kineto = next((real_traces / "kineto").glob("*.json.gz"))
    with gzip.open(kineto) as fh:
        head = fh.read(64 * 1024)
    assert head.lstrip().startswith(b"{")
    assert not nccl_log.sniff(kineto, head)
    rnd = bytes(range(256)) * 100 + b"random text: 1:2:3 [0] INFO nothing\n"
    assert not nccl_log.sniff(tmp_path / "r.bin", rnd)
    tests = real_traces / "nccl_tests" / "nccl-tests-issue-252.txt"
    assert not nccl_log.sniff(tests, tests.read_bytes())


def test_batches_give_the_same_result(real_traces, monkeypatch):
    from pipeline.ingest.nccl import lines

    path = real_traces / "nccl_logs" / "nccl-issue-952.log"
    whole = _parse(path)
    monkeypatch.setattr(lines, "BATCH_BYTES", 700)
    monkeypatch.setattr(lines.iter_batches, "__kwdefaults__", {"batch_bytes": 700})
    small = _parse(path)
    for name in whole:
        assert_frame_equal(whole[name], small[name])


def test_unknown_ranks_are_warned_in_process_order(real_traces):
    """Processes whose rank the log never states are named table by table in (host, pid)
    order, so the same log gives the same warnings (and ``files`` rows) every time; they came
    in the order of a join, which changed from run to run."""
    result = nccl_log.parse(real_traces / "nccl_logs" / "nccl-issue-147.log")
    named = [m.split(";")[0] for m in result.warnings.messages() if "rank unknown for" in m]
    assert named == [
        "rank unknown for learnfair062:32617",  # the only one in the first table warned
        "rank unknown for learnfair062:32615",
        "rank unknown for learnfair062:32625",
        "rank unknown for learnfair062:32629",
        "rank unknown for lines without a host:pid prefix",
    ]


def test_connections_after_init_complete_take_the_threads_communicator(tmp_path):
    """Connection lines after a thread's last Init COMPLETE (NCCL connects a communicator's
    peers at its first collective) belong to the communicator that thread last set up; a
    line before an Init COMPLETE belongs to that one."""
    lines = []
    for rank, (tid, ptr) in enumerate([(11, "0xa0"), (22, "0xb0")]):
        prefix = f"h:{100 + rank}:{tid} [{rank}] NCCL INFO"
        peer = 1 - rank
        lines += [
            f"{prefix} Channel 00/0 : {rank}[{rank}] -> {peer}[{peer}] via P2P/IPC",
            f"{prefix} comm {ptr} rank {rank} nranks 2 cudaDev {rank} busId {rank}000 "
            "commId 0x77 - Init COMPLETE",
            f"{prefix} Channel 01/0 : {rank}[{rank}] -> {peer}[{peer}] via P2P/CUMEM",
        ]
    path = tmp_path / "lazy.log"
    path.write_text("\n".join(lines) + "\n")
    conns = _parse(path)["topology"].filter(pl.col("kind") == "connection")
    got = conns.select("rank", "channel", "peer", "transport", "comm").sort("rank", "channel")
    assert got.rows() == [
        (0, 0, 1, "P2P", "0x77"),
        (0, 1, 1, "P2P", "0x77"),
        (1, 0, 0, "P2P", "0x77"),
        (1, 1, 0, "P2P", "0x77"),
    ]


#: Log lines in the shapes NCCL's own format strings print in each release range
#: (github.com/NVIDIA/nccl, src/init.cc, src/transport/*.cc, src/enqueue.cc), written here;
#: the version each set implies is the intersection of pipeline/ingest/nccl/version.py's
#: ranges of the rules that fire, worked out by hand in each comment.
_VERSION_CASES = {
    # the banner wins over any shape: its own version, the "+cuda" part left out
    "banner": (["NCCL version 2.10.3+cuda11.4",
                "comm 0x1000 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE"], "2.10.3"),
    # init with nvmlDev and commId (2.18-2.20); a Channel n/m line (2.12+) via CUMEM (2.18+)
    "2.18-2.20": (["comm 0x1000 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc "
                   "- Init COMPLETE", "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"],
                  "2.18-2.20"),
    # init without commId (2.5-2.15); a "Ring n :" connection line (2.3-2.6)
    "2.5-2.6": (["comm 0x1000 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE",
                 "Ring 00 : 0[0] -> 1[1] via P2P/IPC"], "2.5-2.6"),
    # "Channel n :" via P2P (2.7-2.13) naming peers by bus id (2.3-2.18); a send printing its
    # sendbuff and a nil recvbuff (2.7-2.11)
    "2.7-2.11": (["Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC",
                  "Send: opCount 0 sendbuff 0x7f0000000000 recvbuff (nil) count 10 datatype 7 "
                  "op 0 root 1 comm 0x1000 [nranks=2] stream 0x5500"], "2.7-2.11"),
    # a tuning line with channel{Lo..Hi} (2.24 and later)
    ">=2.24": (["AllReduce: 2048 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}"], ">=2.24"),
    # 2.3-2.6 and 2.18+ at once: no version, and a warning
    "contradiction": (["Ring 00 : 0[0] -> 1[1] via P2P/IPC",
                       "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"], None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(_VERSION_CASES))
def test_version_from_the_banner_or_the_line_shapes(tmp_path, case):
    messages, version = _VERSION_CASES[case]
    path = tmp_path / "r.log"
    path.write_text("".join(f"h:7:7 [0] NCCL INFO {m}\n" for m in messages))
    result = nccl_log.parse(path)
    assert result.format_version == version
    contradiction = "line shapes of different versions" in " ".join(result.warnings.messages())
    assert contradiction == (case == "contradiction")


def test_connection_lines_give_each_pairs_transport(tmp_path):
    # Two ranks of communicator 0xabc on hosts h0 and h1; connection lines as NCCL's
    # transport setup prints them (src/transport.cc: "Channel %02d/%d : %d[%x] -> %d[%x]
    # [send|receive] via %s"): a receive line names the sender, every other line the receiver.
    init = "comm 0x{p} rank {r} nranks 2 cudaDev {r} nvmlDev {r} busId {b} commId 0xabc - Init COMPLETE"  # noqa: E501
    lines = {
        0: [init.format(p=1000, r=0, b="1b000"),
            "Channel 00/0 : 0[1b000] -> 1[1c000] via P2P/CUMEM/read",
            "Channel 01/0 : 0[1b000] -> 1[1c000] [send] via NET/IB/3/GDRDMA"],
        1: [init.format(p=2000, r=1, b="1c000"),
            "Channel 01/0 : 0[1b000] -> 1[1c000] [receive] via NET/IB/3/GDRDMA",
            "Channel 00/0 : 1[1c000] -> 0[1b000] via SHM/direct/direct",
            "Channel 02/0 : 1[1c000] -> 0[1b000] [send] via NET/Socket/0"],
    }  # fmt: skip
    path = tmp_path / "job.log"
    prefix = "h{r}:{pid}:{pid} [{r}] NCCL INFO "
    path.write_text(
        "".join(prefix.format(r=r, pid=100 + r) + m + "\n" for r, ms in lines.items() for m in ms)
    )
    topo = _parse(path)["topology"].filter(pl.col("kind") == "connection")
    got = topo.sort("rank", "channel").select("rank", "channel", "peer", "transport", "detail")
    assert got.rows() == [
        (0, 0, 1, "P2P", "P2P/CUMEM/read"),
        (0, 1, 1, "NET/IB", "NET/IB/3/GDRDMA [send]"),
        (1, 0, 0, "SHM", "SHM/direct/direct"),
        (1, 1, 0, "NET/IB", "NET/IB/3/GDRDMA [receive]"),
        (1, 2, 0, "NET/Socket", "NET/Socket/0 [send]"),
    ]
    assert set(topo["comm"]) == {"0xabc"}
