"""Nsight Systems collectives of a generated job matched to its Kineto collectives."""

from __future__ import annotations

import pytest

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.synth import JobSpec
from pipeline.synth.scale import write_scaled_job
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def linked_nsys_job(tmp_path_factory: pytest.TempPathFactory) -> pipeline.dataset.handle.Dataset:
    """The default job (the one ``sample_traces/job.yaml`` describes) as Kineto traces and
    one Nsight export, ingested and linked."""
    root = tmp_path_factory.mktemp("nsys_job")
    write_scaled_job(JobSpec(), root / "traces", repeats=2, formats=["kineto", "nsys"])
    summary = ingest([root / "traces"], root / "ds", job="sample", jobs=1)
    assert not summary.errors
    link(root / "ds", config=REPO_ROOT / "sample_traces" / "job.yaml")
    return pipeline.open(root / "ds")


def test_every_nsys_collective_matches_a_kineto_one_by_time(
    linked_nsys_job: pipeline.dataset.handle.Dataset,
) -> None:
    counts = linked_nsys_job.sql(
        """
        SELECT count(*) AS calls, count(m.collective_id) AS matched,
               count(*) FILTER (m.method = 'time') AS by_time,
               count(*) FILTER (k.bytes = c.bytes) AS same_bytes,
               count(*) FILTER (m.sizes_agree) AS agree
        FROM collectives c
        LEFT JOIN collective_matches m USING (job, rank, source, file_id, collective_id)
        LEFT JOIN collectives k ON k.job = m.job AND k.rank = m.rank
            AND k.source = m.primary_source AND k.file_id = m.primary_file_id
            AND k.collective_id = m.primary_collective_id
        WHERE c.source = 'nsys'
        """
    ).row(0, named=True)
    kineto = linked_nsys_job.sql("SELECT count(*) FROM collectives WHERE source = 'kineto'").item()
    assert counts["calls"] == kineto > 0
    assert counts["matched"] == counts["by_time"] == counts["same_bytes"] == counts["calls"]
    assert counts["agree"] == counts["calls"]
