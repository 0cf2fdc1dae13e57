"""A job.yaml whose layout contradicts the traces is never taken silently: the sample job
(tp=2 x pp=2 x dp=2) linked with a job.yaml of tp=4 x pp=1 warns on stderr, one line per
contradiction naming the job.yaml, stores the contradictions in communicator_dims, and
every ledger row that differs gives that reason. Its own job.yaml gives none of these."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import pipeline
from pipeline.cli import cli
from tests.conftest import REPO_ROOT

SAMPLE_YAML = REPO_ROOT / "sample_traces" / "job.yaml"


def wrong_layout(folder: Path) -> Path:
    """The sample's job.yaml with tp=4 and pp=1 (the same 8 ranks)."""
    text = SAMPLE_YAML.read_text()
    text = re.sub(r"(?m)^  tp: 2$", "  tp: 4", text)
    text = re.sub(r"(?m)^  pp: 2$", "  pp: 1", text)
    assert "  tp: 4" in text and "  pp: 1" in text
    path = folder / "wrong.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def relinked(linked_sample: Path, tmp_path_factory: pytest.TempPathFactory):
    """The linked sample copied and linked again, through the CLI, with the wrong layout."""
    folder = tmp_path_factory.mktemp("wrong")
    dataset = folder / "ds"
    shutil.copytree(linked_sample, dataset)
    config = wrong_layout(folder)
    res = CliRunner().invoke(cli, ["link", str(dataset), "--config", str(config)])
    return dataset, config, res


def test_link_warns_once_per_contradiction_naming_the_job_yaml(relinked) -> None:
    _, config, res = relinked
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if line.startswith("Warning:")]
    assert all(line.startswith(f"Warning: {config}: the layout contradicts") for line in warnings)
    text = "\n".join(warnings)
    # the traces' tensor-parallel pairs and data-parallel pairs are no group of tp=4 x dp=2
    assert "groups of 2 ranks (TENSOR_MODEL_PARALLEL_GROUP) are no group of the layout " in text
    assert "groups of 2 ranks (DATA_PARALLEL_GROUP) are no group of the layout" in text
    # the pipeline groups are the layout's dp groups: their name and their send/recv say not
    assert "groups named PIPELINE_MODEL_PARALLEL_GROUP (pp) are dp groups" in text
    assert "send/recv run in groups of 2 ranks (PIPELINE_MODEL_PARALLEL_GROUP)" in text
    assert len(warnings) == len(set(warnings)) == 4
    assert "tp=4 x dp=2" in text and "e.g. ranks 0, 1" in text


def test_contradictions_are_stored_and_every_differing_ledger_row_gives_them(relinked) -> None:
    dataset, _, _ = relinked
    ds = pipeline.open(dataset)
    stored = ds.sql(
        "SELECT count(*) FROM communicator_dims WHERE layout_conflicts IS NOT NULL"
    ).item()
    assert stored > 0
    rows = ds.sql("SELECT status, reason FROM ledger WHERE status <> 'matched'").rows()
    assert rows
    assert all(r.startswith("job.yaml contradicts the traces: ") for _, r in rows), rows
    # each row names the statement on the communicator its calls ran on: the send/recv rows
    # that of the pipeline groups
    sendrecv = ds.sql(
        "SELECT DISTINCT reason FROM ledger WHERE op IN ('send', 'recv') AND parallel_dim = 'dp'"
    ).rows()
    assert sendrecv and all("PIPELINE_MODEL_PARALLEL_GROUP" in r for (r,) in sendrecv)
    # and the traced tensor-parallel all-reduces name the statement on their own groups
    tp = ds.sql(
        "SELECT DISTINCT reason FROM ledger WHERE parallel_dim = 'tp' AND calls > 0 "
        "AND status <> 'matched'"
    ).rows()
    assert tp and all("(TENSOR_MODEL_PARALLEL_GROUP) are no group" in r for (r,) in tp), tp


def test_the_right_layout_contradicts_nothing(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    assert (
        ds.sql("SELECT count(*) FROM communicator_dims WHERE layout_conflicts IS NOT NULL").item()
        == 0
    )
    contradicted = "SELECT count(*) FROM ledger WHERE reason LIKE 'job.yaml contradicts%'"
    assert ds.sql(contradicted).item() == 0
    res = CliRunner().invoke(cli, ["link", str(linked_sample), "--config", str(SAMPLE_YAML)])
    assert res.exit_code == 0 and "Warning" not in res.stderr


@pytest.mark.parametrize(
    ("run", "change", "said"),
    [
        # a recorded 4-stage pipeline described as 4-way data parallel: its send/recv
        ("pp4", ("{pp: 4,", "{dp: 4,"), "send/recv run in groups of 4 ranks"),
        # a recorded tp=2 x dp=2 run described as tp=4: its pairs are no group of the layout
        ("tp_dp", ("{tp: 2, dp: 2,", "{tp: 4, dp: 1,"), "groups of 2 ranks"),
    ],
)
def test_recorded_runs_with_a_wrong_layout_warn(run, change, said, tmp_path) -> None:
    """The same checks on real CPU/gloo runs (tests/data/cpu_gloo), each linked with its own
    job.yaml changed: a warning naming the job.yaml and ledger reasons; with the job.yaml
    as recorded, none."""
    from pipeline.link.runner import link
    from tests.cpu_gloo import DATA, ingested

    ds = ingested(run, tmp_path / "ds")
    assert link(ds.path, config=DATA / run / "job.yaml").warnings == []
    old, new = change
    text = (DATA / run / "job.yaml").read_text()
    assert old in text
    config = tmp_path / "job.yaml"
    config.write_text(text.replace(old, new))
    warnings = link(ds.path, config=config).warnings
    assert warnings and all(w.startswith(f"{config}: the layout contradicts") for w in warnings)
    assert any(said in w for w in warnings), warnings
    reasons = (
        pipeline.open(ds.path)
        .sql("SELECT DISTINCT reason FROM ledger WHERE status <> 'matched'")
        .rows()
    )
    assert reasons and all(r.startswith("job.yaml contradicts the traces: ") for (r,) in reasons)
