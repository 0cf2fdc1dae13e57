"""Run a command in a child process and report its wall time and peak memory.

A child may write the seconds of its timed part (after imports and set-up) to the file
named by ``$TW_TIMING``; that becomes ``inner_seconds``.

Peak memory is that of the child's whole process tree (HTA parses ranks in a process pool;
tokenwire may use workers): the sum of the resident sizes of the child and all its
descendants, sampled every 20 ms from ``/proc``, and never less than the child's own peak
(``VmHWM``, which a sample between two peaks of the sum cannot miss). Not ``ru_maxrss``:
Linux counts in it the parent's resident size at the moment the child was started, so a
benchmark process that had grown to 2 GB showed every child at 2 GB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Measurement:
    """Wall time and peak resident memory of one child process tree."""

    label: str
    seconds: float
    peak_rss_mb: float
    ok: bool = True
    note: str = ""
    inner_seconds: float | None = None  # the timed part only, when the child reports it
    runs: list[float] = field(default_factory=list)  # each run's time, when repeated
    #: user + system CPU time of the child and its waited-for descendants: steadier than
    #: wall time on a machine that other work keeps busy
    cpu_seconds: float | None = None


def timed(m: Measurement) -> float:
    """The time a comparison uses: the timed part when the child reports one, else the whole
    run."""
    return m.inner_seconds if m.inner_seconds is not None else m.seconds


def median_run(runs: list[Measurement]) -> Measurement:
    """Of repeated runs of one step, the run of median time (the lower middle one of an even
    number), with every run's time in ``runs``; the first failed run if any failed.

    One run decides nothing on a shared machine: the same build's ratios moved by a tenth
    from run to run, across a target's threshold.
    """
    failed = [m for m in runs if not m.ok]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=timed)
    return replace(ordered[(len(ordered) - 1) // 2], runs=[timed(m) for m in runs])


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants (Linux /proc; 0 elsewhere)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        rss[int(name)] = int(fields[21]) * _PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(p for p, parent in parents.items() if parent == pid)
    return total


def _high_water(pid: int) -> int:
    """The peak resident bytes of ``pid`` itself since it started its program (``VmHWM``)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for row in f:
                if row.startswith(b"VmHWM:"):
                    return int(row.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def measure(label: str, code: str, *args: str, check: bool = True) -> Measurement:
    """Run ``python -c code args...`` from the repository root and measure it.

    A failing child stops the benchmark when ``check``; else it comes back with ``ok`` False
    and its last line of stderr as ``note``.
    """
    fd, name = tempfile.mkstemp(prefix="tw-bench-", suffix=".txt")
    os.close(fd)
    timing = Path(name)
    env = dict(os.environ, PYTHONPATH=str(REPO), TW_TIMING=str(timing))
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0, 0]  # the tree's summed RSS, the child's own high-water mark
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            peak[1] = max(peak[1], _high_water(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stderr = ""
    if proc.stderr is not None:
        with proc.stderr:
            stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak_mb = max(peak) / 2**20
    inner_text = timing.read_text().strip()
    timing.unlink(missing_ok=True)
    inner = float(inner_text) if inner_text else None
    if proc.returncode != 0:
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        note = lines[-1] if lines else f"exit code {proc.returncode}"
        if check:
            raise SystemExit(f"benchmark step {label!r} failed: {note}")
        return Measurement(label, seconds, peak_mb, ok=False, note=note)
    cpu = usage.ru_utime + usage.ru_stime
    return Measurement(label, seconds, peak_mb, inner_seconds=inner, cpu_seconds=cpu)


def report(title: str, mb: float, base: Measurement, ours: Measurement) -> str:
    """One block of text: MB/s and peak RSS of both, and the ratios."""
    lines = [
        f"== {title}: {mb:,.1f} MB of JSON",
        line(base, mb),
        line(ours, mb),
        f"  ratio tokenwire/baseline: time x{ours.seconds / base.seconds:.2f}, "
        f"peak RSS x{ours.peak_rss_mb / base.peak_rss_mb:.2f}",
    ]
    return "\n".join(lines)


def line(m: Measurement, mb: float | None = None) -> str:
    """One measurement as a table row: the whole child's time and, where it reports one, the
    timed part's."""
    if not m.ok:
        return f"  {m.label:<34} failed: {m.note}"
    rate = f"{mb / m.seconds:8.1f} MB/s" if mb else " " * 13
    text = f"  {m.label:<34} {rate}  {m.seconds:7.2f} s  peak RSS {m.peak_rss_mb:8.0f} MB"
    if len(m.runs) > 1:
        text += f"  (median of {len(m.runs)}: {', '.join(f'{t:.2f}' for t in m.runs)} s)"
    if m.inner_seconds is not None:
        text += f"  (timed part {m.inner_seconds:.3f} s)"
    return text
