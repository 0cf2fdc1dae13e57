"""Two ingests into one dataset at once: the second stops at once, naming the holder's pid.

tokenwire does not wait for the lock (an ingest can take minutes; a second one started by
mistake should say so now, not hang): it exits 1 with ``another tokenwire process (pid N)
is writing this dataset``. The other one finishes as if alone; nothing interleaves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipeline.dataset.commit import writer_lock
from pipeline.dataset.store import LOCK
from pipeline.errors import DatasetError
from pipeline.ingest.run import ingest
from tests.conftest import REPO_ROOT
from tests.reliability.procs import RANKS, make_job, rows, start_ingest

HOLD = (
    "import sys; from pathlib import Path; from pipeline.dataset.commit import writer_lock\n"
    "with writer_lock(Path(sys.argv[1])):\n"
    "    print('held', flush=True); sys.stdin.read()\n"
)


def test_second_ingest_stops_naming_the_holder(tmp_path: Path) -> None:
    """Another process holds the lock (as a running ingest does, for as long as it runs)."""
    dataset = tmp_path / "ds"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(dataset)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        second = start_ingest(make_job(tmp_path / "job", events=5), dataset)
        _, err = second.communicate(timeout=120)
    finally:
        holder.communicate("", timeout=30)  # closes stdin: the holder releases and exits
    assert second.returncode == 1, err
    error = [line for line in err.splitlines() if line.startswith("Error:")]
    assert error == [
        f"Error: {dataset}: another tokenwire process (pid {holder.pid}) is writing this "
        "dataset; run again when it has finished"
    ]
    assert not (dataset / "manifest.json").exists()  # it wrote nothing
    again = start_ingest(tmp_path / "job", dataset)
    assert again.communicate(timeout=120) and again.returncode == 0
    assert rows(dataset)["files"] == RANKS


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


def test_folder_made_by_another_writer_just_before_our_mkdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ingests started together both find the dataset missing; the second's ``mkdir``
    then meets the folder the first made. It goes on to the lock, as if it had been there."""
    dataset = tmp_path / "ds"
    mkdir = Path.mkdir

    def other_writer_first(self: Path, *args: object, **kwargs: object) -> None:
        if self == dataset:
            os.mkdir(dataset)  # the other writer, just before ours
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", other_writer_first)
    summary = ingest([make_job(tmp_path / "job", events=5)], dataset)
    monkeypatch.undo()
    assert summary.count("ingested") == RANKS
    assert rows(dataset)["files"] == RANKS
