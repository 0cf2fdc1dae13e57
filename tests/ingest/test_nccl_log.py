"""NCCL debug-log parser: every real log, plus inline cases for wrappers and damage."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

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
