"""Helpers for the hostile-input tests: the real command in a child process under resource
limits, and digests that show nothing outside the dataset (or the input) changed."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT

#: Address space and CPU seconds a command may use on a hostile input: a bomb that gets
#: past a check ends in a failed allocation or SIGXCPU, which the tests see as a failure.
MEMORY_BYTES = 3 << 30
CPU_SECONDS = 60


@dataclass
class Outcome:
    """What one command did."""

    code: int
    stdout: str
    stderr: str

    def __repr__(self) -> str:  # (an assertion shows the end of what was printed)
        return f"Outcome(code={self.code}, stderr={self.stderr[-2000:]!r})"

    @property
    def errors(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("Error:")]


def drop_privileges() -> None:
    """Take the two capabilities that let root pass file permissions (CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH) out of this process's bounding set, so that what it runs meets
    permissions as another user would: the tests run as root, for whom ``chmod 000``
    otherwise changes nothing. (Clearing the capabilities themselves would not last: a
    root process gets its bounding set back when it runs a program.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def run_cli(
    *args: str | Path,
    cwd: Path | None = None,
    unprivileged: bool = False,
    file_bytes: int | None = None,
    env: dict[str, str] | None = None,
) -> Outcome:
    """``tokenwire ARGS`` in a child process with bounded memory and CPU time; without any
    capability when ``unprivileged``, with writes past ``file_bytes`` refused (EFBIG) when
    given."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
        if file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        if unprivileged:
            drop_privileges()

    child_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        cwd=cwd or REPO_ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        preexec_fn=limits,
        timeout=600,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def digest(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (links not followed): a file's sha256, a link's target,
    a folder's mark; the state a test compares before and after."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def edit_manifest(dataset: Path, edit) -> None:  # noqa: ANN001
    """Apply ``edit`` to the manifest's JSON document and write it back."""
    path = dataset / "manifest.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def assert_one_error(outcome: Outcome, *fragments: str, code: int = 1) -> str:
    """The command exited with ``code`` and printed one ``Error:`` line holding every
    fragment, no traceback; the line."""
    assert outcome.code == code, outcome
    assert len(outcome.errors) == 1, outcome.stderr
    line = outcome.errors[0]
    assert "Traceback" not in outcome.stderr and "internal error" not in line, outcome.stderr
    assert len(line) <= 1000, line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line
