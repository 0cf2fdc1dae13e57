"""``tokenwire sql`` spills a bounded amount to disk: a query that needs more fails with the
limit named, and its temporary folder is gone (DuckDB would otherwise fill 90% of the disk)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import pytest

from pipeline.dataset import views
from pipeline.dataset.query import QueryError, run_queries
from pipeline.ingest.run import ingest
from tests.conftest import REPO_ROOT

#: A sort of 300 M rows: some GB to spill under a 64 MB memory limit.
RUNAWAY = (
    "SELECT count(*) FROM (SELECT a.range x, b.range y FROM range(3000000) a, range(100) b "
    "ORDER BY x * y DESC)"
)


def test_a_query_past_the_spill_limit_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = tmp_path / "ds"
    ingest([REPO_ROOT / "tests" / "data" / "cpu_gloo" / "ddp"], dataset, job="ddp", jobs=1)
    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    monkeypatch.setenv("TOKENWIRE_SQL_SPILL_BYTES", str(32 * 1024 * 1024))
    connect = duckdb.connect  # (the memory limit a big query meets, made small)
    monkeypatch.setattr(
        views.duckdb, "connect", lambda *a, **k: connect(config={"memory_limit": "64MB"})
    )
    with pytest.raises(QueryError, match=r"more than the 32\.0 MiB of temporary disk"):
        run_queries(dataset, RUNAWAY)
    assert list(spill_root.iterdir()) == []


def test_the_spill_limit_grows_with_the_dataset(tmp_path: Path) -> None:
    (tmp_path / "a.parquet").write_bytes(b"x" * 1000)
    assert views.spill_limit(tmp_path, ["a.parquet"]) == views.SPILL_MIN_BYTES
    big = views.SPILL_MIN_BYTES // views.SPILL_PER_PART_BYTE + 1
    with open(tmp_path / "b.parquet", "wb") as f:
        f.truncate(big)  # (a sparse file: its size, not its blocks)
    assert views.spill_limit(tmp_path, ["a.parquet", "b.parquet"]) == (
        views.SPILL_PER_PART_BYTE * (big + 1000)
    )
