"""The project's error types: bad input is a :class:`TraceFormatError`, nothing else.

A parser raises only ``TraceFormatError`` for input it cannot read; the command line turns it
into one line on stderr (``Error: path:line: message``) and a documented exit code.
"""

from __future__ import annotations

import math
import reprlib
from pathlib import Path

#: Longest one error message (after the file name and place) may grow; a library's message
#: or a value a user wrote can be any length, and an error is one line a person reads.
MAX_MESSAGE_CHARS = 400
#: Longest text one user value takes in an error message (``got 'xxx...'``).
MAX_VALUE_CHARS = 80


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as one line of at most ``limit`` characters: every run of whitespace (line
    breaks of a multi-line library message included) becomes one space, and a longer text is
    cut, ending in ``...``."""
    # look at no more than the limit needs: the text may be a whole file's worth
    folded = " ".join(text[: limit * 4 + 4].split())
    if len(folded) > limit or len(text) > limit * 4 + 4:
        return folded[: max(limit - 3, 0)].rstrip() + "..."
    return folded


def shown(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A user's value as an error message shows it: its ``repr``, one line, at most ``limit``
    characters, in time and memory bounded whatever the value is (a list of a million items,
    an integer of 5,000 digits, a structure that contains itself)."""
    return one_line(_BOUNDED_REPR.repr(value), limit)


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` shows only the first items of containers and the ends of long strings; an
    integer's decimal digits are not even worked out past a few dozen (Python refuses to
    print more than 4,300 of them)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            digits = int(x.bit_length() * math.log10(2)) + 1
            return f"{'-' if x < 0 else ''}<an integer of about {digits} digits>"
        return super().repr_int(x, level)


_BOUNDED_REPR = _BoundedRepr()
_BOUNDED_REPR.maxstring = MAX_VALUE_CHARS
_BOUNDED_REPR.maxother = MAX_VALUE_CHARS


class TokenwireError(Exception):
    """Base class of every error tokenwire reports to a user."""


class TraceFormatError(TokenwireError):
    """An input file that cannot be read as what it claims to be.

    Parameters
    ----------
    path
        The file.
    message
        What is wrong, lower-case; a longer or multi-line text (a library's message) is
        folded into one line and cut (:func:`one_line`).
    line
        1-based line number, where the parser knows it.
    offset
        0-based byte offset, where the parser knows it (and no line is given).
    """

    def __init__(
        self,
        path: str | Path,
        message: str,
        *,
        line: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.path = str(path)
        self.message = one_line(message) or "unreadable input"
        self.line = line
        self.offset = offset
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
        elif self.offset is not None:
            where += f": byte {self.offset}"
        return f"{where}: {self.message}"


class DatasetError(TokenwireError):
    """A dataset folder that is missing, locked or inconsistent."""


class ConfigError(TokenwireError):
    """A job description (job.yaml) or option that is invalid; the message names the key.

    The message is folded into one line and cut (:func:`one_line`, with room for the file
    name in front), whatever a library or a user's value put into it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message, 2 * MAX_MESSAGE_CHARS))
