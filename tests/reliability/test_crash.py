"""``tokenwire ingest`` killed with SIGKILL at random points, then run again.

After each kill the dataset must read (every part the manifest lists is whole, the views
work) and a rerun must finish it with exactly the rows of a clean ingest: nothing lost,
nothing twice. The killed process's lock file is left behind with its dead pid; the rerun
takes it over.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.dataset.schema import load_schemas
from pipeline.dataset.store import LOCK, read_manifest
from pipeline.ingest.run import ingest
from tests.reliability.procs import RANKS, make_job, rows, start_ingest, wait_for


def assert_reads_cleanly(dataset: Path) -> None:
    if not (dataset / "manifest.json").exists():
        return  # killed before the first commit: nothing to read yet, nothing lost
    manifest = read_manifest(dataset)
    for table in load_schemas():
        for rel in manifest.parts(table):
            pq.read_table(dataset / rel)  # whole, or this raises
    rows(dataset)


def test_sigkill_at_random_points_then_rerun(tmp_path: Path) -> None:
    src = make_job(tmp_path / "job")
    ref = tmp_path / "ref"
    proc = start_ingest(src, ref)
    locked = wait_for(ref / LOCK, proc)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    busy = time.monotonic() - locked  # how long the lock is held: where kills must land
    expected = rows(ref)
    assert expected["files"] == RANKS

    # Three kills in a row on one dataset (each run recovering what the last one left),
    # then a run that finishes.
    rng = random.Random(20261130)
    dataset = tmp_path / "ds"
    stale_locks = 0
    # The first kill lands just after the lock is taken, so that a stale lock is certain.
    for delay in (0.0, rng.uniform(0.05, 0.9), rng.uniform(0.05, 0.9)):
        proc = start_ingest(src, dataset)
        wait_for(dataset / LOCK, proc)
        time.sleep(delay * busy)
        proc.kill()
        proc.communicate(timeout=30)
        if (dataset / LOCK).exists():
            stale_locks += 1
            assert int((dataset / LOCK).read_text().split()[0]) == proc.pid
        assert_reads_cleanly(dataset)
    assert stale_locks >= 1
    rerun = start_ingest(src, dataset)
    _, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert "Traceback" not in err
    assert rows(dataset) == expected
    assert not (dataset / LOCK).exists()
    assert not [p for p in dataset.rglob("*") if ".tmp-" in p.name]
    listed = {p for t in load_schemas() for p in read_manifest(dataset).parts(t)}
    on_disk = {p.relative_to(dataset).as_posix() for p in dataset.rglob("*.parquet")}
    assert on_disk == listed  # no half-written or orphaned part left


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    src = make_job(tmp_path / "job", events=3)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dataset = tmp_path / "ds"
    dataset.mkdir()
    (dataset / LOCK).write_text(f"{dead.pid} 0\n")
    summary = ingest([src], dataset)
    assert summary.count("ingested") == RANKS
    assert rows(dataset)["files"] == RANKS
    assert not (dataset / LOCK).exists()
