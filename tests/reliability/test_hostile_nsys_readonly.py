"""A WAL-mode Nsight SQLite export: reading it must write nothing beside it (SQLite creates
``-wal`` and ``-shm`` files for a WAL database opened ``mode=ro``), so it also reads from a
read-only folder. The tests run as root, for whom ``chmod 555`` changes nothing: they also
check that no file appears in the folder.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from pipeline.synth.nsys import Layout, write_export
from tests.reliability.hostile import digest, error_line, run_cli


def wal_export(path: Path) -> Path:
    write_export(path, ranks=(0,), layout=Layout(steps=1, layers=1, gemms_per_layer=1))
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()  # the last connection checkpoints and removes the -wal file
    assert path.read_bytes()[18:20] == b"\x02\x02"  # the header says WAL
    return path


@pytest.fixture
def folder(tmp_path: Path):
    out = tmp_path / "traces"
    out.mkdir()
    yield out
    out.chmod(0o755)


def test_wal_export_in_a_read_only_folder(folder: Path, tmp_path: Path) -> None:
    path = wal_export(folder / "rank0.sqlite")
    folder.chmod(0o555)
    before = digest(folder)
    assert list(before) == ["rank0.sqlite"]
    result = run_cli("ingest", folder, "-o", tmp_path / "ds")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1 ingested" in result.stderr
    assert digest(folder) == before  # no -wal, no -shm, the database unchanged
    assert path.stat().st_mode & 0o777 == 0o644


def test_wal_export_with_pending_log_is_refused(folder: Path, tmp_path: Path) -> None:
    """A non-empty -wal holds committed pages that an immutable read would miss: refused,
    naming it, rather than read stale or opened in a way that writes beside it."""
    src = tmp_path / "src"
    src.mkdir()
    path = wal_export(src / "rank0.sqlite")
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE later_pages (a)")
    writer.commit()
    for name in ("rank0.sqlite", "rank0.sqlite-wal"):  # a copy taken while it was open
        shutil.copy(src / name, folder / name)
    writer.close()
    assert (folder / "rank0.sqlite-wal").stat().st_size > 0
    before = digest(folder)
    target = folder / "rank0.sqlite"
    result = run_cli("ingest", target, "-o", tmp_path / "ds")
    assert result.returncode == 1, result.stderr[-2000:]
    error_line(result, target, r": cannot read SQLite database: its write-ahead log rank0")
    assert digest(folder) == before
