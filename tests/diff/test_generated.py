"""tokenwire diff on a generated pair: the sample job (TP2 x PP2 x DP2) against the same
model at TP4 x PP2 x DP1 (pipeline.synth), each linked with its job.yaml. The generator
issues what the analytic model predicts, so every predicted change is observed."""

from __future__ import annotations

import pytest

from pipeline.diff import diff_jobs
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.synth import JobSpec, write_job
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def tp2_tp4(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("diff_generated")
    yaml = (REPO_ROOT / "sample_traces" / "job.yaml").read_text()
    tp4 = yaml.replace("tp: 2", "tp: 4").replace("dp: 2", "dp: 1")
    layouts = {"tp2": (JobSpec(), yaml), "tp4": (JobSpec(tp=4, dp=1), tp4)}
    for name, (spec, config) in layouts.items():
        write_job(spec, root / name / "traces")
        (root / name / "job.yaml").write_text(config)
        assert not ingest([root / name / "traces"], root / name / "ds", job=name, jobs=1).errors
        link(root / name / "ds", config=root / name / "job.yaml")
    return diff_jobs(root / "tp2" / "ds", "tp2", "tp4", other=root / "tp4" / "ds")


def test_predicted_change_is_observed(tp2_tp4) -> None:
    rows = {
        (r["parallel_dim"], r["op"]): r
        for r in tp2_tp4.views["diff_predicted"].iter_rows(named=True)
    }
    assert set(rows) == {("dp", "all_reduce"), ("tp", "all_reduce"), ("pp", "send"), ("pp", "recv")}
    for key, r in rows.items():
        assert r["observed_change"] == r["predicted_change"], key
    # DP 2 -> 1: no gradient all-reduce left; TP 2 -> 4 (twice the micro-batches per rank,
    # the same activations each): twice the tensor-parallel bytes
    assert rows["dp", "all_reduce"]["observed_bytes_b"] == 0
    tp = rows["tp", "all_reduce"]
    assert tp["observed_bytes_b"] == 2 * tp["observed_bytes_a"] > 0


def test_traffic_and_steps(tp2_tp4) -> None:
    traffic = tp2_tp4.views["diff_traffic"]
    gone = traffic.filter(traffic["parallel_dim"] == "dp")
    assert set(gone["found"]) == {"a"}
    assert set(traffic.filter(traffic["parallel_dim"] == "tp")["found"]) == {"both"}
    # the same global batch: tokens per step do not change
    steps = {
        (r["metric"], r["timeline"]): r for r in tp2_tp4.views["diff_steps"].iter_rows(named=True)
    }
    assert steps["tokens", "step"]["change"] == 0
    assert steps["bytes", "step"]["change"] == traffic["bytes_change"].sum()
    # GPU runs: kernels are compared by name
    assert "kernel" in set(tp2_tp4.views["diff_ops"]["kind"])
