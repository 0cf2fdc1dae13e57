"""The big-trace benchmark's inputs and output (benchmarks/big_kineto.py, bench_big.py,
bench_memory.py --big-mb): the recorded run's steps repeated exactly, and each comparison
printed with its target."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_big, bench_memory, big_kineto
from pipeline.ingest.kineto import parse as kineto


def test_a_scaled_rank_is_its_recorded_steps_repeated_exactly(tmp_path: Path) -> None:
    files = big_kineto.write_big_run(tmp_path, file_mb=6.0)
    assert [f.name for f in files] == [f"rank{r}.pt.trace.json" for r in range(4)]
    source = big_kineto.RUN / "rank0.pt.trace.json.gz"
    recorded = kineto.parse(source).tables
    scaled = kineto.parse(files[0]).tables
    copies = scaled["ops"].num_rows // recorded["ops"].num_rows
    assert copies >= 2 and scaled["ops"].num_rows == copies * recorded["ops"].num_rows
    steps = scaled["steps"].column("step").to_pylist()
    first = recorded["steps"].column("step").to_pylist()
    assert steps == list(range(first[0], first[0] + copies * len(first)))
    # every copy's times are the recorded ones moved by a whole number of periods, exactly
    ranks = sorted(big_kineto.RUN.glob("rank*.pt.trace.json.gz"))
    period, _, _ = big_kineto._extent([big_kineto._load(p) for p in ranks])
    start = np.sort(recorded["ops"].column("start_ns").to_numpy())
    moved = np.sort(scaled["ops"].column("start_ns").to_numpy())
    expected = np.sort(np.concatenate([start + k * period * 1000 for k in range(copies)]))
    assert period * 1000 > start[-1] - start[0]
    np.testing.assert_array_equal(moved, expected)
    ids = scaled["ops"].column("external_id").drop_null().to_numpy()
    assert len(np.unique(ids)) == len(ids)  # (ids moved on: no two copies share one)


def test_the_comparison_prints_its_ratio_next_to_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = big_kineto.write_big_run(tmp_path / "big", file_mb=1.0)
    ratio = bench_big.compare("small", files[:2], tmp_path / "work", repeats=1)
    bench_big.stages(files[:1])
    out = capsys.readouterr().out
    found = re.search(r"ingest / typed-decode floor ([\d.]+)x \(CPU [\d.]+x\), target <= 1.5x", out)
    assert found and float(found.group(1)) == pytest.approx(ratio, abs=0.01)
    assert re.search(r"rank0.pt.trace.json\s+decode [\d.]+, frames [\d.]+, tables", out)


def test_the_big_trace_memory_check_prints_its_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    bench_memory.main(["--big-mb", "2"])
    out = capsys.readouterr().out
    assert re.search(r"peak RSS [\d,]+ MB, [\d.]+x the file, target <= 1.0x: (met|NOT MET)", out)
