"""Helpers for the tests that run ``tokenwire ingest`` as a separate process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from pipeline.dataset.schema import load_schemas
from pipeline.dataset.views import connect
from tests.conftest import REPO_ROOT
from tests.reliability.corpus import kineto_doc

RANKS = 6


def make_job(folder: Path, events: int = 8_000) -> Path:
    """Six Kineto ranks big enough that parsing and writing them takes a second or so."""
    folder.mkdir(parents=True)
    for rank in range(RANKS):
        (folder / f"rank{rank}.pt.trace.json").write_text(
            json.dumps(kineto_doc(rank, events=events))
        )
    return folder


def start_ingest(src: Path, dataset: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipeline", "ingest", str(src), "-o", str(dataset), *extra]
    return subprocess.Popen(
        cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> float:
    """Poll until ``path`` holds ``proc``'s pid (``proc`` holds the lock) or ``proc`` ends;
    the time that happened."""
    end = time.monotonic() + timeout
    while proc.poll() is None and _holder(path) != proc.pid:
        assert time.monotonic() < end, f"{path} never named pid {proc.pid}"
        time.sleep(0.002)
    return time.monotonic()


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def rows(dataset: Path) -> dict[str, int]:
    con = connect(dataset)
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in load_schemas()}
