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
