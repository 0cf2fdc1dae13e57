"""Run a command in a child process and report its wall time and peak RSS."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass
class Measurement:
    """Wall time and peak resident memory of one child process."""

    label: str
    seconds: float
    peak_rss_mb: float


def measure(label: str, code: str, *args: str) -> Measurement:
    """Run ``python -c code args...`` and measure it; a failing child stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args])
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark step {label!r} failed")
    return Measurement(label, seconds, usage.ru_maxrss / 1024)


def report(title: str, mb: float, base: Measurement, ours: Measurement) -> str:
    """One block of text: MB/s and peak RSS of both, and the ratios."""
    lines = [
        f"== {title}: {mb:,.1f} MB of JSON",
        f"  {base.label:<28} {mb / base.seconds:8.1f} MB/s  {base.seconds:7.2f} s  "
        f"peak RSS {base.peak_rss_mb:8.0f} MB",
        f"  {ours.label:<28} {mb / ours.seconds:8.1f} MB/s  {ours.seconds:7.2f} s  "
        f"peak RSS {ours.peak_rss_mb:8.0f} MB",
        f"  ratio tokenwire/baseline: time x{ours.seconds / base.seconds:.2f}, "
        f"peak RSS x{ours.peak_rss_mb / base.peak_rss_mb:.2f}",
    ]
    return "\n".join(lines)
