"""A disk that fills during an ingest: one clear line, exit 1, the dataset as it was.

Two ways: an ENOSPC injected where the writer writes (Parquet parts, the ``files`` rows,
the manifest), and a real 1 MiB tmpfs (root only; skipped where mounting is not allowed).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.dataset import compact, small_parts, store
from pipeline.ingest import run
from tests.conftest import tree_digest
from tests.reliability.corpus import write_inline_seeds
from tests.reliability.procs import RANKS, make_job, rows


def ingest(*args: str | Path):
    return CliRunner().invoke(cli, ["ingest", *map(str, args)])


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A dataset holding the inline seeds of job ``job``."""
    write_inline_seeds(tmp_path / "job")
    result = ingest(tmp_path / "job", "-o", tmp_path / "ds")
    assert result.exit_code == 0, result.output
    return tmp_path / "ds"


def _errors(result) -> list[str]:
    """The ``Error:`` lines, each cut after "while writing " (the part named differs)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    return [line.split("while writing ")[0] + "while writing " for line in lines]


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_after(n: int, real):
    """``real``, but raising ENOSPC from the ``n``-th call on."""
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= n:
            _enospc()
        return real(*args, **kwargs)

    return wrapper


# Parts are written through pyarrow's ParquetWriter (store.PartWriter), a row group at a time.
_WRITE_TABLE = pq.ParquetWriter.write_table


def _fail_on_files_rows(writer, *args, **kwargs):
    if "/files/" in str(writer.where):
        _enospc()
    return _WRITE_TABLE(writer, *args, **kwargs)


_REPLACE = os.replace


def _fail_on_manifest(src, dst):
    if str(dst).endswith("manifest.json"):
        _enospc()
    return _REPLACE(src, dst)


@pytest.mark.parametrize(
    ("target", "patch"),
    [
        ("write_table", lambda: _fail_after(1, _WRITE_TABLE)),  # the first part
        ("write_table", lambda: _fail_after(5, _WRITE_TABLE)),  # some parts written
        ("write_table", lambda: _fail_on_files_rows),  # every part written, not files rows
        ("replace", lambda: _fail_on_manifest),  # every part written, the commit fails
        ("replace", lambda: _fail_after(3, os.replace)),  # the rename of a finished part
    ],
    ids=["first-part", "later-part", "files-rows", "manifest", "rename"],
)
def test_injected_disk_full(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, patch
) -> None:
    src = make_job(tmp_path / "more", events=5)
    before = tree_digest(dataset)
    owner = {"write_table": pq.ParquetWriter, "replace": store.os}[target]
    monkeypatch.setattr(owner, target, patch())
    result = ingest(src, "-o", dataset)
    assert result.exit_code == 1, result.output
    assert _errors(result) == [f"Error: {dataset}: disk full while writing "]
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert tree_digest(dataset) == before
    monkeypatch.undo()
    # Space again: the same ingest now goes through.
    assert ingest(src, "-o", dataset).exit_code == 0
    assert rows(dataset)["files"] == 5 + RANKS


def test_disk_full_while_merging_small_parts(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part written and the files rows too, then the disk fills while the small parts
    are merged: the commit has not happened, the dataset is as it was."""
    src = make_job(tmp_path / "more", events=5)
    before = tree_digest(dataset)
    # no small table waits for the commit: each file's are written as it comes, to be merged
    monkeypatch.setattr(run, "SMALL_TABLES_BYTES", 0)
    merged = "part-" + "f" * 16  # the merged parts' name, to tell them from the others
    monkeypatch.setattr(compact, "part_id", lambda names: "f" * 16)
    _disk_full_on(monkeypatch, merged)
    result = ingest(src, "-o", dataset)
    assert result.exit_code == 1, result.output
    assert _errors(result) == [f"Error: {dataset}: disk full while writing "]
    assert merged in result.stderr
    assert tree_digest(dataset) == before


def test_disk_full_while_writing_the_small_tables_at_commit(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file parsed, their small tables held for the commit, then the disk fills while
    the commit writes them: the dataset is as it was."""
    src = make_job(tmp_path / "more", events=5)
    before = tree_digest(dataset)
    shared = "part-" + "e" * 16  # the name of the parts written for the run as a whole
    monkeypatch.setattr(small_parts, "part_id", lambda names: "e" * 16)
    _disk_full_on(monkeypatch, shared)
    result = ingest(src, "-o", dataset)
    assert result.exit_code == 1, result.output
    assert _errors(result) == [f"Error: {dataset}: disk full while writing "]
    assert shared in result.stderr and "files/" not in result.stderr  # before the files rows
    assert tree_digest(dataset) == before


def _disk_full_on(monkeypatch: pytest.MonkeyPatch, part: str) -> None:
    """Every write to a part whose name holds ``part`` fails as on a full disk."""

    def fail(writer, *args, **kwargs):
        if part in str(writer.where):
            _enospc()
        return _WRITE_TABLE(writer, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", fail)


def test_disk_full_into_a_new_dataset_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_job(tmp_path / "job", events=5)
    monkeypatch.setattr(pq.ParquetWriter, "write_table", _fail_after(3, _WRITE_TABLE))
    result = ingest(src, "-o", tmp_path / "new")
    assert result.exit_code == 1
    assert _errors(result) == [f"Error: {tmp_path / 'new'}: disk full while writing "]
    assert not (tmp_path / "new").exists()


def test_other_write_errors_are_clean_too(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def eio(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    src = make_job(tmp_path / "more", events=5)
    before = tree_digest(dataset)
    monkeypatch.setattr(pq.ParquetWriter, "write_table", eio)
    result = ingest(src, "-o", dataset)
    assert result.exit_code == 1
    assert f"Error: {dataset}: cannot write " in result.stderr
    assert ": Input/output error" in result.stderr
    assert tree_digest(dataset) == before


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs, where this process may mount one (root in a container that allows it)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tokenwire-test", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_real_full_disk(tiny_tmpfs: Path, tmp_path: Path) -> None:
    """A small job fits; a big one fills the 1 MiB disk; the small job's dataset survives."""
    small = make_job(tmp_path / "small", events=5)
    dataset = tiny_tmpfs / "ds"
    assert ingest(small, "-o", dataset).exit_code == 0
    before = tree_digest(dataset)
    big = make_job(tmp_path / "big", events=20_000)
    result = ingest(big, "-o", dataset)
    assert result.exit_code == 1, result.output
    assert _errors(result) == [f"Error: {dataset}: disk full while writing "]
    assert tree_digest(dataset) == before
    assert rows(dataset)["files"] == RANKS
