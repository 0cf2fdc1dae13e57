"""``predict`` warns where a person would: a layout that does not fit the accelerator's
memory, a pipeline with fewer micro-batches than stages, a what-if that would change the
world size or the global batch; and MFU takes the GPU the traces name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.model import memory
from pipeline.model.compute import step_flops
from pipeline.model.config import load_job
from pipeline.model.whatif import observed
from tests.cpu_gloo import DATA

REPO = Path(__file__).resolve().parents[2]
SAMPLE_JOB = REPO / "sample_traces" / "job.yaml"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ds = tmp_path_factory.mktemp("sample") / "ds"
    assert not ingest([REPO / "sample_traces"], ds, job="sample", jobs=1).errors
    link(ds, config=SAMPLE_JOB)
    return ds


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ds = tmp_path_factory.mktemp("tp") / "ds"
    assert not ingest([DATA / "tp"], ds, job="tp", jobs=1).errors
    link(ds, config=DATA / "tp" / "job.yaml")
    return ds


def _predict(*args: str) -> tuple[int, dict, str]:
    out = CliRunner().invoke(cli, ["predict", *args, "--format", "json"])
    doc = json.loads(out.stdout) if out.exit_code == 0 else {}
    return out.exit_code, doc, out.stderr


def test_device_names_map_to_accelerators() -> None:
    a100 = memory.accelerator_of("NVIDIA A100-SXM4-40GB")
    assert (a100.name, a100.memory_bytes) == ("a100", 40 * 2**30)
    assert memory.accelerator_of("NVIDIA H100 PCIe").name == "h100-pcie"
    h100 = memory.accelerator_of("NVIDIA H100 80GB HBM3")
    assert (h100.name, h100.memory_bytes) == ("h100-sxm", 80 * 2**30)
    assert memory.accelerator_of("NVIDIA H200").memory_bytes == 141 * 2**30
    assert memory.accelerator_of("AMD Instinct MI300X").name == "mi300x"
    assert memory.accelerator_of("Tesla V100-SXM2-32GB") is None
    assert memory.accelerator_of("NVIDIA GH200 480GB") is None  # (CPU and GPU memory)


def test_layout_that_does_not_fit_warns(tmp_path: Path) -> None:
    # Llama 3 70B (70.6e9 weights) on tp=8 alone: 8.8e9 weights a rank at 2 + 4 + 12 bytes
    # (bf16 params, fp32 grads, mixed-precision Adam, arXiv:1910.02054) = 159 GB before the
    # activations, more than an H100's 80 GiB. On tp=8 pp=8 dp=8 with sequence parallelism,
    # selective recomputation and the distributed optimizer a rank of the first stage holds
    # 1.1e9 weights at 2 + 4 + 12/8 bytes and 10 layers x 8 micro-batches of 34·sbh/t
    # activation bytes (arXiv:2205.05198, Table 2): about 31 GB, which fits.
    job = tmp_path / "job.yaml"
    job.write_text(
        "model: {preset: llama3-70b}\nparallel: {tp: 8}\nhardware: {accelerator: h100-sxm}\n"
    )
    rc, doc, err = _predict("--config", str(job))
    assert rc == 0
    (w,) = [w for w in doc["warnings"] if w["kind"] == "memory"]
    assert w["capacity_bytes"] == 80 * 2**30 and w["memory_bytes"] > 70.5e9 / 8 * 18
    assert "does not fit" in err and "h100-sxm (job.yaml hardware.accelerator)" in err
    assert doc["accelerator"]["name"] == "h100-sxm"
    rc, doc, err = _predict("--config", str(job), "--pp", "8", "--dp", "8",
                            "--distributed-optimizer", "--sequence-parallel", "--recompute",
                            "selective", "--global-batch", "64")  # fmt: skip
    assert rc == 0 and doc["warnings"] == [] and "does not fit" not in err


def test_pipeline_with_fewer_microbatches_than_stages_warns() -> None:
    # the sample job: global batch 16, micro-batch 2, dp 2: m = 4 micro-batches for pp = 2
    rc, doc, err = _predict("--config", str(SAMPLE_JOB))
    assert rc == 0 and doc["warnings"] == [] and "bubble" not in err
    # global batch 4: m = 1 for 2 stages; (p-1)/(m+p-1) = 1/2 of the step idle
    rc, doc, err = _predict("--config", str(SAMPLE_JOB), "--global-batch", "4")
    (w,) = doc["warnings"]
    assert w["kind"] == "bubble" and w["bubble_share"] == pytest.approx(0.5)
    assert "1 micro-batch per step for 2 pipeline stages" in err and "50%" in err


def test_what_if_keeps_the_observed_world(sample: Path) -> None:
    base = ["--config", str(SAMPLE_JOB), "--from", str(sample)]
    # --tp 4 on the 8 ranks of tp=2 pp=2 dp=2: dp follows, 4 x 2 x 1
    rc, doc, _ = _predict(*base, "--tp", "4")
    assert rc == 0
    assert {p["world_size"] for p in doc["projections"]} == {8}
    assert "tp=4 pp=2 dp=1 cp=1 ep=1 mb=2" in [p["layout"] for p in doc["projections"]]
    # a layout of another world is an error unless --world-size asks for it
    rc, _, err = _predict(*base, "--tp", "4", "--dp", "4")
    assert rc == 1 and "--world-size 32" in err
    rc, doc, _ = _predict(*base, "--tp", "4", "--dp", "4", "--world-size", "32")
    assert rc == 0 and {p["world_size"] for p in doc["projections"]} == {8, 32}
    assert "32 ranks, the observed run's 8" in doc["layouts"][0]["reason"]


def test_every_layout_keeps_the_global_batch_and_says_what_it_left_out(
    sample: Path, tp_run: Path
) -> None:
    # tests/data/cpu_gloo/tp: 2 ranks, micro-batch 4, global batch 4. dp=2 keeps the 4
    # sequences with micro-batch 2; pp=2 runs 1 micro-batch for 2 stages (the bubble).
    args = ["--config", str(DATA / "tp" / "job.yaml"), "--from", str(tp_run)]
    rc, doc, err = _predict(*args)
    assert rc == 0
    assert {p["tokens_per_step"] for p in doc["projections"]} == {4 * 32}
    notes = {(n["layout"], n["action"]) for n in doc["layouts"]}
    assert ("tp=1 pp=1 dp=2 cp=1", "adjusted") in notes
    assert "micro_batch 4 -> 2 keeps the global batch of 4 sequences" in err
    assert [w["layout"] for w in doc["warnings"]] == ["tp=1 pp=2 dp=1 cp=1 ep=1 mb=4"]
    # the sample's 8 ranks: pp=8 is dropped (4 layers), and the output says why
    rc, doc, err = _predict("--config", str(SAMPLE_JOB), "--from", str(sample))
    dropped = {n["layout"]: n["reason"] for n in doc["layouts"] if n["action"] == "dropped"}
    assert "model.layers (4) must be at least" in dropped["tp=1 pp=8 dp=1 cp=1"]
    assert "tp=1 pp=8 dp=1 cp=1: dropped" in err


def test_mfu_uses_the_gpu_the_traces_name(sample: Path) -> None:
    # sample_traces/job.yaml names no hardware; the traces' ranks drive an
    # "NVIDIA H100 80GB HBM3": bf16 dense peak 989.5 TFLOP/s (the H100 SXM datasheet)
    rc, doc, _ = _predict("--config", str(SAMPLE_JOB), "--from", str(sample))
    assert rc == 0
    assert doc["accelerator"] == {"name": "h100-sxm", "memory_bytes": 80 * 2**30,
                                  "source": "traces: NVIDIA H100 80GB HBM3"}  # fmt: skip
    flops = step_flops(load_job(SAMPLE_JOB))["model_flops"]
    step = observed(sample).step_s
    assert doc["mfu"] == pytest.approx(flops / (step * 8 * 989.5e12))


def test_job_yaml_hardware_wins_over_the_traces(sample: Path, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(SAMPLE_JOB.read_text() + "hardware: {accelerator: a100}\n")
    rc, doc, _ = _predict("--config", str(job), "--from", str(sample))
    assert rc == 0 and doc["accelerator"]["source"] == "job.yaml hardware.accelerator"
    assert doc["peak_flops"] == 312e12
