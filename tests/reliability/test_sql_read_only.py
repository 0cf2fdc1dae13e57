"""``tokenwire sql`` opens the dataset read-only unless ``--allow-writes`` is given.

Statements that write (by DuckDB's own statement type) are refused before anything runs;
DuckDB itself may read only the parts the manifest lists (``allowed_paths``), nothing else
(``enable_external_access = false``), and cannot be switched back (``lock_configuration``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from tests.conftest import tree_digest
from tests.reliability.corpus import write_inline_seeds


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sql")
    write_inline_seeds(root / "job")
    result = CliRunner().invoke(cli, ["ingest", str(root / "job"), "-o", str(root / "ds")])
    assert result.exit_code == 0, result.output
    return root / "ds"


def sql(dataset: Path, query: str, *extra: str):
    return CliRunner().invoke(cli, ["sql", str(dataset), query, *extra])


def part(dataset: Path) -> Path:
    return next(dataset.glob("collectives/job=job/**/part-*.parquet"))


REFUSED = [
    ("DELETE FROM collectives", "DELETE statement refused"),
    ("UPDATE collectives SET bytes = 0", "UPDATE statement refused"),
    ("INSERT INTO collectives SELECT * FROM collectives", "INSERT statement refused"),
    ("CREATE TABLE t AS SELECT * FROM collectives", "CREATE statement refused"),
    ("DROP VIEW collectives", "DROP statement refused"),
    ("COPY (SELECT 1 AS a) TO '{part}' (FORMAT parquet, USE_TMP_FILE false)", "COPY statement"),
    ("COPY collectives TO '{out}/x.csv'", "COPY statement refused"),
    ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}/x.csv'", "COPY statement refused"),
    ("ATTACH '{out}/other.duckdb' AS other", "ATTACH statement refused"),
    ("INSTALL httpfs", "LOAD statement refused"),
    ("LOAD httpfs", "LOAD statement refused"),
    ("EXPORT DATABASE '{out}/export'", "EXPORT statement refused"),
    ("PREPARE p AS SELECT 1", "PREPARE statement refused"),
    ("SELECT 1; DELETE FROM steps", "DELETE statement refused"),
    ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
    ("SELECT * FROM read_text('{out}/../ds/manifest.json')", "Permission Error"),
    ("SELECT * FROM glob('{out}/*')", "Permission Error"),
    ("SET enable_external_access = true", "configuration has been locked"),
    ("SET allowed_paths = ['/']", "configuration has been locked"),
]


@pytest.mark.parametrize(("query", "message"), REFUSED)
def test_refused(dataset: Path, tmp_path: Path, query: str, message: str) -> None:
    before = tree_digest(dataset)
    result = sql(dataset, query.format(part=part(dataset), out=tmp_path))
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], lines
    if "refused" in message:
        assert "--allow-writes" in lines[0]
    assert tree_digest(dataset) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "query",
    [
        "SELECT count(*) AS n FROM ops",
        "WITH x AS (SELECT rank FROM ranks) SELECT count(*) AS n FROM x",
        "EXPLAIN SELECT count(*) FROM kernels",
        "SUMMARIZE steps",
        "SET VARIABLE r = 0; SELECT count(*) AS n FROM ops WHERE rank = getvariable('r')",
        "PIVOT collectives ON op USING count(*)",
    ],
)
def test_reading_still_works(dataset: Path, query: str) -> None:
    result = sql(dataset, query, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_allow_writes(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "ops.csv"
    result = sql(dataset, f"COPY (SELECT count(*) AS n FROM ops) TO '{out}'", "--allow-writes")
    assert result.exit_code == 0, result.output
    counted = sql(dataset, "SELECT count(*) AS n FROM ops", "--format", "json")
    assert out.read_text() == f"n\n{json.loads(counted.stdout)[0]['n']}\n"
    result = sql(dataset, "CREATE TABLE t AS SELECT 1 AS a; SELECT a FROM t", "--allow-writes")
    assert result.exit_code == 0


def test_a_reader_that_stops_early_gets_no_error(dataset: Path) -> None:
    """``tokenwire sql ... | head -1``: the closed pipe ends the command quietly."""
    import subprocess
    import sys

    query = "SELECT * FROM range(200000)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "sql", str(dataset), query, "--format", "csv"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"range\n"
    proc.stdout.close()  # what head does after its line
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0, stderr
    assert stderr == ""
