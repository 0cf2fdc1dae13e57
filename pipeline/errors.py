"""The project's error types: bad input is a :class:`TraceFormatError`, nothing else.

A parser raises only ``TraceFormatError`` for input it cannot read; the command line turns it
into one line on stderr (``Error: path:line: message``) and a documented exit code.
"""

from __future__ import annotations

from pathlib import Path


class TokenwireError(Exception):
    """Base class of every error tokenwire reports to a user."""


class TraceFormatError(TokenwireError):
    """An input file that cannot be read as what it claims to be.

    Parameters
    ----------
    path
        The file.
    message
        What is wrong, lower-case, one line.
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
        self.message = message.splitlines()[0] if message else "unreadable input"
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
    """A job description (job.yaml) or option that is invalid; the message names the key."""
