"""job.yaml's ``conventions``: what a plain torch.distributed run issues beside the layout
(no vocab-parallel or loss collectives, PyTorch DDP's buckets), checked against sizes worked
out by hand here and against a real PyTorch DDP run's gradient all-reduces."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.model.config import job_from_dict
from pipeline.model.params import rank_tensors, rank_units
from pipeline.model.predict import predict

# The 4-layer GPT of the public CPU/gloo DDP run (its Kineto trace: aten::embedding of
# [1000, 128] on [8, 64] tokens; Q, K, V, O linears of 128 x 128 with biases, FC1 512 x 128).
GPT = {"layers": 4, "hidden": 128, "heads": 4, "ffn_hidden": 512, "vocab": 1000,
       "seq_len": 64, "tied_embeddings": False, "mlp": "gelu", "norm": "layernorm",
       "position": "learned"}  # fmt: skip
FP32 = {"params": "fp32", "activations": "fp32", "grad_reduce": "fp32"}


def _job(parallel: dict, conventions: dict | None = None, **rest) -> object:
    batch = {"micro_batch": 8, "global_batch": 8 * parallel.get("dp", 1)}
    doc = {"model": GPT, "parallel": parallel, "dtypes": FP32, "batch": batch, **rest}
    if conventions is not None:
        doc["conventions"] = conventions
    return job_from_dict(doc)


def _items(job, rank: int = 0) -> set[tuple]:
    return {(r.parallel_dim, r.op, r.phase, r.purpose, r.calls, r.bytes // r.calls)
            for r in predict(job, rank).rows}  # fmt: skip


def test_torch_ddp_buckets_are_cut_between_whole_tensors() -> None:
    """Reverse registration order: LM head 128,000, final norm 2 x 128, then the last block
    backwards (FC2 bias 128 and weight 65,536, FC1 512 and 65,536, norm 2 x 128, O bias 128
    and weight 16,384): 276,736 elements, the first to pass 1 MiB of fp32 (262,144). The
    rest of the 1,057,536 in one bucket under 25 MiB. No loss all-reduce."""
    first = 128_000 + 256 + 128 + 65_536 + 512 + 65_536 + 256 + 128 + 16_384
    assert first == 276_736
    job = _job({"dp": 2}, {"framework": "torch"})
    assert _items(job) == {
        ("dp", "all_reduce", "backward", "first gradient bucket", 1, 4 * first),
        ("dp", "all_reduce", "backward", "gradient buckets", 1, 4 * (1_057_536 - first)),
    }


def test_torch_bucket_caps_are_settable() -> None:
    """ddp_bucket_mb 1: after the first bucket, each closes at 1 MiB too; every bucket holds
    whole tensors and they add up to the model."""
    job = _job({"dp": 2}, {"framework": "torch", "ddp_bucket_mb": 1})
    rows = [r for r in predict(job, 0).rows if r.parallel_dim == "dp"]
    assert sum(r.bytes for r in rows) == 4 * 1_057_536
    assert sum(r.calls for r in rows) > 2
    # every bucket reached its cap, but the one left at the end
    small = [r for r in rows if r.bytes // r.calls < 2**20]
    assert sum(r.calls for r in small) <= 1


def test_a_given_bucket_cap_caps_the_first_bucket_too() -> None:
    """PyTorch keeps the 1 MiB first bucket only while ``bucket_cap_mb`` is left at its
    default: with ``ddp_bucket_mb: 0.5`` (131,072 fp32) the first bucket closes at 0.5 MiB as
    the others do: LM head and final norm (128,256), then FC2's bias and weight (128 and
    65,536) pass it at 193,920."""
    job = _job({"dp": 2}, {"framework": "torch", "ddp_bucket_mb": 0.5})
    assert job.conventions.ddp_first_bucket_mb == 0.5
    first = [r for r in predict(job, 0).rows if r.purpose == "first gradient bucket"]
    assert [r.bytes for r in first] == [4 * (128_000 + 256 + 128 + 65_536)]
    default = _job({"dp": 2}, {"framework": "torch"})
    assert default.conventions.ddp_first_bucket_mb == 1.0


def test_the_first_bucket_cap_needs_the_default_bucket_cap() -> None:
    with pytest.raises(ConfigError, match="conventions.ddp_first_bucket_mb: PyTorch DDP has"):
        _job({"dp": 2}, {"framework": "torch", "ddp_bucket_mb": 4, "ddp_first_bucket_mb": 1})


def test_the_tensors_add_up_to_the_units() -> None:
    for parallel in ({"dp": 2}, {"tp": 2, "pp": 2}, {"tp": 4}):
        for conventions in ({"framework": "torch"}, {}):
            job = _job(parallel, conventions)
            for pp_rank in range(job.parallel.pp):
                units = sum(u.elements for u in rank_units(job, pp_rank) if u.group == "dense")
                assert sum(rank_tensors(job, pp_rank)) == units


def test_torch_tp_has_no_vocab_parallel_or_loss_collectives() -> None:
    """Manual TP on attention and MLP only: the f and g all-reduces per layer, nothing for the
    embedding, LM head or cross-entropy; the embedding and head are whole on each TP rank."""
    act = 8 * 64 * 128 * 4
    torch = _job({"tp": 2}, {"framework": "torch"})
    assert _items(torch) == {
        ("tp", "all_reduce", "forward", "attention and MLP outputs (g)", 8, act),
        ("tp", "all_reduce", "backward", "QKV and FC1 input gradients (f)", 8, act),
    }
    megatron = {i[3] for i in _items(_job({"tp": 2}))}
    assert "vocab-parallel embedding output" in megatron
    assert "vocab-parallel cross-entropy (max, sum of exp, target logit)" in megatron
    whole = sum(u.elements for u in rank_units(torch, 0) if u.layer_kind == "embedding")
    split = sum(u.elements for u in rank_units(_job({"tp": 2}), 0) if u.layer_kind == "embedding")
    assert whole - split == 500 * 128


def test_each_convention_can_be_set_alone() -> None:
    job = _job({"dp": 2}, {"loss_all_reduce": False})
    assert not [i for i in _items(job) if i[3] == "loss report"]
    assert job.conventions.framework == "megatron" and job.conventions.vocab_parallel
    job = _job({"dp": 2}, {"framework": "torch", "loss_all_reduce": True})
    assert [i for i in _items(job) if i[3] == "loss report"]


def test_separate_qkv_all_reduces_each_projections_input_gradient() -> None:
    """Q, K and V as three column-parallel projections: per layer and micro-batch 4 backward
    all-reduces of [b, s, h] (Q, K, V, FC1) where a fused QKV has 2; forward unchanged."""
    act = 8 * 64 * 128 * 4
    fused = _job({"tp": 2}, {"framework": "torch"})
    separate = _job({"tp": 2}, {"framework": "torch", "separate_qkv": True})
    added = _items(separate) - _items(fused)
    assert added == {
        ("tp", "all_reduce", "backward", "K and V input gradients (separate projections)", 8, act)
    }
    assert ("tp", "all_reduce", "backward", "QKV and FC1 input gradients (f)", 8, act) in (
        _items(separate)
    )


def test_fsdp_root_unit_holds_embedding_and_head_gathered_once() -> None:
    """FSDP1 wrapping each layer: one root unit of embedding and LM head, gathered forward
    only (kept unsharded into backward), its gradient reduce-scattered; the layers as
    before."""
    fsdp = {"dp": 2, "fsdp": True}
    per_unit = _job(fsdp, {"framework": "torch"})
    rooted = _job(fsdp, {"framework": "torch", "fsdp_root_unit": True})
    units = {u.layer_kind: u.elements for u in rank_units(per_unit, 0)}
    root = 4 * (units["embedding"] + units["lm_head"])
    rows = {(r.op, r.phase, r.layer_kind): (r.calls, r.bytes) for r in predict(rooted, 0).rows}
    assert {k: v for k, v in rows.items() if k[2] == "root"} == {
        ("all_gather", "forward", "root"): (1, root),
        ("reduce_scatter", "backward", "root"): (1, root),
    }
    assert not [k for k in rows if k[2] in ("embedding", "lm_head")]
    layers = {k: v for k, v in rows.items() if k[2] == "transformer"}
    assert layers == {
        (r.op, r.phase, r.layer_kind): (r.calls, r.bytes)
        for r in predict(per_unit, 0).rows
        if r.layer_kind == "transformer"
    }


@pytest.mark.parametrize(
    ("conventions", "parallel", "message"),
    [
        ({"framework": "jax"}, {"dp": 2}, "conventions.framework: must be one of megatron, torch"),
        ({"ddp_bucket_mb": 25}, {"dp": 2}, "conventions.ddp_bucket_mb: PyTorch DDP's buckets"),
        ({"framework": "torch"}, {"dp": 2, "bucket_size": 1000}, "parallel.bucket_size:"),
        ({"vocab_parallel": "yes"}, {"dp": 2}, "conventions.vocab_parallel: must be true"),
        ({"ddp_bucket_mb": 0, "framework": "torch"}, {"dp": 2}, "conventions.ddp_bucket_mb: must"),
        ({"framwork": "torch"}, {"dp": 2}, "conventions.framwork"),
        ([1], {"dp": 2}, "conventions: must be a mapping"),
        (
            {"separate_qkv": True},
            {"tp": 2, "sequence_parallel": True},
            "conventions.separate_qkv: modelled for tensor parallelism without sequence_parallel",
        ),
        ({"fsdp_root_unit": 1}, {"dp": 2}, "conventions.fsdp_root_unit: must be true"),
    ],
)
def test_bad_conventions_name_the_key(conventions, parallel, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        _job(parallel, conventions)


_ACT = 8 * 64 * 128 * 4  # one micro-batch's activations [8, 64, 128] in fp32
