"""The link benchmark's job builder (benchmarks/bench_link.py) at its smallest: the job it
writes is a dataset that tokenwire reads, links and reports on, so ``make bench`` measures a
real link and a real report."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import pipeline
from benchmarks.bench_link import build_job
from pipeline.cli import cli
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT


def test_the_scaled_job_links(tmp_path: Path) -> None:
    events = build_job(REPO_ROOT / "sample_traces", tmp_path / "job", ranks=2, repeat=2)
    ds = pipeline.open(tmp_path / "job")
    counted = ds.sql(
        "SELECT (SELECT count(*) FROM ops) + (SELECT count(*) FROM kernels) "
        "+ (SELECT count(*) FROM collectives)"
    ).item()
    assert events == counted > 0
    summary = link(tmp_path / "job")
    assert summary.rows["collective_links"] == ds.sql("SELECT count(*) FROM collectives").item()
    page = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "job"), "-o", str(page)])
    assert result.exit_code == 0, result.stderr
    assert "job bench" in result.stderr and page.stat().st_size > 0
    files = ds.sql("SELECT file_id, ranks FROM files ORDER BY file_id").rows()
    assert files == [("bench000000000000", [0]), ("bench000000000001", [1])]
