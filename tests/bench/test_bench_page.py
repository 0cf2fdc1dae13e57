"""bench_page: a report of the generated job opened in headless Chromium, its draw CPU."""

from __future__ import annotations

import os

import pytest

from benchmarks import bench_page
from tests.report.cdp import chromium_path


def test_tree_cpu_counts_this_process():
    sum(i * i for i in range(300_000))  # some CPU of our own
    assert bench_page._tree_cpu(os.getpid()) > 0
    assert bench_page._tree_cpu(-1) == 0


def test_prints_the_page_and_its_draw_cpu(capsys):
    if chromium_path() is None:
        pytest.skip("Chromium is not installed (`make browser`)")
    bench_page.main(["--ranks", "16", "--repeats", "1"])
    line = capsys.readouterr().out
    assert " MB page: Chromium CPU " in line and "(runs: " in line
