"""Helpers for the hostile-input tests: run the real CLI in a child process with its memory and
CPU time capped, check its one error line, and digest folders to show that nothing outside the
dataset (and no input) changed.

Limits are enforced by the kernel in the child (``RLIMIT_AS``, ``RLIMIT_CPU``), never measured
as wall time: the machine is shared, a wall-clock bound would flake. A child that runs past
the CPU limit is killed by SIGXCPU, past the memory limit fails its allocation (an internal
error, exit 3, or a MemoryError): either way the test's exit-code assertion fails.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

#: Address space the child may map. The CLI uses some 200-300 MB but reserves up to 1.8 GB
#: (thread stacks, allocator arenas, shared libraries), and below about 1.5 GB loading
#: pyarrow's libraries can fail; every bomb here would need several GB to be read whole.
MEMORY_LIMIT = 2 * 1024 * 1024 * 1024
#: CPU seconds the child may use; a fixed case takes a few.
CPU_LIMIT_S = 30
#: Longest error line accepted: a message is one readable line, never a dump of the input.
MAX_LINE = 400


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
) -> subprocess.CompletedProcess:
    """``python -m pipeline ARGS`` under the limits above; without the capabilities that
    pass file permissions when ``unprivileged``; with writes past ``file_bytes`` refused
    (EFBIG) when given.

    ``RLIMIT_AS`` counts address space reserved, not memory used, and glibc reserves 64 MiB
    per thread arena (Polars, Arrow and DuckDB start threads): two arenas keep the reserve
    near what is used, so the limit measures the input's cost, not the thread count.
    """

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))
        if file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        if unprivileged:
            drop_privileges()

    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        cwd=cwd or REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        preexec_fn=limits,  # noqa: PLW1509 - the limits must be set in the child
        timeout=600,  # a safety net against a hung test run, not an assertion
    )


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
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "other"
    return out


def edit_manifest(dataset: Path, edit) -> None:  # noqa: ANN001
    """Apply ``edit`` to the manifest's JSON document and write it back."""
    path = dataset / "manifest.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def errors(result: subprocess.CompletedProcess) -> list[str]:
    """The ``Error:`` lines a command printed."""
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


def assert_one_error(result: subprocess.CompletedProcess, *fragments: str, code: int = 1) -> str:
    """The command exited with ``code`` and printed one short ``Error:`` line holding every
    fragment, no traceback; the line."""
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    lines = errors(result)
    assert len(lines) == 1, result.stderr[-2000:]
    line = lines[0]
    assert "Traceback" not in result.stderr and "internal error" not in line, result.stderr
    assert len(line) <= 1000, line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def error_line(result: subprocess.CompletedProcess, path: Path, place: str) -> str:
    """The one ``Error:`` line of ``result``, checked: it names ``path`` and then a place the
    regex ``place`` matches right after it (``: byte \\d+: ``, ``:3: ``, ``: entry 0: ``), and it
    is short. ``tokenwire ingest`` also prints its summary on
    stderr (files, rows, warnings); every other line must be one of those, never a traceback.
    """
    lines = result.stderr.splitlines()
    found = errors(result)
    assert len(found) == 1, result.stderr[-2000:]
    line = found[0]
    assert len(line) <= MAX_LINE, line[:MAX_LINE]
    head = f"Error: {path}"
    assert line.startswith(head), line
    assert re.match(place, line[len(head) :]), line
    summary = re.compile(r"^(ingest|files: |  \S|Warning: |Error: )")
    assert all(summary.match(x) for x in lines), result.stderr[-2000:]
    return line


def only_line(result: subprocess.CompletedProcess, path: Path, place: str) -> str:
    """Like :func:`error_line` for commands that print nothing else on stderr (``hang``)."""
    line = error_line(result, path, place)
    assert result.stderr.splitlines() == [line], result.stderr[-2000:]
    return line
