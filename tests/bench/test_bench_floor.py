"""The ingest-floor benchmark's inputs and floor: the many-small-files set gives each copy a
rank of its own, and the floor script writes a part per trace with every event."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import pipeline
from benchmarks.bench_floor import FLOOR, compare_cpu, many_small
from pipeline.ingest.run import ingest
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_traces"


def test_copies_are_ranks_of_their_own(tmp_path: Path) -> None:
    traces = sorted(SAMPLE.glob("rank*.pt.trace.json.gz"))[:2]
    small = many_small(traces, 3, tmp_path / "small")
    assert len(list(small.iterdir())) == 6
    summary = ingest([small], tmp_path / "ds", job="copies", jobs=1)
    assert not summary.errors
    ranks = pipeline.open(tmp_path / "ds").sql("SELECT DISTINCT rank FROM kernels ORDER BY 1")
    assert ranks["rank"].to_list() == list(range(6))


def test_the_floor_keeps_every_event(tmp_path: Path) -> None:
    trace = sorted(SAMPLE.glob("rank*.pt.trace.json.gz"))[0]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / trace.name).write_bytes(trace.read_bytes())
    subprocess.run([sys.executable, "-c", FLOOR, str(tmp_path / "in"), str(tmp_path / "out")],
                   check=True)  # fmt: skip
    import gzip
    import json

    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    table = pq.read_table(tmp_path / "out" / "part-0.parquet")
    assert table.num_rows == len(events)
    assert table.column("name").to_pylist()[:5] == [e.get("name") for e in events[:5]]


def test_cpu_mode_reports_both_sides_per_file(tmp_path: Path) -> None:
    traces = sorted(SAMPLE.glob("rank*.pt.trace.json.gz"))[:1]
    small = many_small(traces, 1, tmp_path / "small")
    (tmp_path / "work").mkdir()
    line = compare_cpu("one file", small, tmp_path / "work")
    found = re.search(r"floor ([\d.]+) ms, tokenwire ([\d.]+) ms, ratio x([\d.]+)", line)
    assert found, line
    floor, ours, ratio = map(float, found.groups())
    assert floor > 0 and ours > 0
    assert ratio == pytest.approx(ours / floor, rel=0.05)  # (of the rounded times)
    assert not list((tmp_path / "work").iterdir())  # each round's output is removed
