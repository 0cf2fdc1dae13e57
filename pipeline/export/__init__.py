"""``tokenwire export``: a linked job as a timeline that Perfetto and Chrome's trace viewer open.

``scope`` says which part of the job (ranks, steps, a time window, kernels and host ranges or
not); ``timeline`` reads its rows with the queries of ``timeline.sql``; ``events`` turns them
into trace events; ``write`` writes the file. docs/export.md describes the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..export.events import build_events
from ..export.scope import ExportError, Scope, parse_ranks, parse_steps, parse_window
from ..export.timeline import read_timeline
from ..export.write import write_trace

__all__ = [
    "ExportError",
    "ExportResult",
    "Scope",
    "export_timeline",
    "parse_ranks",
    "parse_steps",
    "parse_window",
]

#: Above this many events a browser tab struggles (docs/export.md); the command says so.
MANY_EVENTS = 2_000_000


@dataclass
class ExportResult:
    """What :func:`export_timeline` wrote."""

    output: Path
    job: str
    size_bytes: int
    counts: dict[str, int]
    untimed_ranks: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """One line on what was written: the file, its size, the job and its events."""
        counts = ", ".join(f"{n:,} {k}" for k, n in self.counts.items() if k != "events")
        return (
            f"wrote {self.output} ({self.size_bytes / 1e6:.1f} MB, job {self.job}, "
            f"{self.counts['events']:,} events: {counts})"
        )

    def untimed_warning(self) -> str | None:
        """The ranks left out for want of a timed collective, if any."""
        if not self.untimed_ranks:
            return None
        return f"ranks without timed collectives (none exported): {self.untimed_ranks}"

    def size_warning(self) -> str | None:
        """Whether the file may be too large for a browser."""
        if self.counts["events"] <= MANY_EVENTS:
            return None
        return (
            f"{self.counts['events']:,} events may be more than a browser opens comfortably; "
            "narrow with --step, --ranks or --window (docs/export.md)"
        )


def export_timeline(dataset: Path | str, *, output: Path | str, scope: Scope) -> ExportResult:
    """Write ``scope`` of a linked job of ``dataset`` to ``output`` as a Chrome trace
    (JSON; gzipped when the name ends in ``.gz``).

    Raises
    ------
    DatasetError
        Not a dataset.
    ExportError
        No such job (or several and none chosen), a job not linked, ranks or steps it lacks,
        nothing in scope.
    OutputError
        ``output`` cannot be written.
    """
    rows = read_timeline(dataset, scope)
    events = build_events(rows)
    other = {
        "tokenwire": __version__,
        "dataset": str(dataset),
        "job": rows.job,
        # (the events' ts are microseconds from here; JSON numbers keep µs exact only this way)
        "origin_ns": events.origin_ns,
        "clock": "aligned: each rank's clock_offsets.offset_ns subtracted",
        "scope": {
            "ranks": rows.ranks["rank"].to_list() if scope.ranks is not None else "all",
            "steps": list(scope.steps) if scope.steps is not None else "all",
            "window_ns": list(scope.window) if scope.window is not None else "all",
            "kernels": scope.kernels,
            "ops": scope.ops,
        },
        "counts": events.counts,
    }
    size = write_trace(Path(output), events.lines, other)
    return ExportResult(Path(output), rows.job, size, events.counts, rows.untimed_ranks)
