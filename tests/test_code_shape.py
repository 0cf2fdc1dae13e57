"""The package's functions fit on one screen: none reaches 80 lines (scripts/long_functions.py
lists those that do)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.conftest import REPO_ROOT


def _script():
    path = REPO_ROOT / "scripts" / "long_functions.py"
    spec = importlib.util.spec_from_file_location("long_functions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_function_of_the_package_reaches_80_lines() -> None:
    script = _script()
    assert script.LIMIT == 80
    assert script.long_functions(REPO_ROOT / "pipeline") == []


def test_the_listing_finds_a_long_function(tmp_path: Path) -> None:
    """A method from ``def`` to its last line of 80 lines is listed, a function of 79 not."""
    root = tmp_path / "pkg"
    root.mkdir()
    method = "\n".join(f"        x{i} = {i}" for i in range(78))
    (root / "m.py").write_text(
        f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{method}\n"
        "        return 0\n"
    )
    function = "\n".join(f"    x{i} = {i}" for i in range(78))
    (root / "n.py").write_text(f"def almost():\n{function}\n")
    assert _script().long_functions(root) == [(80, "pkg/m.py:6", "long")]


def test_sql_files_are_read_one_way() -> None:
    """Every ``.sql`` file of the package is read through ``dataset.sql_files``: a second
    reader (a ``-- name:`` splitter of its own, a path beside ``__file__``) is a second rule
    for what a file of named statements means."""
    package = Path(__file__).resolve().parents[1] / "pipeline"
    own_reader = re.compile(r"-- name:|\.sql\"\)\.read_text|with_name\(\"\w+\.sql\"\)")
    readers = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if own_reader.search(p.read_text(encoding="utf-8"))
    )
    assert readers == ["dataset/sql_files.py"]


def test_achieved_bus_bandwidth_has_one_definition() -> None:
    """Bandwidth summed over instances is ``achieved_busbw`` (dataset/measures.sql) in every
    reader: a median, mean or weighted sum of busbw written elsewhere is a second rule."""
    package = Path(__file__).resolve().parents[1] / "pipeline"
    second = re.compile(r"(median|avg|mean|sum)\(\s*busbw", re.IGNORECASE)
    found = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.sql")
        if p.name != "measures.sql" and second.search(p.read_text(encoding="utf-8"))
    )
    assert found == []


#: A statement that reads the raw collectives table (not a subquery of it that only picks
#: ranks or jobs) and sums message bytes: observed traffic of its own.
_RAW_COLLECTIVES = re.compile(r"\b(FROM|JOIN)\s+collectives\b(?!_)", re.IGNORECASE)
_SUM_BYTES = re.compile(r"\bsum\s*\([^()]*\bbytes\b", re.IGNORECASE)
_SUBQUERY = re.compile(r"\(\s*SELECT\b[^()]*\)", re.IGNORECASE)


def _own_traffic(sql: str) -> list[str]:
    """The statements of ``sql`` that sum message bytes read from the raw collectives."""
    found = []
    for statement in sql.split(";"):
        outer = statement
        while (inner := _SUBQUERY.sub("", outer)) != outer:
            outer = inner
        if _RAW_COLLECTIVES.search(outer) and _SUM_BYTES.search(outer):
            found.append(statement.strip())
    return found


def test_observed_traffic_has_one_definition() -> None:
    """Observed bytes per step are token_wire's (link/token_wire.sql, over collective_links:
    one source per rank, link's steps, phases and dimensions) for every reader outside link,
    on a dataset linked or not (the report computes link's tables where they are not
    stored): a reader's SQL that sums the raw collectives' bytes is a second rule."""
    package = Path(__file__).resolve().parents[1] / "pipeline"
    found = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.sql")
        if p.parent.name != "link" and _own_traffic(p.read_text(encoding="utf-8"))
    )
    assert found == []


def test_the_check_finds_a_second_definition_of_observed_traffic() -> None:
    """The report's former fallback for unlinked jobs is found; a query that reads the
    collectives only to pick ranks, beside a sum over another table, is not."""
    fallback = """
        SELECT c.step, coalesce(d.parallel_dim, 'unknown') AS parallel_dim, c.op,
               coalesce(c.phase, 'unattributed') AS phase, count(*) AS calls,
               sum(c.bytes) AS bytes
        FROM collectives c
        JOIN primary_sources p USING (job, rank, source)
        LEFT JOIN dims d ON d.comm = c.comm
        WHERE c.job = $job GROUP BY ALL;
        SELECT parallel_dim, op, sum(bytes) AS predicted_bytes FROM predictions
        WHERE rank IN (SELECT DISTINCT rank FROM collectives WHERE job = $job) GROUP BY ALL;
    """
    found = _own_traffic(fallback)
    assert len(found) == 1 and "FROM collectives c" in found[0]
