"""What one rank of the synthetic Megatron GPT job runs, step by step.

This module owns the per-rank program: the 1F1B pipeline schedule, the forward and backward
of each micro-batch with PyTorch-shaped op nesting (``nn.Module:`` scopes in forward, autograd
``evaluate_function`` ops on the autograd thread in backward), and where every collective is
issued. :mod:`pipeline.synth.job` runs these programs together and matches the collectives.

Communication per rank per step (tensor dims as Megatron holds them, ``[s, b, h]``):

- TP all-reduce (bf16, s*b*h): 2 per layer per micro-batch in forward (after the attention
  output projection and after FC2, inside ``RowParallelLinear``), 2 in backward (input gradient
  of QKV and FC1, inside the ``ColumnParallelLinear`` backward, overlapped with the weight-gradient
  GEMM); first stage: +1 in forward (``VocabParallelEmbedding``); last stage: +1 in backward
  (LM-head input gradient) and +3 fp32 all-reduces of s*b in forward (vocab-parallel cross
  entropy: max logit, predicted logit, sum of exps).
- PP send/recv (bf16, s*b*h): activations downstream in forward, gradients upstream in backward,
  one per micro-batch per stage boundary, in the 1F1B order.
- DP all-reduce (bf16) of the stage's gradient buckets after the last micro-batch's backward
  (Megatron's ``finalize_model_grads``, in a ``backward`` range of its own after the schedule).
- Small extras, as ``docs/model.md`` predicts them: once per step on
  the last stage the loss-reporting all-reduce over DP (fp32, 2 elements: loss sum and token
  count), after the optimizer and outside the forward/backward/optimizer ranges (phase
  ``other``). Not emitted: the ``num_tokens`` broadcast/all-reduce (only with per-token loss),
  the gradient-norm all-reduce over the model-parallel group, fp16 found-inf all-reduces (bf16
  needs no loss scaling) and the embedding-grad all-reduce (untied embeddings).
- Collectives on a group of one rank are skipped, as Megatron skips them.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

from ..synth import job as J

Gen = Generator[J.CommRequest, int, None]
BF16 = "c10::BFloat16"


def one_f_one_b(stage: int, stages: int, micro: int) -> Iterator[tuple[str, int]]:
    """Megatron's non-interleaved 1F1B order with unbatched p2p.

    ``send_forward_recv_backward`` posts the receive first and ``send_backward_recv_forward``
    the send first, so the two ends of every stage boundary issue the same sequence of
    messages (no deadlock with one NCCL stream per pair).
    """
    first, last = stage == 0, stage == stages - 1
    warmup = min(stages - stage - 1, micro)
    steady = micro - warmup
    for i in range(warmup):
        if not first:
            yield "recv_act", i
        yield "F", i
        if not last:
            yield "send_act", i
    if steady and not first:
        yield "recv_act", warmup
    for j in range(steady):
        yield "F", warmup + j
        if not last:
            yield "recv_grad", j
            yield "send_act", warmup + j
        yield "B", j
        if not first:
            yield "send_grad", j
            if j != steady - 1:
                yield "recv_act", warmup + j + 1
    for k in range(warmup):
        if not last:
            yield "recv_grad", steady + k
        yield "B", steady + k
        if not first:
            yield "send_grad", steady + k


def rank_program(R: J.Rank) -> Gen:
    """The generator the simulator drives for one rank (all profiled steps)."""
    spec = R.spec
    act = [spec.seq_len, spec.micro_batch, spec.hidden]
    first, last = R.pp_rank == 0, R.pp_rank == spec.pp - 1
    m = spec.micro_batches
    for k in range(spec.steps):
        R.tid = R.main_tid
        step_ev, _ = R.trace.range_event(
            "user_annotation", f"ProfilerStep#{spec.first_step + k}", R.tid, R.cpu_ns
        )
        R.cpu(25_000)
        for action, _mb in one_f_one_b(R.pp_rank, spec.pp, m):
            R.tid = R.main_tid
            if action == "F":
                yield from forward(R, first, last)
            elif action == "B":
                yield from backward(R, first, last)
            elif action == "send_act":
                yield from R.collective(
                    "pp", "send", "bf16", act, peer=R.pp_rank + 1, blocking=False
                )
            elif action == "recv_act":
                yield from R.collective("pp", "recv", "bf16", act, peer=R.pp_rank - 1)
            elif action == "send_grad":
                yield from R.collective(
                    "pp", "send", "bf16", act, peer=R.pp_rank - 1, blocking=False
                )
            else:
                yield from R.collective("pp", "recv", "bf16", act, peer=R.pp_rank + 1)
        R.tid = R.main_tid
        with R.op("backward", cat="user_annotation", cost=3_000):
            yield from finalize_model_grads(R)
        optimizer(R)
        R.cpu(15_000)
        if last:  # training_log: loss sum and token count, averaged over data parallel
            yield from _ar(R, "dp", "fp32", [2])
        R.trace.close(step_ev, R.cpu_ns)
        R.cpu(60_000)


def _ar(R: J.Rank, dim: str, dtype: str, dims: list[int], blocking: bool = True) -> Gen:
    if len(R.group[dim].ranks) > 1:
        return (yield from R.collective(dim, "all_reduce", dtype, dims, blocking=blocking))
    return R.streams[J.COMPUTE_STREAM]


def _linear(R: J.Rank, module: str, n_out: int, n_in: int) -> None:
    s, b = R.spec.seq_len, R.spec.micro_batch
    with R.module(module):
        dims = shapes_linear(s, b, n_in, n_out)
        with R.op("aten::linear", dims, node=True):
            R.gemm(
                J.GEMM_FWD,
                s * b,
                n_out,
                n_in,
                {"bias": True, "shapes": shapes_addmm(s * b, n_in, n_out)},
            )


def shapes_linear(s: int, b: int, n_in: int, n_out: int) -> dict[str, Any]:
    return J.shapes(([s, b, n_in], BF16), ([n_out, n_in], BF16), ([n_out], BF16))


def shapes_addmm(rows: int, n_in: int, n_out: int) -> dict[str, Any]:
    return J.shapes(
        ([n_out], BF16),
        ([rows, n_in], BF16),
        ([n_in, n_out], BF16),
        (None, "Scalar"),
        (None, "Scalar"),
        concrete=["", "", "", "1", "1"],
    )


def _elementwise(
    R: J.Rank,
    op: str,
    kernel: str,
    dims: list[int],
    n_in: int = 2,
    dur: int = 2_600,
    node: bool = False,
) -> None:
    inputs = [(dims, BF16)] * n_in
    R.simple(op, kernel, "elementwise", dur, J.shapes(*inputs), node=node)


def _layer_norm(R: J.Rank, module: str) -> None:
    s, b, h = R.spec.seq_len, R.spec.micro_batch, R.spec.hidden
    with R.module(module):
        extra = J.shapes(
            ([s, b, h], BF16),
            (None, "ScalarList"),
            ([h], BF16),
            ([h], BF16),
            (None, "Scalar"),
            (None, "Scalar"),
            concrete=["", f"[{h}]", "", "", "1.0000000000000001e-05", "True"],
        )
        with R.op("aten::layer_norm", extra, node=True):
            R.simple("aten::native_layer_norm", J.LN_FWD, "ln", 3_200)


def forward(R: J.Rank, first: bool, last: bool) -> Gen:
    spec = R.spec
    s, b, h, t = spec.seq_len, spec.micro_batch, spec.hidden, spec.tp
    n_layers = spec.layers_per_stage
    R.forward_nodes = []
    with R.op("forward", cat="user_annotation", cost=3_000):
        with (
            R.module("DistributedDataParallel_0"),
            R.module("Float16Module_0"),
            R.module("GPTModel_0"),
        ):
            if first:
                with R.module("LanguageModelEmbedding_0"):
                    with R.module("VocabParallelEmbedding_0"):
                        emb = J.shapes(
                            ([spec.vocab // t, h], BF16),
                            ([b, s], "long int"),
                            (None, "Scalar"),
                            (None, "Scalar"),
                            (None, "Scalar"),
                            concrete=["", "", "-1", "False", "False"],
                        )
                        R.simple("aten::embedding", J.EMBED, "elementwise", 3_800, emb, node=True)
                        _elementwise(R, "aten::masked_fill_", J.MASKED_FILL, [b, s, h])
                        yield from _ar(R, "tp", "bf16", [b, s, h])
                    with R.module("Embedding_0"):
                        pos = J.shapes(
                            ([s, h], BF16),
                            ([s], "long int"),
                            (None, "Scalar"),
                            (None, "Scalar"),
                            (None, "Scalar"),
                            concrete=["", "", "-1", "False", "False"],
                        )
                        R.simple("aten::embedding", J.EMBED, "elementwise", 3_000, pos, node=True)
                    _elementwise(R, "aten::add", J.ADD, [s, b, h])
            with R.module("TransformerBlock_0"):
                for i in range(n_layers):
                    yield from layer_forward(R, i)
                if last:
                    _layer_norm(R, f"LayerNorm_{2 * n_layers}")
            if last:
                _linear(R, f"ColumnParallelLinear_{2 * n_layers}", spec.vocab // t, h)
        if last:
            with R.function("_VocabParallelCrossEntropy"):
                yield from cross_entropy(R)
    R.awaiting_backward.append(R.forward_nodes)


def layer_forward(R: J.Rank, i: int) -> Gen:
    spec = R.spec
    s, b, h, t, f = spec.seq_len, spec.micro_batch, spec.hidden, spec.tp, spec.ffn_hidden
    heads, d = spec.heads // t, spec.hidden // spec.heads
    with R.module(f"TransformerLayer_{i}"):
        _layer_norm(R, f"LayerNorm_{2 * i}")
        with R.module(f"ParallelAttention_{i}"):
            _linear(R, f"ColumnParallelLinear_{2 * i}", 3 * h // t, h)
            qkv = ([b, heads, s, d], BF16)
            extra = J.shapes(
                qkv,
                qkv,
                qkv,
                (None, "Scalar"),
                (None, "Scalar"),
                (None, "Scalar"),
                (None, ""),
                concrete=["", "", "", "0.", "True", "False", ""],
            )
            dur = 9_000 + 4 * b * heads * s * s * d * 1_000 // 200_000
            if R.rank == spec.straggler_rank:
                dur += 140_000  # a slow GPU: this rank is late at the attention all-reduce
            R.simple(
                "aten::_scaled_dot_product_flash_attention",
                J.FLASH_FWD.format(d=d),
                "flash",
                dur,
                extra,
                node=True,
            )
            with R.module(f"RowParallelLinear_{2 * i}"):
                with R.op("aten::linear", shapes_linear(s, b, h // t, h), node=True):
                    R.gemm(
                        J.GEMM_FWD,
                        s * b,
                        h,
                        h // t,
                        {"shapes": J.shapes(([s * b, h // t], BF16), ([h // t, h], BF16))},
                    )
                yield from _ar(R, "tp", "bf16", [s, b, h])
                _elementwise(R, "aten::add", J.ADD, [s, b, h])
        _elementwise(R, "aten::add", J.ADD, [s, b, h])
        _layer_norm(R, f"LayerNorm_{2 * i + 1}")
        with R.module(f"ParallelMLP_{i}"):
            _linear(R, f"ColumnParallelLinear_{2 * i + 1}", f // t, h)
            _elementwise(R, "aten::gelu", J.GELU, [s, b, f // t], n_in=1, node=True)
            with R.module(f"RowParallelLinear_{2 * i + 1}"):
                with R.op("aten::linear", shapes_linear(s, b, f // t, h), node=True):
                    R.gemm(
                        J.GEMM_FWD,
                        s * b,
                        h,
                        f // t,
                        {"shapes": J.shapes(([s * b, f // t], BF16), ([f // t, h], BF16))},
                    )
                yield from _ar(R, "tp", "bf16", [s, b, h])
                _elementwise(R, "aten::add", J.ADD, [s, b, h])
        _elementwise(R, "aten::add", J.ADD, [s, b, h])


def cross_entropy(R: J.Rank) -> Gen:
    """Megatron's vocab-parallel cross entropy: three fp32 TP all-reduces of s*b (max logit,
    predicted logit, sum of exps)."""
    s, b, v = R.spec.seq_len, R.spec.micro_batch, R.spec.vocab // R.spec.tp
    logits = ([s, b, v], "float")
    R.simple(
        "aten::max",
        J.REDUCE_MAX,
        "reduce",
        6_000,
        J.shapes(logits, (None, "Scalar"), (None, "Scalar"), concrete=["", "-1", "False"]),
    )
    yield from _ar(R, "tp", "fp32", [s, b])
    R.simple("aten::sub", J.EXP, "elementwise", 4_000, J.shapes(logits, ([s, b, 1], "float")))
    R.simple("aten::gather", J.REDUCE_SUM, "reduce", 3_000, J.shapes(logits))
    yield from _ar(R, "tp", "fp32", [s, b])
    R.simple("aten::exp", J.EXP, "elementwise", 4_000, J.shapes(logits))
    R.simple("aten::sum", J.REDUCE_SUM, "reduce", 5_000, J.shapes(logits))
    yield from _ar(R, "tp", "fp32", [s, b])
    R.simple("aten::log", J.EXP, "elementwise", 2_600, J.shapes(([s, b], "float")))


@contextmanager
def _grad_fn(R: J.Rank, name: str, cost: int) -> Iterator[int]:
    """``autograd::engine::evaluate_function: <name>`` wrapping ``<name>`` (autograd thread),
    both with the sequence number of the forward op that created the node: the backward
    runs the nodes of its micro-batch's forward in reverse."""
    seq = R.backward_nodes.pop()
    with R.op(f"autograd::engine::evaluate_function: {name}", autograd=seq, cost=5_000):
        with R.op(name, autograd=seq, cost=cost) as ext:
            yield ext


def _linear_backward(R: J.Rank, n_out: int, n_in: int, column: bool) -> Gen:
    s, b = R.spec.seq_len, R.spec.micro_batch
    name = "LinearWithGradAccumulationAndAsyncCommunicationBackward"
    with _grad_fn(R, name, cost=4_000):
        R.gemm(
            J.GEMM_DGRAD,
            s * b,
            n_in,
            n_out,
            {"shapes": J.shapes(([s * b, n_out], BF16), ([n_out, n_in], BF16))},
        )
        end = None
        if column:  # async all-reduce of the input gradient, overlapped with the wgrad GEMM
            end = yield from _ar(R, "tp", "bf16", [s, b, n_in], blocking=False)
        R.gemm(
            J.GEMM_WGRAD,
            n_out,
            n_in,
            s * b,
            {"shapes": J.shapes(([n_out, s * b], BF16), ([s * b, n_in], BF16))},
        )
        R.simple("aten::sum", J.REDUCE_SUM, "reduce", 3_000, J.shapes(([s * b, n_out], BF16)))
        if end is not None:
            R.streams[J.COMPUTE_STREAM] = max(R.streams[J.COMPUTE_STREAM], end + 1_200)


def _simple_backward(R: J.Rank, name: str, op: str, kernels: list[tuple[str, str, int]]) -> None:
    with _grad_fn(R, name, cost=3_000):
        with R.op(op) as ext:
            for kernel, kind, dur in kernels:
                R.kernel(ext, kernel, kind, dur)


def _ln_backward(R: J.Rank) -> None:
    _simple_backward(
        R,
        "NativeLayerNormBackward0",
        "aten::native_layer_norm_backward",
        [(J.LN_BWD, "ln", 3_600), (J.LN_BWD_GAMMA, "ln", 4_200)],
    )


def backward(R: J.Rank, first: bool, last: bool) -> Gen:
    spec = R.spec
    h, t, f = spec.hidden, spec.tp, spec.ffn_hidden
    d = spec.hidden // spec.heads
    R.backward_nodes = R.awaiting_backward.pop(0)
    with R.op("backward", cat="user_annotation", cost=3_000):
        R.tid = R.autograd_tid
        if last:
            _simple_backward(
                R,
                "_VocabParallelCrossEntropyBackward",
                "aten::sub_",
                [(J.EXP, "elementwise", 4_000)],
            )
            yield from _linear_backward(R, spec.vocab // t, h, column=True)
            _ln_backward(R)
        for _ in reversed(range(spec.layers_per_stage)):
            yield from _linear_backward(R, h, f // t, column=False)
            _simple_backward(
                R, "GeluBackward0", "aten::gelu_backward", [(J.GELU_BWD, "elementwise", 3_000)]
            )
            yield from _linear_backward(R, f // t, h, column=True)
            _ln_backward(R)
            yield from _linear_backward(R, h, h // t, column=False)
            _simple_backward(
                R,
                "ScaledDotProductFlashAttentionBackward0",
                "aten::_scaled_dot_product_flash_attention_backward",
                [(J.FLASH_BWD.format(d=d), "flash", 22_000)],
            )
            yield from _linear_backward(R, 3 * h // t, h, column=True)
            _ln_backward(R)
        if first:
            for _ in range(2):  # word and position embeddings
                _simple_backward(
                    R,
                    "EmbeddingBackward0",
                    "aten::embedding_dense_backward",
                    [(J.EMBED_BWD, "elementwise", 5_000)],
                )
        R.tid = R.main_tid
    if R.backward_nodes:  # the backward runs every node its forward created
        raise AssertionError(f"rank {R.rank}: backward left nodes {R.backward_nodes}")


def finalize_model_grads(R: J.Rank) -> Gen:
    """DP gradient all-reduce of each bucket of the stage's gradient buffer."""
    for bucket in J.dp_buckets(R.spec, R.pp_rank):
        yield from _ar(R, "dp", "bf16", [bucket])


def optimizer(R: J.Rank) -> None:
    n_params = sum(n for _, n in J.stage_params(R.spec, R.pp_rank))
    with R.op("optimizer", cat="user_annotation", cost=3_000):
        R.simple("aten::_foreach_norm", J.L2NORM, "mta", 4_000 + n_params // 2_000)
        with R.op("aten::item"), R.op("aten::_local_scalar_dense") as ext:
            call = 6_000
            start = max(R.cpu_ns + call - 1_000, R.streams[J.COMPUTE_STREAM] + 1_000)
            R.trace.memcpy(
                tid=R.tid,
                call_ts=R.cpu_ns,
                call_dur=call,
                external_id=ext,
                stream=J.COMPUTE_STREAM,
                start=start,
                dur=1_400,
                nbytes=4,
                kind="Memcpy DtoH (Device -> Pinned)",
            )
            R.streams[J.COMPUTE_STREAM] = start + 1_400
            R.sync_cpu_to_gpu()
        with R.op("Optimizer.step#FusedAdam.step", cat="user_annotation", cost=8_000):
            R.simple("aten::_fused_adam_", J.ADAM, "mta", 6_000 + n_params // 500)
