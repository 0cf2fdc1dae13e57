"""The runs that use torch.distributed's own parallel APIs (scripts/record_torch_runs.py),
linked with their job.yaml (``conventions: {framework: torch}``): the ledger row by row."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import pipeline
from pipeline.link.runner import link
from tests.cpu_gloo import (
    ACT,
    BLOCK,
    DATA,
    EMBED,
    FP32,
    HEAD,
    PARAMS,
    ingested,
    linked,
    linked_as_torch,
)

_ROW = ("parallel_dim", "op", "phase", "status", "predicted_calls", "predicted_message_bytes",
        "calls", "message_bytes")  # fmt: skip


def _ledger(run: str, dataset: Path, step: int = 2) -> list[tuple]:
    """The ledger of ``run``'s step ``step`` (both ranks), ordered."""
    ds = linked(run, dataset)
    return ds.sql(f"SELECT {', '.join(_ROW)} FROM ledger WHERE step = {step} ORDER BY ALL").rows()


def test_pipelining_1f1b_matches_every_item(tmp_path: Path) -> None:
    """Schedule1F1B, 2 stages, 4 micro-batches of [4, 32, 64] fp32: per rank 4 sends and 4
    recvs, forward activations and backward gradients, every one an item."""
    assert _ledger("pp_1f1b", tmp_path / "ds") == [
        ("pp", "recv", "backward", "matched", 4, ACT, 4, ACT),
        ("pp", "recv", "forward", "matched", 4, ACT, 4, ACT),
        ("pp", "send", "backward", "matched", 4, ACT, 4, ACT),
        ("pp", "send", "forward", "matched", 4, ACT, 4, ACT),
    ]


def test_dtensor_tp_matches_with_separate_qkv(tmp_path: Path) -> None:
    """DTensor's functional all-reduces (``_c10d_functional::all_reduce``) are recognised and
    labelled tp. Forward: RowwiseParallel's output all-reduce on O and FC2, as Megatron's g
    (2 layers x 2 x 2 ranks). Backward: ColwiseParallel makes each of Q, K, V and FC1
    replicate its input on its own, so each input gradient is all-reduced on its own: 4 per
    layer where Megatron's f (one before the fused QKV, one before FC1) issues 2; the
    job.yaml says so (``separate_qkv: true``)."""
    assert _ledger("tp_dtensor", tmp_path / "ds") == [
        ("tp", "all_reduce", "backward", "matched", 16, ACT, 16, ACT),
        ("tp", "all_reduce", "forward", "matched", 8, ACT, 8, ACT),
    ]


def test_ddp_on_4_ranks_matches_its_one_bucket(tmp_path: Path) -> None:
    """DDP over 4 ranks, no loss report: one bucket of every gradient (under PyTorch's 1 MiB
    first bucket), one all-reduce per rank and step."""
    assert _ledger("ddp4", tmp_path / "ds") == [
        ("dp", "all_reduce", "backward", "matched", 4, PARAMS * FP32, 4, PARAMS * FP32),
    ]


ROOT = EMBED + HEAD  # FSDP1's root unit: what the blocks' units leave (embedding and head)


def test_fsdp1_matches_every_item(tmp_path: Path) -> None:
    """FSDP1 with a unit per block and the root holding the embedding and head
    (``fsdp_root_unit: true``): the blocks' units gathered forward and backward, the root
    once (FSDP1 keeps it unsharded from forward to backward), and every unit's gradient
    reduce-scattered (``c10d::_reduce_scatter_base_``, which gloo runs as a
    ``gloo:all_reduce`` of the whole unit: the bytes are the whole unit's)."""
    assert _ledger("fsdp1", tmp_path / "ds") == [
        ("dp", "all_gather", "backward", "matched", 4, BLOCK * FP32, 4, BLOCK * FP32),
        ("dp", "all_gather", "forward", "matched", 2, ROOT * FP32, 2, ROOT * FP32),
        ("dp", "all_gather", "forward", "matched", 4, BLOCK * FP32, 4, BLOCK * FP32),
        ("dp", "reduce_scatter", "backward", "matched", 2, ROOT * FP32, 2, ROOT * FP32),
        ("dp", "reduce_scatter", "backward", "matched", 4, BLOCK * FP32, 4, BLOCK * FP32),
    ]


def test_fsdp1_without_its_root_unit_names_the_items(tmp_path: Path) -> None:
    """Linked with ``framework: torch`` alone, the model predicts an embedding and a head
    unit, each re-gathered backward: the root's gather and reduce-scatter are those items
    resized (the same bytes: parameters wrapped otherwise), the head's missing, the
    re-gathers missing."""
    ds = linked_as_torch("fsdp1", tmp_path)
    rows = ds.sql(
        "SELECT op, phase, status, predicted_message_bytes, message_bytes, reason FROM ledger "
        "WHERE step = 2 AND status <> 'matched' ORDER BY ALL"
    ).rows()
    units = "the same bytes in other calls: parameters wrapped in other units"
    units += " (conventions.fsdp_root_unit)"
    assert rows == [
        ("all_gather", "backward", "missing", HEAD * FP32, None, None),
        ("all_gather", "backward", "missing", EMBED * FP32, None, None),
        ("all_gather", "forward", "missing", HEAD * FP32, None, units),
        ("all_gather", "forward", "size differs", EMBED * FP32, ROOT * FP32, units),
        ("reduce_scatter", "backward", "missing", HEAD * FP32, None, units),
        ("reduce_scatter", "backward", "size differs", EMBED * FP32, ROOT * FP32, units),
    ]


#: The 4-rank runs, ledger rows of step 2 over the 4 ranks. tp_dtensor4: per rank and layer
#: 2 output all-reduces forward (O, FC2) and 4 input-gradient all-reduces backward (Q, K, V,
#: FC1); pp_1f1b4 (4 stages, 4 micro-batches): 3 stage boundaries, each crossed by 4
#: activations forward and 4 gradients backward; fsdp1_4: as fsdp1, over 4 ranks.
FOUR_RANKS = {
    "tp_dtensor4": [
        ("tp", "all_reduce", "backward", "matched", 32, ACT, 32, ACT),
        ("tp", "all_reduce", "forward", "matched", 16, ACT, 16, ACT),
    ],
    "pp_1f1b4": [
        ("pp", op, phase, "matched", 12, ACT, 12, ACT)
        for op in ("recv", "send")
        for phase in ("backward", "forward")
    ],
    "fsdp1_4": [
        ("dp", "all_gather", "backward", "matched", 8, BLOCK * FP32, 8, BLOCK * FP32),
        ("dp", "all_gather", "forward", "matched", 4, ROOT * FP32, 4, ROOT * FP32),
        ("dp", "all_gather", "forward", "matched", 8, BLOCK * FP32, 8, BLOCK * FP32),
        ("dp", "reduce_scatter", "backward", "matched", 4, ROOT * FP32, 4, ROOT * FP32),
        ("dp", "reduce_scatter", "backward", "matched", 8, BLOCK * FP32, 8, BLOCK * FP32),
    ],
}


@pytest.mark.parametrize("run", sorted(FOUR_RANKS))
def test_four_rank_runs_match_row_by_row(tmp_path: Path, run: str) -> None:
    """DTensor TP, pipelining's 1F1B and FSDP1 over 4 ranks (a world-sized TP group, 4
    stages, a world-sized FSDP group): every item matched in both profiled steps, every call
    of a step in an item, each dimension labelled from the evidence."""
    assert _ledger(run, tmp_path / "ds") == FOUR_RANKS[run]
    ds = pipeline.open(tmp_path / "ds")
    assert set(ds.sql("SELECT status FROM ledger")["status"]) == {"matched"}
    observed = ds.sql(
        "SELECT count(*) FROM collectives WHERE source = 'kineto' AND step IS NOT NULL"
    ).item()
    assert ds.sql("SELECT sum(calls) FROM ledger").item() == observed


#: ddp_bucket's buckets (bucket_cap_mb=0.1: 104,857 bytes, 26,214 fp32 elements, the first
#: bucket too), the gradients whole in reverse registration order, a bucket closed once it
#: reaches the cap: LM head, final norm and block 1's FC2 (16,384 + 128 + 64 + 16,384);
#: block 1's FC1 to K (256 + 16,384 + 128 + 64 + 4,096 + 2 x 4,160); block 1's Q and first
#: norm and block 0's MLP (4,160 + 128 + 16,448 + 16,640); the rest (35,328).
BUCKETS = (32_960, 29_248, 37_376, 35_328)


def test_ddp_bucket_cap_caps_the_first_bucket_too(tmp_path: Path) -> None:
    """DDP with ``bucket_cap_mb=0.1`` (``ddp_bucket_mb: 0.1``): PyTorch drops its 1 MiB first
    bucket when the cap is given, so every bucket closes at 0.1 MiB: 4 buckets per rank, each
    matched (with a 1 MiB first bucket the model would give one bucket of every gradient)."""
    assert sum(BUCKETS) == PARAMS
    assert _ledger("ddp_bucket", tmp_path / "ds") == [
        ("dp", "all_reduce", "backward", "matched", 2, b * FP32, 2, b * FP32)
        for b in sorted(BUCKETS)
    ]
    assert _per_rank_differences(pipeline.open(tmp_path / "ds")) == []


def test_ddp_buckets_without_the_cap_name_the_key(tmp_path: Path) -> None:
    """The same run linked with ``framework: torch`` alone: the model's one bucket (under
    1 MiB) against 4 observed, the same bytes: each row names the key that sets the cap."""
    ds = linked_as_torch("ddp_bucket", tmp_path)
    rows = ds.sql(
        "SELECT status, predicted_message_bytes, message_bytes, reason FROM ledger "
        "WHERE step = 2 ORDER BY message_bytes DESC"
    ).rows()
    why = "the same bytes in other calls: gradient buckets cut elsewhere"
    why += " (conventions.ddp_bucket_mb)"
    big = max(BUCKETS) * FP32
    assert rows == [("size differs", PARAMS * FP32, big, why)] + [
        ("unpredicted", None, b * FP32, why) for b in sorted(BUCKETS, reverse=True)[1:]
    ]


#: The linear biases of one block: Q, K, V and O (the attention's own o_bias), FC1 and FC2
BLOCK_BIASES = 3 * 64 + 64 + 256 + 64


def test_ddp_without_linear_biases_matches(tmp_path: Path) -> None:
    """No linear biases (``linear_bias: none``): one bucket of every gradient, the biases of
    both blocks left out."""
    size = (PARAMS - 2 * BLOCK_BIASES) * FP32
    assert _ledger("ddp_nobias", tmp_path / "ds") == [
        ("dp", "all_reduce", "backward", "matched", 2, size, 2, size),
    ]
    assert _per_rank_differences(pipeline.open(tmp_path / "ds")) == []


def test_ddp_without_linear_biases_names_the_key(tmp_path: Path) -> None:
    """Linked without ``linear_bias``, the model gives the biases: the bucket differs by
    their bytes (under 1%, which alone would read as buckets cut elsewhere), and the reason
    names the key that gives the observed bytes."""
    config = yaml.safe_load((DATA / "ddp_nobias" / "job.yaml").read_text())
    del config["model"]["linear_bias"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    ds = ingested("ddp_nobias", tmp_path / "ds")
    link(tmp_path / "ds", config=tmp_path / "job.yaml")
    rows = ds.sql(
        "SELECT status, predicted_message_bytes, message_bytes, reason FROM ledger WHERE step = 2"
    ).rows()
    why = "the linear layers' biases: the bytes match model.linear_bias: none"
    assert rows == [("size differs", PARAMS * FP32, (PARAMS - 2 * BLOCK_BIASES) * FP32, why)]


def _per_rank_differences(ds: pipeline.Dataset, step: int = 2) -> list[tuple]:
    """(rank, dimension, op, phase, message bytes, observed calls, predicted calls) of every
    rank's kind of call whose count differs from the model's for that rank: none when each
    rank's own calls match its own items."""
    return ds.sql(f"""
        WITH seen AS (
            SELECT l.rank, coalesce(l.parallel_dim, 'unknown') AS parallel_dim, c.op,
                   coalesce(l.phase, 'other') AS phase, l.bytes, count(*) AS calls
            FROM collective_links l
            JOIN collectives c USING (job, rank, source, file_id, collective_id)
            WHERE l.source = 'kineto' AND l.step = {step} AND l.bytes IS NOT NULL
            GROUP BY ALL),
        model AS (
            SELECT rank, parallel_dim, op, phase, bytes // calls AS bytes, sum(calls) AS calls
            FROM predictions GROUP BY ALL)
        SELECT rank, parallel_dim, op, phase, bytes, s.calls AS seen, m.calls AS predicted
        FROM seen s FULL JOIN model m USING (rank, parallel_dim, op, phase, bytes)
        WHERE s.calls IS DISTINCT FROM m.calls ORDER BY ALL""").rows()


#: HSDP's units: embedding, the two blocks, the head (the root holds no parameters)
HSDP_UNITS = {"embed": EMBED, "block": BLOCK, "head": HEAD}


def test_hsdp_matches_every_item_per_rank(tmp_path: Path) -> None:
    """FSDP2 over a 2 x 2 mesh (``mesh: {dp_replicate: 2, dp_shard: 2}``): each unit
    gathered in its shard group forward and backward, its gradient reduce-scattered there
    (gloo: an all_reduce of the whole unit) and the half it keeps all-reduced across the
    replicate group; every item matched, on each of the 4 ranks."""
    rows = []
    for unit in sorted(HSDP_UNITS.values()):
        n = 8 if unit == BLOCK else 4  # 2 blocks; 4 ranks
        rows += [
            ("dp", "all_gather", "backward", "matched", n, unit * FP32, n, unit * FP32),
            ("dp", "all_gather", "forward", "matched", n, unit * FP32, n, unit * FP32),
            ("dp", "all_reduce", "backward", "matched", n, unit * 2, n, unit * 2),
            ("dp", "reduce_scatter", "backward", "matched", n, unit * FP32, n, unit * FP32),
        ]
    assert _ledger("hsdp", tmp_path / "ds") == sorted(rows)
    ds = pipeline.open(tmp_path / "ds")
    assert _per_rank_differences(ds) == []
    assert set(ds.sql("SELECT ranks FROM ledger")["ranks"]) == {4}


def test_hsdp_groups_are_dp_by_their_names(tmp_path: Path) -> None:
    """Without a job.yaml, the shard groups ({0,1}, {2,3}: consecutive ranks, which alone
    read as tp) and the replicate groups ({0,2}, {1,3}) are dp by their DeviceMesh names
    (``mesh_dp_shard``, ``mesh_dp_replicate``)."""
    ds = ingested("hsdp", tmp_path / "ds")
    link(tmp_path / "ds")
    dims = ds.sql(
        "SELECT ranks, parallel_dim, dim_source FROM communicator_dims WHERE nranks = 2 "
        "ORDER BY ranks"
    ).rows()
    assert dims == [
        ([0, 1], "dp", "name"), ([0, 2], "dp", "name"), ([1, 3], "dp", "name"),
        ([2, 3], "dp", "name"),
    ]  # fmt: skip
    assert ds.sql("SELECT count(*) FROM collective_links WHERE parallel_dim = 'tp'").item() == 0


def test_hsdp_without_its_mesh_names_no_tp(tmp_path: Path) -> None:
    """Linked as plain FSDP over 4 ranks (``dp: 4``, no mesh): the gathers and
    reduce-scatters are those of FSDP, the replicate group's all-reduces unpredicted, named
    by the mesh that predicts them, and dp (the job has no tensor parallelism), never tp."""
    config = yaml.safe_load((DATA / "hsdp" / "job.yaml").read_text())
    config["parallel"] = {"dp": 4, "fsdp": True, "world_size": 4}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    ds = ingested("hsdp", tmp_path / "ds")
    link(tmp_path / "ds", config=tmp_path / "job.yaml")
    rows = ds.sql(
        "SELECT DISTINCT parallel_dim, op, status, reason FROM ledger WHERE status <> 'matched'"
    ).rows()
    why = "HSDP's replicate groups: the bytes match parallel.mesh: {replicate: 2, shard: 2}"
    assert rows == [("dp", "all_reduce", "unpredicted", why)]
    assert ds.sql("SELECT count(*) FROM collective_links WHERE parallel_dim = 'tp'").item() == 0


def test_interleaved_1f1b_phases_come_from_the_schedule(tmp_path: Path) -> None:
    """ScheduleInterleaved1F1B, 4 stages on 2 ranks (0 and 2 on rank 0, 1 and 3 on rank 1),
    2 micro-batches: every send of rank 0 goes to rank 1, forward (stages 0 -> 1, 2 -> 3)
    and backward (2 -> 1) alike, so the direction of the peer cannot give the phase; the
    schedule's ``PP:<stage>SEND_F<mb>`` names do. Per rank: rank 0 sends 4 activations and
    2 gradients and receives 2 activations and 4 gradients; rank 1 the reverse; every row
    over both ranks."""
    assert _ledger("pp_interleaved", tmp_path / "ds") == [
        ("pp", op, phase, "matched", 6, ACT, 6, ACT)
        for op in ("recv", "send")
        for phase in ("backward", "forward")
    ]
    ds = pipeline.open(tmp_path / "ds")
    assert _per_rank_differences(ds) == []
    assert set(ds.sql("SELECT ranks FROM ledger")["ranks"]) == {2}
    per_rank = ds.sql(
        "SELECT l.rank, c.op, l.phase, count(*) FROM collective_links l "
        "JOIN collectives c USING (job, rank, source, file_id, collective_id) "
        "WHERE l.step = 2 AND l.source = 'kineto' GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert per_rank == [
        (0, "recv", "backward", 4), (0, "recv", "forward", 2),
        (0, "send", "backward", 2), (0, "send", "forward", 4),
        (1, "recv", "backward", 2), (1, "recv", "forward", 4),
        (1, "send", "backward", 4), (1, "send", "forward", 2),
    ]  # fmt: skip


def test_dtensor_sequence_parallel_matches_every_item(tmp_path: Path) -> None:
    """DTensor TP + SP (``SequenceParallel`` on the LayerNorms, gathers before attention, MLP
    and the whole LM head), per rank and step: forward 5 all_gathers (2 a layer, the head's)
    and 4 reduce_scatters (O and FC2); backward the transposes alone: 4 all_gathers of the
    scatters' gradients and the embedding output's (cut into sequence shards forward,
    locally), 4 reduce_scatters of the gathers' (the head's gradient is whole: cut locally);
    no re-gather, as DTensor keeps the gathered input. In the optimizer each of the 10
    LayerNorm tensors (h = 64 fp32) is all-reduced 3 times: its partial gradient in
    ``_foreach_lerp_`` and twice in ``_foreach_addcmul_``."""
    norm = 64 * FP32
    assert _ledger("tp_sp", tmp_path / "ds") == [
        ("tp", "all_gather", "backward", "matched", 10, ACT, 10, ACT),
        ("tp", "all_gather", "forward", "matched", 10, ACT, 10, ACT),
        ("tp", "all_reduce", "optimizer", "matched", 60, norm, 60, norm),
        ("tp", "reduce_scatter", "backward", "matched", 8, ACT, 8, ACT),
        ("tp", "reduce_scatter", "forward", "matched", 8, ACT, 8, ACT),
    ]
    assert _per_rank_differences(pipeline.open(tmp_path / "ds")) == []


def test_sequence_parallel_as_megatron_names_the_framework(tmp_path: Path) -> None:
    """The same run linked without ``framework: torch``: Megatron's SP (re-gathers backward,
    one all-reduce of the norm gradients, vocab-parallel cross entropy) differs in every
    row but the forward gathers, and each such row names the key whose value gives the
    observed bytes."""
    config = yaml.safe_load((DATA / "tp_sp" / "job.yaml").read_text())
    del config["conventions"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    ds = ingested("tp_sp", tmp_path / "ds")
    link(tmp_path / "ds", config=tmp_path / "job.yaml")
    reasons = ds.sql(
        "SELECT DISTINCT reason FROM ledger WHERE step = 2 AND status <> 'matched'"
    ).rows()
    assert reasons == [("what the framework issues: the bytes match conventions.framework: torch",)]


def test_interleaved_1f1b_without_vpp_names_the_key(tmp_path: Path) -> None:
    """Linked without ``vpp: 2``, the model gives each rank one stage: half the sends and
    receives of the first and last ranks' loop; the rows that differ name the key."""
    config = yaml.safe_load((DATA / "pp_interleaved" / "job.yaml").read_text())
    del config["parallel"]["vpp"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    ds = ingested("pp_interleaved", tmp_path / "ds")
    link(tmp_path / "ds", config=tmp_path / "job.yaml")
    rows = ds.sql(
        "SELECT DISTINCT status, reason FROM ledger WHERE step = 2 AND status <> 'matched'"
    ).rows()
    assert rows == [("calls differ", "the stages per rank: the bytes match parallel.vpp: 2")]
