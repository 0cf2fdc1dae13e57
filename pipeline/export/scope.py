"""What part of a job ``tokenwire export`` writes: the scope options and their parsing.

A browser holds a timeline in memory whole, so a job of a thousand ranks is exported a step,
a few ranks or a time window at a time. :class:`Scope` is that choice; the ``parse_*``
functions read the command line's spelling of it and raise :class:`ExportError` (one line,
exit 1) for text they cannot read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TokenwireError

__all__ = ["ExportError", "Scope", "parse_ranks", "parse_steps", "parse_window"]


class ExportError(TokenwireError):
    """A timeline that cannot be exported as asked (bad scope, unlinked job, nothing in scope)."""


@dataclass(frozen=True)
class Scope:
    """The part of a job to export.

    Attributes
    ----------
    job
        The job (needed only when the dataset holds several).
    ranks
        Global ranks to export (``None``: all of the job's).
    steps
        First and last step, inclusive (``None``: every step, and events outside steps).
    window
        Start and end in ns on the job's aligned clock; an end may be ``None`` (open). Events
        that overlap the window are exported whole.
    kernels
        Also export GPU kernels (not NCCL's: the collectives stand for those).
    ops
        Also export host ranges (torch ops, module scopes, runtime calls, NVTX ranges).
    """

    job: str | None = None
    ranks: tuple[int, ...] | None = None
    steps: tuple[int, int] | None = None
    window: tuple[int | None, int | None] | None = None
    kernels: bool = False
    ops: bool = False


_RANGE = re.compile(r"^\s*(\d+)\s*(?:[-:]\s*(\d+)\s*)?$")
#: The most ranks one --ranks range may name (a typo of 0-99999999 would build a huge list).
MAX_RANKS = 1 << 20


def parse_ranks(text: str) -> tuple[int, ...]:
    """``"0-7,12"`` -> ``(0, 1, ..., 7, 12)``, sorted, without repeats.

    Raises
    ------
    ExportError
        A part that is not a rank or an ascending range of ranks.
    """
    ranks: set[int] = set()
    for part in text.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ExportError(f"--ranks: {part.strip()!r} is not a rank or a range (e.g. 0-7,12)")
        lo, hi = int(match[1]), int(match[2] if match[2] is not None else match[1])
        if hi < lo:
            raise ExportError(f"--ranks: range {part.strip()!r} ends before it starts")
        _require_int64("--ranks", hi)
        if hi - lo + len(ranks) >= MAX_RANKS:
            raise ExportError(f"--ranks: more than {MAX_RANKS:,} ranks")
        ranks.update(range(lo, hi + 1))
    return tuple(sorted(ranks))


def parse_steps(text: str) -> tuple[int, int]:
    """``"3"`` -> ``(3, 3)``; ``"2-4"`` or ``"2:4"`` -> ``(2, 4)``.

    Raises
    ------
    ExportError
        Not a step or an ascending range of steps.
    """
    match = _RANGE.match(text)
    if match is None:
        raise ExportError(f"--step: {text.strip()!r} is not a step or a range (e.g. 3 or 2-4)")
    lo, hi = int(match[1]), int(match[2] if match[2] is not None else match[1])
    if hi < lo:
        raise ExportError(f"--step: range {text.strip()!r} ends before it starts")
    _require_int64("--step", hi)
    return lo, hi


def _require_int64(option: str, *values: int | None) -> None:
    """Steps, ranks and times are 64-bit integers in the dataset; a value beyond cannot
    match one (and DuckDB refuses to compare with it)."""
    for value in values:
        if value is not None and not -(2**63) <= value < 2**63:
            raise ExportError(f"{option}: {value:.3g} is outside 64-bit integers")


def parse_window(text: str) -> tuple[int | None, int | None]:
    """``"START_NS:END_NS"`` (either end may be left out) -> ``(start, end)``.

    Raises
    ------
    ExportError
        Not two integers (ns) around a colon, or an end before the start.
    """
    start, sep, end = text.partition(":")
    try:
        if not sep or not (start.strip() or end.strip()):
            raise ValueError
        lo = int(start) if start.strip() else None
        hi = int(end) if end.strip() else None
    except ValueError:
        raise ExportError(
            f"--window: {text.strip()!r} is not START_NS:END_NS (ns on the aligned clock; "
            "either end may be left out)"
        ) from None
    _require_int64("--window", lo, hi)
    if lo is not None and hi is not None and hi < lo:
        raise ExportError(f"--window: {text.strip()!r} ends before it starts")
    return lo, hi
