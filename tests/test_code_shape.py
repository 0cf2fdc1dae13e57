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
