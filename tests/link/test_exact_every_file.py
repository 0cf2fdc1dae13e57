"""Each link SQL file has its test of hand-made rows in, exact rows out
(tests/link/test_exact_<file>.py, through tests/link/sql_harness.py)."""

from __future__ import annotations

from pathlib import Path

from pipeline.link.plan import sql_files


def test_every_link_sql_file_has_an_exact_test() -> None:
    files = {f.name.removesuffix(".sql") for f in sql_files()}
    here = Path(__file__).parent
    tested = {p.stem.removeprefix("test_exact_") for p in here.glob("test_exact_*.py")}
    assert files == tested - {"every_file"}
