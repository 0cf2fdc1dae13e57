"""What-if projections from a linked run: the recorded CPU/gloo TP run projected onto data
parallelism, checked against the recorded DDP run of the same model and micro-batch."""

from __future__ import annotations

import dataclasses
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


def test_tp_run_projected_onto_dp_against_the_ddp_run(linked: dict[str, Path]) -> None:
    # tests/data/cpu_gloo: the same 2-layer GPT, micro-batch 4, on 2 CPU ranks, recorded once
    # as TP 2 and once as DDP 2 (twice the tokens per step). The TP run's compute splits
    # 62% transformer layers, 17% LM head, 3% embedding, 18% the rest; its 26 traced
    # all-reduces of 512 B and 32 KiB fit alpha 550 us and 0.275 GB/s (gloo on CPU).
    # Projected from it, the DP layout's step is 50.6 ms against the DDP run's measured
    # 41.6 ms: +22%. Compute 32.8 ms against 22.0 ms, +49% (layers and head twice the TP
    # rank's FLOPs, the embedding the same lookups: gloo's TP run computes less per second);
    # communication and idle 17.8 ms against 19.6 ms, -9%.
    tp = whatif.observed(linked["tp"])
    ddp = whatif.observed(linked["ddp"])
    assert dict(tp.shares)["transformer"] == pytest.approx(0.62, abs=0.01)
    (f,) = tp.fits
    assert (f.op, f.nranks, f.points) == ("all_reduce", 2, 2)
    assert f.alpha_us == pytest.approx(550, rel=0.01)
    assert f.busbw_GBps == pytest.approx(0.275, rel=0.01)
    base = whatif.with_observed_fits(load_job(DATA / "tp" / "job.yaml"), tp)
    dp = whatif.target(DATA / "tp" / "job.yaml", {"parallel.tp": 1, "parallel.dp": 2}, None)
    rows = whatif.project(base, tp, [dataclasses.replace(dp, network=base.network)])
    mine = {p.observed: p for p in rows}
    # the observed layout projects onto its own measured step
    assert mine[True].step_s == pytest.approx(tp.step_s)
    assert mine[True].compute_s == pytest.approx(tp.compute_s)
    got = mine[False]
    assert got.tokens_per_step == 256 and got.world_size == 2
    assert got.step_s / ddp.step_s - 1 == pytest.approx(0.22, abs=0.01)
    assert got.compute_s / ddp.compute_s - 1 == pytest.approx(0.49, abs=0.01)
    assert got.comm_s / (ddp.step_s - ddp.compute_s) - 1 == pytest.approx(-0.09, abs=0.01)
    # per class: 2x the transformer, LM head and rest, 1x the embedding lookups
    share = dict(tp.shares)
    assert got.compute_s == pytest.approx(tp.compute_s * (2 - share["embedding"]))
    # ranked fastest first
    assert [p.step_s for p in rows] == sorted(p.step_s for p in rows)


def test_dp_run_projected_onto_tp_against_the_tp_run(linked: dict[str, Path]) -> None:
    # The other way round: the DDP run's collectives give no fit (its 8-byte loss all-reduce
    # took longer than its 527 KiB gradient all-reduce), so the network section's NVLink
    # figures are calibrated on its step; the TP 2 layout's 26 small all-reduces then project
    # to 122 ms against 48.6 ms of communication and idle measured, +151%; compute 11.1 ms
    # against 16.7 ms, -33%; the step 133 ms against 65.2 ms, +104%. The calibration ratio
    # carries the latency of gloo no better than its bandwidth: a fit needs two sizes.
    tp = whatif.observed(linked["tp"])
    ddp = whatif.observed(linked["ddp"])
    assert ddp.fits == ()
    base = load_job(DATA / "ddp" / "job.yaml")
    target = whatif.target(DATA / "ddp" / "job.yaml", {"parallel.tp": 2, "parallel.dp": 1}, None)
    got = next(p for p in whatif.project(base, ddp, [target]) if not p.observed)
    assert got.step_s / tp.step_s - 1 == pytest.approx(1.04, abs=0.02)
    assert got.compute_s / tp.compute_s - 1 == pytest.approx(-0.33, abs=0.01)


def test_cli_ranks_every_layout_of_the_world(linked: dict[str, Path]) -> None:
    args = ["predict", "--config", str(DATA / "tp" / "job.yaml"), "--from", str(linked["tp"])]
    out = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    layouts = [p["layout"] for p in doc["projections"]]
    # 2 ranks: tp 2 (observed), dp 2 (micro-batch 2 keeps the 4 sequences), pp 2 (2 layers)
    assert sorted(layouts) == sorted(
        ["tp=2 pp=1 dp=1 cp=1 ep=1 mb=4", "tp=1 pp=1 dp=2 cp=1 ep=1 mb=2",
         "tp=1 pp=2 dp=1 cp=1 ep=1 mb=4"]
    )  # fmt: skip
    steps = [p["step_s"] for p in doc["projections"]]
    assert steps == sorted(steps)
    # the figures est_time_s used: the run's own all-reduces
    (fitted,) = doc["timing"]["fitted"]
    assert fitted["source"] == "26 traced collectives of job tp" and fitted["points"] == 2
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
    fitted = whatif.with_observed_fits(job, obs)
    targets = [dataclasses.replace(t, network=fitted.network)
               for t in whatif.layouts(DATA / "tp" / "job.yaml", 2, {})]  # fmt: skip
    rows = whatif.project(fitted, obs, targets)
    dp2 = next(p for p in rows if p.layout.startswith("tp=1 pp=1 dp=2"))
    # the figures used: fitted to the run's own all-reduces
    assert "all_reduce over 2 ranks fitted to 26 traced collectives of job tp" in page
    # (the table's durations are in the one unit its header names: ms here)
    assert "step (ms)" in page
    assert f"<td>{dp2.step_s * 1e3:.1f}</td>" in page.replace(' class="num"', "")
    assert fmt.duration(obs.step_s * 1e9) in page and "What-if: the step of every" in page
    assert "give hardware.peak_tflops or hardware.accelerator" in page
    # with a peak in the job.yaml the section shows MFU: achieved over peak per rank
    yaml = tmp_path / "job.yaml"
    yaml.write_text((DATA / "tp" / "job.yaml").read_text() + "hardware: {peak_tflops: 0.5}\n")
    build_report(linked["tp"], config=yaml, output=tmp_path / "m.html")
    page = (tmp_path / "m.html").read_text()
    assert "MFU (peak 0.5 TFLOP/s per GPU, hardware.peak_tflops)" in page
    assert f"{per_rank / 0.5:.2%}" in page
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
