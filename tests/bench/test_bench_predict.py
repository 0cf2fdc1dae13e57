"""The predict benchmark (benchmarks/bench_predict.py) at its smallest: it runs every world
size up to 2^30 ranks and prints one line each."""

from __future__ import annotations

import pytest

from benchmarks.bench_predict import WORLDS, main


def test_bench_predict_prints_every_world(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--repeat", "1", "--list-max", "1024"])
    out = capsys.readouterr().out
    for world in WORLDS:
        assert f"{world:,} ranks" in out
    assert out.count("listing the group") == 1
