"""The build comparison (benchmarks/compare_builds.py) finds a changed row and reports none
between identical datasets: two ingests of one sample trace, one of them then altered."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from benchmarks.compare_builds import _same, compare
from pipeline.ingest.run import ingest
from tests.conftest import REPO_ROOT

TRACE = sorted((REPO_ROOT / "sample_traces").glob("rank0.*.pt.trace.json.gz"))[0]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sample trace ingested as job ``j``."""
    out = tmp_path_factory.mktemp("compare") / "a"
    summary = ingest([TRACE], out, job="j", jobs=1)
    assert not summary.errors
    return out


def _copy(dataset: Path, to: Path) -> Path:
    shutil.copytree(dataset, to)
    return to


def _rewrite(dataset: Path, table: str, change) -> None:
    """Write ``table``'s one part again as ``change`` makes it."""
    (part,) = (dataset / table / "job=j").glob("part-*.parquet")
    pq.write_table(change(pq.read_table(part)), part)


def test_identical_builds_differ_nowhere(dataset: Path, tmp_path: Path) -> None:
    again = tmp_path / "b"
    ingest([TRACE], again, job="j", jobs=1)  # (another ingest time: not a difference)
    assert compare(dataset, again) == []


def test_a_changed_value_names_its_table_and_column(dataset: Path, tmp_path: Path) -> None:
    other = _copy(dataset, tmp_path / "b")

    def rename_first_kernel(table: pa.Table) -> pa.Table:
        names = table.column("name").to_pylist()
        names[0] = names[0] + "_changed"
        index = table.column_names.index("name")
        return table.set_column(index, "name", pa.array(names, table.schema.field("name").type))

    _rewrite(other, "kernels", rename_first_kernel)
    diffs = compare(dataset, other)
    assert len(diffs) == 1
    assert "kernels differs" in diffs[0] and "'name'" in diffs[0]


def test_a_missing_row_is_a_difference(dataset: Path, tmp_path: Path) -> None:
    other = _copy(dataset, tmp_path / "b")
    _rewrite(other, "ops", lambda table: table.slice(1))
    diffs = compare(dataset, other)
    assert len(diffs) == 1
    assert "ops differs" in diffs[0]


def test_floats_are_equal_to_a_relative_1e_9() -> None:
    a = pa.table({"x": [1.0, 2.0, None], "ingested_at_ns": [1, 2, 3]})
    close = pa.table({"x": [1.0 + 1e-12, 2.0, None], "ingested_at_ns": [4, 5, 6]})
    far = pa.table({"x": [1.0 + 1e-6, 2.0, None], "ingested_at_ns": [1, 2, 3]})
    assert _same(a, close, "x") and _same(a, close, "ingested_at_ns")
    assert not _same(a, far, "x")
    assert not _same(a, a.filter(pc.is_valid(a.column("x"))), "x")
