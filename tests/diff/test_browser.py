"""The diff page in a real browser, as the report is tested (tests/report/test_browser.py):
headless Chromium opens it offline; no console error, every chart drawn, no request but the
page itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.diff import diff_jobs
from pipeline.diff.page import write_page
from tests.report.cdp import Browser, chromium_path
from tests.report.test_browser import check_page


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


def test_ddp_to_fsdp_page(browser, runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "diff.html"
    write_page(diff_jobs(runs["ddp"], "ddp", "fsdp", other=runs["fsdp"]), out)
    res = check_page(browser, out, tmp_path / "diff.png")
    assert {c["name"] for c in res.charts} == {
        "diff_step_time", "diff_traffic_bytes", "diff_op_time"
    }  # fmt: skip
    text = browser.text()
    assert "Predicted change next to observed change" in text
    assert "reduce_scatter" in text and "FSDPBlock_1" in text


def test_sample_against_itself_page(browser, sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "same.html"
    write_page(diff_jobs(sample, "sample", "sample"), out)
    check_page(browser, out)
    assert "Largest time changes per op and kernel" in browser.text()
