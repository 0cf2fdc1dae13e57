"""Folders as they come: hidden folders and links the walk passes over are named, an ingest
that ingests nothing fails, and a file gives the same outcome named or found in a folder
(or the message says why not)."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli
from tests.conftest import REPO_ROOT

ROCPROF = REPO_ROOT / "tests/data/rocprof/fsdp_rank1.rocprofv3.json.gz"


def _ingest(*args: str):
    return CliRunner().invoke(cli, ["ingest", *args])


def _trace_in(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(ROCPROF, folder))


def test_traces_only_under_hidden_folders_are_named_not_lost(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _trace_in(repo / ".github" / "traces")
    _trace_in(repo / ".cache")
    out = tmp_path / "ds"
    result = _ingest(str(repo), "-o", str(out))
    assert result.exit_code == 1
    assert f"{repo}: no files in this folder but hidden ones" in result.stderr
    assert f"{repo / '.cache'}/, {repo / '.github'}/" in result.stderr
    assert "name one to ingest it" in result.stderr
    assert not out.exists()
    # named, a hidden folder is read
    named = _ingest(str(repo / ".github"), "-o", str(out))
    assert named.exit_code == 0, named.output
    assert "files: 1 ingested" in named.stderr


def test_what_the_walk_passes_over_beside_traces_is_noted(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _trace_in(job)
    _trace_in(job / ".cache")
    (tmp_path / "elsewhere").mkdir()
    (job / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    result = _ingest(str(job), "-o", str(tmp_path / "ds"))
    assert result.exit_code == 0, result.output
    assert "files: 1 ingested" in result.stderr
    note = next(line for line in result.stderr.splitlines() if line.startswith("Note: passed over"))
    assert f"{job / '.cache'}/" in note
    assert f"{job / 'linked'}/" in note


def test_an_ingest_of_nothing_fails_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "notes"
    src.mkdir()
    (src / "a.txt").write_text("one\n")
    (src / "b.md").write_text("two\n")
    out = tmp_path / "ds"
    result = _ingest(str(src), "-o", str(out))
    assert result.exit_code == 1
    assert "Error: nothing was ingested: none of the 2 files found is a trace" in result.stderr
    assert not (out / "manifest.json").exists()


def test_a_reingest_of_files_the_dataset_holds_is_no_failure(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _trace_in(job)
    out = tmp_path / "ds"
    assert _ingest(str(job), "-o", str(out)).exit_code == 0
    again = _ingest(str(job), "-o", str(out))
    assert again.exit_code == 0, again.output
    assert "files: 0 ingested, 1 skipped" in again.stderr


def test_a_file_named_or_found_in_a_folder_says_why_the_outcomes_differ(tmp_path: Path) -> None:
    job = tmp_path / "job"
    trace = _trace_in(job)
    notes = job / "notes.txt"
    notes.write_text("not a trace\n")
    in_folder = _ingest(str(job), "-o", str(tmp_path / "a"))
    assert in_folder.exit_code == 0
    assert (
        f"{notes}: not a trace format tokenwire reads; skipped, as a folder's other files are "
        "(named alone, it is an error)"
    ) in in_folder.stderr
    named = _ingest(str(trace), str(notes), "-o", str(tmp_path / "b"))
    assert named.exit_code == 1
    assert f"Error: {notes}: not a trace format tokenwire reads" in named.stderr
    # the trace itself: the same outcome either way
    assert "files: 1 ingested" in in_folder.stderr and "1 ingested" in named.stderr
