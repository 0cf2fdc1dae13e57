"""DeepSeek-V3's node-limited expert routing: bytes per token inside and across nodes."""

from __future__ import annotations

from pipeline.model.traffic import ep_a2a_message, node_limited_ep_bytes


def test_deepseek_v3_bytes_per_token_by_hand() -> None:
    # DeepSeek-V3 Technical Report, arXiv:2412.19437: hidden 7168 (section 4.2), 8 of 256
    # routed experts per token, on at most M = 4 nodes (section 2.1.2, node-limited routing),
    # 64-way EP over 8 nodes (section 3.2); dispatch in FP8, combine in BF16 (section 3.3.4).
    # By hand: across nodes, dispatch 4 x 7168 x 1 = 28,672 B and combine 4 x 7168 x 2 =
    # 57,344 B; inside nodes (NVLink forwarding to the 8 experts) 8 x 7168 x 1 = 57,344 B and
    # 8 x 7168 x 2 = 114,688 B.
    b = node_limited_ep_bytes(top_k=8, hidden=7168, max_nodes=4, nodes=8)
    assert b == {"dispatch_inter": 28_672, "dispatch_intra": 57_344,
                 "combine_inter": 57_344, "combine_intra": 114_688}  # fmt: skip
    # unrestricted BF16 routing sends k·h·2 bytes each way: 229,376 B per token, 2.67 times
    # the 86,016 B the node limit allows across nodes
    naive = 2 * ep_a2a_message(k=8, tokens=1, h=7168, e=2)
    assert naive == 229_376
    assert naive / (b["dispatch_inter"] + b["combine_inter"]) == 229_376 / 86_016


def test_fewer_nodes_than_the_limit() -> None:
    # an EP group on 2 nodes: a token crosses to at most the 1 other node
    b = node_limited_ep_bytes(top_k=8, hidden=10, max_nodes=4, nodes=2)
    assert (b["dispatch_inter"], b["combine_inter"]) == (10, 20)
    assert node_limited_ep_bytes(top_k=8, hidden=10, max_nodes=4, nodes=1)["combine_inter"] == 0


# --------------------------------------------------------------------------- predict's rows

import pytest  # noqa: E402

from pipeline.errors import ConfigError  # noqa: E402
from pipeline.model.config import build_job  # noqa: E402
from pipeline.model.predict import predict  # noqa: E402

V3 = {"model.preset": "deepseek-v3", "parallel.dp": 64, "parallel.ep": 64,
      "batch.micro_batch": 1, "batch.global_batch": 64, "network.gpus_per_node": 8,
      "model.moe.max_nodes": 4, "model.moe.dispatch_dtype": "fp8",
      "model.moe.combine_dtype": "bf16"}  # fmt: skip


def _ep(job, rank=0):
    return {r.purpose: r for r in predict(job, rank).rows if r.parallel_dim == "ep"}


def test_deepseek_v3_rows_per_token_match_the_hand_bound() -> None:
    # 64-way EP over 8 nodes of 8 GPUs, 4,096 tokens per micro-batch, 58 MoE layers (61 less
    # 3 dense): per token and MoE layer the rows must give the bytes worked out by hand in
    # test_deepseek_v3_bytes_per_token_by_hand
    job = build_job(None, V3)
    rows = _ep(job)
    per = 58 * 4096  # calls x tokens
    want = {
        "expert dispatch": (57_344, 28_672),
        "expert combine": (114_688, 57_344),
        "combine gradients (towards the experts)": (57_344, 28_672),
        "dispatch gradients (back from the experts)": (114_688, 57_344),
    }
    assert set(rows) == set(want)
    for purpose, (intra, inter) in want.items():
        r = rows[purpose]
        assert r.calls == 58
        assert (r.intra_node_bytes / per, r.inter_node_bytes / per) == (intra, inter)
        assert r.wire_bytes == r.intra_node_bytes + r.inter_node_bytes
        # payload M = k·T·h·e: FP8 towards the experts, BF16 back
        e = 1 if purpose in ("expert dispatch", "combine gradients (towards the experts)") else 2
        assert r.bytes == 58 * 4096 * 8 * 7168 * e
    # without the node limit, BF16 all-to-all pairwise over 64 ranks: 56/64 of k·h·2 per token
    # and direction crosses nodes, 100,352 B against the limit's 28,672 + 57,344 = 86,016 B
    # for both directions
    plain = _ep(build_job(None, {k: v for k, v in V3.items() if "moe." not in k}))
    (r,) = [x for p, x in plain.items() if p == "expert dispatch and combine"]
    assert r.inter_node_bytes / (2 * per) == pytest.approx(56 / 64 * 8 * 7168 * 2)


def test_limit_needs_nodes_to_cross() -> None:
    # EP 8 inside one node: nothing crosses; the dtypes still apply
    job = build_job(None, V3 | {"parallel.ep": 8})
    rows = _ep(job)
    assert all(r.inter_node_bytes == 0 for r in rows.values())
    d, c = rows["expert dispatch"], rows["expert combine"]
    assert 2 * d.bytes == c.bytes
    assert d.wire_bytes == pytest.approx(7 / 8 * d.bytes)
    # a limit above the group's nodes: a token crosses to at most the other 7
    wide = _ep(build_job(None, V3 | {"model.moe.max_nodes": 20}))["expert dispatch"]
    assert wide.inter_node_bytes / (58 * 4096) == 7 * 7168


def test_recompute_adds_dispatch_and_combine() -> None:
    rows = _ep(build_job(None, V3 | {"recompute": "full"}))
    assert {"recomputed dispatch", "recomputed combine"} <= set(rows)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model.moe.max_nodes", 0, "model.moe.max_nodes: must be a positive integer"),
        ("model.moe.dispatch_dtype", "int4", "model.moe.dispatch_dtype: must be one of"),
        ("model.moe.capacity_factor", 1.25, "model.moe.max_nodes: node-limited routing"),
    ],
)
def test_bad_keys(key, value, match) -> None:
    with pytest.raises(ConfigError, match=match):
        build_job(None, V3 | {key: value})
