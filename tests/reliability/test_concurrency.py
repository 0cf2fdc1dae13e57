"""Two ingests into one dataset at once: the second stops at once, naming the holder's pid.

tokenwire does not wait for the lock (an ingest can take minutes; a second one started by
mistake should say so now, not hang): it exits 1 with ``another tokenwire process (pid N)
is writing this dataset``. The first one finishes as if alone; nothing interleaves.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pipeline.dataset.store import LOCK, writer_lock
from pipeline.errors import DatasetError
from pipeline.ingest.run import ingest
from tests.reliability.procs import RANKS, make_job, rows, start_ingest, wait_for


def test_second_ingest_stops_naming_the_holder(tmp_path: Path) -> None:
    src = make_job(tmp_path / "job")
    other = make_job(tmp_path / "other", events=5)
    dataset = tmp_path / "ds"
    first = start_ingest(src, dataset)
    wait_for(dataset / LOCK, first)
    assert first.poll() is None, "the first ingest ended before the second one started"
    second = start_ingest(other, dataset)
    _, err2 = second.communicate(timeout=120)
    _, err1 = first.communicate(timeout=120)
    assert first.returncode == 0, err1
    assert second.returncode == 1, err2
    error = [line for line in err2.splitlines() if line.startswith("Error:")]
    assert error == [
        f"Error: {dataset}: another tokenwire process (pid {first.pid}) is writing this "
        "dataset; run again when it has finished"
    ]
    assert rows(dataset)["files"] == RANKS  # only the first run's files, all of them


def test_two_ingests_started_together_never_interleave(tmp_path: Path) -> None:
    src_a = make_job(tmp_path / "a", events=2000)
    src_b = make_job(tmp_path / "b", events=2000)
    dataset = tmp_path / "ds"
    procs = [start_ingest(src, dataset) for src in (src_a, src_b)]
    results = [(p, p.communicate(timeout=120)[1]) for p in procs]
    codes = sorted(p.returncode for p, _ in results)
    assert codes in ([0, 0], [0, 1]), results
    for p, err in results:
        if p.returncode == 1:
            winner = next(q for q, _ in results if q is not p)
            assert f"(pid {winner.pid}) is writing this dataset" in err
    done = rows(dataset)
    # Each job is either wholly in the dataset or not at all.
    assert done["files"] == RANKS * codes.count(0)


def test_lock_in_process(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    with writer_lock(dataset):
        assert (dataset / LOCK).read_text().split()[0] == str(os.getpid())
        # A second holder, even in this process (another open file), is refused.
        with pytest.raises(DatasetError, match=rf"\(pid {os.getpid()}\) is writing"):
            with writer_lock(dataset):
                pass
        errors: list[Exception] = []

        def other() -> None:
            try:
                ingest([make_job(tmp_path / "job", events=1)], dataset)
            except DatasetError as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(errors) == 1
    assert not (dataset / LOCK).exists()
    # Released: the next writer gets it.
    assert ingest([tmp_path / "job"], dataset).count("ingested") == RANKS
