"""The sample job, ingested and linked once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="session")
def linked_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample job, ingested and linked with its job.yaml."""
    dataset = tmp_path_factory.mktemp("sample") / "ds"
    summary = ingest([REPO_ROOT / "sample_traces"], dataset, job="sample", jobs=1)
    assert not summary.errors
    link(dataset, config=REPO_ROOT / "sample_traces" / "job.yaml")
    return dataset
