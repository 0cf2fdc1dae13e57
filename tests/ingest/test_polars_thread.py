"""pipeline/ingest/polars_thread.py: a parse run on a thread of Polars' pool gives what it
would give on the caller's, and raises what it raises."""

from __future__ import annotations

import threading

import polars as pl
import pytest

from pipeline.ingest.polars_thread import on_polars_thread


def test_the_function_runs_on_another_thread_and_its_queries_answer_as_on_this_one() -> None:
    frame = pl.DataFrame({"rank": [0, 1, 1, 2], "bytes": [4, 8, 16, 32]})

    def work() -> tuple[int, pl.DataFrame]:
        by_rank = frame.filter(pl.col("bytes") > 4).group_by("rank").agg(pl.col("bytes").sum())
        return threading.get_ident(), by_rank.sort("rank")

    ident, result = on_polars_thread(work)
    assert ident != threading.get_ident()
    assert result.equals(work()[1])
    assert result.rows() == [(1, 24), (2, 32)]


def test_what_the_function_raises_is_raised_to_the_caller() -> None:
    def bad() -> None:
        raise ValueError("line 7: not a trace")

    with pytest.raises(ValueError, match="line 7: not a trace"):
        on_polars_thread(bad)


def test_an_interrupt_inside_the_function_reaches_the_caller() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        on_polars_thread(interrupted)
