"""The link benchmark's job builder (benchmarks/bench_link.py) at its smallest: the job it
writes is a dataset that tokenwire reads, links and reports on, so ``make bench`` measures a
real link and a real report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
from click.testing import CliRunner

import pipeline
from benchmarks.bench_link import OUTPUT_COPY, build_job
from pipeline.cli import cli
from pipeline.dataset.store import read_manifest
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


def test_the_output_floor_copies_every_derived_table(tmp_path: Path) -> None:
    """The floor beside link, a DuckDB copy of link's outputs, writes each derived table of
    the linked dataset with all its rows."""
    build_job(REPO_ROOT / "sample_traces", tmp_path / "job", ranks=2, repeat=1)
    summary = link(tmp_path / "job")
    out = tmp_path / "copies"
    out.mkdir()
    subprocess.run(
        [sys.executable, "-c", OUTPUT_COPY, str(tmp_path / "job"), str(out)],
        check=True,
        cwd=REPO_ROOT,
    )
    derived = read_manifest(tmp_path / "job").derived
    assert {p.stem for p in out.glob("*.parquet")} == set(derived)
    assert "collective_links" in derived and "wire" in derived
    for name in derived:
        copied = duckdb.sql(f"SELECT count(*) FROM '{out / name}.parquet'").fetchall()[0][0]
        assert copied == summary.rows[name] > 0
