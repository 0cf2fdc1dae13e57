"""Shared fixtures: where the public real traces are, and small helpers for CLI tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def real_traces_dir() -> Path | None:
    """``$TOKENWIRE_REAL_TRACES``, else ``../shared/real_traces`` beside the checkout; None
    where it is absent, or ``$TOKENWIRE_REAL_TRACES`` is set empty (``make test-quick``)."""
    env = os.environ.get("TOKENWIRE_REAL_TRACES")
    if env == "":
        return None
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "real_traces"
    return path if path.is_dir() else None


def real_kineto_files() -> list[str]:
    """The real Kineto traces, relative to the real traces folder, for ``parametrize``; one
    placeholder where the folder is absent, which the ``real_traces`` fixture skips with the
    reason."""
    root = real_traces_dir()
    if root is None:
        return ["(real traces absent)"]
    files = sorted((root / "kineto").rglob("*.json.gz")) + sorted(
        (root / "kineto_cpu_gloo").rglob("*.pt.trace.json.gz")
    )
    return [str(p.relative_to(root)) for p in files]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that takes the ``real_traces`` fixture is marked ``real_traces``: ``-m
    real_traces`` selects them, ``-m 'not real_traces'`` runs what a public clone can."""
    for item in items:
        if "real_traces" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_traces)


#: Why a test on ../shared/real_traces did not run.
ABSENT = "../shared/real_traces is absent (set TOKENWIRE_REAL_TRACES to run this)"
LEFT_OUT = "real-trace tests left out (TOKENWIRE_REAL_TRACES is set empty)"


def real_traces_absent() -> str | None:
    """Why the tests on ../shared/real_traces cannot run here; None where they can. A module
    of such tests alone (``test_real_traces.py``) skips itself with it, once::

        if (absent := real_traces_absent()) is not None:
            pytest.skip(absent, allow_module_level=True)
    """
    if real_traces_dir() is not None:
        return None
    return LEFT_OUT if os.environ.get("TOKENWIRE_REAL_TRACES") == "" else ABSENT


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 (pytest's own type)
    """One line: how many of the tests on ../shared/real_traces ran, and how many of them
    and of their modules were skipped, so that a CI log shows whether they did."""
    outcomes: dict[str, set[str]] = {}
    modules = 0
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "real_traces" in getattr(report, "keywords", {}):
                outcomes.setdefault(outcome, set()).add(report.nodeid)
            elif outcome == "skipped" and report.when == "collect":
                modules += any(r in str(report.longrepr) for r in (ABSENT, LEFT_OUT))
    ran = outcomes.get("passed", set()) | outcomes.get("failed", set())
    skipped = outcomes.get("skipped", set()) - ran
    if ran or skipped or modules:
        terminalreporter.write_line(
            f"tests on ../shared/real_traces: {len(ran)} ran, {len(skipped)} skipped"
            + (f", {modules} modules of them skipped" if modules else "")
        )


@pytest.fixture
def real_traces() -> Path:
    """The real traces folder; the test is skipped where it is absent (a user's own clone)."""
    absent = real_traces_absent()
    if absent is not None:
        pytest.skip(absent)
    return real_traces_dir()


def tree_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by relative path: a dataset's exact state."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(autouse=True, scope="session")
def _own_cache_dir(tmp_path_factory) -> None:
    """Reports cache the Vega bundle under $TOKENWIRE_CACHE_DIR: the tests keep theirs apart
    from the user's ~/.cache."""
    if "TOKENWIRE_CACHE_DIR" not in os.environ:
        os.environ["TOKENWIRE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


def edit_parts(dataset: Path, table: str, change) -> None:
    """Rewrite every Parquet part of ``table`` in place with ``change(frame)``, a Polars
    frame of the part's rows (``rank`` among its columns). For tests that make a dataset
    another job could have written."""
    import polars as pl

    for part in (dataset / table).rglob("*.parquet"):
        change(pl.read_parquet(part, hive_partitioning=False)).write_parquet(part)
