"""The benchmark's measuring helpers (benchmarks/measure.py): which of repeated runs counts;
and the floor step of bench_kineto (its child checks what it rewrote)."""

from __future__ import annotations

from benchmarks.measure import Measurement, line, measure, median_run, timed
from tests.conftest import REPO_ROOT


def _run(seconds: float, inner: float | None = None, ok: bool = True) -> Measurement:
    return Measurement("step", seconds, 100.0, ok=ok, inner_seconds=inner)


def test_the_median_run_is_kept_with_every_runs_time() -> None:
    runs = [_run(3.0), _run(1.0), _run(2.0)]
    kept = median_run(runs)
    assert kept.seconds == 2.0 and kept.runs == [3.0, 1.0, 2.0]
    assert "(median of 3: 3.00, 1.00, 2.00 s)" in line(kept)


def test_an_even_number_of_runs_keeps_the_lower_middle_one_by_the_timed_part() -> None:
    # (the whole run's time orders them the other way: the timed part decides)
    runs = [_run(9.0, 0.4), _run(8.0, 0.1), _run(7.0, 0.3), _run(6.0, 0.2)]
    kept = median_run(runs)
    assert (kept.seconds, timed(kept)) == (6.0, 0.2)
    assert kept.runs == [0.4, 0.1, 0.3, 0.2]


def test_a_failed_run_is_what_the_step_reports() -> None:
    failed = Measurement("step", 1.0, 0.0, ok=False, note="boom")
    assert median_run([_run(1.0), failed, _run(2.0)]) is failed
    assert median_run([_run(5.0)]).runs == [5.0]


def test_a_child_reports_its_timed_part() -> None:
    code = "import os, sys, time\nopen(os.environ['TW_TIMING'], 'w').write(sys.argv[1])\n"
    m = measure("child", code, "0.25")
    assert m.ok and m.inner_seconds == 0.25 and timed(m) == 0.25 and m.seconds > 0
    assert line(m).endswith("(timed part 0.250 s)")
    bad = measure("child", "raise SystemExit('no luck')", check=False)
    assert not bad.ok and bad.note == "no luck"


def test_the_link_floor_rewrites_every_collective_and_fails_on_none(tmp_path) -> None:
    from benchmarks.bench_kineto import REWRITE
    from pipeline.ingest.run import ingest

    dataset = tmp_path / "ds"
    files = sorted((REPO_ROOT / "sample_traces").glob("rank0.*"))
    assert not ingest(files, dataset, job="sample", jobs=1).errors
    m = measure("floor", REWRITE, str(dataset))
    assert m.ok and m.inner_seconds is not None and m.inner_seconds > 0
    # (a dataset without collectives has nothing to rewrite: the step says so rather than
    # timing nothing)
    (tmp_path / "empty" / "collectives").mkdir(parents=True)
    bad = measure("floor", REWRITE, str(tmp_path / "empty"), check=False)
    assert not bad.ok and bad.note.endswith("no collectives to rewrite")
