"""FLOPs per step, MFU and memory per rank against published figures and hand arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import ConfigError
from pipeline.model import compute as C
from pipeline.model.config import build_job


def _job(preset: str, **over: object):
    keys = {"recompute", "batch.micro_batch", "batch.global_batch"}
    o: dict[str, object] = {"model.preset": preset}
    for k, v in over.items():
        o[k if k in keys else f"parallel.{k}"] = v
    return build_job(None, o)


GiB = 2**30


@pytest.mark.parametrize(
    ("scheme", "expected_gb"),
    [("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)],
)
def test_zero_paper_figure_1(scheme: str, expected_gb: float) -> None:
    # Rajbhandari et al., ZeRO, arXiv:1910.02054, Figure 1: a 7.5B-parameter model with
    # mixed-precision Adam (K = 12, fp16 parameters and gradients) on N_d = 64 GPUs holds
    # 120 GB (baseline), 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p) per GPU.
    b = C.state_bytes(7.5e9, scheme, 64, 2, 2)
    assert sum(b.values()) / 1e9 == pytest.approx(expected_gb, abs=0.05)


def test_megatron_distributed_optimizer_bytes_per_parameter() -> None:
    # Megatron Core user guide, "Distributed Optimizer"
    # (docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html): bf16
    # parameters with fp32 gradients take 18 bytes per parameter without, 6 + 12/d with the
    # distributed optimizer; fp32 parameters and gradients 16 and 8 + 8/d.
    d = 8
    assert sum(C.state_bytes(1, "ddp", d, 2, 4).values()) == 18
    assert sum(C.state_bytes(1, "zero1", d, 2, 4).values()) == pytest.approx(6 + 12 / d)
    assert sum(C.state_bytes(1, "ddp", d, 4, 4).values()) == 16
    assert sum(C.state_bytes(1, "zero1", d, 4, 4).values()) == pytest.approx(8 + 8 / d)


@pytest.mark.parametrize(("preset", "saving"), [("gpt3-175b", 0.70), ("mt-nlg", 0.65)])
def test_selective_recompute_saving(preset: str, saving: float) -> None:
    # Korthikanti et al., arXiv:2205.05198, Section 4.2: selective recomputation cuts the
    # activation memory of GPT-3 (a=96, h=12288, s=2048) by 70% and of MT-NLG 530B
    # (a=128, h=20480, s=2048) by 65% (the 5as/h term against 34).
    dims = {"gpt3-175b": {}, "mt-nlg": {"hidden": 20480, "heads": 128, "kv_heads": 128,
                                        "ffn_hidden": 81920, "layers": 105}}[preset]  # fmt: skip
    over = {f"model.{k}": v for k, v in dims.items()}
    base = {"model.preset": "gpt3-175b", "parallel.tp": 8, "parallel.sequence_parallel": True}
    none = build_job(None, base | over | {"recompute": "none"})
    sel = build_job(None, base | over | {"recompute": "selective"})
    got = 1 - C.layer_activation_bytes(sel) / C.layer_activation_bytes(none)
    assert got == pytest.approx(saving, abs=0.005)


def test_activation_formulas_table_2() -> None:
    # arXiv:2205.05198 Table 2, written out for GPT-3 175B, s=2048, b=1, t=8.
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    tp = _job("gpt3-175b", tp=8, recompute="none", **{"batch.micro_batch": 1})
    assert C.layer_activation_bytes(tp) == pytest.approx(
        s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    )
    sp = _job("gpt3-175b", tp=8, sequence_parallel=True, recompute="none")
    assert C.layer_activation_bytes(sp) == pytest.approx(s * b * h / t * (34 + 5 * a * s / h))
    full = _job("gpt3-175b", tp=8, sequence_parallel=True, recompute="full")
    assert C.layer_activation_bytes(full) == pytest.approx(2 * s * b * h / t)


def test_first_stage_holds_all_layers_worth() -> None:
    # arXiv:2205.05198 Section 4.2.3: under 1F1B the first stage keeps p micro-batches of
    # L/p layers, i.e. L layers' activations, whatever p.
    j = _job("gpt3-175b", tp=8, pp=8, dp=2, sequence_parallel=True, recompute="selective",
             **{"batch.micro_batch": 1, "batch.global_batch": 64})  # fmt: skip
    first = C.rank_memory(j, 0).activations
    assert first == pytest.approx(96 * 2048 * 12288 * 34 / 8)
    assert C.rank_memory(j, 7).activations == pytest.approx(first / 8)


def test_step_flops_and_mfu() -> None:
    # 6·N·D plus attention (Megatron accounting); full recomputation adds one forward of the
    # layers (8/6 of the layer FLOPs), Korthikanti et al. Section 5.
    j = _job("gpt3-175b", tp=8, pp=8, dp=4, recompute="full",
             **{"batch.micro_batch": 1, "batch.global_batch": 1536})  # fmt: skip
    f = C.step_flops(j)
    tokens = 1536 * 2048
    head = 50257 * 12288
    per_token = f["model_flops"] / tokens
    assert f["hardware_flops"] == pytest.approx(
        f["model_flops"] + (per_token - 6 * head) / 3 * tokens
    )
    # MFU = model FLOPs / (T · n · peak)
    assert C.mfu(j, 20.0, 312e12) == pytest.approx(f["model_flops"] / (20.0 * 256 * 312e12))
    with pytest.raises(ConfigError):
        C.mfu(j, 0.0, 312e12)


def test_zero3_shards_everything_over_dp() -> None:
    j1 = _job("llama2-7b", dp=1)
    j8 = _job("llama2-7b", dp=8, zero_stage=3)
    m1, m8 = C.rank_memory(j1, 0), C.rank_memory(j8, 0)
    assert m8.params == pytest.approx(m1.params / 8)
    assert m8.optimizer == pytest.approx(m1.optimizer / 8)


def test_cli_prints_compute_and_mfu() -> None:
    args = ["predict", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "4",
            "--step-time", "20", "--peak-tflops", "312"]  # fmt: skip
    res = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["compute"]["mfu"] == pytest.approx(
        doc["compute"]["model_flops"] / (20 * 256 * 312e12)
    )
    table = CliRunner().invoke(cli, args)
    assert "MFU:" in table.output and "memory per rank" in table.output


def test_mfu_from_the_job_yaml_hardware(tmp_path: Path) -> None:
    # hardware.accelerator: a100 gives the A100 datasheet's dense BF16 312 TFLOP/s (624 with
    # sparsity), the same MFU as --peak-tflops 312
    job = tmp_path / "job.yaml"
    job.write_text(
        "model: {preset: gpt3-175b}\nparallel: {tp: 8, pp: 8, dp: 4}\n"
        "hardware: {accelerator: a100}\n"
    )
    args = ["predict", "--config", str(job), "--step-time", "20", "--format", "json"]
    doc = json.loads(CliRunner().invoke(cli, args).stdout)
    assert doc["compute"]["mfu"] == pytest.approx(
        doc["compute"]["model_flops"] / (20 * 256 * 312e12)
    )
