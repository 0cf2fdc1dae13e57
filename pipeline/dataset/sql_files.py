"""The package's SQL files, read one way: a file's whole text, or a file of named
statements (``-- name: <name>`` on the line before each) split into them by one rule.

Every reader of a ``.sql`` file of the package (dataset views, link, model, report,
export, diff) goes through here, so the files travel in a wheel the same way and the
``-- name:`` convention has one parser.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

#: The line that names the statement after it, in a file of named statements.
NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def sql_text(package: str, file: str) -> str:
    """The text of ``file``, a SQL file of ``package``: the caller's ``__package__``, so that
    the package's files are found under whatever name it was imported as (``tokenwire``,
    ``pipeline``)."""
    return resources.files(package).joinpath(file).read_text(encoding="utf-8")


@functools.cache
def named_statements(package: str, file: str) -> dict[str, str]:
    """The named statements of ``file`` of ``package``, by name, in the file's order."""
    parts = NAME_LINE.split(sql_text(package, file))
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def measures_sql() -> str:
    """``measures.sql``: the macros of measures with one definition (``achieved_busbw``),
    for every connection that computes them, a dataset's or diff's in-memory one."""
    return sql_text(__package__, "measures.sql")
