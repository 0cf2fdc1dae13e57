"""Flight recorder dumps: the real gloo dumps, pickles, older layouts and bad input."""

from __future__ import annotations

import gzip
import json
import math
import os
import pickle
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.dataset.schema import conform
from pipeline.errors import TraceFormatError
from pipeline.ingest.flight_recorder import parse as fr
from tests.conftest import REPO_ROOT

#: The project's own dumps (tests/data/cpu_gloo: one run of each layout, 2 ranks).
PROJECT = [
    REPO_ROOT / "tests" / "data" / "cpu_gloo" / run / f"rank{rank}.flight_recorder.json.gz"
    for run in ("ddp", "fsdp", "tp", "pp", "moe")
    for rank in (0, 1)
]


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _write_json(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


# --------------------------------------------------------------------------- real dumps


def test_every_recorded_dump_ingests_every_entry() -> None:
    for path in PROJECT:
        raw = _raw(path)
        entries = raw.get("entries", [])
        result = fr.parse(path)
        assert result.format == "flight_recorder"
        assert result.format_version == raw["version"] == "2.10"
        for name, table in result.tables.items():
            conform(name, table, job="j", source="flight_recorder", file_id="0" * 16)
        coll = result.tables["collectives"]
        assert coll.num_rows == len(entries), path
        rank = int(path.name.split(".")[0].removeprefix("rank"))
        assert set(coll.column("rank").to_pylist()) <= {rank}
        assert result.tables["ranks"].column("rank").to_pylist() == [rank]
        rows = coll.to_pylist()
        for row, e in zip(rows, entries, strict=True):
            assert row["seq"] == e["collective_seq_id"]
            assert row["op_seq"] == e["op_id"]
            assert row["p2p_seq"] == e["p2p_seq_id"]
            assert row["record_id"] == e["record_id"]
            assert row["op_name"] == e["profiling_name"]
            assert row["op"] == e["profiling_name"].split(":")[1]
            assert row["pg_name"] == e["process_group"][0]
            assert row["comm"] == "pg:" + e["process_group"][0]
            assert row["enqueue_ns"] == e["time_created_ns"]
            assert row["state"] == e["state"]
            assert row["retired"] == e["retired"]
            assert row["count"] == sum(math.prod(s) for s in e["input_sizes"])
            assert row["out_count"] == sum(math.prod(s) for s in e["output_sizes"])
            # real dumps say "never seen" with 0
            assert e["time_discovered_started_ns"] == 0
            assert row["time_discovered_started_ns"] is None
        ops = Counter(r["op"] for r in rows)
        assert ops == Counter(e["profiling_name"].split(":")[1] for e in entries)


#: Each run's collectives in its dumps (rank 0's; rank 1's the same), from what
#: tests/data/cpu_gloo/README.md says each run issues: 5 steps, DDP's set-up (an all_gather
#: and 4 broadcasts) where a model is wrapped in DDP, and the closing barrier.
RUN_OPS = {
    # a bucket and the loss report a step
    "ddp": {"all_gather": 1, "broadcast": 4, "all_reduce": 5 * 2, "barrier": 1},
    # 13 all-reduces a step (10 of activations, 3 of the cross entropy)
    "tp": {"all_reduce": 5 * 13, "barrier": 1},
    # no send/recv is recorded
    "pp": {"barrier": 1},
    # 8 all-to-alls a step; the dense gradients and the loss report
    "moe": {"all_gather": 1, "broadcast": 4, "all_to_all": 5 * 8, "all_reduce": 5 * 2,
            "barrier": 1},
    # 4 units gathered forward and again backward; each unit's gradient, the loss report
    "fsdp": {"all_gather": 5 * 8, "all_reduce": 5 * (4 + 1), "barrier": 1},
}  # fmt: skip


def test_recorded_dump_counts_match_the_readme() -> None:
    for path in PROJECT:
        ops = Counter(fr.parse(path).tables["collectives"].column("op").to_pylist())
        assert ops == RUN_OPS[path.parent.name], path


def test_sequence_ids_are_continuous_per_group() -> None:
    for path in PROJECT:
        rows = fr.parse(path).tables["collectives"].to_pylist()
        by_comm: dict[str, list[int]] = {}
        for r in rows:
            by_comm.setdefault(r["comm"], []).append(r["seq"])
        for seqs in by_comm.values():
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            assert seqs[0] == 1


def test_a_dump_without_entries_has_no_collectives(tmp_path: Path) -> None:
    # (a rank that recorded no collective writes no "entries" key: the pp run's dump
    # without its one barrier)
    doc = _raw(REPO_ROOT / "tests/data/cpu_gloo/pp/rank0.flight_recorder.json.gz")
    del doc["entries"]
    result = fr.parse(_write_json(tmp_path / "rank0.flight_recorder.json", doc))
    assert result.tables["collectives"].num_rows == 0
    assert result.tables["ranks"].column("rank").to_pylist() == [0]


def test_message_size_and_dtype() -> None:
    path = REPO_ROOT / "tests/data/cpu_gloo/ddp/rank0.flight_recorder.json.gz"
    rows = fr.parse(path).tables["collectives"].to_pylist()
    gather = rows[0]
    assert gather["op"] == "all_gather" and gather["dtype"] == "int64"
    assert gather["bytes"] == 2 * 8  # gathered output [2, 1] of Long
    bucket, loss = rows[-3], rows[-2]  # (the last step's; then the barrier)
    assert (bucket["op"], bucket["dtype"], bucket["bytes"]) == ("all_reduce", "float32", 134912 * 4)
    assert (loss["op"], loss["dtype"], loss["bytes"]) == ("all_reduce", "float32", 2 * 4)


def test_communicators_from_pg_config() -> None:
    path = REPO_ROOT / "tests/data/cpu_gloo/moe/rank1.flight_recorder.json.gz"
    result = fr.parse(path)
    comms = result.tables["communicators"].to_pylist()
    assert comms == [
        {
            "rank": 1,
            "comm": "pg:0",
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend": "gloo",
            "nranks": 2,
            "ranks": [0, 1],
            "rank_in_comm": 1,
        }
    ]
    assert result.tables["ranks"].to_pylist()[0]["world_size"] == 2
    assert any("without a name" in m for m in result.warnings.messages())


def test_sniff() -> None:
    dumps = PROJECT
    # the dumps and the profiler traces beside them
    for path in sorted(p for d in {d.parent for d in dumps} for p in d.glob("rank*.json.gz")):
        with gzip.open(path) as f:
            head = f.read(64 * 1024)
        assert fr.sniff(path, head) == ("flight_recorder" in path.name), path


# --------------------------------------------------------------------------- pickle


def _as_pickle_layout(doc: dict) -> dict:
    """The real dump in the layout the pickle writer uses: tuples, None for never seen."""
    out = dict(doc)
    entries = []
    for e in doc.get("entries", []):
        e = dict(e)
        e["process_group"] = tuple(e["process_group"])
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[k] = e[k] or None
        entries.append(e)
    out["entries"] = entries
    return out


def test_pickle_parses_the_same_as_json(tmp_path: Path) -> None:
    for path in PROJECT:
        doc = _as_pickle_layout(_raw(path))
        target = tmp_path / path.parent.name / path.name.replace(".json.gz", "")
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(pickle.dumps(doc, protocol=2))
        assert fr.sniff(target, target.read_bytes()[: 64 * 1024])
        from_pickle, from_json = fr.parse(target), fr.parse(path)
        assert from_pickle.format_version == from_json.format_version
        for name in ("collectives", "communicators", "ranks"):
            assert_frame_equal(
                pl.from_arrow(from_pickle.tables[name]), pl.from_arrow(from_json.tables[name])
            )


def test_gzipped_pickle(tmp_path: Path) -> None:
    path = REPO_ROOT / "tests/data/cpu_gloo/tp/rank1.flight_recorder.json.gz"
    target = tmp_path / "nccl_trace_rank_1.gz"
    target.write_bytes(gzip.compress(pickle.dumps(_as_pickle_layout(_raw(path)))))
    result = fr.parse(target)
    # the tp run's dump: 65 collectives of its TP group and the closing barrier
    assert result.tables["collectives"].num_rows == 66
    assert result.tables["collectives"].column("rank").to_pylist() == [1] * 66


class _OpenFile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (open, (str(self.marker), "w"))


class _System:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("payload", [_OpenFile, _System])
def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path: Path, payload: type) -> None:
    marker = tmp_path / "marker"
    doc = {"version": "2.10", "pg_config": {}, "entries": [{"profiling_name": payload(marker)}]}
    path = tmp_path / "rank0.pkl"
    path.write_bytes(pickle.dumps(doc, protocol=2))
    with pytest.raises(TraceFormatError, match="pickle refused") as info:
        fr.parse(path)
    assert "only plain data" in str(info.value)
    assert str(path) in str(info.value)
    assert not marker.exists()


def test_pickle_of_a_class_instance_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rank0.pkl"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [Path("x")]}))
    with pytest.raises(TraceFormatError, match=r"pickle refused: it asks to load pathlib\."):
        fr.parse(path)


# --------------------------------------------------------------------------- older layouts


def _nccl_entry(**kw: object) -> dict:
    e = {
        "record_id": 0,
        "pg_id": 0,
        "process_group": ("1", "pp"),
        "collective_seq_id": 0,
        "p2p_seq_id": 1,
        "op_id": 1,
        "profiling_name": "nccl:send 0->1",
        "time_created_ns": 1_000,
        "duration_ms": 0.25,
        "input_sizes": [[4, 64, 128]],
        "input_dtypes": ["BFloat16"],
        "output_sizes": [[4, 64, 128]],
        "output_dtypes": ["BFloat16"],
        "state": "completed",
        "time_discovered_started_ns": 2_000,
        "time_discovered_completed_ns": 3_000,
        "retired": True,
        "timeout_ms": 600_000,
        "is_p2p": True,
        "frames": [{"name": "send", "filename": "distributed_c10d.py", "line": 1}],
    }
    e.update(kw)
    return e


def test_nccl_p2p_entry(tmp_path: Path) -> None:
    doc = {
        "version": "2.4",
        "pg_config": {"1": {"name": "1", "desc": "pp", "ranks": "[2, 3]"}},
        "pg_status": {},
        "entries": [_nccl_entry(), _nccl_entry(profiling_name="nccl:recv 0<-1", record_id=1)],
    }
    path = tmp_path / "rank2.pkl"
    path.write_bytes(pickle.dumps(doc, protocol=2))
    result = fr.parse(path)
    send, recv = result.tables["collectives"].to_pylist()
    assert (send["op"], send["peer"], send["is_p2p"], send["p2p_seq"]) == ("send", 3, True, 1)
    assert (recv["op"], recv["peer"]) == ("recv", 3)
    assert send["dur_ns"] == 250_000 and send["timeout_ns"] == 600_000_000_000
    assert send["dtype"] == "bfloat16" and send["bytes"] == 4 * 64 * 128 * 2
    assert send["time_discovered_completed_ns"] == 3_000
    comm = result.tables["communicators"].to_pylist()[0]
    assert (comm["comm"], comm["ranks"], comm["rank_in_comm"], comm["pg_desc"]) == (
        "pg:1",
        [2, 3],
        0,
        "pp",
    )


def test_version_1_layout(tmp_path: Path) -> None:
    entry = {
        "record_id": 5,
        "pg_id": 0,
        "seq_id": 7,
        "op_id": 7,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 10,
        "input_sizes": [[8]],
        "output_sizes": [[8]],
        "state": "started",
        "time_discovered_started_ns": 11,
        "time_discovered_completed_ns": None,
        "retired": False,
        "frames": [],
    }
    doc = {"entries": [entry], "version": "1.4", "pg_config": {0: [0, 1, 2, 3]}}
    path = tmp_path / "nccl_trace_rank_3"
    path.write_bytes(pickle.dumps(doc, protocol=2))
    result = fr.parse(path)
    row = result.tables["collectives"].to_pylist()[0]
    assert (row["rank"], row["seq"], row["comm"], row["pg_name"], row["state"]) == (
        3,
        7,
        "pg_id:0",
        None,
        "started",
    )
    assert row["dtype"] is None and row["bytes"] is None and row["count"] == 8
    assert row["group_size"] == 4
    comm = result.tables["communicators"].to_pylist()[0]
    assert (comm["comm"], comm["nranks"], comm["rank_in_comm"]) == ("pg_id:0", 4, 3)


def test_unversioned_list_layout(tmp_path: Path) -> None:
    entries = [
        {
            "pg_id": 0,
            "seq_id": i,
            "profiling_name": "nccl:all_gather",
            "time_created_us": 5 + i,
            "input_sizes": [[2]],
            "output_sizes": [[8]],
            "state": "completed",
            "retired": True,
            "frames": [],
        }
        for i in range(3)
    ]
    path = tmp_path / "trace-rank-1.pkl"
    path.write_bytes(pickle.dumps(entries, protocol=2))
    result = fr.parse(path)
    assert result.format_version == fr.UNVERSIONED
    rows = result.tables["collectives"].to_pylist()
    assert [r["seq"] for r in rows] == [0, 1, 2]
    assert [r["enqueue_ns"] for r in rows] == [5000, 6000, 7000]
    assert {r["rank"] for r in rows} == {1}


def test_rank_key_wins_over_file_name(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "rank9.json", {"version": "2.10", "rank": 4, "pg_config": {}})
    result = fr.parse(path)
    assert result.rank_source == "rank_key"
    assert result.tables["ranks"].column("rank").to_pylist() == [4]


def test_rank_from_file_name_is_the_shared_rule(tmp_path: Path) -> None:
    """The dump takes its rank from the one file-name rule every format uses."""
    result = fr.parse(_write_json(tmp_path / "worker0_step_12.json", {"version": "2.10"}))
    assert result.rank_source == "file_name"
    assert result.tables["ranks"].column("rank").to_pylist() == [0]


# --------------------------------------------------------------------------- bad input


MOE_DUMP = REPO_ROOT / "tests/data/cpu_gloo/moe/rank0.flight_recorder.json.gz"


def test_truncated_gzip(tmp_path: Path) -> None:
    raw = MOE_DUMP.read_bytes()
    path = tmp_path / "rank0.flight_recorder.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        fr.parse(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    raw = bytearray(MOE_DUMP.read_bytes())
    for i in range(100, 200):
        raw[i] ^= 0xFF
    path = tmp_path / "rank0.flight_recorder.json.gz"
    path.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match="gzip|JSON"):
        fr.parse(path)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "empty"),
        (b'{"traceEvents": []}', "not a flight recorder dump"),
        (b'{"version": "2.10", "entries": [', "invalid JSON"),
        (b"hello", "neither JSON nor pickle"),
        (b'"2.10"', "neither JSON nor pickle"),
        (b'{"version": 2, "entries": []}', "not a string"),
        (b'{"version": "2.10", "entries": {}}', "'entries' is not a list"),
        (b'{"version": "2.10", "entries": [{"collective_seq_id": 1}]}', "entry 0: missing"),
        (
            b'{"version": "2.10", "entries": [{"profiling_name": "gloo:all_reduce", '
            b'"process_group": ["0", "default_pg"], "collective_seq_id": 1, "input_sizes": "x"}]}',
            "entry 0: 'input_sizes'",
        ),
        (b'{"version": "2.10", "pg_config": {"0": {"ranks": "os.system(1)"}}}', "rank list"),
    ],
)
def test_bad_json(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=match) as info:
        fr.parse(path)
    assert str(info.value).startswith(str(path))


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{\n"version": "2.10",\n"entries": [}\n')
    with pytest.raises(TraceFormatError) as info:
        fr.parse(path)
    assert info.value.line == 3


def test_truncated_pickle(tmp_path: Path) -> None:
    src = REPO_ROOT / "tests/data/cpu_gloo/ddp/rank0.flight_recorder.json.gz"
    doc = _as_pickle_layout(_raw(src))
    data = pickle.dumps(doc, protocol=2)
    path = tmp_path / "rank0.pkl"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceFormatError, match="corrupt or truncated pickle"):
        fr.parse(path)


def test_no_rank_anywhere(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "dump.json", {"version": "2.10", "pg_config": {}})
    with pytest.raises(TraceFormatError, match="no 'rank' key"):
        fr.parse(path)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"time_created_ns": 2**70}, "outside 64-bit"),
        ({"input_sizes": [[2**40, 2**40]]}, "outside 64-bit"),
        ({"duration_ms": float("inf")}, "duration_ms"),
        ({"duration_ms": float("nan")}, "duration_ms"),
        ({"retired": "yes"}, "'retired'"),
        ({"process_group": ["0"]}, "'process_group'"),
    ],
)
def test_bad_values_in_a_pickled_entry(tmp_path: Path, change: dict, match: str) -> None:
    entry = _nccl_entry(**change)
    path = tmp_path / "rank0.pkl"
    path.write_bytes(pickle.dumps({"version": "2.4", "pg_config": {}, "entries": [entry]}))
    with pytest.raises(TraceFormatError, match=f"entry 0: .*{match}"):
        fr.parse(path)
