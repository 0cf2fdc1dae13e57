"""Parameter counts and FLOPs against totals worked out by hand from the published dims, and
worked examples from Narayanan et al. 2021 (arXiv:2104.04473) and Llama 3 (arXiv:2407.21783)."""

from __future__ import annotations

import pytest

from pipeline.model.config import job_from_dict
from pipeline.model.params import (
    active_params,
    chunk_sizes,
    flops_per_token,
    layer_params,
    stage_layers,
    total_params,
)
from pipeline.model.presets import PRESETS
from tests.model.oracle import narayanan_flops_per_iteration, narayanan_params


def _model(name: str, **dims):
    return job_from_dict({"model": {"preset": name, **dims}}).model


# Totals computed by hand from each model's published dims (docs/model.md), to these digits.
PRESET_TOTALS = [
    ("gpt2-small", 124_439_808, 0),  # exact
    ("gpt3-175b", 174.6e9, 0.05e9),
    ("llama2-7b", 6.738e9, 0.0005e9),
    ("llama2-70b", 68.98e9, 0.005e9),
    ("llama3-8b", 8.030e9, 0.0005e9),
    ("llama3-70b", 70.55e9, 0.005e9),
    ("llama3-405b", 405.85e9, 0.005e9),
    ("mixtral-8x7b", 46.70e9, 0.005e9),
    ("deepseek-v3", 671.0e9, 0.05e9),
]


@pytest.mark.parametrize(("name", "expected", "half_digit"), PRESET_TOTALS)
def test_preset_totals_match_reference(name, expected, half_digit):
    n = total_params(_model(name))
    if half_digit == 0:
        assert n == expected
    else:
        assert abs(n - expected) <= half_digit


def test_every_preset_is_checked_against_a_published_total():
    # A preset without a row in PRESET_TOTALS would go unchecked.
    assert {name for name, _, _ in PRESET_TOTALS} == set(PRESETS)


def test_llama2_7b_by_hand():
    # 32 x (4h^2 attention + 3*h*f SwiGLU + 2h RMSNorm) + 2*V*h untied + h final norm.
    h, f, v = 4096, 11008, 32000
    assert total_params(_model("llama2-7b")) == 32 * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h


def test_llama3_8b_gqa_by_hand():
    # GQA: Q and O h*h each, K and V h*h_kv each with h_kv = 8 KV heads x 128 = 1024.
    h, f, v, h_kv = 4096, 14336, 128256, 1024
    n = 32 * (2 * h * h + 2 * h * h_kv + 3 * h * f + 2 * h) + 2 * v * h + h  # 8.030 B
    assert total_params(_model("llama3-8b")) == n
    assert active_params(_model("llama3-8b")) == n  # dense: every weight is active


def test_mixtral_by_hand():
    # Every layer: GQA attention, router h*E, E = 8 SwiGLU experts of 3*h*f, two RMSNorms.
    h, f, v, h_kv, experts, top_k = 4096, 14336, 32000, 1024, 8, 2
    layer = 2 * h * h + 2 * h * h_kv + experts * 3 * h * f + h * experts + 2 * h
    total = 32 * layer + 2 * v * h + h
    assert total_params(_model("mixtral-8x7b")) == total
    # A token touches top_k of the experts: the other 6 per layer are idle (12.88 B active).
    active = total - 32 * (experts - top_k) * 3 * h * f
    assert active_params(_model("mixtral-8x7b")) == active


def test_active_params_deepseek_v3():
    # Published as 37.5 B active (ours 37.55 B: the printed figure is truncated).
    ds = active_params(_model("deepseek-v3"))
    assert 37.5e9 <= ds < 37.6e9


def test_mla_attention_is_187_1_m():
    # MLA attention per layer (DeepSeek-V3): h*q_lora + q_lora*a*(d_nope + d_rope)
    # + h*(kv_lora + d_rope) + kv_lora*a*(d_nope + d_v) + a*d_v*h; a dense V3 layer adds the
    # SwiGLU MLP 3*h*f and two RMSNorms 2h.
    h, a, q_lora, kv_lora, d_nope, d_rope, d_v = 7168, 128, 1536, 512, 128, 64, 128
    # = 187,105,280 (187.1 M)
    mla = (h * q_lora + q_lora * a * (d_nope + d_rope) + h * (kv_lora + d_rope)
           + kv_lora * a * (d_nope + d_v) + a * d_v * h)  # fmt: skip
    assert layer_params(_model("deepseek-v3"), 0).dense == mla + 3 * h * 18432 + 2 * h


def test_narayanan_eq2_gpt3_padded_vocab():
    # GPT-3 175B: N (Narayanan eq. 2) = 174.62 B with V = 51,200 (padded).
    n = narayanan_params(layers=96, hidden=12288, vocab=51200, seq_len=2048)
    assert round(n / 1e9, 2) == 174.62
    # Our count of the same model differs from eq. 2 only by the final LayerNorm (2h).
    ours = total_params(_model("gpt3-175b", vocab=51200))
    assert ours - round(n) == 2 * 12288


def test_narayanan_eq3_gpt3_iteration():
    # GPT-3 175B, B = 1536: 4.51e18 FLOPs per iteration -> 31.5 s at 140 TFLOP/s/GPU on 1,024 GPUs.
    f = narayanan_flops_per_iteration(batch=1536, seq_len=2048, layers=96, hidden=12288,
                                      vocab=51200)  # fmt: skip
    assert f"{f:.2e}" == "4.51e+18"
    assert round(f / (1024 * 140e12), 1) == 31.5


def test_flops_per_token_llama3_405b():
    # Llama 3 405B (Table 4: 8,192 GPUs, 16 M-token steps, 430 TFLOP/s/GPU): 2.524e12
    # FLOPs/token -> 4.23e19 per step -> 12.0 s.
    f = flops_per_token(_model("llama3-405b"))
    assert f"{f:.3e}" == "2.524e+12"
    step = f * 2048 * 8192
    assert f"{step:.2e}" == "4.23e+19"
    assert round(step / (8192 * 430e12), 1) == 12.0


def test_flops_per_token_by_hand_gpt2():
    # 6 * (N - V*h input lookup - s*h positions + V*h tied LM head) + 6*L*s*h.
    n = 124_439_808
    h, v, s, n_layers = 768, 50257, 1024, 12
    n_mm = n - v * h - s * h + v * h
    assert flops_per_token(_model("gpt2-small")) == 6 * n_mm + 6 * n_layers * s * h


def test_chunk_sizes_even_and_llama3_uneven():
    assert chunk_sizes(12, 4) == [3, 3, 3, 3]
    # Llama 3 405B on PP16: first and last stage hold one layer fewer (Llama 3 paper).
    assert chunk_sizes(126, 16) == [7] + [8] * 14 + [7]
    assert sum(chunk_sizes(5, 4)) == 5 and min(chunk_sizes(5, 4)) == 1


def test_stage_layers_interleaved():
    job = job_from_dict({
        "model": {"layers": 8, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 100,
                  "seq_len": 16},
        "parallel": {"pp": 2, "vpp": 2},
    })  # fmt: skip
    # virtual stages 0..3 hold layers [0,1],[2,3],[4,5],[6,7]; rank r holds stages r and r+2.
    assert stage_layers(job, 0) == [0, 1, 4, 5]
    assert stage_layers(job, 1) == [2, 3, 6, 7]


@pytest.mark.parametrize("preset", ["gpt3-175b", "llama3-70b", "mixtral-8x7b", "deepseek-v3"])
def test_layer_flops_add_up_to_the_model(preset: str) -> None:
    # the what-if scales each layer by its own FLOPs: the layers, the LM head (6·V·h) and the
    # final norm (6·h, or 6·2h for LayerNorm) make flops_per_token
    from pipeline.model.params import embedding_params, layer_flops_per_token

    m = _model(preset)
    norm = 2 * m.hidden if m.norm == "layernorm" else m.hidden
    layers = sum(layer_flops_per_token(m, i) for i in range(m.layers))
    assert layers + 6 * embedding_params(m) + 6 * norm == flops_per_token(m)


def test_linear_bias_by_hand() -> None:
    """``linear_bias`` on GPT-2 small (h 768, f 3072, 12 layers, 124,439,808 with every
    bias): ``none`` drops Q, K, V, O and FC1, FC2 biases (4·768 + 3072 + 768 a layer),
    ``qkv`` keeps Q, K and V's (3·768)."""
    per_layer = 4 * 768 + 3072 + 768
    assert total_params(_model("gpt2-small", linear_bias="all")) == 124_439_808
    assert total_params(_model("gpt2-small", linear_bias="none")) == 124_439_808 - 12 * per_layer
    qkv = 124_439_808 - 12 * (per_layer - 3 * 768)
    assert total_params(_model("gpt2-small", linear_bias="qkv")) == qkv
    # Llama (SwiGLU) defaults to none; all adds Q, K, V, O, gate, up and down biases
    llama = _model("llama2-7b")
    assert llama.biases == "none"
    with_bias = layer_params(_model("llama2-7b", linear_bias="all"), 0).dense
    assert with_bias - layer_params(llama, 0).dense == 4 * 4096 + 2 * 11008 + 4096


def test_layer_tensors_follow_linear_bias() -> None:
    """The tensors DDP buckets: without biases, a GPT layer is its norms and six matrices."""
    from pipeline.model.params import layer_tensors

    m = _model("gpt2-small", linear_bias="none")
    assert layer_tensors(m, 0) == [768, 768] + [768 * 768] * 4 + [768, 768] + [768 * 3072] * 2
    assert sum(layer_tensors(m, 0)) == layer_params(m, 0).dense


def test_a_bad_linear_bias_names_the_key() -> None:
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="model.linear_bias: must be one of all, none, qkv"):
        _model("gpt2-small", linear_bias="some")
