"""Every command that writes, on a read-only file system (EROFS): one line naming the path
it could not write, exit 1, nothing left behind, the dataset as it was.

The tests run as root, for whom ``chmod`` does not make a folder read-only; a read-only bind
mount does, for everyone: each command runs in a mount namespace of its own (``unshare -m``)
in which the folder is bound onto itself read-only, so the mount is gone when it exits.
Where the container allows no mount namespace the tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.reliability.hostile import assert_one_error, digest, run_cli

SAMPLES = REPO_ROOT / "sample_traces"
#: Binds folder $1 onto itself read-only, then runs the rest of the arguments.
_READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def _read_only_run(folder: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """``tokenwire ARGS`` with ``folder`` mounted read-only for it alone."""
    argv = [sys.executable, "-m", "pipeline", *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MALLOC_ARENA_MAX": "2"}
    env.pop("TOKENWIRE_DEBUG", None)
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", _READ_ONLY, "sh", str(folder), *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=600,  # a safety net against a hung run, not an assertion
    )


def _mounts_allowed(folder: Path) -> str | None:
    """None when a read-only bind mount can be made here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            _READ_ONLY + " 2>&1",
            "sh",
            str(folder),
            "touch",
            str(folder / "probe"),
        ],  # fmt: skip
        capture_output=True,
        text=True,
    )
    if "Read-only file system" not in probe.stdout + probe.stderr:
        return f"no read-only bind mount in a mount namespace here: {probe.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A linked dataset of the sample job's first two ranks (NCCL logs, Kineto traces)."""
    root = tmp_path_factory.mktemp("erofs")
    why = _mounts_allowed(root)
    if why:
        pytest.skip(why)
    src = root / "src"
    src.mkdir()
    for rank in (0, 1):
        shutil.copy(SAMPLES / f"rank{rank}.nccl.log", src)
        shutil.copy(next(SAMPLES.glob(f"rank{rank}.*.pt.trace.json.gz")), src)
    dataset = root / "ds"
    for args in (["ingest", src, "-o", dataset, "--job", "j"],
                 ["link", dataset, "--config", SAMPLES / "job.yaml"]):  # fmt: skip
        done = run_cli(*args)
        assert done.returncode == 0, done.stderr[-2000:]
    return dataset


#: Each writing command: its arguments (``RO``: the read-only folder, ``DS``: the dataset in
#: it, ``W``: a writable folder) and the path its error line names.
CASES = {
    "ingest-new": (["ingest", SAMPLES / "rank2.nccl.log", "-o", "RO/new"], "RO/new"),
    "ingest-into": (["ingest", SAMPLES / "rank2.nccl.log", "-o", "DS", "--job", "j"], "DS"),
    "link": (["link", "DS", "--config", SAMPLES / "job.yaml"], "DS"),
    "sql-o": (["sql", "DS", "SELECT 1 AS x", "--format", "csv", "-o", "RO/x.csv"], "RO/x.csv"),
    "report": (["report", "DS", "-o", "RO/r.html"], "RO/r.html"),
    "report-png-dir": (["report", "DS", "-o", "W/r.html", "--png-dir", "RO/png"], "RO/png"),
    "export": (["export", "DS", "-o", "RO/t.json"], "RO/t.json"),
    "export-flows": (["export", "DS", "--flows", "-o", "RO/f.csv"], "RO/f.csv"),
    "diff-html": (["diff", "DS", "j", "j", "--html", "RO/d.html"], "RO/d.html"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_read_only_file_system(linked: Path, tmp_path: Path, case: str) -> None:
    read_only = tmp_path / "ro"
    shutil.copytree(linked, read_only / "ds")
    writable = tmp_path / "w"
    writable.mkdir()
    names = {"RO": str(read_only), "DS": str(read_only / "ds"), "W": str(writable)}

    def fill(arg: str | Path) -> str:
        text = str(arg)
        for key, value in names.items():
            text = text.replace(key, value) if text.split("/")[0] == key else text
        return text

    args, named = CASES[case]
    before = digest(read_only)
    done = _read_only_run(read_only, *map(fill, args))
    assert_one_error(done, f"Error: {fill(named)}", "Read-only file system")
    assert digest(read_only) == before  # (the mount made sure; the digest shows it held)
    assert digest(writable) == {}  # no report beside images that could not be written
