"""The predict benchmark (benchmarks/bench_predict.py) at its smallest: it runs every world
size up to 2^30 ranks and prints one line each, with the DP group it predicted for and, where
listed, the members it listed: TP 8 x PP 16 leave world / 128 ranks in each."""

from __future__ import annotations

import re

import pytest

from benchmarks.bench_predict import WORLDS, main


def test_bench_predict_prints_every_world(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--repeat", "1", "--list-max", "1024"])
    out = capsys.readouterr().out
    lines = re.findall(r"^\s+([\d,]+) ranks .*\(DP group of ([\d,]+)\)\s+(.*)$", out, re.M)
    got = [(int(w.replace(",", "")), int(n.replace(",", "")), rest) for w, n, rest in lines]
    assert [(w, n) for w, n, _ in got] == [(w, w // 128) for w in WORLDS]
    # only the smallest world (1,024 ranks) is listed: 8 members, as predicted
    assert [
        re.search(r"listing the group \(([\d,]+) members\)", r) is not None for *_, r in got
    ] == [True, False, False, False, False]
    assert "listing the group (8 members)" in got[0][2]
