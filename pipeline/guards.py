"""What keeps failures that come from outside an input's content to one line: a special file
where a file is expected, a standard stream that cannot be written or read, a resource limit
(memory, open files), Ctrl-C during a query, a worker whose parent died.

Each is a mechanism for a whole class (docs/reliability.md, "Hostile input by class"):
:func:`require_regular` before any open of a file a user names, :func:`guard_streams` once
per command, :func:`limit_message` in the command line's one top-level handler,
:func:`interrupt_calls` around a query, :func:`die_with_parent` in every worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import resource
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import TokenwireError, TraceFormatError

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def require_regular(path: str | Path) -> None:
    """Refuse ``path`` unless it is a regular file (a link to one is followed), looked at
    without opening it: a FIFO would block the open, a device act on it (``/dev/zero`` never
    ends).

    Raises
    ------
    TraceFormatError
        ``not a regular file but a FIFO`` (a socket, a device, a folder), or why it cannot
        be looked at.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
        raise TraceFormatError(path, f"not a regular file but {kind}")


class LimitError(TokenwireError):
    """A resource limit of the process (``ulimit``) that a step cannot run under."""


class StreamError(TokenwireError):
    """A standard stream that cannot be written (full, closed, a size limit) or read."""


class _GuardedOut:
    """Standard output whose failed writes are a :class:`StreamError` (one line, exit 1),
    never a traceback at the interpreter's last flush. The data still buffered is dropped
    then (the stream goes to ``/dev/null``): it could not be written anyway."""

    def __init__(self, stream: object | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._do(lambda s: s.write(text))

    def flush(self) -> None:
        self._do(lambda s: s.flush())

    def _do(self, action: Callable) -> object:
        if self._stream is None:
            raise StreamError("standard output is closed; nothing could be written")
        try:
            return action(self._stream)
        except BrokenPipeError:
            raise  # (the reader stopped early, `| head`: the command line ends quietly)
        except OSError as exc:
            self._drop()
            raise StreamError(f"standard output: cannot write: {_reason(exc)}") from None

    def _drop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self._stream.fileno())
            os.close(fd)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


class _ClosedIn:
    """Standard input when the process was started with it closed."""

    encoding = "utf-8"
    errors = "strict"

    def read(self, *_: object) -> str:
        raise StreamError("standard input is closed; give the text as an argument")

    readline = read

    def isatty(self) -> bool:
        return False


def guard_streams() -> None:
    """Put :class:`_GuardedOut` over standard output, and a closed standard input in place
    of the interpreter's ``None``."""
    if not isinstance(sys.stdout, _GuardedOut):
        sys.stdout = _GuardedOut(sys.stdout)
    if sys.stdin is None:
        sys.stdin = _ClosedIn()


def finish_streams() -> None:
    """Flush standard output inside the command (a failure is then its one error line)."""
    if isinstance(sys.stdout, _GuardedOut) and sys.stdout._stream is not None:
        sys.stdout.flush()


def _reason(exc: OSError) -> str:
    return exc.strerror or (str(exc).splitlines() or [type(exc).__name__])[0]


def limit_message(exc: BaseException) -> str | None:
    """The one line for an exception that says a resource limit of the process was reached
    (memory, open files, file size), naming the limit; None for any other."""
    text = str(exc)
    if (
        isinstance(exc, MemoryError)
        # (a library that cannot be mapped under ulimit -v fails its import)
        or (isinstance(exc, ImportError) and "failed to map segment" in text)
        or "out of memory" in text.lower()
        or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)
    ):
        return f"out of memory ({_limit_text(resource.RLIMIT_AS, 'ulimit -v', 1024)})"
    if (isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)) or (
        "Too many open files" in text
    ):
        return f"too many open files ({_limit_text(resource.RLIMIT_NOFILE, 'ulimit -n', 1)})"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        limit = _limit_text(resource.RLIMIT_FSIZE, "ulimit -f", 1024)
        return f"cannot write: {_reason(exc)} ({limit})"
    return None


def _limit_text(which: int, shell: str, unit: int) -> str:
    soft, _ = resource.getrlimit(which)
    if soft == resource.RLIM_INFINITY:
        return f"no {shell} limit is set"
    return f"the limit is {shell} {soft // unit:,}"


@contextlib.contextmanager
def interrupt_calls(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` (``DuckDBPyConnection.interrupt``) when Ctrl-C arrives during the block.

    Python runs its SIGINT handler only between bytecodes of the main thread, which a
    native call (a DuckDB query) holds for as long as it runs. The signal's number is also
    written to the wakeup fd at once, from C: a thread waiting on it calls ``stop``; the
    block's error then is a ``KeyboardInterrupt``.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # (not the main interpreter)
        os.close(read)
        os.close(write)
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                data = os.read(read, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGINT in data and not done.is_set():
                interrupted.set()
                stop()

    interrupted = threading.Event()
    thread = threading.Thread(target=watch, name="tokenwire-interrupt", daemon=True)
    thread.start()
    try:
        yield
    except Exception as exc:
        # (DuckDB reports its interrupted query as an error of its own, a RuntimeError on
        # some paths, and may have handled the SIGINT itself: its own handler then ran,
        # not Python's, and nothing reached the wakeup fd)
        if interrupted.is_set() or _interrupted_query(exc):
            raise KeyboardInterrupt from None
        raise
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        os.close(write)  # the watcher's read ends
        thread.join(timeout=5)
        os.close(read)


def _interrupted_query(exc: Exception) -> bool:
    """Whether ``exc`` is DuckDB saying that its query was interrupted (only Ctrl-C does)."""
    return type(exc).__name__ == "InterruptException" or str(exc).startswith("Query interrupted")


def die_with_parent(parent: int) -> None:
    """In a worker process: be killed when ``parent`` dies (Linux ``PR_SET_PDEATHSIG``), so a
    killed ``ingest --jobs N`` leaves no worker writing behind it; exit at once if it died
    already."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """``text`` for a terminal: every control character but the line break and the tab
    (ESC, which starts a terminal's commands, BEL, CR, which overwrites a line) written as
    its escape, ``\\x1b``."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


#: Address space the chart renderer (vl-convert's V8) reserves when it starts: it aborts the
#: process natively below this (measured: it fails at 64 GiB, starts at 128 GiB).
RENDERER_ADDRESS_SPACE = 128 << 30


def require_address_space(what: str, need: int) -> None:
    """Refuse to start native code that reserves ``need`` bytes of address space (and
    aborts the whole process, with no error to catch, when it cannot) under a smaller
    ``ulimit -v``.

    Raises
    ------
    LimitError
        Naming ``what``, what it needs and the limit.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < need:
        raise LimitError(
            f"{what} needs {need >> 30} GiB of address space and the limit is ulimit -v "
            f"{soft // 1024:,} KiB; raise it (ulimit -v unlimited) or leave the option out"
        )
