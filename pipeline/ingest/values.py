"""Rules every parser applies to numbers and values taken from input files.

- An integer from input must fit a signed 64-bit integer (every integer column of the
  dataset is ``int64``), and a byte count must also be >= 0. A value outside is bad input:
  the parser says where it is, it is never wrapped, clipped or left to fail later in Polars
  or Arrow (an "internal error"). Products of two input integers (count x element size)
  are checked the same way.
- Error messages describe a value with :func:`describe`, never with ``repr`` or ``str`` of
  the whole value: a hostile file can hold a list that shares itself to a depth of 2**60
  nodes, or an integer with 100,000 digits (``str`` refuses past 4,300 digits).

A trace that does not say its rank takes it from its file name, by one rule for every
format (:func:`rank_from_file_name`).

Scalars are checked with :func:`check_int64` / :func:`check_bytes` (raising
:class:`OutOfRange`, whose message the parser places), lines and columns with
:func:`check_line_numbers` and :func:`product_fits`.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

#: Longest name of an event (op, kernel, range, category), in characters, in every trace
#: format: the longest real ones, kernel names of heavily templated code, are some 10 KB. A
#: longer one is refused where it stands, so a small gzipped file cannot make every copy of
#: a frame hold a string of hundreds of MB.
MAX_NAME_CHARS = 1024 * 1024
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Decimal digits of the longest int64 (``-9223372036854775808`` has 19 after the sign).
_INT64_DIGITS = 19
#: Characters of a string shown in an error message.
_SHOWN_CHARS = 40


class OutOfRange(ValueError):
    """An integer from input that does not fit where it goes; the message names it."""


def fits_int64(value: int) -> bool:
    """Whether ``value`` is within signed 64-bit integers."""
    return INT64_MIN <= value <= INT64_MAX


def check_int64(value: int, what: str) -> int:
    """``value`` when it fits int64.

    Raises
    ------
    OutOfRange
        Outside 64-bit integers; the message names ``what`` and describes the value.
    """
    if not fits_int64(value):
        raise OutOfRange(f"{what} is {describe(value)}, outside 64-bit integers")
    return value


def check_bytes(value: int, what: str = "bytes") -> int:
    """``value`` when it is a byte count: >= 0 and within int64.

    Raises
    ------
    OutOfRange
        Negative or beyond int64.
    """
    if value < 0:
        raise OutOfRange(f"{what} is {describe(value)}, a negative byte count")
    return check_int64(value, what)


def int64_or_none(value: Any) -> int | None:
    """``value`` when it is an integer (not a bool) within int64, else None (read as unknown)."""
    if isinstance(value, int) and not isinstance(value, bool) and fits_int64(value):
        return value
    return None


def str_or_none(value: Any) -> str | None:
    """``value`` when it is a string, else None (read as unknown)."""
    return value if isinstance(value, str) else None


def describe(value: Any) -> str:
    """A short description of ``value`` for an error message, whatever its size or depth.

    Containers are described by their type and length, never rendered; integers beyond 19
    digits by their number of digits (computed from the bit length, so no conversion runs);
    strings are cut to a few dozen characters.
    """
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        if fits_int64(value):
            return str(value)
        digits = int(value.bit_length() * 0.30103) + 1  # log10(2): about as many digits
        return f"an integer of about {digits} digits"
    if isinstance(value, str):
        if len(value) <= _SHOWN_CHARS:
            return repr(value)
        return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    if isinstance(value, (list, tuple, dict, set, frozenset, bytes, bytearray)):
        noun = "item" if len(value) == 1 else "items"
        return f"a {type(value).__name__} of {len(value)} {noun}"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------- columns


def product_fits(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """True where ``a * b`` of two int64 columns fits int64 (Polars wraps it silently);
    true where either is null.

    Checked in float64, which keeps the magnitude: a product within 2**10 of 2**63 may be
    refused, no real count comes near it.
    """
    product = a.cast(pl.Float64) * b.cast(pl.Float64)
    return (product.abs() < float(2**63)).fill_null(True)


class LineOutOfRange(OutOfRange):
    """A number beyond int64 on a line of a line-based format; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


_INT64_MAX_TEXT = str(INT64_MAX)


def numbers_out_of_range(text: pl.Expr) -> pl.Expr:
    """True where ``text`` holds a decimal number (a whole word of digits, so not hex) beyond
    int64; only such a long run of digits can be."""
    digits = text.str.extract_all(r"\b\d{19,}\b").list.eval(pl.element().str.strip_chars_start("0"))
    n = pl.element().str.len_chars()
    big = (n > _INT64_DIGITS) | ((n == _INT64_DIGITS) & (pl.element() > _INT64_MAX_TEXT))
    return digits.list.eval(big).list.any().fill_null(False)


def check_line_numbers(frame: pl.DataFrame, text: str, line: str = "line_no") -> None:
    """Refuse the first row of ``frame`` whose column ``text`` holds a number beyond int64.

    A cheap test for 19 digits in a row comes first: real lines hold none.

    Raises
    ------
    LineOutOfRange
        With the row's ``line`` number.
    """
    if not frame.height or not frame[text].str.contains(r"\d{19}").any():
        return
    bad = frame.filter(numbers_out_of_range(pl.col(text)))
    if bad.height:
        at, value = bad.select(line, text).row(0)
        number = max((d.lstrip("0") for d in re.findall(r"\b\d{19,}\b", value)), key=len)
        raise LineOutOfRange(at, f"the number {describe(number)} is outside 64-bit integers")


#: Where a file name holds its rank, most telling first: ``rank3`` / ``worker3`` (PyTorch's
#: ``tensorboard_trace_handler(worker_name=...)``, torch's flight-recorder ``..._rank_3``),
#: then a number closing a ``_``-separated field (``fr_dump_3.pkl``), then trailing digits.
_RANK_IN_FILE_NAME = (
    re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"_(\d+)(?:\.|$)"),
    re.compile(r"(\d+)$"),
)
_TRACE_SUFFIXES = (".gz", ".json", ".pkl", ".pickle", ".sqlite")


def rank_from_file_name(name: str) -> int | None:
    """The rank a file name states (``rank3``, ``worker3``, ``rank-3``, ``nccl_trace_rank_3``,
    ``x_3.json``, ``dump15``), or None: the one rule for every format whose trace may not
    say its rank. ``worker0_step_12.pt.trace.json`` is rank 0: a rank or worker tag wins
    over any other number."""
    for suffix in _TRACE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for pattern in _RANK_IN_FILE_NAME:
        found = pattern.search(name)
        if found:
            digits = found.group(1).lstrip("0") or "0"
            return int(digits) if len(digits) <= 18 else None  # (beyond int64: no rank)
    return None
