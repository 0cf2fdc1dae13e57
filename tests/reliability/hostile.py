"""Helpers for the hostile-input tests: run the real CLI in a child process with its memory and
CPU time capped, and check its one error line and that the input folder was left as it was.

Limits are enforced by the kernel in the child (``RLIMIT_AS``, ``RLIMIT_CPU``), never measured
as wall time: the machine is shared, a wall-clock bound would flake. A child that runs past
the CPU limit is killed by SIGXCPU, past the memory limit fails its allocation (an internal
error, exit 3, or a MemoryError): either way the test's exit-code assertion fails.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
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


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))


def run_cli(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m pipeline ARGS`` from the repository root, under the limits above.

    ``RLIMIT_AS`` counts address space reserved, not memory used, and glibc reserves 64 MiB
    per thread arena (Polars, Arrow and DuckDB start threads): two arenas keep the reserve
    near what is used, so the limit measures the input's cost, not the thread count.
    """
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)],
        cwd=REPO_ROOT,
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},
        capture_output=True,
        text=True,
        preexec_fn=_limits,  # noqa: PLW1509 - the limits must be set in the child
        timeout=600,  # a safety net against a hung test run, not an assertion
    )


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's sha256, or the kind of anything else."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_file() and not path.is_symlink():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir" if path.is_dir() else "other"
    return out


def error_line(result: subprocess.CompletedProcess, path: Path, place: str) -> str:
    """The one ``Error:`` line of ``result``, checked: it names ``path`` and then a place the
    regex ``place`` matches right after it (``: byte \\d+: ``, ``:3: ``, ``: entry 0: ``), and it
    is short. ``tokenwire ingest`` also prints its summary on
    stderr (files, rows, warnings); every other line must be one of those, never a traceback.
    """
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    line = errors[0]
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
