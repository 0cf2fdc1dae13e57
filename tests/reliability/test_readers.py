"""Readers while a writer commits: a read that a commit interrupts reads the new commit.

An ingest into a job merges the job's small parts and deletes the ones it merged; a reader
that listed the old parts finds one gone. ``tokenwire sql``, ``tables``, ``report`` and
``hang`` then read again over the new manifest (``pipeline.dataset.snapshot``). A part
deleted while the manifest stays the same (by hand) is named in one line instead.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from pipeline.dataset import catalog, query
from pipeline.dataset.catalog import describe
from pipeline.dataset.query import run_query
from pipeline.dataset.store import MissingPartError, read_manifest
from pipeline.ingest.run import ingest
from pipeline.report import build_report, context
from tests.conftest import REPO_ROOT
from tests.reliability.corpus import kineto_doc

RANKS = 6


@pytest.fixture
def halves(tmp_path: Path) -> tuple[Path, Path]:
    """Kineto traces of one job: ranks 0-2 in one folder, 3-5 in another."""
    folders = (tmp_path / "first", tmp_path / "second")
    for rank in range(RANKS):
        folder = folders[rank * 2 // RANKS]
        folder.mkdir(exist_ok=True)
        doc = json.dumps(kineto_doc(rank, events=50))
        (folder / f"rank{rank}.pt.trace.json").write_text(doc)
    return folders


def _interrupting(real, dataset: Path, commit: Path, calls: list[Path]):  # noqa: ANN001, ANN202
    """``real`` (a function that opens ``dataset``), where the first call is followed by an
    ingest of ``commit`` that merges away parts the opened state lists."""

    def opened(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        value = real(*args, **kwargs)
        calls.append(dataset)
        if len(calls) == 1:
            before = set(read_manifest(dataset).all_parts())
            assert not ingest([commit], dataset, job="job").errors
            gone = before - set(read_manifest(dataset).all_parts())
            assert gone and not any((dataset / rel).exists() for rel in gone)
        return value

    return opened


def _sql_ranks(ds: Path, _: Path) -> int:
    return run_query(ds, "SELECT count(*) AS n FROM ranks")["n"].item()


def _tables_ranks(ds: Path, _: Path) -> int:
    return {t.name: t.rows for t in describe(ds)}["ranks"]


def _report_ranks(ds: Path, out: Path) -> int:
    build_report(ds, output=out / "report.html")
    return int(re.search(r"(\d+) ranks", (out / "report.html").read_text()).group(1))


@pytest.mark.parametrize(
    ("module", "opener", "ranks_seen"),
    [
        (query, "connect", _sql_ranks),
        (catalog, "read_parts_by_table", _tables_ranks),
        (context, "connect", _report_ranks),
    ],
    ids=["sql", "tables", "report"],
)
def test_a_read_a_commit_interrupts_reads_the_new_commit(
    halves: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    opener: str,
    ranks_seen: Callable[[Path, Path], int],
) -> None:
    ds = tmp_path / "ds"
    assert not ingest([halves[0]], ds, job="job").errors
    calls: list[Path] = []
    interrupted = _interrupting(getattr(module, opener), ds, halves[1], calls)
    monkeypatch.setattr(module, opener, interrupted)
    assert ranks_seen(ds, tmp_path) == RANKS
    assert len(calls) == 2  # the first read failed on a merged-away part, the second did not


def test_a_part_deleted_by_hand_during_a_query_is_named(
    halves: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = tmp_path / "ds"
    assert not ingest([halves[0]], ds, job="job").errors
    gone = read_manifest(ds).parts("ranks")[0]
    real = query.connect

    def connect_then_delete(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        con = real(*args, **kwargs)
        (ds / gone).unlink(missing_ok=True)
        return con

    monkeypatch.setattr(query, "connect", connect_then_delete)
    with pytest.raises(MissingPartError, match=f"{gone} is listed in the manifest but missing"):
        run_query(ds, "SELECT count(*) AS n FROM ranks")


INGEST_ONE_BY_ONE = """
import sys
from pathlib import Path
from pipeline.ingest.run import ingest
dataset = Path(sys.argv[1])
for path in sys.argv[2:]:
    assert not ingest([Path(path)], dataset, job="job").errors
    print(path, flush=True)
"""


def test_queries_during_ingests_see_whole_commits(
    halves: tuple[Path, Path], tmp_path: Path
) -> None:
    """Live: a process commits one rank at a time (each commit merges the job's small parts
    and deletes the old ones) while this one queries. Every query answers, with the ranks of
    some commit, never fewer than the one before."""
    ds = tmp_path / "ds"
    assert not ingest([halves[0] / "rank0.pt.trace.json"], ds, job="job").errors
    rest = sorted(
        p for folder in halves for p in folder.iterdir() if p.name != "rank0.pt.trace.json"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", INGEST_ONE_BY_ONE, str(ds), *map(str, rest)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = [1]
    try:
        while writer.poll() is None:
            n = run_query(ds, "SELECT count(*) AS n FROM ranks")["n"][0]
            assert seen[-1] <= n <= RANKS, seen
            seen.append(n)
    finally:
        _, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert run_query(ds, "SELECT count(*) AS n FROM ranks")["n"].to_list() == [RANKS]
    assert len(seen) > 2  # the reads overlapped the commits
