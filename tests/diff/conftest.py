"""The real CPU/gloo runs diff compares (ddp, fsdp and ddp_mb8: DDP at 8 sequences per
micro-batch), each in its own dataset linked with its job.yaml, and the sample job; ingested
and linked once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT
from tests.cpu_gloo import linked

SAMPLE = REPO_ROOT / "sample_traces"


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run name -> its dataset, linked with the run's job.yaml (the job is the run's name)."""
    root = tmp_path_factory.mktemp("diff_runs")
    out = {}
    for run in ("ddp", "fsdp", "ddp_mb8"):
        linked(run, root / run)
        out[run] = root / run
    return out


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample job (job ``sample``), linked with its job.yaml."""
    dataset = tmp_path_factory.mktemp("diff_sample") / "ds"
    assert not ingest([SAMPLE], dataset, job="sample", jobs=1).errors
    link(dataset, config=SAMPLE / "job.yaml")
    return dataset
