"""Streaming Kineto parse: the same tables whatever the batch size, bounded memory, exact
error offsets."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.errors import TraceFormatError
from pipeline.ingest.kineto import parse as kineto
from tests.conftest import REPO_ROOT

WHOLE = 1 << 40  # one batch: the whole file decoded at once


def _same(a, b) -> None:
    assert a.tables.keys() == b.tables.keys()
    for name in a.tables:
        assert_frame_equal(pl.from_arrow(a.tables[name]), pl.from_arrow(b.tables[name]))
    assert a.warnings.messages() == b.warnings.messages()
    assert (a.format_version, a.rank_source) == (b.format_version, b.rank_source)


def _event(i: int, **extra) -> dict:
    ev = {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1}
    ev.update({"ts": 1000 + 10 * i, "dur": 5, "args": {"External id": i}})
    ev.update(extra)
    return ev


def _doc() -> dict:
    events = [_event(i) for i in range(40)]
    # boundary look-alikes inside a string and inside a nested list of objects
    events[7]["name"] = 'weird}, {"ph": "X"} name'
    events[11]["args"]["Input Dims"] = [[1, 2], []]
    events[12]["args"]["nested"] = [{"a": 1}, {"b": [{"c": 2}]}]
    events.insert(0, _event(99, cat="user_annotation", name="ProfilerStep#3", dur=900))
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "GPU A"}, {"id": 1, "name": "GPU B"}],
        "distributedInfo": {"rank": 3, "world_size": 4},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


@pytest.mark.parametrize("batch", [1, 64, 300, 4096, WHOLE])
@pytest.mark.parametrize("compact", [True, False])
def test_keys_after_the_events_and_look_alike_boundaries(
    tmp_path: Path, batch: int, compact: bool
) -> None:
    path = tmp_path / "t.json"
    doc = _doc()
    path.write_text(json.dumps(doc) if compact else json.dumps(doc, indent=2))
    result = kineto.parse(path, batch_bytes=batch)
    ops = result.tables["ops"]
    assert ops.num_rows == len(doc["traceEvents"])
    assert sorted(ops.column("name").to_pylist()) == sorted(e["name"] for e in doc["traceEvents"])
    assert result.tables["ranks"].column("rank").to_pylist() == [3]
    assert result.tables["ranks"].column("base_time_ns").to_pylist() == [doc["baseTimeNanoseconds"]]
    # ts 1000 us after baseTimeNanoseconds, which comes after the events in the file
    first = min(ops.column("start_ns").to_pylist())
    assert first == doc["baseTimeNanoseconds"] + 1_000_000
    _same(kineto.parse(path, batch_bytes=WHOLE), result)


def test_gzip_is_read_as_a_stream(tmp_path: Path) -> None:
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps(_doc()))
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    _same(kineto.parse(plain), kineto.parse(packed, batch_bytes=256))


@pytest.mark.parametrize("batch", [64, 4096, WHOLE])
def test_malformed_in_the_middle_names_its_byte(tmp_path: Path, batch: int) -> None:
    text = json.dumps(_doc())
    bad_at = text.index('"op20"') + len('"op20"')  # the ',' after the name
    assert text[bad_at] == ","
    path = tmp_path / "bad.json"
    path.write_text(text[:bad_at] + ",," + text[bad_at + 1 :])
    with pytest.raises(TraceFormatError) as err:
        kineto.parse(path, batch_bytes=batch)
    assert err.value.offset == bad_at + 1
    assert "malformed JSON" in str(err.value)


@pytest.mark.parametrize("cut", [0.3, 0.9, 0.999])
@pytest.mark.parametrize("batch", [64, WHOLE])
def test_truncated_file_says_so_at_its_end(tmp_path: Path, cut: float, batch: int) -> None:
    data = json.dumps(_doc()).encode()
    path = tmp_path / "cut.json"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(TraceFormatError) as err:
        kineto.parse(path, batch_bytes=batch)
    assert "JSON ends early" in str(err.value)
    assert err.value.offset == path.stat().st_size


def test_wrong_event_type_names_the_event(tmp_path: Path) -> None:
    doc = _doc()
    doc["traceEvents"][30]["pid"] = 1.5
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"traceEvents\[30\]\.pid"):
        kineto.parse(path, batch_bytes=200)


def test_no_trace_events(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "x": {"traceEvents": []}}')
    with pytest.raises(TraceFormatError, match="traceEvents"):
        kineto.parse(path, batch_bytes=8)


# -- memory --------------------------------------------------------------------------------------
CAP_BYTES = 2_800 * 2**20  # address space: the streaming parse of 300 MB fits, a whole one not
_CHILD = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from pipeline.ingest.kineto import parse as kineto
result = kineto.parse(Path(sys.argv[1]), batch_bytes=int(sys.argv[2]))
print(result.tables["ops"].num_rows)
"""


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc/meminfo: Linux only")
@pytest.mark.skipif(
    _available_bytes() < 4 * 2**30, reason="needs 4 GB of free memory for the capped parses"
)
def test_300_mb_trace_parses_under_an_address_space_cap(tmp_path: Path) -> None:
    from pipeline.synth.job import JobSpec
    from pipeline.synth.scale import write_scaled_job

    spec = JobSpec(tp=1, pp=1, dp=1, global_batch=4)
    path = write_scaled_job(spec, tmp_path, target_bytes=300_000_000)["kineto"][0]
    assert path.stat().st_size >= 280_000_000
    expected_ops = path.read_bytes().count(b'"ph": "X", "cat": "')
    expected_ops -= path.read_bytes().count(b'"cat": "kernel"')
    expected_ops -= path.read_bytes().count(b'"cat": "gpu_')
    expected_ops -= 1  # the profiler's own span ("cat": "Trace")
    env = dict(os.environ, POLARS_MAX_THREADS="2", PYTHONPATH=str(REPO_ROOT))
    code = _CHILD.format(cap=CAP_BYTES)

    def run(batch: int) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code, str(path), str(batch)],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )

    streamed = run(kineto.BATCH_BYTES)
    assert streamed.returncode == 0, streamed.stderr[-2000:]
    assert int(streamed.stdout.split()[-1]) == expected_ops
    whole = run(WHOLE)
    assert whole.returncode != 0, "a whole-file parse fit under the cap: the cap proves nothing"
