"""Odd file names, unreadable folders and the error line itself: one bad name never stops a
run, nothing is skipped in silence, and every line tokenwire prints is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.ingest import run
from tests.reliability.corpus import kineto_doc
from tests.reliability.hostile import assert_one_error, digest, drop_privileges, run_cli


def _trace(path: Path, rank: int) -> Path:
    path.write_text(json.dumps(kineto_doc(rank)))
    return path


def test_a_name_that_is_not_utf8_gets_its_own_error(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    _trace(folder / "rank0.pt.trace.json", 0)
    bad = os.fsencode(folder) + b"/rank1-\xe9\xff.pt.trace.json"
    with open(bad, "w") as f:
        f.write(json.dumps(kineto_doc(1)))
    before = digest(folder)
    outcome = run_cli("ingest", folder, "-o", tmp_path / "ds")
    line = assert_one_error(outcome, "rank1-\\xe9\\xff.pt.trace.json", "not valid UTF-8")
    assert line.isprintable()
    assert "files: 1 ingested" in outcome.stderr
    assert digest(folder) == before
    count = run_cli("sql", tmp_path / "ds", "SELECT count(*) AS n FROM files", "--format", "csv")
    assert count.stdout == "n\n1\n"


def test_a_name_with_a_line_break_is_printed_on_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    _trace(folder / "rank0.pt.trace.json", 0)
    (folder / "rank1\nfake\x1b[31m.pt.trace.json").write_text('{"traceEvents": [')
    outcome = run_cli("ingest", folder, "-o", tmp_path / "ds")
    assert_one_error(outcome, "rank1\\nfake\\x1b[31m.pt.trace.json")


@pytest.fixture
def shared_tmp(tmp_path: Path) -> Path:
    """A folder for a child that meets permissions (:func:`hostile.drop_privileges`)."""
    locked = tmp_path / "probe"
    locked.mkdir(mode=0o000)
    probe = subprocess.run(
        [sys.executable, "-c", f"import os; os.listdir({str(locked)!r})"],
        preexec_fn=drop_privileges,
        capture_output=True,
    )
    if probe.returncode == 0:
        pytest.skip("this process reads a chmod 000 folder even without capabilities")
    return tmp_path


def test_an_unreadable_folder_is_reported_not_skipped(shared_tmp: Path) -> None:
    job = shared_tmp / "job"
    (job / "locked").mkdir(parents=True)
    _trace(job / "rank0.pt.trace.json", 0)
    _trace(job / "locked" / "rank1.pt.trace.json", 1)
    (job / "locked").chmod(0o000)
    outcome = run_cli("ingest", job, "-o", shared_tmp / "ds", unprivileged=True)
    assert outcome.returncode == 0, outcome.stderr
    assert f"Warning: {job / 'locked'}: cannot read folder: Permission denied" in outcome.stderr
    # nothing else to read: the folder's error is the run's, exit 1
    outcome = run_cli("ingest", job / "locked", "-o", shared_tmp / "ds2", unprivileged=True)
    assert_one_error(outcome, str(job / "locked"), "cannot read folder")
    assert not (shared_tmp / "ds2").exists()


def test_an_unreadable_file_is_one_line(shared_tmp: Path) -> None:
    job = shared_tmp / "job"
    job.mkdir()
    _trace(job / "rank0.pt.trace.json", 0)
    _trace(job / "rank1.pt.trace.json", 1).chmod(0o000)
    outcome = run_cli("ingest", job, "-o", shared_tmp / "ds", unprivileged=True)
    assert_one_error(outcome, "rank1.pt.trace.json", "cannot read file: Permission denied")
    assert "files: 1 ingested" in outcome.stderr


def test_debug_shows_the_traceback_of_a_parser_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a parser is one line and exit 3; with TOKENWIRE_DEBUG=1 its traceback too."""
    _trace(tmp_path / "rank0.pt.trace.json", 0)

    def broken(tables):  # noqa: ANN001
        raise KeyError("a parser bug")

    monkeypatch.setattr(run, "attribute_collectives", broken)
    args = ["ingest", str(tmp_path / "rank0.pt.trace.json"), "-o", str(tmp_path / "ds")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 3
    assert "internal error: KeyError" in result.stderr and "Traceback" not in result.stderr
    result = CliRunner(env={"TOKENWIRE_DEBUG": "1"}).invoke(cli, args)
    assert result.exit_code == 3
    assert "Traceback (most recent call last)" in result.stderr
    assert "in broken" in result.stderr
