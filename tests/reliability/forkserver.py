"""Run ``tokenwire`` commands in forked children of one process that has imported it, for the
hostile-input matrix (``test_matrix.py``): a new interpreter costs a second of imports per
command, a fork a few milliseconds.

The server is a process of its own (``python -m tests.reliability.forkserver``) that imports
the CLI and the libraries it loads, never starts a thread, and forks one child per request:
a fork of the test process itself could inherit thread pools that earlier tests started
(Polars, Arrow, DuckDB), which a child would wait on forever. Each child gets the limits of
:func:`tests.reliability.hostile.run_cli` (address space, CPU seconds, optionally a file
size limit or of open files), its own stdin, stdout and stderr, and
runs the command as ``python -m pipeline`` would; the server answers with its exit status.

Protocol: one JSON request per line on stdin (``args``, ``cwd``, ``stdin``, ``stdout``,
``stderr``: paths; ``file_bytes``, ``open_files``); two JSON answers per
request on stdout: ``{"pid": P}`` when the child starts (a client that waits too long
kills its process group) and ``{"code": N}`` when it ends (a negative N: killed by signal
-N).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys


def _child(request: dict) -> None:
    from tests.reliability.hostile import CPU_LIMIT_S, MEMORY_LIMIT

    os.setsid()
    os.chdir(request["cwd"])
    os.environ.update(request.get("env") or {})
    for fd, (name, flags) in enumerate(
        [
            (request["stdin"], os.O_RDONLY),
            (request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ]
    ):
        new = os.open(name, flags, 0o644)
        os.dup2(new, fd)
        os.close(new)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))
    if request.get("file_bytes") is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = request["file_bytes"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    if request.get("open_files") is not None:
        limit = request["open_files"]
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # the streams an interpreter starts with (the server's hold its requests, read ahead)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(  # noqa: SIM115
        2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
    )
    from pipeline.cli import cli

    sys.argv = ["tokenwire", *request["args"]]
    code = 0
    try:
        cli.main(args=request["args"], prog_name="tokenwire")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    # What the interpreter does at exit: flush the streams; a failure there is exit 120.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError) as exc:
        os.write(2, f"Exception ignored on flushing sys.stdout: {exc!r}\n".encode())
        code = 120
    os._exit(code)


def serve() -> None:
    """Answer requests until stdin closes."""
    # what the command loads, imported once here (no thread is started by an import)
    import duckdb  # noqa: F401
    import polars  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import pipeline.cli  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            finally:
                os._exit(99)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps({"code": code}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
