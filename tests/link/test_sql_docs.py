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
        # Only the loss-report all-reduce after the step, which the model also puts in 'other',
        # in the profiler traces and (matched to them) in the NCCL logs.
        assert sorted(frame.rows()) == [("kineto", "all_reduce", 8), ("nccl_log", "all_reduce", 8)]
    elif title == "Hosts, ranks and devices, each counted once across sources":
        assert frame.rows() == [(1, 8, 8, "NVIDIA H100 80GB HBM3")]
    elif title == "Bytes per step by parallel dimension and phase":
        # three sources of every call, counted once: the totals token_wire reports
        wire = pipeline.open(linked_sample).sql("SELECT sum(bytes), sum(calls) FROM token_wire")
        assert (frame["bytes"].sum(), frame["calls"].sum()) == wire.row(0)
    else:
        assert frame.height > 0, title


def _readme_python_queries() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.+?)```", text, flags=re.S)
    return [q for block in blocks for q in re.findall(r'\.sql\("([^"]+)"\)', block)]


def _exact_bytes(dataset: Path) -> int:
    """The sample's collective bytes counted once: the profiler's calls (every rank has a
    profiler trace), the same total token_wire reports."""
    import pipeline

    ds = pipeline.open(dataset)
    kineto = ds.sql("SELECT sum(bytes) FROM collectives WHERE source = 'kineto'").item()
    assert ds.sql("SELECT sum(bytes) FROM token_wire").item() == kineto
    return int(kineto)


def test_readme_python_query_counts_each_byte_once(linked_sample: Path) -> None:
    """The README's first query, summed, is the job's bytes, not once per source."""
    import pipeline

    queries = _readme_python_queries()
    assert queries
    for query in queries:
        frame = pipeline.open(linked_sample).sql(query)
        assert frame["bytes"].dtype.is_integer(), query
        assert frame["bytes"].sum() == _exact_bytes(linked_sample), query


def test_doc_totals_count_each_byte_once(linked_sample: Path) -> None:
    import pipeline

    ds = pipeline.open(linked_sample)
    in_layers = ds.sql(
        "SELECT sum(bytes) FROM collectives_linked WHERE source = 'kineto' AND layer IS NOT NULL"
    ).item()
    exact = {
        "Top layers by bytes": in_layers,
        "Bytes per step by parallel dimension and phase": _exact_bytes(linked_sample),
    }
    queries = dict(_queries())
    for title, total in exact.items():
        frame = ds.sql(queries[title].replace("LIMIT 10", ""))
        assert frame["bytes"].sum() == total > 0, title
