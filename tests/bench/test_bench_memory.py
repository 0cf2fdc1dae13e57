"""The memory benchmark (benchmarks/bench_memory.py) at its smallest: it generates its trace,
measures the base, the floor and each job, and prints one line per job."""

from __future__ import annotations

import re

import pytest

from benchmarks import bench_memory


def test_prints_a_bound_per_job(capsys: pytest.CaptureFixture[str]) -> None:
    bench_memory.main(["--file-mb", "1", "--counts", "1,2"])
    out = capsys.readouterr().out
    assert "the floor, 1 files: (peak - its base) / largest file x" in out
    jobs = re.findall(r"^\s+(\d+) files \(.*peak RSS\s+[\d,]+ MB, .* x(-?[\d.]+),", out, re.M)
    assert [count for count, _ in jobs] == ["1", "2"]
