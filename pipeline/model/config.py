"""``job.yaml``: the job description the analytic model reads, loaded and validated.

This module owns the spelling of every key (see ``docs/job-yaml.md``), their defaults and
every consistency check between them. Whatever is wrong is a :class:`ConfigError` whose
message names the key (``parallel.tp``) and what is allowed; an unknown key (a typo such as
``tensor_paralel``) is an error, never ignored. The loaded job is a tree of frozen
dataclasses that the rest of :mod:`pipeline.model` reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import ConfigError
from pipeline.model.presets import PRESETS, preset

#: Bytes per element of each dtype name (fp8 scales are not counted).
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

#: Megatron's default rank order (``--rank-order``-free default in ``parallel_state``).
DEFAULT_ORDER = "tp-cp-ep-dp-pp"

_TOP_KEYS = ("model", "parallel", "batch", "dtypes", "recompute", "network")
_MODEL_KEYS = (
    "preset", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
    "tied_embeddings", "mlp", "norm", "position", "moe", "mla",
)  # fmt: skip
_DIM_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")
_MOE_KEYS = (
    "experts", "top_k", "every", "first_dense", "ffn_hidden", "shared_experts", "capacity_factor",
)  # fmt: skip
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim")
_PARALLEL_KEYS = (
    "tp", "pp", "dp", "cp", "ep", "vpp", "sequence_parallel", "zero_stage", "fsdp",
    "reshard_after_forward", "distributed_optimizer", "order", "world_size", "bucket_size",
)  # fmt: skip
_BATCH_KEYS = ("micro_batch", "global_batch", "grad_accum")
_DTYPE_KEYS = ("params", "activations", "grad_reduce")
_NETWORK_KEYS = ("gpus_per_node", "intra_node_GBps", "inter_node_GBps", "algorithm")
_RECOMPUTE = ("none", "selective", "full")
_MLP = ("gelu", "swiglu")
_NORM = ("layernorm", "rmsnorm")
_POSITION = ("learned", "rope")
_ALGORITHMS = ("ring", "tree", "nvls")
_ORDER_DIMS = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class MoE:
    """Mixture-of-experts settings (``model.moe``); ``docs/model.md`` notation ``E, k, C``."""

    experts: int
    top_k: int
    every: int = 1
    first_dense: int = 0
    ffn_hidden: int = 0
    shared_experts: int = 0
    capacity_factor: float | None = None

    def is_moe_layer(self, index: int) -> bool:
        """Whether 0-based layer ``index`` is an MoE layer (DeepSeek/HF rule)."""
        return index >= self.first_dense and index % self.every == 0


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention dims (``model.mla``, DeepSeek-V3, arXiv:2412.19437)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_dim: int
    qk_rope_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Model:
    """Model dimensions (Megatron notation, as in ``docs/model.md``: L, h, a, a_kv, f, V, s)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    tied_embeddings: bool
    mlp: str
    norm: str
    position: str
    moe: MoE | None = None
    mla: MLA | None = None

    @property
    def head_dim(self) -> int:
        """``d_h = h / a``."""
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """``h_kv = a_kv · d_h``."""
        return self.kv_heads * self.head_dim

    def is_moe_layer(self, index: int) -> bool:
        """Whether 0-based layer ``index`` has routed experts."""
        return self.moe is not None and self.moe.is_moe_layer(index)


@dataclass(frozen=True)
class Parallel:
    """Parallel layout (``docs/model.md`` notation: t, p, d, c, E_p, v)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    fsdp: bool = False
    reshard_after_forward: bool = True
    distributed_optimizer: bool = False
    order: str = DEFAULT_ORDER
    bucket_size: int | None = None

    @property
    def world_size(self) -> int:
        """``n = t·p·d·c`` (EP is carved out of DP×CP, Megatron-style)."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def dp_scheme(self) -> str:
        """How gradients are synchronised: ddp, zero1, zero2, zero3 or fsdp_no_reshard (ZeRO)."""
        if self.fsdp or self.zero_stage == 3:
            return "zero3" if self.reshard_after_forward else "fsdp_no_reshard"
        if self.zero_stage == 2:
            return "zero2"
        if self.zero_stage == 1 or self.distributed_optimizer:
            return "zero1"
        return "ddp"


@dataclass(frozen=True)
class Batch:
    """Micro-batch ``b`` and global batch ``B`` in sequences."""

    micro_batch: int
    global_batch: int


@dataclass(frozen=True)
class Dtypes:
    """Element types: parameters (gathered), activations, gradient reduction."""

    params: str = "bf16"
    activations: str = "bf16"
    grad_reduce: str = "fp32"

    @property
    def e_p(self) -> int:
        """Bytes per gathered parameter element."""
        return DTYPE_BYTES[self.params]

    @property
    def e_a(self) -> int:
        """Bytes per activation element."""
        return DTYPE_BYTES[self.activations]

    @property
    def e_g(self) -> int:
        """Bytes per reduced gradient element."""
        return DTYPE_BYTES[self.grad_reduce]


@dataclass(frozen=True)
class Network:
    """Per-GPU link bandwidths (GB/s, one direction) and the collective algorithm."""

    gpus_per_node: int = 8
    intra_node_GBps: float = 450.0
    inter_node_GBps: float = 50.0
    algorithm: str = "ring"


@dataclass(frozen=True)
class Job:
    """A whole ``job.yaml``."""

    model: Model
    parallel: Parallel
    batch: Batch
    dtypes: Dtypes
    recompute: str
    network: Network

    @property
    def microbatches(self) -> int:
        """``m = B / (d·b)``: micro-batches each pipeline runs per step."""
        return self.batch.global_batch // (self.batch.micro_batch * self.parallel.dp)

    @property
    def tokens_per_step(self) -> int:
        """``B·s``."""
        return self.batch.global_batch * self.model.seq_len


# --------------------------------------------------------------------------- loading


def read_job_file(path: str | Path) -> dict[str, Any]:
    """The parsed mapping of a ``job.yaml`` (unvalidated), or :class:`ConfigError`."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML") from exc
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: the job description must be a mapping with keys " + ", ".join(_TOP_KEYS)
        )
    return doc


def build_job(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    world_size: int | None = None,
) -> Job:
    """A job from a ``job.yaml`` and/or ``section.key`` overrides (command-line flags).

    ``overrides`` maps dotted keys (``parallel.tp``, ``model.preset``, ``recompute``) to
    values; ``None`` values are skipped. A ``model.preset`` override replaces the file's
    whole ``model`` section. Errors name the file (when there is one) and the key.
    """
    doc: dict[str, Any] = read_job_file(path) if path is not None else {}
    doc = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in doc.items()}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if not key:
            doc[section] = value
            continue
        if dotted == "model.preset":
            doc["model"] = {"preset": value}
            continue
        sec = doc.get(section)
        if not isinstance(sec, dict):
            sec = {}
        sec[key] = value
        doc[section] = sec
    try:
        return job_from_dict(doc, world_size=world_size)
    except ConfigError as exc:
        if path is None:
            raise
        raise ConfigError(f"{path}: {exc}") from None


def load_job(path: str | Path) -> Job:
    """Read and validate a ``job.yaml`` file.

    Raises
    ------
    ConfigError
        Unreadable YAML, an unknown key, a bad value or an inconsistent layout; the message
        starts with the file name and names the key.
    """
    return build_job(path)


def job_from_dict(doc: Any, *, world_size: int | None = None) -> Job:
    """Validate a parsed ``job.yaml`` mapping and build the :class:`Job`.

    ``world_size``, when known (e.g. the ranks of a dataset), must equal the layout's product.
    """
    if not isinstance(doc, Mapping):
        raise ConfigError("the job description must be a mapping with keys " + ", ".join(_TOP_KEYS))
    _check_keys(doc, _TOP_KEYS, "")
    if "model" not in doc:
        raise ConfigError("model: missing; give model.preset or the model dims")
    model = _model(doc["model"])
    parallel, given_world = _parallel(doc.get("parallel") or {})
    batch = _batch(doc.get("batch") or {}, parallel.dp)
    dtypes = _dtypes(doc.get("dtypes") or {})
    recompute = doc.get("recompute", "none")
    if recompute is None:
        recompute = "none"
    _choice(recompute, _RECOMPUTE, "recompute")
    network = _network(doc.get("network") or {})
    job = Job(model, parallel, batch, dtypes, recompute, network)
    for key, ws in (("parallel.world_size", given_world), ("world size", world_size)):
        if ws is not None and ws != parallel.world_size:
            p = parallel
            raise ConfigError(
                f"{key}: {ws} ranks, but tp*pp*dp*cp = {p.tp}*{p.pp}*{p.dp}*{p.cp} = "
                f"{p.world_size}; the layout's product must equal the world size"
            )
    _check_layout(job)
    return job


# --------------------------------------------------------------------------- sections


def _model(raw: Any) -> Model:
    if isinstance(raw, str):
        raw = {"preset": raw}
    if not isinstance(raw, Mapping):
        raise ConfigError("model: must be a mapping (model: {preset: NAME} or the dims)")
    _check_keys(raw, _MODEL_KEYS, "model.")
    name = raw.get("preset")
    if name is not None:
        if name not in PRESETS:
            raise ConfigError(
                f"model.preset: unknown preset {name!r}; allowed: {', '.join(PRESETS)}"
            )
        merged: dict[str, Any] = preset(name)
        for key, value in raw.items():
            if key == "preset":
                continue
            if key in ("moe", "mla") and isinstance(value, Mapping) and merged.get(key):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    else:
        merged = dict(raw)
        missing = [k for k in _DIM_KEYS if k not in merged and k != "kv_heads"]
        if missing:
            raise ConfigError(
                f"model.{missing[0]}: missing; without model.preset give all of "
                + ", ".join(k for k in _DIM_KEYS if k != "kv_heads")
            )
    layers = _pos_int(merged["layers"], "model.layers")
    hidden = _pos_int(merged["hidden"], "model.hidden")
    heads = _pos_int(merged["heads"], "model.heads")
    kv_heads = _pos_int(merged.get("kv_heads", heads), "model.kv_heads")
    ffn = _pos_int(merged["ffn_hidden"], "model.ffn_hidden")
    vocab = _pos_int(merged["vocab"], "model.vocab")
    seq = _pos_int(merged["seq_len"], "model.seq_len")
    tied = _bool(merged.get("tied_embeddings", False), "model.tied_embeddings")
    mlp = _choice(merged.get("mlp", "gelu"), _MLP, "model.mlp")
    norm = _choice(merged.get("norm", "layernorm"), _NORM, "model.norm")
    position = _choice(merged.get("position", "learned"), _POSITION, "model.position")
    if hidden % heads:
        raise ConfigError(f"model.hidden ({hidden}) must be divisible by model.heads ({heads})")
    if heads % kv_heads:
        raise ConfigError(f"model.kv_heads ({kv_heads}) must divide model.heads ({heads})")
    moe = _moe(merged["moe"], ffn, layers) if merged.get("moe") else None
    mla = _mla(merged["mla"]) if merged.get("mla") else None
    return Model(
        name=name or "custom",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=ffn,
        vocab=vocab,
        seq_len=seq,
        tied_embeddings=tied,
        mlp=mlp,
        norm=norm,
        position=position,
        moe=moe,
        mla=mla,
    )


def _moe(raw: Any, ffn: int, layers: int) -> MoE:
    if not isinstance(raw, Mapping):
        raise ConfigError("model.moe: must be a mapping with keys " + ", ".join(_MOE_KEYS))
    _check_keys(raw, _MOE_KEYS, "model.moe.")
    if "experts" not in raw or "top_k" not in raw:
        raise ConfigError("model.moe: experts and top_k are required")
    experts = _pos_int(raw["experts"], "model.moe.experts")
    top_k = _pos_int(raw["top_k"], "model.moe.top_k")
    if top_k > experts:
        raise ConfigError(
            f"model.moe.top_k ({top_k}) must be at most model.moe.experts ({experts})"
        )
    every = _pos_int(raw.get("every", 1), "model.moe.every")
    first_dense = _nonneg_int(raw.get("first_dense", 0), "model.moe.first_dense")
    if first_dense >= layers:
        raise ConfigError(f"model.moe.first_dense ({first_dense}) must be below model.layers")
    eff = _pos_int(raw.get("ffn_hidden", ffn) or ffn, "model.moe.ffn_hidden")
    shared = _nonneg_int(raw.get("shared_experts", 0) or 0, "model.moe.shared_experts")
    cf = raw.get("capacity_factor")
    if cf is not None:
        if isinstance(cf, bool) or not isinstance(cf, int | float) or cf <= 0:
            raise ConfigError(
                f"model.moe.capacity_factor: must be a positive number or null, got {cf!r}"
            )
        cf = float(cf)
    return MoE(experts, top_k, every, first_dense, eff, shared, cf)


def _mla(raw: Any) -> MLA:
    if not isinstance(raw, Mapping):
        raise ConfigError("model.mla: must be a mapping with keys " + ", ".join(_MLA_KEYS))
    _check_keys(raw, _MLA_KEYS, "model.mla.")
    missing = [k for k in _MLA_KEYS if k not in raw]
    if missing:
        raise ConfigError(f"model.mla.{missing[0]}: missing; model.mla needs all of its keys")
    return MLA(*(_pos_int(raw[k], f"model.mla.{k}") for k in _MLA_KEYS))


def _parallel(raw: Any) -> tuple[Parallel, int | None]:
    if not isinstance(raw, Mapping):
        raise ConfigError("parallel: must be a mapping with keys " + ", ".join(_PARALLEL_KEYS))
    _check_keys(raw, _PARALLEL_KEYS, "parallel.")
    ints = {k: _pos_int(raw.get(k, 1), f"parallel.{k}") for k in ("tp", "pp", "dp", "cp", "ep")}
    vpp = _pos_int(raw.get("vpp", 1) or 1, "parallel.vpp")
    zero = raw.get("zero_stage", 0) or 0
    if zero not in (0, 1, 2, 3) or isinstance(zero, bool):
        raise ConfigError(f"parallel.zero_stage: must be 0, 1, 2 or 3, got {zero!r}")
    fsdp = _bool(raw.get("fsdp", False), "parallel.fsdp")
    if fsdp and zero in (1, 2):
        raise ConfigError(
            f"parallel.fsdp: FSDP shards parameters (ZeRO-3); it cannot be combined with "
            f"parallel.zero_stage {zero} (use 0 or 3)"
        )
    order = raw.get("order", DEFAULT_ORDER) or DEFAULT_ORDER
    bucket = raw.get("bucket_size")
    if bucket is not None:
        bucket = _pos_int(bucket, "parallel.bucket_size")
    world = raw.get("world_size")
    if world is not None:
        world = _pos_int(world, "parallel.world_size")
    par = Parallel(
        **ints,
        vpp=vpp,
        sequence_parallel=_bool(raw.get("sequence_parallel", False), "parallel.sequence_parallel"),
        zero_stage=zero,
        fsdp=fsdp,
        reshard_after_forward=_bool(
            raw.get("reshard_after_forward", True), "parallel.reshard_after_forward"
        ),
        distributed_optimizer=_bool(
            raw.get("distributed_optimizer", False), "parallel.distributed_optimizer"
        ),
        order=_order(order, ints),
        bucket_size=bucket,
    )
    return par, world


def _order(raw: Any, degrees: Mapping[str, int]) -> str:
    allowed = (
        "a '-'-separated permutation of tp, cp, ep, dp, pp (a dimension of degree 1 may be "
        "left out; ep left out sits just before dp)"
    )
    if not isinstance(raw, str):
        raise ConfigError(f"parallel.order: must be {allowed}, got {raw!r}")
    dims = [d.strip().lower() for d in raw.split("-")]
    if len(set(dims)) != len(dims) or not set(dims) <= set(_ORDER_DIMS):
        raise ConfigError(f"parallel.order: must be {allowed}, got {raw!r}")
    if "ep" not in dims:
        dims.insert(dims.index("dp") if "dp" in dims else len(dims), "ep")
    for dim in _ORDER_DIMS:
        if dim not in dims:
            if degrees[dim] > 1:
                raise ConfigError(
                    f"parallel.order: {raw!r} leaves out {dim}, whose degree is {degrees[dim]}"
                )
            dims.append(dim)
    return "-".join(dims)


def _batch(raw: Any, dp: int) -> Batch:
    if not isinstance(raw, Mapping):
        raise ConfigError("batch: must be a mapping with keys " + ", ".join(_BATCH_KEYS))
    _check_keys(raw, _BATCH_KEYS, "batch.")
    b = _pos_int(raw.get("micro_batch", 1), "batch.micro_batch")
    accum = raw.get("grad_accum")
    if accum is not None:
        accum = _pos_int(accum, "batch.grad_accum")
    if raw.get("global_batch") is not None:
        gb = _pos_int(raw["global_batch"], "batch.global_batch")
        if accum is not None and gb != b * dp * accum:
            raise ConfigError(
                f"batch.grad_accum: {accum} disagrees with batch.global_batch {gb} = "
                f"micro_batch*dp*grad_accum would need grad_accum {gb / (b * dp):g}"
            )
    else:
        gb = b * dp * (accum or 1)
    if gb % (b * dp):
        raise ConfigError(
            f"batch.global_batch ({gb}) must be divisible by batch.micro_batch x parallel.dp "
            f"({b} x {dp} = {b * dp})"
        )
    return Batch(b, gb)


def _dtypes(raw: Any) -> Dtypes:
    if not isinstance(raw, Mapping):
        raise ConfigError("dtypes: must be a mapping with keys " + ", ".join(_DTYPE_KEYS))
    _check_keys(raw, _DTYPE_KEYS, "dtypes.")
    names = tuple(DTYPE_BYTES)
    vals = {
        k: _choice(raw.get(k, default), names, f"dtypes.{k}")
        for k, default in (("params", "bf16"), ("activations", "bf16"), ("grad_reduce", "fp32"))
    }
    return Dtypes(**vals)


def _network(raw: Any) -> Network:
    if not isinstance(raw, Mapping):
        raise ConfigError("network: must be a mapping with keys " + ", ".join(_NETWORK_KEYS))
    _check_keys(raw, _NETWORK_KEYS, "network.")
    return Network(
        gpus_per_node=_pos_int(raw.get("gpus_per_node", 8), "network.gpus_per_node"),
        intra_node_GBps=_pos_num(raw.get("intra_node_GBps", 450.0), "network.intra_node_GBps"),
        inter_node_GBps=_pos_num(raw.get("inter_node_GBps", 50.0), "network.inter_node_GBps"),
        algorithm=_choice(raw.get("algorithm", "ring"), _ALGORITHMS, "network.algorithm"),
    )


def _check_layout(job: Job) -> None:
    m, p = job.model, job.parallel
    if m.heads % p.tp:
        raise ConfigError(f"model.heads ({m.heads}) must be divisible by parallel.tp ({p.tp})")
    if m.kv_heads % p.tp and p.tp % m.kv_heads:
        raise ConfigError(
            f"model.kv_heads ({m.kv_heads}) and parallel.tp ({p.tp}): one must divide the other"
        )
    if m.ffn_hidden % p.tp:
        raise ConfigError(
            f"model.ffn_hidden ({m.ffn_hidden}) must be divisible by parallel.tp ({p.tp})"
        )
    if m.layers < p.pp * p.vpp:
        raise ConfigError(
            f"model.layers ({m.layers}) must be at least parallel.pp x parallel.vpp "
            f"({p.pp} x {p.vpp}): every pipeline chunk needs a layer"
        )
    if p.vpp > 1 and p.pp == 1:
        raise ConfigError("parallel.vpp: interleaving (vpp > 1) needs parallel.pp > 1")
    if p.sequence_parallel and m.seq_len % p.tp:
        raise ConfigError(
            f"model.seq_len ({m.seq_len}) must be divisible by parallel.tp ({p.tp}) "
            "with parallel.sequence_parallel"
        )
    if p.cp > 1 and m.seq_len % (2 * p.cp):
        raise ConfigError(
            f"model.seq_len ({m.seq_len}) must be divisible by 2 x parallel.cp ({2 * p.cp})"
        )
    if p.ep > 1:
        if m.moe is None:
            raise ConfigError("parallel.ep: expert parallelism (ep > 1) needs model.moe")
        if m.moe.experts % p.ep:
            raise ConfigError(
                f"model.moe.experts ({m.moe.experts}) must be divisible by parallel.ep ({p.ep})"
            )
        if (p.dp * p.cp) % p.ep:
            raise ConfigError(
                f"parallel.ep ({p.ep}) must divide parallel.dp x parallel.cp ({p.dp * p.cp}): "
                "experts are laid out over the data- and context-parallel ranks"
            )
    if m.moe is not None and m.moe.ffn_hidden % p.tp:
        raise ConfigError(
            f"model.moe.ffn_hidden ({m.moe.ffn_hidden}) must be divisible by parallel.tp ({p.tp})"
        )


# --------------------------------------------------------------------------- scalars


def _check_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for key in raw:
        if key not in allowed:
            hint = _closest(str(key), allowed)
            extra = f" (did you mean {prefix}{hint}?)" if hint else ""
            raise ConfigError(f"{prefix}{key}: unknown key{extra}; allowed: {', '.join(allowed)}")


#: Long spellings users write for the short keys, used only to suggest the right key.
_HINTS = {
    "tensor_parallel": "tp", "tensor_model_parallel_size": "tp", "pipeline_parallel": "pp",
    "pipeline_model_parallel_size": "pp", "data_parallel": "dp", "context_parallel": "cp",
    "expert_parallel": "ep", "virtual_pipeline": "vpp", "interleave": "vpp",
    "num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads", "ffn_hidden_size": "ffn_hidden", "vocab_size": "vocab",
    "seq_length": "seq_len", "micro_batch_size": "micro_batch",
    "global_batch_size": "global_batch",
}  # fmt: skip


def _closest(key: str, allowed: tuple[str, ...]) -> str | None:
    import difflib

    candidates = list(allowed) + [k for k, v in _HINTS.items() if v in allowed]
    hits = difflib.get_close_matches(key.lower(), candidates, n=1, cutoff=0.6)
    if not hits:
        return None
    return _HINTS.get(hits[0], hits[0])


def _pos_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}: must be a positive integer, got {value!r}")
    return value


def _nonneg_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key}: must be a non-negative integer, got {value!r}")
    return value


def _pos_num(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{key}: must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")
    return float(value)


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: must be true or false, got {value!r}")
    return value


def _choice(value: Any, allowed: tuple[str, ...], key: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{key}: must be one of {', '.join(allowed)}, got {value!r}")
    return value
