"""The sample job, ingested and linked once per session, and its export read back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.export import Scope, export_timeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="session")
def linked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample job, ingested and linked with its job.yaml."""
    dataset = tmp_path_factory.mktemp("export") / "ds"
    summary = ingest([REPO_ROOT / "sample_traces"], dataset, job="sample", jobs=1)
    assert not summary.errors
    link(dataset, config=REPO_ROOT / "sample_traces" / "job.yaml")
    return dataset


@pytest.fixture(scope="session")
def whole(linked: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The whole sample job exported (collectives, steps, phases, flows), parsed."""
    out = tmp_path_factory.mktemp("trace") / "sample.json"
    export_timeline(linked, output=out, scope=Scope())
    return json.loads(out.read_text())


def copy_dataset(linked: Path, tmp_path: Path) -> Path:
    """A copy of the linked sample that a test may change."""
    return Path(shutil.copytree(linked, tmp_path / "copy"))
