"""``job.yaml``: the job description the analytic model reads, loaded and validated.

This module owns the spelling of every key (see ``docs/job-yaml.md``), their defaults and
every consistency check between them. Whatever is wrong is a :class:`ConfigError` whose
message names the key (``parallel.tp``) and what is allowed; an unknown key (a typo such as
``tensor_paralel``) is an error, never ignored. The loaded job is a tree of frozen
dataclasses that the rest of :mod:`pipeline.model` reads.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, TraceFormatError, one_line, shown
from ..guards import require_regular
from ..model.presets import PRESETS, preset
from ..vocab import DIMS, DTYPE_SIZES, WORLD_DIMS

#: job.yaml's dtype names -> the dataset's (fp8: E4M3, as Transformer Engine's forward pass).
JOB_DTYPES: dict[str, str] = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8": "float8_e4m3",
}
#: Bytes per element of each job.yaml dtype name (vocab.DTYPE_SIZES; fp8 scales not counted).
DTYPE_BYTES: dict[str, int] = {name: DTYPE_SIZES[dtype] for name, dtype in JOB_DTYPES.items()}

#: Megatron's default rank order (``--rank-order``-free default in ``parallel_state``).
DEFAULT_ORDER = "tp-cp-ep-dp-pp"

# Limits on what a job.yaml may hold. Each is far beyond any real job, and each bounds the
# time and memory of reading the file or of the model's arithmetic (docs/job-yaml.md, "Limits").

#: Largest job.yaml read: a real one is a few KB; reading on would only cost memory
#: (``--config /dev/zero``).
MAX_JOB_BYTES = 1 << 20
#: Most YAML nodes (keys, values, list items) a job.yaml may hold once every alias is
#: expanded: a full job.yaml has about 100, an alias bomb ("billion laughs") billions.
MAX_YAML_NODES = 10_000
#: Deepest nesting of mappings and lists, aliases expanded: a job.yaml nests 4 deep
#: (the document, ``model``, ``moe``, ``experts``); deeper only exhausts Python's stack.
MAX_YAML_DEPTH = 32
#: Most ranks (``tp·pp·dp·cp``, and any degree): 2^30, a thousand times the largest jobs
#: trained so far; ``predict`` works out a rank's communicators in closed form at any size.
MAX_RANKS = 1 << 30
#: Most transformer layers: the model works through each layer of a stage (real: up to ~130).
MAX_LAYERS = 1 << 14
#: Largest model dimension, MoE or MLA setting, or batch size (sequences): 16,777,216, a
#: vocabulary, width or context of 16M is far past any model (real: 256K, 53K, 10M).
MAX_DIM = 1 << 24
#: Largest gradient bucket in elements (real: 40 million to a few billion).
MAX_BUCKET = 1 << 48
#: Largest count the model outputs (calls or bytes of a rank per step): the ``predictions``
#: table stores them as 64-bit integers.
MAX_INT64 = (1 << 63) - 1

_TOP_KEYS = (
    "model", "parallel", "batch", "dtypes", "recompute", "network", "conventions", "hardware",
)  # fmt: skip
_HARDWARE_KEYS = ("accelerator", "peak_tflops")
#: Largest ``hardware.peak_tflops`` accepted: a thousand times today's fastest accelerator.
MAX_PEAK_TFLOPS = 1e7
_MODEL_KEYS = (
    "preset", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
    "tied_embeddings", "mlp", "norm", "position", "moe", "mla", "linear_bias",
)  # fmt: skip
_DIM_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")
_MOE_KEYS = (
    "experts", "top_k", "every", "first_dense", "ffn_hidden", "shared_experts", "capacity_factor",
    "max_nodes", "dispatch_dtype", "combine_dtype",
)  # fmt: skip
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim")
_PARALLEL_KEYS = (
    "tp", "pp", "dp", "cp", "ep", "vpp", "sequence_parallel", "zero_stage", "fsdp",
    "reshard_after_forward", "distributed_optimizer", "order", "world_size", "bucket_size",
    "mesh",
)  # fmt: skip
_BATCH_KEYS = ("micro_batch", "global_batch", "grad_accum", "forward_only")
_DTYPE_KEYS = ("params", "activations", "grad_reduce")
_NETWORK_KEYS = (
    "gpus_per_node", "intra_node_GBps", "inter_node_GBps", "algorithm", "efficiency",
    "base_latency_us", "intra_node_latency_us", "inter_node_latency_us",
)  # fmt: skip
_CONVENTION_KEYS = (
    "framework", "vocab_parallel", "loss_all_reduce", "ddp_first_bucket_mb", "ddp_bucket_mb",
    "separate_qkv", "fsdp_root_unit",
)  # fmt: skip
_FRAMEWORKS = ("megatron", "torch")
_RECOMPUTE = ("none", "selective", "full")
_MLP = ("gelu", "swiglu")
_NORM = ("layernorm", "rmsnorm")
_POSITION = ("learned", "rope")
#: Which linear layers have a bias (``model.linear_bias``): every one, none, or Q, K and V
#: alone (Megatron-LM ``--add-bias-linear`` / ``--disable-bias-linear``, ``--add-qkv-bias``)
LINEAR_BIAS = ("all", "none", "qkv")
#: Collective algorithms ``network.algorithm`` may name (one, a list, or ``auto``).
ALGORITHMS = ("ring", "tree", "nvls", "hierarchical")
#: What ``auto`` lets the time model choose among (NVLS needs NVLink SHARP hardware: list it).
AUTO_ALGORITHMS = ("ring", "tree", "hierarchical")
_ORDER_DIMS = tuple(DEFAULT_ORDER.split("-"))
#: The dimension names ``parallel.mesh`` takes (``init_device_mesh``'s ``mesh_dim_names``, as
#: torchtitan spells them, or bare) and the layout dimension of each: HSDP's replicate and
#: shard dimensions are the two parts of dp
MESH_DIMS = {
    "dp_replicate": "replicate", "replicate": "replicate", "dp_shard": "shard", "shard": "shard",
    "dp": "dp", "cp": "cp", "tp": "tp", "pp": "pp", "ep": "ep",
}  # fmt: skip


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
    #: node-limited routing (DeepSeek-V3): a token's experts lie on at most this many nodes
    max_nodes: int | None = None
    #: element types of the dispatch and combine all-to-alls (None: ``dtypes.activations``)
    dispatch_dtype: str | None = None
    combine_dtype: str | None = None

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
    #: ``all``, ``none`` or ``qkv``; None: by ``mlp`` (GELU/GPT ``all``, SwiGLU ``none``)
    linear_bias: str | None = None

    @property
    def biases(self) -> str:
        """Which linear layers have a bias: ``linear_bias``, else ``all`` for a GELU (GPT)
        model and ``none`` for SwiGLU."""
        if self.linear_bias is not None:
            return self.linear_bias
        return "all" if self.mlp == "gelu" else "none"

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
    #: HSDP: ranks of dp that shard each FSDP unit (``parallel.mesh``'s shard dimension); the
    #: other ``dp / dp_shard`` hold replicas of the shard. None: the whole of dp shards.
    dp_shard: int | None = None

    @property
    def hsdp(self) -> bool:
        """Whether FSDP shards over part of dp and replicates over the rest (HSDP)."""
        return self.dp_shard is not None and self.dp_shard < self.dp

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
    """Micro-batch ``b`` and global batch ``B`` in sequences; ``forward_only``: a serving
    step (prefill or decode), forward passes with no backward, gradients or optimizer."""

    micro_batch: int
    global_batch: int
    forward_only: bool = False


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
    """Per-GPU link bandwidths (GB/s, one direction), the collective algorithm and the
    alpha-beta time model's figures (``pipeline.model.timing``).

    ``algorithm``: one of :data:`ALGORITHMS`, a tuple of them or ``auto``
    (:data:`AUTO_ALGORITHMS`): the time model then picks the fastest per collective.

    ``efficiency``: the share of the line rate collectives reach (measured bus bandwidth
    tops out near 80% of NVLink's). Latencies: NCCL's Simple-protocol ring figures
    (``baseLat`` and ``hwLat`` in ``src/graph/tuning.cc``, NCCL 2.18 to 2.21). ``fitted``:
    alpha and bus bandwidth per collective fitted to nccl-tests tables, used in their place.
    """

    gpus_per_node: int = 8
    intra_node_GBps: float = 450.0
    inter_node_GBps: float = 50.0
    algorithm: str | tuple[str, ...] = "ring"
    efficiency: float = 0.8
    base_latency_us: float = 8.4
    intra_node_latency_us: float = 3.4
    inter_node_latency_us: float = 14.0
    fitted: tuple = ()


@dataclass(frozen=True)
class Conventions:
    """What the training framework issues beside the layout's own collectives.

    ``megatron``: vocab-parallel embedding, LM head and cross-entropy, a loss all-reduce per
    step, gradient buckets of ``parallel.bucket_size`` elements. ``torch`` (plain
    torch.distributed): none of the vocab-parallel or loss collectives, and PyTorch DDP's
    buckets: whole gradient tensors in reverse registration order, the first bucket closed at
    1 MiB, the others at 25 MiB (``ddp_first_bucket_mb``, ``ddp_bucket_mb``; a
    ``ddp_bucket_mb`` given caps the first bucket too, as ``bucket_cap_mb`` does).

    Two keys describe how a model is written rather than a framework (both false by default):
    ``separate_qkv``, Q, K and V as three column-parallel projections (each all-reduces its
    input gradient over TP on its own), and ``fsdp_root_unit``, FSDP's root unit holding the
    embedding and LM head (FSDP1 wrapping each transformer layer), gathered once a step.
    """

    framework: str = "megatron"
    vocab_parallel: bool = True
    loss_all_reduce: bool = True
    ddp_first_bucket_mb: float = 1.0
    ddp_bucket_mb: float = 25.0
    separate_qkv: bool = False
    fsdp_root_unit: bool = False

    @property
    def torch_buckets(self) -> bool:
        """Whether DDP gradients are bucketed as PyTorch DDP does."""
        return self.framework == "torch"


@dataclass(frozen=True)
class Hardware:
    """The accelerator, for model FLOPs utilisation: ``peak_tflops`` (dense TFLOP/s of one
    GPU) or an ``accelerator`` name whose datasheet figure for the activation dtype
    ``pipeline.model.presets.ACCELERATORS`` holds; ``peak_tflops`` wins when both are given."""

    accelerator: str | None = None
    peak_tflops: float | None = None


@dataclass(frozen=True)
class Job:
    """A whole ``job.yaml``."""

    model: Model
    parallel: Parallel
    batch: Batch
    dtypes: Dtypes
    recompute: str
    network: Network
    conventions: Conventions = Conventions()
    hardware: Hardware = Hardware()
    #: The job.yaml it was read from, for error messages (not part of the job's identity).
    source: str | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def microbatches(self) -> int:
        """``m = B / (d·b)``: micro-batches each pipeline runs per step."""
        return self.batch.global_batch // (self.batch.micro_batch * self.parallel.dp)

    @property
    def tokens_per_step(self) -> int:
        """``B·s``."""
        return self.batch.global_batch * self.model.seq_len

    @property
    def peak_flops(self) -> float | None:
        """Dense peak FLOP/s of one GPU from ``hardware`` (None when not given)."""
        hw = self.hardware
        if hw.peak_tflops is not None:
            return hw.peak_tflops * 1e12
        if hw.accelerator is None:
            return None
        from ..model.presets import ACCELERATORS

        return ACCELERATORS[hw.accelerator][self.dtypes.activations] * 1e12


# --------------------------------------------------------------------------- loading


def read_job_file(path: str | Path) -> dict[str, Any]:
    """The parsed mapping of a ``job.yaml`` (unvalidated), or :class:`ConfigError`.

    The file is read as YAML by PyYAML's safe loader within the limits above (size, nodes
    with aliases expanded, nesting); every error is one line naming the file and the line
    and column (or the key) at fault.
    """
    path = Path(path)
    raw = _read_bounded(path)
    try:
        doc = _load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {_yaml_error(exc, raw)}") from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: the job description must be a mapping with keys " + ", ".join(_TOP_KEYS)
        )
    return doc


def _load(raw: bytes) -> Any:
    loader = _JobLoader(raw)  # (decodes the whole text: a ReaderError comes from here)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _read_bounded(path: Path) -> bytes:
    try:
        require_regular(path)
    except TraceFormatError as exc:
        raise ConfigError(str(exc)) from None
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_JOB_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_JOB_BYTES:
        raise ConfigError(
            f"{path}: byte {MAX_JOB_BYTES}: the file goes on past {MAX_JOB_BYTES >> 20} MiB; "
            "a job.yaml is a few KB"
        )
    return raw


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that a job.yaml may not hold (past a limit, a duplicate key): its message
    is ``line L, column C: problem``, without PyYAML's "not valid YAML" wording."""

    def __init__(self, problem: str, mark: yaml.Mark) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _JobLoader(yaml.SafeLoader):
    """PyYAML's safe loader, within :data:`MAX_YAML_NODES` and :data:`MAX_YAML_DEPTH`.

    PyYAML composes an alias as a reference to its anchor's node, so a billion-laughs
    document loads small and fast; it is what reads it next (validation, an error message
    showing a value) that expands it. So the loader counts every node as if each alias were
    a copy of what it refers to, and refuses the alias that goes past the limit. It also
    refuses a key given twice in one mapping (PyYAML keeps the last silently), and turns a
    scalar that cannot be constructed (a month 13, an integer of 5,000 digits) into an error
    at its line instead of a Python exception.
    """

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self._nodes = 0  # nodes composed so far, each alias counted as its anchor's subtree
        self._depth = 0  # nesting of the node being composed (the document's root is 1)
        self._deepest = 0  # deepest nesting reached inside the node being composed
        self._anchored: dict[str, tuple[int, int]] = {}  # anchor: (nodes, height) it stands for

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._alias(event)
            return super().compose_node(parent, index)
        self._depth += 1
        first, outer = self._nodes, self._deepest
        self._deepest = self._depth
        self._grow(1, self._depth, event.start_mark, "the document")
        node = super().compose_node(parent, index)
        if isinstance(node, yaml.MappingNode):
            _check_duplicates(node)
        if event.anchor is not None:
            height = self._deepest - self._depth + 1
            self._anchored[event.anchor] = (self._nodes - first, height)
        self._deepest = max(outer, self._deepest)
        self._depth -= 1
        return node

    def _alias(self, event: yaml.AliasEvent) -> None:
        size = self._anchored.get(event.anchor)
        if size is None:
            if event.anchor in self.anchors:  # its node is still being composed
                raise _Refused(
                    f"alias *{shown(event.anchor)[1:-1]} is inside the node it refers to "
                    "(a structure that contains itself)",
                    event.start_mark,
                )
            return  # an undefined alias: PyYAML's own error says so
        nodes, height = size
        self._grow(nodes, self._depth + height, event.start_mark, f"alias *{event.anchor}")

    def _grow(self, nodes: int, depth: int, mark: yaml.Mark, what: str) -> None:
        self._nodes += nodes
        self._deepest = max(self._deepest, depth)
        if self._nodes > MAX_YAML_NODES:
            raise _Refused(
                f"{one_line(what, 40)} takes the document past {MAX_YAML_NODES:,} YAML nodes "
                "(aliases expanded); a job.yaml has about 100",
                mark,
            )
        if depth > MAX_YAML_DEPTH:
            raise _Refused(
                f"{one_line(what, 40)} nests deeper than {MAX_YAML_DEPTH} levels (aliases "
                "expanded); a job.yaml nests 4 deep",
                mark,
            )

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ArithmeticError, LookupError, ValueError, TypeError, AttributeError) as exc:
            # PyYAML's scalar constructors trust that the text matched the tag's pattern; an
            # explicit tag (`!!int ''`, `!!timestamp x`) skips that match
            raise _Refused(_unconstructible(node, exc), node.start_mark) from None


def _check_duplicates(node: yaml.MappingNode) -> None:
    seen: dict[tuple[str, str], yaml.Node] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        first = seen.setdefault((key.tag, key.value), key)
        if first is not key:
            raise _Refused(
                f"key {shown(key.value)} given twice in one mapping (first at line "
                f"{first.start_mark.line + 1})",
                key.start_mark,
            )


def _unconstructible(node: yaml.Node, exc: Exception) -> str:
    kind = node.tag.rpartition(":")[2]
    text = node.value if isinstance(node.value, str) else ""
    digits = sum(c.isdigit() for c in text)
    if kind == "int" and digits > 1000:
        # (Python's own message tells a programmer to raise sys.set_int_max_str_digits)
        return f"an integer of {digits:,} digits; no job.yaml value has more than 15"
    return f"{kind} {shown(text)} cannot be read: {exc}"


def _yaml_error(exc: yaml.YAMLError, raw: bytes) -> str:
    """``PLACE: what`` for a YAML error: the line and column, and the problem in one line."""
    if isinstance(exc, yaml.reader.ReaderError):
        return _reader_error(exc, raw)
    if not isinstance(exc, yaml.MarkedYAMLError):
        return f"not valid YAML: {exc}"
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    if isinstance(exc, _Refused):
        return where + str(exc.problem)
    what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
    return f"{where}not valid YAML: {what}"


def _reader_error(exc: yaml.reader.ReaderError, raw: bytes) -> str:
    if exc.encoding != "unicode":  # bytes that do not decode: the position is a byte's
        line = raw[: exc.position].count(b"\n") + 1
        return (
            f"line {line}: not {exc.encoding.upper()} text (byte 0x{exc.character:02x} at "
            f"byte {exc.position}); a job.yaml is UTF-8 text"
        )
    # a character YAML does not allow (a control character): the position is a character's
    # (in the text as PyYAML decoded it: UTF-16 when it starts with its byte order mark)
    utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    text = raw.decode("utf-16" if utf16 else "utf-8", "replace")
    line = text[: exc.position].count("\n") + 1
    return f"line {line}: character U+{exc.character:04X} is not allowed in YAML text"


def build_job(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    world_size: int | None = None,
) -> Job:
    """A job from a ``job.yaml`` and/or ``section.key`` overrides (command-line flags).

    ``overrides`` maps dotted keys (``parallel.tp``, ``model.moe.max_nodes``, ``recompute``) to
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
        # (nested keys, model.moe.max_nodes, go one mapping deeper per dot)
        node = doc
        *parents, last = dotted.split(".")
        for part in parents:
            sub = node.get(part)
            node[part] = sub = dict(sub) if isinstance(sub, Mapping) else {}
            node = sub
        node[last] = value
    try:
        job = job_from_dict(doc, world_size=world_size)
    except ConfigError as exc:
        if path is None:
            raise
        raise ConfigError(f"{path}: {exc}") from None
    return job if path is None else dataclasses.replace(job, source=str(path))


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
    parallel, given_world = _parallel(_opt(doc, "parallel", {}))
    batch = _batch(_opt(doc, "batch", {}), parallel.dp)
    dtypes = _dtypes(_opt(doc, "dtypes", {}))
    recompute = _choice(_opt(doc, "recompute", "none"), _RECOMPUTE, "recompute")
    network = _network(_opt(doc, "network", {}))
    conventions = _conventions(_opt(doc, "conventions", {}), parallel)
    hardware = _hardware(_opt(doc, "hardware", {}), dtypes.activations)
    job = Job(model, parallel, batch, dtypes, recompute, network, conventions, hardware)
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
        raise ConfigError(
            f"model: must be a mapping (model: {{preset: NAME}} or the dims), got {shown(raw)}"
        )
    _check_keys(raw, _MODEL_KEYS, "model.")
    name = raw.get("preset")
    if name is not None:
        # (a list or a mapping is no preset's name, and no key of PRESETS: unhashable)
        if not isinstance(name, str) or name not in PRESETS:
            raise ConfigError(
                f"model.preset: unknown preset {shown(name)}; allowed: {', '.join(PRESETS)}"
            )
        merged: dict[str, Any] = preset(name)
        for key, value in raw.items():
            if key == "preset" or value is None:  # null: the preset's own value
                continue
            if key in ("moe", "mla") and isinstance(value, Mapping) and merged.get(key):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    else:
        merged = {k: v for k, v in raw.items() if v is not None}
        missing = [k for k in _DIM_KEYS if k not in merged and k != "kv_heads"]
        if missing:
            raise ConfigError(
                f"model.{missing[0]}: missing; without model.preset give all of "
                + ", ".join(k for k in _DIM_KEYS if k != "kv_heads")
            )
    layers = _pos_int(merged["layers"], "model.layers", MAX_LAYERS)
    hidden = _pos_int(merged["hidden"], "model.hidden")
    heads = _pos_int(merged["heads"], "model.heads")
    kv_heads = _pos_int(merged.get("kv_heads", heads), "model.kv_heads")
    ffn = _pos_int(merged["ffn_hidden"], "model.ffn_hidden")
    vocab = _pos_int(merged["vocab"], "model.vocab")
    seq = _pos_int(merged["seq_len"], "model.seq_len")
    tied = _bool(_opt(merged, "tied_embeddings", False), "model.tied_embeddings")
    mlp = _choice(_opt(merged, "mlp", "gelu"), _MLP, "model.mlp")
    norm = _choice(_opt(merged, "norm", "layernorm"), _NORM, "model.norm")
    position = _choice(_opt(merged, "position", "learned"), _POSITION, "model.position")
    bias = merged.get("linear_bias")
    bias = None if bias is None else _choice(bias, LINEAR_BIAS, "model.linear_bias")
    if hidden % heads:
        raise ConfigError(f"model.hidden ({hidden}) must be divisible by model.heads ({heads})")
    if heads % kv_heads:
        raise ConfigError(f"model.kv_heads ({kv_heads}) must divide model.heads ({heads})")
    # (absent, null or {}: none; any other value must be the mapping)
    moe = _moe(merged["moe"], ffn, layers) if _given(merged, "moe") else None
    mla = _mla(merged["mla"]) if _given(merged, "mla") else None
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
        linear_bias=bias,
    )


def _moe(raw: Any, ffn: int, layers: int) -> MoE:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"model.moe: must be a mapping with keys {', '.join(_MOE_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _MOE_KEYS, "model.moe.")
    if raw.get("experts") is None or raw.get("top_k") is None:
        raise ConfigError("model.moe: experts and top_k are required")
    experts = _pos_int(raw["experts"], "model.moe.experts")
    top_k = _pos_int(raw["top_k"], "model.moe.top_k")
    if top_k > experts:
        raise ConfigError(
            f"model.moe.top_k ({top_k}) must be at most model.moe.experts ({experts})"
        )
    every = _pos_int(_opt(raw, "every", 1), "model.moe.every")
    first_dense = _nonneg_int(_opt(raw, "first_dense", 0), "model.moe.first_dense")
    if first_dense >= layers:
        raise ConfigError(f"model.moe.first_dense ({first_dense}) must be below model.layers")
    eff = _pos_int(_opt(raw, "ffn_hidden", ffn), "model.moe.ffn_hidden")
    shared = _nonneg_int(_opt(raw, "shared_experts", 0), "model.moe.shared_experts")
    cf = raw.get("capacity_factor")
    if cf is not None:
        cf = _pos_num(cf, "model.moe.capacity_factor")
    max_nodes = raw.get("max_nodes")
    if max_nodes is not None:
        max_nodes = _pos_int(max_nodes, "model.moe.max_nodes", MAX_RANKS)
        if cf is not None:
            raise ConfigError(
                "model.moe.max_nodes: node-limited routing is modelled dropless; leave "
                "model.moe.capacity_factor null"
            )
    dtypes = {
        k: None if raw.get(k) is None else _choice(raw[k], tuple(DTYPE_BYTES), f"model.moe.{k}")
        for k in ("dispatch_dtype", "combine_dtype")
    }
    return MoE(experts, top_k, every, first_dense, eff, shared, cf, max_nodes, **dtypes)


def _mla(raw: Any) -> MLA:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"model.mla: must be a mapping with keys {', '.join(_MLA_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _MLA_KEYS, "model.mla.")
    missing = [k for k in _MLA_KEYS if raw.get(k) is None]
    if missing:
        raise ConfigError(f"model.mla.{missing[0]}: missing; model.mla needs all of its keys")
    return MLA(*(_pos_int(raw[k], f"model.mla.{k}") for k in _MLA_KEYS))


def _parallel(raw: Any) -> tuple[Parallel, int | None]:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"parallel: must be a mapping with keys {', '.join(_PARALLEL_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _PARALLEL_KEYS, "parallel.")
    dp_shard, order = None, ""
    if _given(raw, "mesh"):
        ints, order, dp_shard = _mesh(raw)
    else:
        ints = {k: _pos_int(_opt(raw, k, 1), f"parallel.{k}", MAX_RANKS) for k in DIMS}
    world_product = math.prod(ints[d] for d in WORLD_DIMS)
    if world_product > MAX_RANKS:
        raise ConfigError(
            f"parallel: tp*pp*dp*cp = {world_product:,} ranks, more than the {MAX_RANKS:,} "
            "tokenwire models"
        )
    if not order:
        order = _order(_opt(raw, "order", DEFAULT_ORDER), ints)
    vpp = _pos_int(_opt(raw, "vpp", 1), "parallel.vpp", MAX_LAYERS)
    zero = _opt(raw, "zero_stage", 0)
    if isinstance(zero, bool) or not isinstance(zero, int) or zero not in (0, 1, 2, 3):
        raise ConfigError(f"parallel.zero_stage: must be 0, 1, 2 or 3, got {shown(zero)}")
    fsdp = _bool(_opt(raw, "fsdp", False), "parallel.fsdp")
    if fsdp and zero in (1, 2):
        raise ConfigError(
            f"parallel.fsdp: FSDP shards parameters (ZeRO-3); it cannot be combined with "
            f"parallel.zero_stage {zero} (use 0 or 3)"
        )
    if dp_shard is not None and not (fsdp or zero == 3):
        raise ConfigError(
            "parallel.mesh: a shard dimension beside a replicate one is HSDP; it needs "
            "parallel.fsdp: true (or zero_stage: 3)"
        )
    bucket = raw.get("bucket_size")
    if bucket is not None:
        bucket = _pos_int(bucket, "parallel.bucket_size", MAX_BUCKET)
    world = raw.get("world_size")
    if world is not None:
        world = _pos_int(world, "parallel.world_size", MAX_RANKS)
    par = Parallel(
        **ints,
        vpp=vpp,
        sequence_parallel=_bool(
            _opt(raw, "sequence_parallel", False), "parallel.sequence_parallel"
        ),
        zero_stage=zero,
        fsdp=fsdp,
        reshard_after_forward=_bool(
            _opt(raw, "reshard_after_forward", True), "parallel.reshard_after_forward"
        ),
        distributed_optimizer=_bool(
            _opt(raw, "distributed_optimizer", False), "parallel.distributed_optimizer"
        ),
        order=order,
        bucket_size=bucket,
        dp_shard=dp_shard,
    )
    return par, world


def _mesh(raw: Mapping[str, Any]) -> tuple[dict[str, int], str, int | None]:
    """(degrees, order, dp_shard) of ``parallel.mesh``: a mapping of DeviceMesh dimension
    names to sizes, outermost first, as ``init_device_mesh(shape, mesh_dim_names=...)`` takes
    them (torch/distributed/device_mesh.py: the last dimension varies fastest over the
    ranks). ``replicate`` and ``shard`` (HSDP, ``fully_shard`` over a 2-D mesh) are the outer
    and inner parts of dp and must be neighbours in that order."""
    mesh = raw["mesh"]
    names = ", ".join(MESH_DIMS)
    if not isinstance(mesh, Mapping):
        raise ConfigError(
            f"parallel.mesh: must be a mapping of dimension names ({names}) to sizes, "
            f"outermost first, got {shown(mesh)}"
        )
    for key in ("tp", "pp", "dp", "cp", "ep", "order"):
        if _given(raw, key):
            raise ConfigError(
                f"parallel.{key}: parallel.mesh gives the layout; give {key} there (or no mesh)"
            )
    dims: list[str] = []
    sizes: dict[str, int] = {}
    for name, size in mesh.items():
        dim = MESH_DIMS.get(name) if isinstance(name, str) else None
        if dim is None:
            raise ConfigError(f"parallel.mesh: unknown dimension {shown(name)}; allowed: {names}")
        if dim in sizes or dim == "dp" and {"replicate", "shard"} & set(sizes) or (
            dim in ("replicate", "shard") and "dp" in sizes
        ):  # fmt: skip
            raise ConfigError(f"parallel.mesh: {name} names a dimension given already")
        sizes[dim] = _pos_int(size, f"parallel.mesh.{name}", MAX_RANKS)
        dims.append(dim)
    dp_shard = None
    if "replicate" in sizes and "shard" in sizes:
        if dims.index("shard") != dims.index("replicate") + 1:
            raise ConfigError(
                "parallel.mesh: the shard dimension must come right after the replicate one "
                "(HSDP's dp is replicate x shard)"
            )
        dp_shard = sizes["shard"]
    dp = sizes.pop("replicate", 1) * sizes.pop("shard", 1) * sizes.pop("dp", 1)
    ints = {k: sizes.get(k, 1) for k in DIMS} | {"dp": dp}
    order: list[str] = []
    for dim in reversed(dims):  # (the layout's order is fastest-varying first)
        dim = "dp" if dim in ("replicate", "shard") else dim
        if dim not in order:
            order.append(dim)
    if math.prod(ints[d] for d in WORLD_DIMS) > MAX_RANKS:
        return ints, "", dp_shard  # (refused by the caller, as any layout that large)
    return ints, _order("-".join(order), ints), dp_shard


def _order(raw: Any, degrees: Mapping[str, int]) -> str:
    allowed = (
        "a '-'-separated permutation of tp, cp, ep, dp, pp (a dimension of degree 1 may be "
        "left out; ep left out sits just before dp)"
    )
    if not isinstance(raw, str):
        raise ConfigError(f"parallel.order: must be {allowed}, got {shown(raw)}")
    dims = [d.strip().lower() for d in raw.split("-")]
    if len(set(dims)) != len(dims) or not set(dims) <= set(_ORDER_DIMS):
        raise ConfigError(f"parallel.order: must be {allowed}, got {shown(raw)}")
    if "ep" not in dims:
        dims.insert(dims.index("dp") if "dp" in dims else len(dims), "ep")
    for dim in _ORDER_DIMS:
        if dim not in dims:
            if degrees[dim] > 1:
                raise ConfigError(
                    f"parallel.order: {shown(raw)} leaves out {dim}, whose degree is {degrees[dim]}"
                )
            dims.append(dim)
    return "-".join(dims)


def _batch(raw: Any, dp: int) -> Batch:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"batch: must be a mapping with keys {', '.join(_BATCH_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _BATCH_KEYS, "batch.")
    b = _pos_int(_opt(raw, "micro_batch", 1), "batch.micro_batch")
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
        if gb > MAX_DIM:  # (the default, from values each within their limits)
            raise ConfigError(
                f"batch.global_batch: micro_batch*dp*grad_accum = {gb:,} sequences, more than "
                f"{MAX_DIM:,}"
            )
    if gb % (b * dp):
        raise ConfigError(
            f"batch.global_batch ({gb}) must be divisible by batch.micro_batch x parallel.dp "
            f"({b} x {dp} = {b * dp})"
        )
    return Batch(b, gb, _bool(_opt(raw, "forward_only", False), "batch.forward_only"))


def _dtypes(raw: Any) -> Dtypes:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"dtypes: must be a mapping with keys {', '.join(_DTYPE_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _DTYPE_KEYS, "dtypes.")
    names = tuple(DTYPE_BYTES)
    vals = {
        k: _choice(_opt(raw, k, default), names, f"dtypes.{k}")
        for k, default in (("params", "bf16"), ("activations", "bf16"), ("grad_reduce", "fp32"))
    }
    return Dtypes(**vals)


def _network(raw: Any) -> Network:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"network: must be a mapping with keys {', '.join(_NETWORK_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _NETWORK_KEYS, "network.")
    return Network(
        gpus_per_node=_pos_int(_opt(raw, "gpus_per_node", 8), "network.gpus_per_node", MAX_RANKS),
        intra_node_GBps=_pos_num(_opt(raw, "intra_node_GBps", 450.0), "network.intra_node_GBps"),
        inter_node_GBps=_pos_num(_opt(raw, "inter_node_GBps", 50.0), "network.inter_node_GBps"),
        algorithm=_algorithm(_opt(raw, "algorithm", "ring")),
        efficiency=_share(_opt(raw, "efficiency", 0.8), "network.efficiency"),
        **{
            k: _nonneg_num(_opt(raw, k, default), f"network.{k}")
            for k, default in (
                ("base_latency_us", 8.4),
                ("intra_node_latency_us", 3.4),
                ("inter_node_latency_us", 14.0),
            )
        },  # fmt: skip
    )


def _hardware(raw: Any, activations: str) -> Hardware:
    from ..model.presets import ACCELERATORS

    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"hardware: must be a mapping with keys {', '.join(_HARDWARE_KEYS)}, got {shown(raw)}"
        )
    _check_keys(raw, _HARDWARE_KEYS, "hardware.")
    name = _opt(raw, "accelerator", None)
    if name is not None:
        name = _choice(name, tuple(ACCELERATORS), "hardware.accelerator")
    peak = _opt(raw, "peak_tflops", None)
    if peak is not None:
        peak = _pos_num(peak, "hardware.peak_tflops")
        if peak > MAX_PEAK_TFLOPS:
            raise ConfigError(
                f"hardware.peak_tflops: at most {MAX_PEAK_TFLOPS:.0e} TFLOP/s per GPU, got "
                f"{shown(raw['peak_tflops'])}"
            )
    elif name is not None and activations not in ACCELERATORS[name]:
        raise ConfigError(
            f"hardware.accelerator: {name} has no {activations} figure in the table "
            f"(dtypes.activations); give hardware.peak_tflops"
        )
    return Hardware(name, peak)


def _algorithm(value: Any) -> str | tuple[str, ...]:
    """One algorithm, ``auto``, or a non-empty list of distinct algorithms to choose among."""
    key = "network.algorithm"
    if isinstance(value, list):
        if not value or len(value) > len(ALGORITHMS):
            raise ConfigError(f"{key}: a list must name 1 to {len(ALGORITHMS)} algorithms, "
                              f"got {len(value)}")  # fmt: skip
        names = tuple(_choice(v, ALGORITHMS, f"{key}[{i}]") for i, v in enumerate(value))
        if len(set(names)) < len(names):
            raise ConfigError(f"{key}: lists an algorithm twice")
        return names[0] if len(names) == 1 else names
    return _choice(value, (*ALGORITHMS, "auto"), key)


def _conventions(raw: Any, parallel: Parallel) -> Conventions:
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"conventions: must be a mapping with keys {', '.join(_CONVENTION_KEYS)}, "
            f"got {shown(raw)}"
        )
    _check_keys(raw, _CONVENTION_KEYS, "conventions.")
    framework = _choice(_opt(raw, "framework", "megatron"), _FRAMEWORKS, "conventions.framework")
    megatron = framework == "megatron"
    for key in ("ddp_first_bucket_mb", "ddp_bucket_mb"):
        if megatron and _given(raw, key):
            raise ConfigError(
                f"conventions.{key}: PyTorch DDP's buckets apply with framework: torch; "
                "Megatron's are parallel.bucket_size"
            )
    if not megatron and parallel.bucket_size is not None:
        raise ConfigError(
            "parallel.bucket_size: Megatron's buckets (elements); with framework: torch give "
            "conventions.ddp_bucket_mb"
        )
    first_mb, bucket_mb = _ddp_bucket_caps(raw)
    separate_qkv = _bool(_opt(raw, "separate_qkv", False), "conventions.separate_qkv")
    if separate_qkv and parallel.sequence_parallel:
        raise ConfigError(
            "conventions.separate_qkv: modelled for tensor parallelism without "
            "sequence_parallel (its all-reduces)"
        )
    return Conventions(
        framework=framework,
        vocab_parallel=_bool(_opt(raw, "vocab_parallel", megatron), "conventions.vocab_parallel"),
        loss_all_reduce=_bool(
            _opt(raw, "loss_all_reduce", megatron), "conventions.loss_all_reduce"
        ),
        ddp_first_bucket_mb=first_mb,
        ddp_bucket_mb=bucket_mb,
        separate_qkv=separate_qkv,
        fsdp_root_unit=_bool(_opt(raw, "fsdp_root_unit", False), "conventions.fsdp_root_unit"),
    )


def _ddp_bucket_caps(raw: Mapping[str, Any]) -> tuple[float, float]:
    """(first bucket, other buckets) in MiB. PyTorch DDP keeps its small first bucket
    (``dist._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB) only while ``bucket_cap_mb`` is left at its
    default; given explicitly, it caps the first bucket too (``_BucketCapacityConfig.create``,
    torch/nn/parallel/distributed.py, v2.13.0)."""
    bucket = _pos_num(_opt(raw, "ddp_bucket_mb", 25.0), "conventions.ddp_bucket_mb")
    if not _given(raw, "ddp_bucket_mb"):
        first = _pos_num(_opt(raw, "ddp_first_bucket_mb", 1.0), "conventions.ddp_first_bucket_mb")
        return first, bucket
    if _given(raw, "ddp_first_bucket_mb"):
        raise ConfigError(
            "conventions.ddp_first_bucket_mb: PyTorch DDP has a first bucket of its own only "
            "while bucket_cap_mb is left at its default; with conventions.ddp_bucket_mb every "
            "bucket, the first too, closes at ddp_bucket_mb"
        )
    return bucket, bucket


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
            # (a key may be any scalar YAML reads: a number, a date, a 1 MB string)
            text = key if isinstance(key, str) and len(key) <= 40 else shown(key)
            hint = _closest(text, allowed)
            extra = f" (did you mean {prefix}{hint}?)" if hint else ""
            raise ConfigError(f"{prefix}{text}: unknown key{extra}; allowed: {', '.join(allowed)}")


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


def _opt(raw: Mapping[Any, Any], key: str, default: Any) -> Any:
    """``raw[key]``, or ``default`` when the key is absent or null (``key:`` left empty)."""
    value = raw.get(key)
    return default if value is None else value


def _given(raw: Mapping[Any, Any], key: str) -> bool:
    """Whether an optional section is given: not absent, null or an empty mapping."""
    value = raw.get(key)
    return value is not None and not (isinstance(value, Mapping) and not value)


def _pos_int(value: Any, key: str, maximum: int = MAX_DIM) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}: must be a positive integer, got {shown(value)}")
    if value > maximum:
        raise ConfigError(f"{key}: must be at most {maximum:,}, got {shown(value)}")
    return value


def _nonneg_int(value: Any, key: str, maximum: int = MAX_DIM) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key}: must be a non-negative integer, got {shown(value)}")
    if value > maximum:
        raise ConfigError(f"{key}: must be at most {maximum:,}, got {shown(value)}")
    return value


def _pos_num(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{key}: must be a positive number, got {shown(value)}")
    # (an integer past float's range is as infinite as .inf)
    if (isinstance(value, int) and value.bit_length() > 1000) or not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {shown(value)}")
    return float(value)


def _nonneg_num(value: Any, key: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
        if value == 0:
            return 0.0
        raise ConfigError(f"{key}: must be a non-negative number, got {shown(value)}")
    return _pos_num(value, key)


def _share(value: Any, key: str) -> float:
    share = _pos_num(value, key)
    if share > 1:
        raise ConfigError(f"{key}: must be in (0, 1], got {shown(value)}")
    return share


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: must be true or false, got {shown(value)}")
    return value


def _choice(value: Any, allowed: tuple[str, ...], key: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{key}: must be one of {', '.join(allowed)}, got {shown(value)}")
    return value
