"""A real CPU inference run (tests/data/infer_cpu, recorded by scripts/record_torch_runs.py):
greedy decoding of 4 tokens after a 2 x 16 prompt, no ProfilerStep, each token in a
``decode <i>`` range. Ingest, link and report, with and without a named step marker."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import pipeline
from pipeline.cli import cli
from tests.conftest import REPO_ROOT

RUN = REPO_ROOT / "tests/data/infer_cpu"


@pytest.fixture(scope="module", params=[None, r"decode (\d+)"], ids=["whole", "marker"])
def linked(request, tmp_path_factory) -> tuple[Path, str | None]:
    dataset = tmp_path_factory.mktemp("infer") / "ds"
    marker = [] if request.param is None else ["--step-marker", request.param]
    runner = CliRunner()
    res = runner.invoke(cli, ["ingest", str(RUN), "-o", str(dataset), "--job", "infer", *marker])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["link", str(dataset)])
    assert res.exit_code == 0, res.output
    return dataset, request.param


def test_inference_steps_and_tokens(linked) -> None:
    dataset, marker = linked
    ds = pipeline.open(dataset)
    steps = ds.sql("SELECT step, marker, tokens FROM steps ORDER BY step").rows()
    if marker is None:
        # one step over the trace: the 2 sequences' embeddings of 16, 17, 18, 19 tokens
        assert steps == [(0, "whole_trace", 140)]
    else:
        assert steps == [(k, marker, 2 * (16 + k)) for k in range(4)]
    # every op is in a step, and each step's breakdown adds up to its window
    assert ds.sql("SELECT count(*) FROM ops WHERE step IS NULL").item() == 0
    rows = ds.sql(
        "SELECT count(*), bool_and(compute_ns + overlapped_comm_ns + exposed_comm_ns + idle_ns "
        "= window_ns), sum(exposed_comm_ns + overlapped_comm_ns) FROM time_breakdown"
    ).rows()
    assert rows == [(len(steps), True, 0)]
    # no process group: nothing for link to match, and no collectives
    assert ds.sql("SELECT count(*) FROM collectives_linked").item() == 0


def test_inference_report_says_where_steps_come_from(linked, tmp_path: Path) -> None:
    dataset, marker = linked
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(dataset), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    whole = "1 rank(s) recorded no ProfilerStep ranges (an inference run"
    named = "1 rank(s) recorded no ProfilerStep ranges: their steps are the ranges of"
    assert (whole in page, named in page) == (marker is None, marker is not None)
