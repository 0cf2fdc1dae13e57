"""Shared fixtures: the real traces (``../shared/real_traces`` or $TOKENWIRE_REAL_TRACES)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def real_traces() -> Path:
    """The real-trace folder; tests using it are skipped when it is absent."""
    env = os.environ.get("TOKENWIRE_REAL_TRACES")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "real_traces"
    if not path.is_dir():
        pytest.skip(f"real traces not found at {path} (set TOKENWIRE_REAL_TRACES)")
    return path
