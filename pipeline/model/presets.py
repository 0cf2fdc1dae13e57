"""Model presets: the published dimensions of well-known models.

Each preset is a plain mapping in the spelling of ``job.yaml``'s ``model`` section, so a
preset and hand-written dims go through the same validation. Sources: the OpenAI GPT-2
config, GPT-3 (arXiv:2005.14165) Table 2.1, the HuggingFace configs of Llama-2 and Mixtral,
Llama 3 (arXiv:2407.21783) Table 3 and DeepSeek-V3's ``config.json``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

_GPT = {"mlp": "gelu", "norm": "layernorm", "position": "learned"}
_LLAMA = {"mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False}

# fmt: off
_PRESETS: dict[str, dict[str, Any]] = {
    # OpenAI GPT-2 config: tied embeddings, learned positions.
    "gpt2-small": {
        "layers": 12, "hidden": 768, "heads": 12, "kv_heads": 12, "ffn_hidden": 3072,
        "vocab": 50257, "seq_len": 1024, "tied_embeddings": True, **_GPT,
    },
    # GPT-3 paper Table 2.1 (d_head 128, n_ctx 2048); embeddings tied as in GPT-2.
    "gpt3-175b": {
        "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn_hidden": 49152,
        "vocab": 50257, "seq_len": 2048, "tied_embeddings": True, **_GPT,
    },
    "llama2-7b": {
        "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_hidden": 11008,
        "vocab": 32000, "seq_len": 4096, **_LLAMA,
    },
    "llama2-70b": {
        "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
        "vocab": 32000, "seq_len": 4096, **_LLAMA,
    },
    "llama3-8b": {
        "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
        "vocab": 128256, "seq_len": 8192, **_LLAMA,
    },
    "llama3-70b": {
        "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
        "vocab": 128256, "seq_len": 8192, **_LLAMA,
    },
    "llama3-405b": {
        "layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn_hidden": 53248,
        "vocab": 128256, "seq_len": 8192, **_LLAMA,
    },
    # HF config: num_local_experts 8, num_experts_per_tok 2, every layer MoE.
    "mixtral-8x7b": {
        "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
        "vocab": 32000, "seq_len": 32768, **_LLAMA,
        "moe": {"experts": 8, "top_k": 2, "every": 1, "ffn_hidden": 14336},
    },
    # config.json: 3 dense layers then 58 MoE layers (256 routed top-8 + 1 shared), MLA.
    # The multi-token-prediction module (+11.5 B) is not part of the 671 B total.
    "deepseek-v3": {
        "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128, "ffn_hidden": 18432,
        "vocab": 129280, "seq_len": 4096, **_LLAMA,
        "moe": {"experts": 256, "top_k": 8, "every": 1, "first_dense": 3, "ffn_hidden": 2048,
                "shared_experts": 1},
        "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_dim": 128,
                "qk_rope_dim": 64, "v_head_dim": 128},
    },
}
# fmt: on

#: Dense peak TFLOP/s of one accelerator per element type (``hardware.accelerator``): the
#: vendors' datasheets, whose tensor-core figures "with sparsity" are halved here: NVIDIA
#: A100 Tensor Core GPU datasheet (SXM), NVIDIA H100 Tensor Core GPU datasheet (SXM and PCIe;
#: the H200's compute is the H100 SXM's, NVIDIA H200 datasheet), AMD Instinct MI300X
#: datasheet. fp32 is the non-tensor vector figure.
ACCELERATORS: MappingProxyType[str, dict[str, float]] = MappingProxyType({
    "a100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "h100-sxm": {"bf16": 989.5, "fp16": 989.5, "fp8": 1979.0, "fp32": 67.0},
    "h100-pcie": {"bf16": 756.5, "fp16": 756.5, "fp8": 1513.0, "fp32": 51.0},
    "h200": {"bf16": 989.5, "fp16": 989.5, "fp8": 1979.0, "fp32": 67.0},
    "mi300x": {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "fp32": 163.4},
})  # fmt: skip

#: Memory of one accelerator (``hardware.accelerator``) in bytes, from the same datasheets:
#: A100 80 GB (the 40 GB part is told by its name, :func:`pipeline.model.memory.accelerator_of`),
#: H100 SXM and PCIe 80 GB, H200 141 GB, MI300X 192 GB of HBM. The datasheets' GB are the
#: HBM stacks' binary size (an "80GB" H100 reports 81,559 MiB to nvidia-smi), hence GiB here.
ACCELERATOR_MEMORY_BYTES: MappingProxyType[str, int] = MappingProxyType({
    "a100": 80 * 2**30,
    "h100-sxm": 80 * 2**30,
    "h100-pcie": 80 * 2**30,
    "h200": 141 * 2**30,
    "mi300x": 192 * 2**30,
})  # fmt: skip

#: Preset name -> ``model`` section (read-only).
PRESETS: MappingProxyType[str, dict[str, Any]] = MappingProxyType(_PRESETS)


def preset(name: str) -> dict[str, Any]:
    """A fresh copy of preset ``name`` (raises ``KeyError`` for an unknown name)."""
    src = _PRESETS[name]
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in src.items()}
