"""The link benchmark's job builder (benchmarks/bench_link.py) at its smallest: the job it
writes is a dataset that tokenwire reads, links and reports on, so ``make bench`` measures a
real link and a real report."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
from click.testing import CliRunner

import pipeline
from benchmarks.bench_link import ANSWERS, OUTPUT_COPY, REPORT_GIVEN, build_job
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


def test_the_report_with_its_answers_given_writes_the_same_page(tmp_path: Path) -> None:
    """The report's floor without a query (bench_link --many-ranks) does all the report
    does but query: from the answers a report kept, it writes the same page."""
    from tests.report.fixtures import large_job

    large_job(tmp_path / "job", ranks=16)
    answers, pages = tmp_path / "answers.pickle", [tmp_path / "a.html", tmp_path / "b.html"]

    def run(code: str, page: Path) -> None:
        args = [sys.executable, "-c", code, str(tmp_path / "job"), str(page), str(answers)]
        subprocess.run(args, check=True, cwd=REPO_ROOT, capture_output=True)

    run(ANSWERS, pages[0])
    run(REPORT_GIVEN, pages[1])
    assert pages[0].read_bytes() == pages[1].read_bytes()
    assert b"tw-spec" in pages[0].read_bytes()
    # the page is drawn from the answers kept, not from queries run again
    with answers.open("rb") as f:
        kept = pickle.load(f)
    kept["glance_ranks", "[]"] = kept["glance_ranks", "[]"].with_columns(gpus=pl.lit("Z-GPU-9"))
    with answers.open("wb") as f:
        pickle.dump(kept, f)
    run(REPORT_GIVEN, pages[1])
    assert b"Z-GPU-9" in pages[1].read_bytes() and b"Z-GPU-9" not in pages[0].read_bytes()
