"""Every query of docs/sql.md runs on the linked sample job and returns rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "sql.md"


def _queries() -> list[tuple[str, str]]:
    text = DOC.read_text()
    # (a section may explain itself in a paragraph between its title and its query)
    found = re.findall(r"^## ([^\n]+)\n(?:(?!^## ).)*?```sql\n(.+?)```", text, flags=re.S | re.M)
    return [(title.strip(), sql) for title, sql in found]


def test_doc_has_a_dozen_questions() -> None:
    assert len(_queries()) >= 12


@pytest.mark.parametrize(("title", "query"), _queries(), ids=[t for t, _ in _queries()])
def test_query_runs(title: str, query: str, linked_sample: Path) -> None:
    import pipeline

    frame = pipeline.open(linked_sample).sql(query)
    if title == "Where observed and predicted traffic differ":
        assert frame.is_empty()  # the sample follows the model exactly
    elif title == "Collectives that could not be attributed to a layer or phase":
        # none: every collective of the sample has an owner (the loss-report all-reduce after
        # the step, which the model also puts in 'other', is 'metrics')
        assert frame.is_empty()
    elif title == "Bytes per step by parallel dimension and phase":
        # three sources of every call, counted once: the totals token_wire reports
        wire = pipeline.open(linked_sample).sql("SELECT sum(bytes), sum(calls) FROM token_wire")
        assert (frame["bytes"].sum(), frame["calls"].sum()) == wire.row(0)
    else:
        assert frame.height > 0, title
