"""What-if projections from a linked run: the recorded CPU/gloo TP run projected onto data
parallelism, checked against the recorded DDP run of the same model and micro-batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import DatasetError
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.model import whatif
from pipeline.model.config import load_job
from pipeline.report import fmt
from tests.cpu_gloo import DATA


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for run in ("tp", "ddp"):
        ds = tmp_path_factory.mktemp(run) / "ds"
        assert not ingest([DATA / run], ds, job=run, jobs=1).errors
        link(ds, config=DATA / run / "job.yaml")
        out[run] = ds
    return out


def test_tp_run_projected_onto_dp_matches_the_ddp_run(linked: dict[str, Path]) -> None:
    # tests/data/cpu_gloo: the same 2-layer GPT, micro-batch 4, on 2 CPU ranks, recorded once
    # as TP 2 and once as DDP 2 (twice the tokens per step). Projected from the TP run, the
    # DP layout's step is 41.1 ms against the DDP run's measured 41.6 ms: -1.1%. Its parts are
    # further off, in opposite directions: compute 33.3 ms projected (twice the TP rank's
    # FLOPs) against 22.0 ms measured, +51% (gloo's TP run computes less efficiently per
    # FLOP); communication and idle 7.8 ms against 19.6 ms, -60%.
    tp = whatif.observed(linked["tp"])
    ddp = whatif.observed(linked["ddp"])
    base = load_job(DATA / "tp" / "job.yaml")
    dp = whatif.target(DATA / "tp" / "job.yaml", {"parallel.tp": 1, "parallel.dp": 2}, None)
    rows = whatif.project(base, tp, [dp])
    mine = {p.observed: p for p in rows}
    # the observed layout projects onto its own measured step
    assert mine[True].step_s == pytest.approx(tp.step_s)
    assert mine[True].compute_s == pytest.approx(tp.compute_s)
    got = mine[False]
    assert got.tokens_per_step == 256 and got.world_size == 2
    assert got.step_s / ddp.step_s - 1 == pytest.approx(-0.011, abs=0.01)
    assert got.compute_s / ddp.compute_s - 1 == pytest.approx(0.51, abs=0.02)
    assert got.compute_s == pytest.approx(2 * tp.compute_s)
    # ranked fastest first
    assert [p.step_s for p in rows] == sorted(p.step_s for p in rows)


def test_cli_ranks_every_layout_of_the_world(linked: dict[str, Path]) -> None:
    args = ["predict", "--config", str(DATA / "tp" / "job.yaml"), "--from", str(linked["tp"])]
    out = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    layouts = [p["layout"] for p in doc["projections"]]
    # 2 ranks: tp 2 (observed), dp 2, pp 2 (2 layers: one each)
    assert sorted(layouts) == sorted(
        ["tp=2 pp=1 dp=1 cp=1 ep=1 mb=4", "tp=1 pp=1 dp=2 cp=1 ep=1 mb=4",
         "tp=1 pp=2 dp=1 cp=1 ep=1 mb=4"]
    )  # fmt: skip
    steps = [p["step_s"] for p in doc["projections"]]
    assert steps == sorted(steps)
    text = CliRunner().invoke(cli, [*args, "--dp", "2", "--tp", "1"])
    assert text.exit_code == 0 and "(observed)" in text.output and "dp=2" in text.output


def test_dataset_without_timings(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    assert not ingest([DATA / "tp"], ds, job="tp", jobs=1).errors
    with pytest.raises(DatasetError, match="no step timings"):
        whatif.observed(ds, "other")


def test_mfu_of_the_measured_step(linked: dict[str, Path]) -> None:
    # model FLOPs per step / (measured step x ranks x peak), PaLM's definition (compute.mfu);
    # a peak of 1 TFLOP/s per rank keeps the figure visible for this tiny CPU run
    from pipeline.model.compute import step_flops

    obs = whatif.observed(linked["tp"])
    flops = step_flops(load_job(DATA / "tp" / "job.yaml"))["model_flops"]
    args = ["predict", "--config", str(DATA / "tp" / "job.yaml"), "--from", str(linked["tp"]),
            "--tp", "2", "--peak-tflops", "1", "--format", "json"]  # fmt: skip
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["mfu"] == pytest.approx(flops / (obs.step_s * 2 * 1e12))


def test_report_compute_section(linked: dict[str, Path], tmp_path: Path) -> None:
    from pipeline.model.compute import step_flops
    from pipeline.report import build_report

    job = load_job(DATA / "tp" / "job.yaml")
    result = build_report(linked["tp"], config=DATA / "tp" / "job.yaml", output=tmp_path / "r.html")
    assert "compute" in result.sections
    page = (tmp_path / "r.html").read_text()
    obs = whatif.observed(linked["tp"])
    per_rank = step_flops(job)["model_flops"] / (obs.step_s * 2) / 1e12
    assert "achieved model TFLOP/s per rank" in page and f"{per_rank:.4g}" in page
    # the what-if table: the DP 2 layout's projected step (the test above checks it against
    # the DDP run) and the observed layout's, which projects onto its measured step
    rows = whatif.project(job, obs, whatif.layouts(DATA / "tp" / "job.yaml", 2, {}))
    dp2 = next(p for p in rows if p.layout.startswith("tp=1 pp=1 dp=2"))
    assert f"<td>{fmt.duration(dp2.step_s * 1e9)}</td>" in page.replace(' class="num"', "")
    assert fmt.duration(obs.step_s * 1e9) in page and "What-if: the step of every" in page
    # without a job.yaml the section says what it needs
    bare = build_report(linked["tp"], output=tmp_path / "b.html")
    assert "compute" in bare.sections
    assert "No compute model: it needs the job" in (tmp_path / "b.html").read_text()


def test_report_what_if_too_many_layouts(
    linked: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.report import build_report
    from pipeline.report import compute as section

    monkeypatch.setattr(section, "MAX_WHATIF_LAYOUTS", 1)
    build_report(linked["tp"], config=DATA / "tp" / "job.yaml", output=tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    # (2 ranks: tp 2, pp 2 (one layer a stage) or dp 2)
    assert "No what-if table: 3 layouts of 2 ranks" in page
    assert "What-if: the step of every" not in page
