"""job.yaml loading and validation: defaults, presets, overrides and every kind of bad config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipeline.errors import ConfigError
from pipeline.model.config import build_job, job_from_dict, load_job

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "job.yaml"

DIMS = {"layers": 4, "hidden": 256, "heads": 8, "ffn_hidden": 1024, "vocab": 8192,
        "seq_len": 128}  # fmt: skip


def _err(doc, **kw) -> str:
    with pytest.raises(ConfigError) as exc:
        job_from_dict(doc, **kw)
    return str(exc.value)


def test_sample_job_loads_as_the_brief_describes():
    job = load_job(SAMPLE)
    m, p = job.model, job.parallel
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab, m.seq_len) == (
        4, 256, 8, 8, 1024, 8192, 128)  # fmt: skip
    assert (m.mlp, m.norm, m.position, m.tied_embeddings) == ("gelu", "layernorm", "learned", False)
    assert (p.tp, p.pp, p.dp, p.cp, p.ep, p.world_size, p.order) == (
        2, 2, 2, 1, 1, 8, "tp-cp-ep-dp-pp")  # fmt: skip
    assert (job.batch.micro_batch, job.batch.global_batch, job.microbatches) == (2, 16, 4)
    assert (job.dtypes.e_p, job.dtypes.e_a, job.dtypes.e_g) == (2, 2, 2)
    assert job.tokens_per_step == 16 * 128
    assert job.network.algorithm == "ring" and job.recompute == "none"


def test_defaults_without_preset_are_gpt_style_and_megatron_dtypes():
    job = job_from_dict({"model": DIMS})
    assert (job.model.mlp, job.model.norm, job.model.position) == ("gelu", "layernorm", "learned")
    assert job.model.kv_heads == 8
    assert job.dtypes.grad_reduce == "fp32"  # Megatron reduces bf16 models in fp32
    assert job.parallel.dp_scheme == "ddp" and job.batch.global_batch == 1


def test_preset_with_overrides():
    job = job_from_dict({"model": {"preset": "llama3-8b", "seq_len": 4096}})
    assert job.model.seq_len == 4096 and job.model.hidden == 4096 and job.model.name == "llama3-8b"
    moe = job_from_dict({"model": {"preset": "mixtral-8x7b", "moe": {"capacity_factor": 1.25}}})
    assert moe.model.moe.experts == 8 and moe.model.moe.capacity_factor == 1.25


def test_grad_accum_gives_global_batch_and_schemes():
    job = job_from_dict({"model": DIMS, "parallel": {"dp": 4}, "batch": {"micro_batch": 2,
                         "grad_accum": 3}})  # fmt: skip
    assert job.batch.global_batch == 24 and job.microbatches == 3
    schemes = {
        (0, False, False): "ddp", (1, False, False): "zero1", (0, False, True): "zero1",
        (2, False, False): "zero2", (3, False, False): "zero3", (0, True, False): "zero3",
    }  # fmt: skip
    for (z, fsdp, dist), want in schemes.items():
        par = {"zero_stage": z, "fsdp": fsdp, "distributed_optimizer": dist}
        assert job_from_dict({"model": DIMS, "parallel": par}).parallel.dp_scheme == want
    par = {"fsdp": True, "reshard_after_forward": False}
    assert job_from_dict({"model": DIMS, "parallel": par}).parallel.dp_scheme == "fsdp_no_reshard"


def test_order_without_ep_and_llama_order():
    job = job_from_dict({"model": DIMS, "parallel": {"order": "tp-cp-pp-dp"}})
    assert job.parallel.order == "tp-cp-pp-ep-dp"


@pytest.mark.parametrize(
    ("doc", "pattern"),
    [
        # unknown keys, at every level, with a suggestion
        ({"model": DIMS, "parallel": {"tensor_paralel": 2}},
         r"parallel\.tensor_paralel: unknown key \(did you mean parallel\.tp\?\); allowed: tp, pp"),
        ({"model": DIMS, "paralel": {}}, r"^paralel: unknown key \(did you mean parallel\?\)"),
        ({"model": {**DIMS, "hiden": 3}},
         r"model\.hiden: unknown key \(did you mean model\.hidden"),
        ({"model": {**DIMS, "moe": {"experts": 4, "top_k": 1, "topk": 2}}},
         r"model\.moe\.topk: unknown key"),
        ({"model": DIMS, "batch": {"microbatch": 2}}, r"batch\.microbatch: unknown key"),
        ({"model": DIMS, "network": {"gpus": 8}}, r"network\.gpus: unknown key"),
        ({"model": DIMS, "dtypes": {"grads": "fp32"}}, r"dtypes\.grads: unknown key"),
        # divisibility
        ({"model": DIMS, "parallel": {"tp": 3}},
         r"model\.heads \(8\) must be divisible by parallel\.tp \(3\)"),
        ({"model": DIMS, "parallel": {"dp": 2}, "batch": {"micro_batch": 2, "global_batch": 6}},
         r"batch\.global_batch \(6\) must be divisible by batch\.micro_batch x parallel\.dp"),
        ({"model": {**DIMS, "kv_heads": 3}}, r"model\.kv_heads \(3\) must divide model\.heads"),
        ({"model": DIMS, "parallel": {"pp": 8}}, r"model\.layers \(4\) must be at least"),
        ({"model": {**DIMS, "seq_len": 130}, "parallel": {"tp": 4, "sequence_parallel": True}},
         r"model\.seq_len \(130\) must be divisible by parallel\.tp"),
        ({"model": DIMS, "parallel": {"ep": 2, "dp": 2}}, r"parallel\.ep: .*needs model\.moe"),
        ({"model": {**DIMS, "moe": {"experts": 6, "top_k": 2}}, "parallel": {"ep": 4, "dp": 4}},
         r"model\.moe\.experts \(6\) must be divisible by parallel\.ep \(4\)"),
        ({"model": {**DIMS, "moe": {"experts": 8, "top_k": 2}}, "parallel": {"ep": 4, "dp": 2}},
         r"parallel\.ep \(4\) must divide parallel\.dp x parallel\.cp"),
        ({"model": DIMS, "parallel": {"vpp": 2}}, r"parallel\.vpp: .*needs parallel\.pp > 1"),
        # values
        ({"model": DIMS, "parallel": {"tp": 0}},
         r"parallel\.tp: must be a positive integer, got 0"),
        ({"model": DIMS, "parallel": {"tp": "2"}}, r"parallel\.tp: must be a positive integer"),
        ({"model": DIMS, "parallel": {"sequence_parallel": "yes"}},
         r"parallel\.sequence_parallel: must be true or false"),
        ({"model": DIMS, "parallel": {"zero_stage": 4}},
         r"parallel\.zero_stage: must be 0, 1, 2 or 3"),
        ({"model": DIMS, "parallel": {"zero_stage": 1, "fsdp": True}}, r"parallel\.fsdp: "),
        ({"model": DIMS, "parallel": {"order": "tp-dp-pp", "cp": 2}},
         r"parallel\.order: 'tp-dp-pp' leaves out cp, whose degree is 2"),
        ({"model": DIMS, "parallel": {"order": "tp-xp-dp-pp"}}, r"parallel\.order: must be"),
        ({"model": DIMS, "parallel": {"order": "tp-cp-cp-dp-pp"}}, r"parallel\.order: must be"),
        ({"model": DIMS, "recompute": "partial"},
         r"recompute: must be one of none, selective, full, got 'partial'"),
        ({"model": {**DIMS, "mlp": "relu"}}, r"model\.mlp: must be one of gelu, swiglu"),
        ({"model": DIMS, "dtypes": {"activations": "int8"}},
         r"dtypes\.activations: must be one of"),
        ({"model": DIMS, "network": {"algorithm": "butterfly"}},
         r"network\.algorithm: must be one of ring, tree, nvls"),
        ({"model": DIMS, "hardware": {"peak_tflops": "fast"}},
         r"hardware\.peak_tflops: must be a positive number, got 'fast'"),
        ({"model": DIMS, "hardware": {"peak_tflops": -1}},
         r"hardware\.peak_tflops: must be a positive number"),
        ({"model": DIMS, "hardware": {"peak_tflops": float("inf")}},
         r"hardware\.peak_tflops: must be a finite number"),
        ({"model": DIMS, "hardware": {"peak_tflops": 10**30}},
         r"hardware\.peak_tflops: at most 1e\+07 TFLOP/s per GPU"),
        ({"model": DIMS, "hardware": {"peak_tflops": True}},
         r"hardware\.peak_tflops: must be a positive number, got True"),
        ({"model": DIMS, "hardware": {"accelerator": "tpu-v9"}},
         r"hardware\.accelerator: must be one of a100, h100-sxm"),
        ({"model": DIMS, "hardware": {"accelerator": "a100"}, "dtypes": {"activations": "fp8"}},
         r"hardware\.accelerator: a100 has no fp8 figure"),
        ({"model": DIMS, "hardware": "h100"}, r"hardware: must be a mapping"),
        ({"model": DIMS, "hardware": {"peak": 1}}, r"hardware\.peak: unknown key"),
        ({"model": DIMS, "network": {"algorithm": []}},
         r"network\.algorithm: a list must name 1 to 4 algorithms, got 0"),
        ({"model": DIMS, "network": {"algorithm": ["ring", "auto"]}},
         r"network\.algorithm\[1\]: must be one of ring, tree, nvls, hierarchical, got 'auto'"),
        ({"model": DIMS, "network": {"algorithm": ["ring", "ring"]}},
         r"network\.algorithm: lists an algorithm twice"),
        ({"model": DIMS, "network": {"algorithm": {"a": 1}}},
         r"network\.algorithm: must be one of ring, tree, nvls, hierarchical, auto"),
        ({"model": DIMS, "network": {"inter_node_GBps": -1}},
         r"network\.inter_node_GBps: must be a positive number"),
        ({"model": {"preset": "llama9"}},
         r"model\.preset: unknown preset 'llama9'; allowed: gpt2-small"),
        ({"model": {"layers": 2}}, r"model\.hidden: missing"),
        ({"parallel": {}}, r"^model: missing"),
        ({"model": {**DIMS, "moe": {"experts": 2, "top_k": 3}}},
         r"model\.moe\.top_k \(3\) must be at most"),
        ([1, 2], r"must be a mapping"),
        ({"model": DIMS, "batch": {"micro_batch": 1, "global_batch": 4, "grad_accum": 3}},
         r"batch\.grad_accum: 3 disagrees"),
    ],
)  # fmt: skip
def test_bad_configs_name_the_key(doc, pattern):
    assert re.search(pattern, _err(doc)), _err(doc)


def test_world_size_must_equal_layout_product():
    msg = _err({"model": DIMS, "parallel": {"tp": 2, "pp": 2, "dp": 2, "world_size": 16}})
    assert msg.startswith("parallel.world_size: 16 ranks, but tp*pp*dp*cp = 2*2*2*1 = 8")
    msg = _err({"model": DIMS, "parallel": {"tp": 2}}, world_size=4)
    assert "world size: 4 ranks" in msg and "= 2" in msg


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text(yaml.safe_dump({"model": DIMS, "parallel": {"tensor_paralel": 2}}))
    with pytest.raises(ConfigError, match=re.escape(f"{bad}: parallel.tensor_paralel: unknown")):
        load_job(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: {layers: 4\nparallel: [")
    with pytest.raises(
        ConfigError, match=re.escape(str(broken)) + r": line 2, column \d+: not valid YAML: "
    ):
        load_job(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_job(tmp_path / "missing.yaml")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_job(scalar)


def test_hardware_peak() -> None:
    # NVIDIA H100 SXM datasheet: BF16 tensor 1,979 TFLOP/s with sparsity, 989.5 dense; the
    # explicit peak wins over the name
    job = build_job(None, {"model.preset": "llama2-7b", "hardware.accelerator": "h100-sxm"})
    assert job.peak_flops == 989.5e12
    fp32 = build_job(None, {"model.preset": "llama2-7b", "hardware.accelerator": "a100",
                            "dtypes.activations": "fp32"})  # fmt: skip
    assert fp32.peak_flops == 19.5e12
    both = build_job(None, {"model.preset": "llama2-7b", "hardware.accelerator": "a100",
                            "hardware.peak_tflops": 250})  # fmt: skip
    assert both.peak_flops == 250e12
    assert build_job(None, {"model.preset": "llama2-7b"}).peak_flops is None


def test_hostile_hardware_is_one_line_exit_1(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import cli

    bad = tmp_path / "job.yaml"
    bad.write_text(yaml.safe_dump({"model": DIMS, "hardware": {"peak_tflops": "1e400"}}))
    out = CliRunner().invoke(cli, ["predict", "--config", str(bad)])
    assert out.exit_code == 1
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and f"{bad}: hardware.peak_tflops: must be a positive" in lines[0]


def test_build_job_overrides():
    job = build_job(SAMPLE, {"parallel.tp": 4, "parallel.dp": 1, "recompute": "full",
                             "batch.global_batch": 8})  # fmt: skip
    assert (job.parallel.tp, job.parallel.dp, job.recompute, job.batch.global_batch) == (
        4, 1, "full", 8)  # fmt: skip
    job = build_job(None, {"model.preset": "llama3-8b", "model.seq_len": 2048, "parallel.tp": 8})
    assert job.model.seq_len == 2048 and job.parallel.tp == 8
    with pytest.raises(ConfigError, match=r"job\.yaml: model\.heads \(8\) must be divisible"):
        build_job(SAMPLE, {"parallel.tp": 16})


def test_every_key_is_documented():
    from pipeline.model import config as c

    doc = (REPO / "docs" / "job-yaml.md").read_text()
    keys = (*c._TOP_KEYS, *c._MODEL_KEYS, *c._MOE_KEYS, *c._MLA_KEYS, *c._PARALLEL_KEYS,
            *c._BATCH_KEYS, *c._DTYPE_KEYS, *c._NETWORK_KEYS, *c._HARDWARE_KEYS)  # fmt: skip
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing
