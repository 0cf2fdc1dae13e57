"""Small NCCL logs parsed together (``nccl.log.parse_batch``, ingest's batches of files): each
file's result is the one it gives alone, and a bad file fails alone, with its own error."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.ingest.nccl import log as nccl_log
from pipeline.ingest.run import ingest
from pipeline.synth.__main__ import main as synth
from tests.ingest.test_nccl_log import _synthetic

REPO = Path(__file__).resolve().parents[2]

COLL = (
    "node0:48211:48211 [0] NCCL INFO AllReduce: opCount {op} sendbuff 0x7f3a00000000 recvbuff "
    "0x7f3b00000000 count {count} datatype 7 op 0 root 0 comm 0x5500000007a0 [nranks=2] "
    "stream 0x55d1e200001c\n"
)


def _same(paths: list[Path]) -> None:
    """parse_batch of ``paths`` gives, file by file, what parse gives (or the same error)."""
    batch = nccl_log.parse_batch(paths)
    assert len(batch) == len(paths)
    for path, got in zip(paths, batch, strict=True):
        try:
            want = nccl_log.parse(path)
        except Exception as exc:
            assert isinstance(got, type(exc)), (path, got)
            assert str(got) == str(exc), path
            continue
        assert not isinstance(got, Exception), (path, got)
        assert got.format == want.format
        assert got.format_version == want.format_version, path
        assert got.rank_source == want.rank_source, path
        assert got.warnings.messages() == want.warnings.messages(), path
        assert got.warnings.total == want.warnings.total, path
        assert list(got.tables) == list(want.tables)
        for name, table in want.tables.items():
            assert got.tables[name].schema == table.schema, (path, name)
            assert_frame_equal(pl.from_arrow(got.tables[name]), pl.from_arrow(table))


def _own_logs(tmp_path: Path) -> list[Path]:
    """Logs of several shapes: interleaved processes with launcher tags, CRLF, damaged and
    unknown lines, WARN lines with locations, torchrun tags and timestamps, trimmed prefixes,
    prefix-less COLL fragments, one-rank communicators."""
    text = _synthetic().decode("latin-1").rsplit("\r\n", 1)[0] + "\r\n"  # whole lines
    logs = {
        "interleaved.log": text,
        "torchrun.log": (
            "[rank1]:[2026-03-02 14:07:55.104233] h:7:7 [1] NCCL INFO comm 0x10 rank 1 nranks 2 cudaDev 1 busId 1c000 - Init COMPLETE\n"  # noqa: E501
            "[rank1]:[2026-03-02 14:07:56.000001] h:7:7 [1] NCCL INFO Broadcast: opCount 5 sendbuff 0x1 recvbuff 0x1 count 10 datatype 0 op 0 root 0 comm 0x10 [nranks=2] stream 0x0\n"  # noqa: E501
            "\n"
            "[2026-03-02 14:07:57] h:7:9 [1] transport/net_ib.cc:1456 (ncclIbTest) NCCL WARN NET/IB : Got completion\n"  # noqa: E501
        ),
        "trimmed.log": (
            "[0] NCCL INFO comm 0x20 rank 0 nranks 1 cudaDev 0 busId 1000 - Init COMPLETE\n"
            "NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 0 comm 0x20 [nranks=1] stream 0x0\n"  # noqa: E501
        ),
        "bare.log": (
            "n:5:5 [0] NCCL INFO comm 0x30 rank 0 nranks 2 cudaDev 0 busId 2000 - Init COMPLETE\n"
            + COLL.replace("node0:48211:48211 [0] NCCL INFO ", "")
            .replace("0x5500000007a0", "0x30")
            .format(op=0, count=8)
            + "n:5:5 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 0 comm 0x30 [nranks=2] stream 0x0\n"  # noqa: E501
        ),
        "one_rank.log": COLL.format(op=0, count=4).replace("[nranks=2]", "[nranks=1]"),
    }
    out = []
    for name, body in logs.items():
        path = tmp_path / name
        path.write_bytes(body.encode("utf-8"))
        out.append(path)
    return out


def test_batch_is_each_file_alone_on_own_logs(tmp_path):
    sample = sorted((REPO / "sample_traces").glob("*.nccl.log"))
    _same(_own_logs(tmp_path) + sample)


def test_batch_is_each_file_alone_on_a_generated_job(tmp_path):
    job = tmp_path / "job"
    synth([str(job), "--tp", "4", "--pp", "2", "--dp", "2", "--steps", "1", "--layers", "2"]
          + ["--global-batch", "4", "--formats", "nccl"])  # fmt: skip
    logs = sorted(job.glob("*.nccl.log"))
    assert len(logs) == 16
    _same(logs)


def test_a_bad_file_fails_alone(tmp_path):
    good = sorted((REPO / "sample_traces").glob("*.nccl.log"))[:3]
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    notes = tmp_path / "notes.log"
    notes.write_text("hello\nthis is not a log\n")
    cut = tmp_path / "cut.log"
    cut.write_bytes(good[0].read_bytes()[:-40])
    missing = tmp_path / "missing.log"
    _same([good[0], empty, good[1], notes, cut, missing, good[2]])
    # a line a step over the whole batch refuses: every file is parsed again alone
    huge = tmp_path / "huge.log"
    huge.write_text(COLL.format(op=0, count=4) + COLL.format(op=1, count="9" * 25))
    wraps = tmp_path / "wraps.log"
    wraps.write_text(COLL.format(op=0, count=4) + COLL.format(op=1, count=2**62))
    paths = [good[0], huge, good[1], wraps, good[2]]
    _same(paths)
    got = nccl_log.parse_batch(paths)
    assert [isinstance(r, Exception) for r in got] == [False, True, False, True, False]
    assert "outside 64-bit integers" in str(got[1])
    assert "beyond 64-bit integers" in str(got[3])


def test_ingest_in_batches_fails_only_the_bad_file(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for log in sorted((REPO / "sample_traces").glob("*.nccl.log")):
        (folder / log.name).write_bytes(log.read_bytes())
    bad = folder / "rank9.nccl.log"
    bad.write_text(COLL.format(op=0, count=4) + COLL.format(op=1, count="9" * 25))
    summary = ingest([folder], tmp_path / "ds", jobs=1)
    assert [o.path.name for o in summary.outcomes] == sorted(p.name for p in folder.iterdir())
    failed = summary.errors
    assert [o.path for o in failed] == [bad]
    alone = ingest([bad], tmp_path / "ds_alone", jobs=1).errors
    assert failed[0].error == alone[0].error
    assert summary.count("ingested") == 8
    single = ingest([folder / "rank3.nccl.log"], tmp_path / "ds3", jobs=1).outcomes[0]
    batched = next(o for o in summary.outcomes if o.path.name == "rank3.nccl.log")
    assert batched.rows == single.rows
    assert batched.warnings == single.warnings
    assert (batched.format_version, batched.rank_source) == (
        single.format_version,
        single.rank_source,
    )


@pytest.mark.parametrize("files", [1, 2])
def test_parse_files_in_order(tmp_path, files):
    from pipeline.ingest.run import parse_files

    logs = sorted((REPO / "sample_traces").glob("*.nccl.log"))[: files + 1]
    args = [(p, "j", True, f"{i:064x}", tmp_path / "ds", 1 << 14) for i, p in enumerate(logs)]
    outs = parse_files(args)
    assert [o.path for o in outs] == logs
    assert all(o.status == "ingested" for o in outs)


def test_a_batch_that_fails_as_a_whole_parses_each_file_alone(tmp_path, monkeypatch):
    from pipeline.ingest.run import parse_files

    logs = sorted((REPO / "sample_traces").glob("*.nccl.log"))[:3]

    def bug(texts):
        raise RuntimeError("a step over the batch fails")

    monkeypatch.setattr(nccl_log, "_scan_files", bug)
    _same(logs)

    def raises(paths):
        raise RuntimeError("parse_batch fails")

    monkeypatch.setattr(nccl_log, "parse_batch", raises)
    args = [(p, "j", True, f"{i:064x}", tmp_path / "ds", 1 << 14) for i, p in enumerate(logs)]
    assert [o.status for o in parse_files(args)] == ["ingested"] * 3
