"""Parameter counts and FLOPs per token, whole-model and per rank (``docs/model.md``).

One counting routine serves both: :func:`layer_params` returns the weights of one layer as
one tensor-parallel rank holds them (Megatron sharding), so the whole model is the same call
with ``tp = ep = 1``. The per-rank split (:func:`rank_units`) feeds the data-parallel traffic
of :mod:`pipeline.model.predict`; :func:`total_params` and :func:`flops_per_token` are what the
presets are checked against (their published totals, ``tests/model/test_params.py``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..model.config import Job, Model


@dataclass(frozen=True)
class LayerParams:
    """Elements of one layer held by one TP (and EP) rank.

    ``dense`` reduces over the data-parallel x context-parallel group, ``expert`` (routed
    experts) over the expert-data-parallel group. ``sp`` is the part of ``dense`` that
    Megatron marks ``sequence_parallel`` (norm weights and biases, row-parallel biases): with
    sequence parallelism its gradients are all-reduced over TP once per step.
    """

    dense: int
    expert: int
    sp: int


def _norm(model: Model) -> int:
    """Elements of one norm: weight (+ bias for LayerNorm)."""
    return 2 * model.hidden if model.norm == "layernorm" else model.hidden


def _mlp(model: Model, ffn: int, tp: int) -> tuple[int, int]:
    """(sharded, replicated) elements of one MLP of width ``ffn`` split over ``tp``.

    SwiGLU: three matrices; GELU (GPT): two. With biases (``model.biases`` ``all``) the
    column-parallel biases (FC1; gate and up) are sharded, the row-parallel one (FC2, down)
    replicated.
    """
    h = model.hidden
    mats = 3 if model.mlp == "swiglu" else 2
    if model.biases != "all":
        return mats * h * ffn // tp, 0
    return (mats * h * ffn + (mats - 1) * ffn) // tp, h


def layer_params(model: Model, index: int, *, tp: int = 1, ep: int = 1) -> LayerParams:
    """Weights of 0-based layer ``index`` on one rank, with Megatron sharding.

    Attention ``h·h (Q) + 2·h·h_kv (K,V) + h·h (O)`` (+ biases ``h + 2h_kv`` on Q, K, V and
    ``h`` on O as ``model.biases`` says), MLA as DeepSeek-V3 (arXiv:2412.19437); MLP ``3·h·f``
    or ``2·h·f`` (+ biases); MoE ``E x`` the expert MLP plus the router ``h·E`` and shared
    experts; two norms. Q/K/V/O, MLP and expert matrices are split over ``tp``; when
    ``kv_heads < tp`` each rank keeps one whole KV head.
    """
    h, m = model.hidden, model
    if m.mla is not None:
        a, la = m.heads, m.mla
        sharded = (
            la.q_lora_rank * a * (la.qk_nope_dim + la.qk_rope_dim)
            + la.kv_lora_rank * a * (la.qk_nope_dim + la.v_head_dim)
            + a * la.v_head_dim * h
        ) // tp
        attn = sharded + h * la.q_lora_rank + h * (la.kv_lora_rank + la.qk_rope_dim)
        attn_sp = 0
    else:
        kv_w = m.kv_hidden // tp if m.kv_heads >= tp else m.head_dim
        attn = 2 * h * h // tp + 2 * h * kv_w
        attn_sp = 0
        if m.biases in ("all", "qkv"):
            attn += h // tp + 2 * kv_w  # QKV bias sharded
        if m.biases == "all":
            attn += h  # O bias replicated
            attn_sp = h
    norms = 2 * _norm(m)
    dense = attn + norms
    sp = attn_sp + norms
    expert = 0
    if m.is_moe_layer(index):
        moe = m.moe
        assert moe is not None
        shard, repl = _mlp(m, moe.ffn_hidden, tp)
        expert = (moe.experts // ep) * (shard + repl)
        dense += h * moe.experts  # router, replicated
        if moe.shared_experts:
            s_shard, s_repl = _mlp(m, moe.ffn_hidden * moe.shared_experts, tp)
            dense += s_shard + s_repl
            sp += s_repl
    else:
        shard, repl = _mlp(m, m.ffn_hidden, tp)
        dense += shard + repl
        sp += repl
    return LayerParams(dense=dense, expert=expert, sp=sp)


def embedding_params(model: Model, *, tp: int = 1) -> int:
    """Word-embedding elements on one TP rank: ``V·h / t``, vocab padded to a multiple of t."""
    return math.ceil(model.vocab / tp) * model.hidden


def position_params(model: Model) -> int:
    """Learned position embedding ``s·h`` (replicated over TP), 0 for RoPE."""
    return model.seq_len * model.hidden if model.position == "learned" else 0


def total_params(model: Model) -> int:
    """``N``: every weight: ``L·layer + V·h + [V·h if untied] + s·h + final norm``."""
    layers = sum(_whole(layer_params(model, i)) for i in range(model.layers))
    head = 0 if model.tied_embeddings else embedding_params(model)
    return layers + embedding_params(model) + head + position_params(model) + _norm(model)


def active_params(model: Model) -> int:
    """``N_act``: weights one token touches; MoE layers count ``top_k`` routed experts only."""
    total = total_params(model)
    if model.moe is None:
        return total
    moe = model.moe
    per_expert = sum(_mlp(model, moe.ffn_hidden, 1))
    idle = (moe.experts - moe.top_k) * per_expert
    return total - idle * sum(model.is_moe_layer(i) for i in range(model.layers))


def flops_per_token(model: Model) -> int:
    """Model FLOPs per trained token, Megatron accounting (``num_floating_point_operations``).

    ``6·N_mm + 6·L·s·h_attn`` with ``N_mm`` the matmul weights a token touches (active
    parameters without the input-embedding and position lookups, with the LM head even when
    it is tied) and the attention term halved for the causal mask; MLA uses
    ``3·s·a·(d_qk + d_v)`` per layer. No recomputation.
    """
    n_mm = active_params(model) - embedding_params(model) - position_params(model)
    if model.tied_embeddings:
        n_mm += embedding_params(model)
    return 6 * n_mm + model.layers * attention_flops_per_token(model)


def attention_flops_per_token(model: Model) -> int:
    """Score and context matmuls (``QK^T``, ``AV``) of one layer per token, forward and
    backward, halved for the causal mask: ``6·s·h`` (MLA ``3·s·a·(d_qk + d_v)``)."""
    if model.mla is not None:
        la = model.mla
        d_qk = la.qk_nope_dim + la.qk_rope_dim
        return 3 * model.seq_len * model.heads * (d_qk + la.v_head_dim)
    return 6 * model.seq_len * model.heads * model.head_dim


def layer_flops_per_token(model: Model, index: int) -> int:
    """Model FLOPs of 0-based layer ``index`` per trained token: ``6·`` the weights a token
    touches in it (``top_k`` routed experts of an MoE layer) plus its attention term, the
    per-layer part of :func:`flops_per_token`."""
    p = layer_params(model, index)
    weights = p.dense
    if p.expert:
        moe = model.moe
        assert moe is not None
        weights += moe.top_k * sum(_mlp(model, moe.ffn_hidden, 1))
    return 6 * weights + attention_flops_per_token(model)


def _whole(p: LayerParams) -> int:
    return p.dense + p.expert


# --------------------------------------------------------------------------- per rank


def chunk_sizes(layers: int, chunks: int) -> list[int]:
    """Layers per pipeline chunk (virtual stage), in pipeline order.

    Even when ``chunks`` divides ``layers`` (Megatron). Otherwise every chunk gets
    ``ceil(L/chunks)`` layers and the missing ones are taken from the ends inwards, first,
    last, second, ... (Llama 3, arXiv:2407.21783: first and last stage hold one layer fewer).
    """
    base = -(-layers // chunks)
    sizes = [base] * chunks
    missing = base * chunks - layers
    ends_inwards = [i // 2 if i % 2 == 0 else chunks - 1 - i // 2 for i in range(chunks)]
    for i in ends_inwards[:missing]:
        sizes[i] -= 1
    return sizes


def stage_layers(job: Job, pp_rank: int) -> list[int]:
    """0-based indices of the layers pipeline rank ``pp_rank`` holds, over its ``v`` chunks.

    Virtual stage ``k = j·p + r`` (chunk ``j`` of rank ``r``) holds the ``k``-th contiguous
    block of layers (Megatron's interleaved assignment).
    """
    p, v = job.parallel.pp, job.parallel.vpp
    sizes = chunk_sizes(job.model.layers, p * v)
    # (one pass: summing each prefix anew was quadratic in pp·vpp)
    starts = [0, *itertools.accumulate(sizes)]
    out: list[int] = []
    for j in range(v):
        k = j * p + pp_rank
        out.extend(range(starts[k], starts[k] + sizes[k]))
    return out


@dataclass(frozen=True)
class Unit:
    """A block of weights synchronised together under ZeRO-3/FSDP (one wrapped module).

    ``group`` is ``dense`` (reduces over DP x CP) or ``expert`` (over expert-DP).
    """

    layer_kind: str
    elements: int
    group: str


def vocab_tp(job: Job) -> int:
    """Ranks the embedding and LM head are split over: TP with vocab-parallel layers
    (Megatron), else 1 (``conventions.vocab_parallel: false``)."""
    return job.parallel.tp if job.conventions.vocab_parallel else 1


def layer_tensors(model: Model, index: int, *, tp: int = 1) -> list[int]:
    """Elements of each dense weight tensor of 0-based layer ``index`` on one TP rank, in the
    order a GPT or Llama block registers them: norm, Q, K, V, O (each with its bias where
    ``model.biases`` gives one), norm, MLP (FC1, FC2; or gate, up, down; each with its bias).
    PyTorch DDP cuts its buckets between whole tensors, so where they fall depends on this
    order. An MoE or MLA
    layer is one tensor of its dense weights (their order is the implementation's)."""
    if model.mla is not None or model.is_moe_layer(index):
        return [layer_params(model, index, tp=tp).dense]
    h, f, bias = model.hidden, model.ffn_hidden, model.biases
    kv_w = model.kv_hidden // tp if model.kv_heads >= tp else model.head_dim
    norm = [h, h] if model.norm == "layernorm" else [h]
    attn: list[int] = []
    for width in (h // tp, kv_w, kv_w):  # Q, K, V: column-parallel, biases sharded
        attn += [h * width, width] if bias in ("all", "qkv") else [h * width]
    attn += [h // tp * h, h] if bias == "all" else [h // tp * h]  # O: row-parallel, bias whole
    up = [h * f // tp, f // tp] if bias == "all" else [h * f // tp]  # column-parallel
    down = [f // tp * h, h] if bias == "all" else [f // tp * h]  # row-parallel, bias whole
    mlp = up + down if model.mlp == "gelu" else up + up + down  # FC1, FC2; gate, up, down
    return norm + attn + norm + mlp


def rank_tensors(job: Job, pp_rank: int) -> list[int]:
    """Elements of each dense weight tensor a rank of pipeline stage ``pp_rank`` holds, in
    registration order: word and position embeddings (first stage), the layers
    (:func:`layer_tensors`), the final norm and the LM head (last stage). They add up to the
    dense units of :func:`rank_units`."""
    m, par = job.model, job.parallel
    out: list[int] = []
    if pp_rank == 0:
        out += [embedding_params(m, tp=vocab_tp(job))]
        out += [position_params(m)] if position_params(m) else []
    for i in stage_layers(job, pp_rank):
        out += layer_tensors(m, i, tp=par.tp)
    if pp_rank == par.pp - 1:
        out += [m.hidden, m.hidden] if m.norm == "layernorm" else [m.hidden]
        if not (m.tied_embeddings and par.pp == 1):
            out += [embedding_params(m, tp=vocab_tp(job))]
    return out


def rank_units(job: Job, pp_rank: int) -> list[Unit]:
    """The weights one rank of pipeline stage ``pp_rank`` holds, as FSDP-style units.

    One unit per transformer layer (its dense weights), one per MoE layer's local experts, an
    ``embedding`` unit on the first stage (word embedding + learned positions) and an
    ``lm_head`` unit on the last (final norm + output layer, or the tied embedding's copy when
    ``pp > 1``), split over TP where they are vocab-parallel. Every TP rank of a stage holds
    the same counts.
    """
    m, par = job.model, job.parallel
    units: list[Unit] = []
    if pp_rank == 0:
        units.append(
            Unit("embedding", embedding_params(m, tp=vocab_tp(job)) + position_params(m), "dense")
        )
    for i in stage_layers(job, pp_rank):
        lp = layer_params(m, i, tp=par.tp, ep=par.ep)
        units.append(Unit("transformer", lp.dense, "dense"))
        if lp.expert:
            units.append(Unit("moe", lp.expert, "expert"))
    if pp_rank == par.pp - 1:
        head = 0 if (m.tied_embeddings and par.pp == 1) else embedding_params(m, tp=vocab_tp(job))
        units.append(Unit("lm_head", head + _norm(m), "dense"))
    return units


def rank_sp_params(job: Job, pp_rank: int) -> int:
    """Elements whose gradients Megatron all-reduces over TP under sequence parallelism.

    Norm weights/biases and row-parallel biases of the stage's layers, plus the final norm on
    the last stage (``_allreduce_layernorm_grads``).
    """
    m = job.model
    n = sum(layer_params(m, i, tp=job.parallel.tp).sp for i in stage_layers(job, pp_rank))
    if pp_rank == job.parallel.pp - 1:
        n += _norm(m)
    return n
