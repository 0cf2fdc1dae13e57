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
from tests.conftest import REPO_ROOT
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


_WIDE_TABLES_JS = """Array.from(document.querySelectorAll('div.table'))
  .filter(d => d.scrollWidth > d.clientWidth + 1)
  .map(d => d.closest('section').id + ': ' + d.scrollWidth + ' > ' + d.clientWidth)"""


def check_page(browser: Browser, page: Path, shot: Path | None = None):
    """Open ``page`` and assert it rendered cleanly and offline, every table within its
    box; the load result."""
    res = browser.open(page)
    assert res.console_errors == []
    assert res.exceptions == []
    assert res.dialogs == []
    assert res.requests == [res.url], "the page asked for something beside itself"
    assert res.charts, "no chart container on the page"
    assert [c["name"] for c in res.charts if not c["drawn"]] == []
    # no column of a table hidden behind a horizontal scroll
    assert browser.evaluate(_WIDE_TABLES_JS) == []
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


_FIRST_SCREEN_JS = """(() => {
  const v = document.getElementById('verdict');
  const bottom = el => el.getBoundingClientRect().bottom;
  return {
    sections: Array.from(document.querySelectorAll('main section')).map(s => s.id),
    leads: Array.from(v.querySelectorAll('p.lead')).map(p => ({text: p.innerText,
                                                               bottom: bottom(p)})),
    warnings: v.querySelectorAll('p.warn').length,
    charts: Array.from(v.querySelectorAll('.chart')).map(c => ({
      name: c.dataset.chart, bottom: bottom(c), drawn: !!c.querySelector('svg')})),
    facts_top: document.getElementById('glance').getBoundingClientRect().top,
    what_if: document.querySelector('#compute table tbody tr td').innerText,
  };
})()"""


def test_the_first_screen_states_the_verdict_in_the_tables_figures(browser, tmp_path):
    """The sample report at 1400 x 900, the first screen a reader sees: the verdict's
    sentences and its four charts, each figure equal to the same figure worked out here from
    the linked tables (ledger, time_breakdown, collective_waits, token_wire) or read from the
    what-if table further down; the job's metadata below the screen. And the story the sample
    tells: ranks 0-3 wait about 60% of every step in backward pp receives for stage 1, and
    nearly all time in collectives is waiting."""
    from pipeline.report import fmt
    from pipeline.report.verdict import _short

    ds = tmp_path / "ds"
    ingest([SAMPLE], ds)
    link(ds, config=JOB_YAML)
    out = tmp_path / "report.html"
    build_report(ds, config=JOB_YAML, output=out)
    browser.viewport(1400, 900)
    try:
        check_page(browser, out)
        browser.screenshot(tmp_path / "first_screen.png", height=900)
        screen = browser.evaluate(_FIRST_SCREEN_JS)
    finally:
        browser.viewport(1280, 900)
    assert screen["sections"][0] == "verdict" and screen["warnings"] == 0
    assert [c["name"] for c in screen["charts"]] == [
        "verdict_model", "verdict_ranks", "verdict_tokens", "verdict_what_if"
    ]  # fmt: skip
    assert all(c["drawn"] and c["bottom"] <= 900 for c in screen["charts"]), screen["charts"]
    assert all(p["bottom"] <= 900 for p in screen["leads"])
    assert screen["facts_top"] > 900  # the job's metadata and files: below the answer
    model, time, tokens, what_if = (p["text"] for p in screen["leads"])
    db = pipeline.open(ds)

    observed, predicted, differing = db.sql(
        "SELECT sum(bytes) / count(DISTINCT step), sum(predicted_bytes) / count(DISTINCT step),"
        " count(DISTINCT (status, parallel_dim, op, phase, purpose, layer, "
        "predicted_message_bytes, message_bytes)) FILTER (WHERE status <> 'matched') FROM ledger"
    ).rows()[0]
    assert f"{fmt.nbytes(observed)} observed, {fmt.nbytes(predicted)} predicted" in model
    assert f"({observed / predicted:.2f}×)" in model
    if differing:
        reason = db.sql(
            "SELECT any_value(reason) FROM ledger WHERE status <> 'matched' GROUP BY status, "
            "parallel_dim, op, phase, purpose, layer, predicted_message_bytes, message_bytes "
            "ORDER BY abs(avg(bytes) - avg(predicted_bytes)) DESC, parallel_dim, op, phase, "
            "status LIMIT 1"
        ).item()
        assert f"{differing:,} ledger items differ" in model
        assert f"Reason: {reason or 'none known'}" in model
    else:
        assert "every item of the model was seen with its size and count" in model

    exposed = db.sql("SELECT sum(exposed_comm_ns) / sum(window_ns) FROM time_breakdown").item()
    waiting = db.sql(
        "SELECT sum(wait_ns) / (sum(wait_ns) + sum(transfer_ns)) FROM collective_waits"
    ).item()
    ranks = db.sql(
        "SELECT w.rank, sum(w.wait_ns) / any_value(t.steps) / any_value(t.window_ns), "
        "list(DISTINCT w.late_rank ORDER BY w.late_rank) FROM collective_waits w "
        "JOIN (SELECT rank, count(*) AS steps, avg(window_ns) AS window_ns FROM time_breakdown "
        "GROUP BY rank) t USING (rank) WHERE w.parallel_dim = 'pp' AND w.op = 'recv' "
        "AND w.phase = 'backward' AND w.late_rank <> w.rank AND w.wait_ns > 0 "
        "GROUP BY w.rank ORDER BY w.rank"
    ).rows()
    assert [r[0] for r in ranks] == [0, 1, 2, 3]
    assert sorted(x for r in ranks for x in r[2]) == [4, 5, 6, 7]  # stage 1 of each pipeline
    share = sum(r[1] for r in ranks) / len(ranks)
    assert 0.5 < share < 0.65 and waiting > 0.9  # the sample's story
    assert f"Exposed communication is {fmt.share(exposed)} of the step" in time
    assert (
        f"Ranks 0–3 spend {fmt.share(share)} of every step waiting in backward pp receives "
        "for stage 1 (ranks 4–7)"
    ) in time
    assert f"{fmt.share(waiting)} of all time in collectives is waiting" in time

    per_token, predicted_per_token = db.sql(
        "SELECT sum(bytes) / count(DISTINCT step) / max(tokens), "
        "sum(predicted_bytes) / count(DISTINCT step) / max(tokens) FROM token_wire"
    ).rows()[0]
    assert (
        f"Each token accounts for {fmt.nbytes(per_token)} of collective messages over all ranks "
        f"({fmt.nbytes(predicted_per_token)} predicted)"
    ) in tokens
    assert what_if.startswith(f"The what-if projects {_short(screen['what_if'])} as the fastest")


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


def test_real_kineto_only(browser, real_traces, tmp_path):
    ds = tmp_path / "ds"
    ingest([real_traces / "kineto" / "dlrm_v100_8ranks"], ds, job="dlrm")
    out = tmp_path / "report.html"
    build_report(ds, output=out)
    check_page(browser, out, tmp_path / "dlrm.png")


def test_real_nccl_logs_only(browser, real_traces, tmp_path):
    """Every NCCL log (and nccl-tests output) is its own job; the reports of the ones with
    topology, collectives and bandwidth tables open cleanly and say why time is missing."""
    ds = tmp_path / "ds"
    logs = sorted((real_traces / "nccl_logs").glob("*.log")) + sorted(
        (real_traces / "nccl_tests").glob("*.txt")
    )
    for log in logs:
        ingest([log], ds, job=log.stem)
    for job in ("nccl-tests-issue-166", "nccl-issue-147", "nccl-issue-1530"):
        out = tmp_path / f"{job}.html"
        build_report(ds, output=out, job=job)
        check_page(browser, out)
        assert "carry no timings" in browser.text()


def test_real_nsight_only(browser, real_traces, tmp_path):
    ds = tmp_path / "ds"
    ingest([real_traces / "nsys" / "a100_vector_add"], ds, job="a100")
    nvtx = real_traces / "nsys" / "cpu_nvtx_nccl_like" / "nsys2023.4_cpu_nvtx_nccl_like.sqlite"
    ingest([nvtx], ds, job="nvtx")
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
