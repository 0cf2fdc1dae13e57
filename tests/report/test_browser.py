"""The report in a real browser: headless Chromium opens it from a file URL with the network
emulated offline; no console error, every chart drawn (an SVG in each chart's container), no
request but the page itself, no dialog. One browser for the whole module."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.report import build_report
from tests.conftest import REPO_ROOT, real_traces_dir
from tests.report.cdp import Browser, chromium_path
from tests.report.fixtures import (
    EVIL,
    large_job,
    page_of_small_and_big_charts,
    sample_with_evil_kernel,
)

SAMPLE = REPO_ROOT / "sample_traces"
JOB_YAML = SAMPLE / "job.yaml"


@pytest.fixture(scope="module")
def browser():
    binary = chromium_path()
    if binary is None:
        pytest.skip(
            "Chromium is not installed and could not be: `make browser` installs the Debian "
            "packages chromium and chromium-driver (as root)"
        )
    b = Browser(binary)
    yield b
    b.close()


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    path = real_traces_dir()
    if path is None:
        pytest.skip("../shared/real_traces is absent (set TOKENWIRE_REAL_TRACES to run this)")
    return path


def check_page(browser: Browser, page: Path, shot: Path | None = None):
    """Open ``page`` and assert it rendered cleanly and offline; the load result."""
    res = browser.open(page)
    assert res.console_errors == []
    assert res.exceptions == []
    assert res.dialogs == []
    assert res.requests == [res.url], "the page asked for something beside itself"
    assert res.charts, "no chart container on the page"
    assert [c["name"] for c in res.charts if not c["drawn"]] == []
    if shot is not None:
        browser.screenshot(shot)
        assert shot.read_bytes().startswith(b"\x89PNG")
    return res


def test_sample_job_linked_with_prediction(browser, tmp_path):
    ds = tmp_path / "ds"
    ingest([SAMPLE], ds)
    link(ds, config=JOB_YAML)
    out = tmp_path / "report.html"
    result = build_report(ds, config=JOB_YAML, output=out)
    res = check_page(browser, out, tmp_path / "report.png")
    assert {c["name"] for c in res.charts} == set(result.charts)
    text = browser.text()
    assert "Bytes per step" in text and "Who arrives late" in text
    # the wire section's host x host heatmap and demand over a step, drawn
    drawn = {c["name"] for c in res.charts if c["drawn"]}
    assert {"wire_host_heatmap", "wire_host_demand"} <= drawn
    assert "On the wire" in text and "The busiest links" in text
    # the rank picker is a live input bound to the time chart
    assert browser.evaluate("document.querySelectorAll('.vega-bind input').length") >= 1


def test_sample_job_raw_without_job_yaml(browser, tmp_path):
    ds = tmp_path / "ds"
    ingest([SAMPLE], ds)
    out = tmp_path / "report.html"
    build_report(ds, output=out)
    check_page(browser, out)
    assert "No job.yaml given" in browser.text()


def test_kernel_named_script_renders_as_text(browser, tmp_path):
    ds = sample_with_evil_kernel(SAMPLE, tmp_path / "ds")
    out = tmp_path / "report.html"
    build_report(ds, output=out)
    check_page(browser, out)  # no dialog, no error
    text = browser.text()
    assert text.count(EVIL) >= 2  # the table cell and the chart's axis label
    # no element came from the name
    assert browser.evaluate("document.querySelectorAll('main script').length") == 0


def test_real_kineto_only(browser, real, tmp_path):
    ds = tmp_path / "ds"
    ingest([real / "kineto" / "dlrm_v100_8ranks"], ds, job="dlrm")
    out = tmp_path / "report.html"
    build_report(ds, output=out)
    check_page(browser, out, tmp_path / "dlrm.png")


def test_real_nccl_logs_only(browser, real, tmp_path):
    """Every NCCL log (and nccl-tests output) is its own job; the reports of the ones with
    topology, collectives and bandwidth tables open cleanly and say why time is missing."""
    ds = tmp_path / "ds"
    logs = sorted((real / "nccl_logs").glob("*.log")) + sorted((real / "nccl_tests").glob("*.txt"))
    for log in logs:
        ingest([log], ds, job=log.stem)
    for job in ("nccl-tests-issue-166", "nccl-issue-147", "nccl-issue-1530"):
        out = tmp_path / f"{job}.html"
        build_report(ds, output=out, job=job)
        check_page(browser, out)
        assert "carry no timings" in browser.text()


def test_real_nsight_only(browser, real, tmp_path):
    ds = tmp_path / "ds"
    ingest([real / "nsys" / "a100_vector_add"], ds, job="a100")
    ingest([real / "nsys" / "cpu_nvtx_nccl_like" / "nsys2023.4_cpu_nvtx_nccl_like.sqlite"], ds,
           job="nvtx")  # fmt: skip
    for job in ("a100", "nvtx"):
        out = tmp_path / f"{job}.html"
        build_report(ds, output=out, job=job)
        check_page(browser, out)


def test_thousand_ranks_small_page_that_draws(browser, tmp_path):
    ds = tmp_path / "big"
    large_job(ds, ranks=1000)
    out = tmp_path / "big.html"
    start = time.monotonic()
    result = build_report(ds, output=out)
    build_s = time.monotonic() - start
    assert result.size_bytes < 10_000_000
    res = check_page(browser, out, tmp_path / "big.png")
    print(
        f"1,000 ranks: page {result.size_bytes / 1e6:.2f} MB, built in {build_s:.1f} s, "
        f"rendered in {res.load_s:.2f} s"
    )
    # (the load time is printed, not asserted: tests never assert on wall time; the page's
    # size and its drawing every chart are what keep it quick to open)
    assert "time_per_rank" in result.charts and "late_ranks" in result.charts


def test_big_charts_draw_on_a_canvas_and_small_ones_as_svg(browser, tmp_path):
    out = tmp_path / "mixed.html"
    out.write_text(page_of_small_and_big_charts())
    res = check_page(browser, out)
    drawn = {c["name"]: c["renderer"] for c in res.charts}
    assert drawn == {"small": "svg", "edge": "svg", "big": "canvas", "big_concatenated": "canvas"}


_NCCL_TESTS_OUT = """\
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20
# Using devices
#  Rank  0 Group  0 Pid  11 on h0 device  0 [0000:4c:00] GPU
#  Rank  1 Group  0 Pid  12 on h0 device  1 [0000:4d:00] GPU
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           256     float     sum      -1    10.00    0.10    0.10      0     9.50    0.11    0.11      0
       65536         16384     float     sum      -1    14.00    4.68    4.68      0    13.80    4.75    4.75      0
     4194304       1048576     float     sum      -1   160.00   26.21   26.21      0   158.00   26.55   26.55      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 10.5
"""  # noqa: E501


def test_nccl_logs_and_nccl_tests_only(browser, tmp_path):
    """The sample job's NCCL logs alone (no profiler trace), and an nccl-tests output as a job
    of its own: both reports open cleanly and say why time is missing (the tests' own data,
    as test_real_nccl_logs_only does with the public logs)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for log in sorted(SAMPLE.glob("rank*.nccl.log")):
        (logs / log.name).write_bytes(log.read_bytes())
    bench = tmp_path / "bench" / "all_reduce_perf.txt"
    bench.parent.mkdir()
    bench.write_text(_NCCL_TESTS_OUT)
    ds = tmp_path / "ds"
    assert not ingest([logs], ds, job="logs", jobs=1).errors
    assert not ingest([bench.parent], ds, job="bench", jobs=1).errors
    link(ds)
    tests_rows = pipeline.open(ds).sql("SELECT count(*) FROM bandwidth_tests WHERE job = 'bench'")
    assert tests_rows.item() == 6  # three sizes, out of place and in place
    for job in ("logs", "bench"):
        out = tmp_path / f"{job}.html"
        build_report(ds, output=out, job=job)
        check_page(browser, out)
        assert "carry no timings" in browser.text()
