"""How long headless Chromium takes to draw the report of a job of many ranks.

The tests' generated job of ``--ranks`` ranks (``tests/report/fixtures.large_job``) is
written, linked and reported (or ``--page`` names a report already written); the page is then
opened ``--repeats`` times, each in a fresh headless Chromium (the tests' ``cdp.Browser``:
offline, 1280 x 900), until every chart is drawn. The figure is the CPU time (user + system)
of Chromium's processes over the load, which other work on a shared machine disturbs less
than wall time; the least of the runs is printed beside the page's size.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from tests.report.cdp import Browser, chromium_path

_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, plus the children it has reaped."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        stats[int(entry.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        f = stats.get(pid)
        if f is not None:  # utime, stime, cutime, cstime
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        todo += children.get(pid, [])
    return total / _TICK


def draw_cpu(page: Path) -> tuple[float, float]:
    """One load of ``page`` in a fresh Chromium: (CPU seconds, wall seconds)."""
    browser = Browser(chromium_path() or "chromium")
    try:
        root = browser._proc.pid
        before = _tree_cpu(root)
        res = browser.open(page, timeout_s=120)
        after = _tree_cpu(root)
        undrawn = [c["name"] for c in res.charts if not c["drawn"]]
        if undrawn or res.console_errors or res.exceptions:
            raise SystemExit(f"{page}: not drawn: {undrawn} {res.console_errors} {res.exceptions}")
        return after - before, res.load_s
    finally:
        browser.close()


def main(argv: list[str] | None = None) -> None:
    """Write (or take) the page and print its size and the CPU Chromium takes to draw it."""
    if chromium_path() is None:
        print("bench_page: Chromium is not installed (`make browser`); skipped", file=sys.stderr)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16384)
    parser.add_argument("--page", type=Path, help="a report already written")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tw-bench-page-") as tmp:
        page = args.page
        if page is None:
            from pipeline.report import build_report
            from tests.report.fixtures import large_job

            large_job(Path(tmp) / "ds", ranks=args.ranks)
            page = Path(tmp) / "report.html"
            build_report(Path(tmp) / "ds", output=page)
        runs = [draw_cpu(page) for _ in range(args.repeats)]
        cpu = [c for c, _ in runs]
        print(
            f"{page.stat().st_size / 1e6:.1f} MB page: Chromium CPU {min(cpu):.2f} s "
            f"(runs: {', '.join(f'{c:.2f}' for c in cpu)}), "
            f"wall {min(w for _, w in runs):.2f} s"
        )


if __name__ == "__main__":
    main()
