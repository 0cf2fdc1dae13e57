"""The report's wire section: the model's bytes inside and across nodes, item by item."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.model.config import job_from_dict
from pipeline.report.wire import _predicted_split

# tp 2 x dp 4 on two hosts of four GPUs: rank = tp + 2·dp, so TP pairs {0,1}, {2,3}, ... sit
# in one host and each DP group ({0,2,4,6}, {1,3,5,7}) has two ranks on each host.
JOB = {
    "model": {"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 1000,
              "seq_len": 32, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope"},
    "parallel": {"tp": 2, "dp": 4},
    "batch": {"micro_batch": 1, "global_batch": 4},
    "network": {"gpus_per_node": 4},
}  # fmt: skip


def test_a_dp_group_over_two_hosts_splits_its_ring_between_them():
    # Weights of one TP rank (Megatron sharding, no biases): per layer Q, K, V, O 4·h²/t =
    # 8,192, two RMSNorms 2·h = 128, SwiGLU 3·h·f/t = 12,288: 20,608; two layers 41,216;
    # vocab-parallel embedding and untied LM head V/t·h = 32,000 each; final norm 64.
    elements = 2 * (4 * 64 * 64 // 2 + 2 * 64 + 3 * 64 * 128 // 2) + 2 * 500 * 64 + 64
    assert elements == 105_280
    grads = elements * 4  # fp32 gradient reduction, one bucket (under 40e6 elements)
    # ring all-reduce over 4 ranks: each sends 2·3/4·M; of the ring's 4 links, 2 cross hosts
    wire = 2 * 3 / 4 * grads
    loss = 2 * 3 / 4 * 8  # the loss report: 8 bytes over the same group
    per_rank_inter = wire / 2 + loss / 2
    # TP pairs: b·s·h bf16 = 4,096 B; 4 all-reduces forward, 4 backward (2 per layer), the
    # embedding output and LM head input gradient, and 3 cross-entropy reductions of b·s
    # fp32; a 2-rank all-reduce sends M
    tp = 10 * 32 * 64 * 2 + 3 * 32 * 4
    split = _predicted_split(SimpleNamespace(config=job_from_dict(JOB)))
    assert split == {
        ("tp", "intra"): 8 * tp,
        ("tp", "inter"): 0.0,
        ("dp", "intra"): 8 * per_rank_inter,
        ("dp", "inter"): 8 * per_rank_inter,
    }
    assert split[("dp", "inter")] == 2_526_768


def test_without_a_job_yaml_there_is_no_predicted_split():
    assert _predicted_split(SimpleNamespace(config=None)) is None
