"""``tokenwire ingest`` sets Polars' allocator to give freed pages back at once, where jemalloc
reads it: in the environment before Polars is first imported (pipeline/allocators.py). The
command runs in a child process with a finder first on ``sys.meta_path`` that records the
setting when ``polars`` is first imported; a value the user set wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import allocators
from pipeline.allocators import JEMALLOC_CONF, JEMALLOC_ENV, trim_heap
from tests.conftest import REPO_ROOT

SCRIPT = r"""
import os, sys

class Watch:
    seen = "not imported"

    def find_spec(self, name, path=None, target=None):
        if name == "polars" and Watch.seen == "not imported":
            Watch.seen = os.environ.get("_RJEM_MALLOC_CONF", "unset")
        return None

assert "polars" not in sys.modules
sys.meta_path.insert(0, Watch())
from pipeline.cli import cli
try:
    cli(sys.argv[1:])
except SystemExit:
    pass
print(Watch.seen)
"""

SAMPLE = next((REPO_ROOT / "sample_traces").glob("rank0.*.json*"))


def _setting_at_polars_import(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], cwd=REPO_ROOT, env=env, capture_output=True,
        text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    env.update(values)
    return env


def test_ingest_sets_it_before_polars_loads(tmp_path: Path) -> None:
    args = ["ingest", str(SAMPLE), "-o", str(tmp_path / "ds")]
    assert _setting_at_polars_import(args, _env()) == JEMALLOC_CONF
    assert (tmp_path / "ds").is_dir()


def test_with_a_step_marker_too(tmp_path: Path) -> None:
    # (the option's check imports Polars before the command runs)
    args = ["ingest", str(SAMPLE), "-o", str(tmp_path / "ds"), "--step-marker", "step"]
    assert _setting_at_polars_import(args, _env()) == JEMALLOC_CONF


def test_the_users_own_setting_wins(tmp_path: Path) -> None:
    args = ["ingest", str(SAMPLE), "-o", str(tmp_path / "ds")]
    env = _env(_RJEM_MALLOC_CONF="narenas:1")
    assert _setting_at_polars_import(args, env) == "narenas:1"


def test_other_commands_leave_it_alone(tmp_path: Path) -> None:
    args = ["sql", str(tmp_path / "none"), "SELECT 1"]
    assert _setting_at_polars_import(args, _env()) in ("unset", "not imported")


def test_trim_heap_runs_anywhere() -> None:
    trim_heap()  # (glibc: gives free pages back; elsewhere: nothing, no error)


def test_workers_without_a_big_file_start_with_jemallocs_own_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers start without the setting ingest made where no file is big (each batch or step
    would fault the pages given back in again); where one is they keep it; a value the user
    set is never taken away."""
    from pipeline.ingest.run import _worker_environment

    monkeypatch.delenv(JEMALLOC_ENV, raising=False)
    monkeypatch.setattr(allocators, "_set_here", False)
    allocators.return_freed_memory()
    assert allocators.set_here()
    with _worker_environment(2, False):
        assert JEMALLOC_ENV not in os.environ
    assert os.environ[JEMALLOC_ENV] == JEMALLOC_CONF
    with _worker_environment(2, True):
        assert os.environ[JEMALLOC_ENV] == JEMALLOC_CONF
    # (Polars' import writes its own settings in front of ours: still ours to take away)
    monkeypatch.setenv(JEMALLOC_ENV, "dirty_decay_ms:500," + JEMALLOC_CONF)
    with _worker_environment(2, False):
        assert JEMALLOC_ENV not in os.environ
    monkeypatch.setattr(allocators, "_set_here", False)
    monkeypatch.setenv(JEMALLOC_ENV, JEMALLOC_CONF)  # (the user's, though the same value)
    allocators.return_freed_memory()
    with _worker_environment(2, False):
        assert os.environ[JEMALLOC_ENV] == JEMALLOC_CONF
