"""Every collective byte has an owner (docs/link.md, the attributed_by table), each rule on
a run that needs it: the recorded CPU/gloo runs of tests/data/cpu_gloo and the sample job."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeline
from pipeline.link.runner import link
from tests.cpu_gloo import BLOCK as BLOCK_PARAMS
from tests.cpu_gloo import DATA, EMBED, FP32, HEAD, LOSS, PARAMS, ingested, linked

RUNS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
# one source per rank (the bytes token_wire and the report count)
_OWNED = """
SELECT sum(l.bytes) FILTER (WHERE l.layer IS NOT NULL), sum(l.bytes)
FROM collective_links l JOIN primary_sources USING (job, rank, source)
"""


@pytest.mark.parametrize("run", RUNS)
def test_every_byte_of_a_recorded_run_has_an_owner(run: str, tmp_path: Path) -> None:
    if (DATA / run / "job.yaml").exists():
        ds = linked(run, tmp_path / "ds")
    else:
        ds = ingested(run, tmp_path / "ds")
        link(tmp_path / "ds")
    owned, total = ds.sql(_OWNED).rows()[0]
    assert total > 0 and owned == total


def test_every_byte_of_the_sample_has_an_owner(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    owned, total = ds.sql(_OWNED).rows()[0]
    assert owned == total == 151_781_440
    # NCCL's own NVTX ranges are never layers: Nsight's calls take the profiler's owners
    fake = ds.sql("SELECT count(*) FROM collective_links WHERE layer LIKE 'nccl%'").item()
    assert fake == 0
    nsys = ds.sql(
        "SELECT count(*) FILTER (WHERE attributed_by LIKE 'matched:%'), count(*) "
        "FROM collective_links WHERE source = 'nsys'"
    ).rows()[0]
    assert nsys[0] == nsys[1] > 0


def test_sample_backward_collectives_belong_to_their_forward_module(linked_sample: Path):
    """Megatron's column-parallel backward all-reduces: the QKV and FC1 projections of every
    layer and the LM head, placed through the autograd sequence number."""
    rows = (
        pipeline.open(linked_sample)
        .sql(
            "SELECT layer_index, layer_label, count(*) FROM collective_links "
            "WHERE source = 'kineto' AND step = 2 AND phase = 'backward' "
            "AND attributed_by = 'backward_of_forward_op' GROUP BY ALL ORDER BY ALL"
        )
        .rows()
    )
    # 4 ranks a stage x 4 micro-batches; stage 1's layers are the model's layers 2 and 3
    qkv, fc1 = (
        "ParallelAttention_{0}/ColumnParallelLinear_{1}",
        "ParallelMLP_{0}/ColumnParallelLinear_{1}",
    )
    expected = [
        (layer, f"TransformerLayer_{local}/{fmt.format(local, 2 * local + k)}", 16)
        for layer in range(4)
        for local in [layer % 2]
        for k, fmt in enumerate((qkv, fc1))
    ]
    assert rows == sorted([*expected, (None, "ColumnParallelLinear_4", 16)], key=str)


def test_sample_gradient_buckets_split_over_their_layers(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    rows = ds.sql(
        "SELECT rank, layer_label, layer_index, bytes FROM gradient_bucket_layers "
        "WHERE source = 'kineto' AND step = 2 AND rank IN (0, 4) ORDER BY rank, bytes, layer_index"
    ).rows()
    # job.yaml: hidden 256, ffn 1024, tp 2, bf16 gradients; a layer's TP shard is 395,648
    # elements; stage 0 holds the word (4096 x 256) and position (128 x 256) embeddings,
    # stage 1 the final LayerNorm and the LM head's vocabulary shard
    layer = 791_296
    assert rows == [
        (0, "TransformerLayer_0", 0, layer),
        (0, "TransformerLayer_1", 1, layer),
        (0, "VocabParallelEmbedding_0", None, (4096 * 256 + 128 * 256) * 2),
        (4, "TransformerLayer_0", 2, layer),
        (4, "TransformerLayer_1", 3, layer),
        (4, "lm_head", None, (4096 * 256 + 2 * 256) * 2),
    ]
    # every bucket's rows add up to it exactly
    off = ds.sql(
        "SELECT count(*) FROM (SELECT any_value(l.bytes) AS b, sum(g.bytes) AS s "
        "FROM collective_links l LEFT JOIN gradient_bucket_layers g "
        "USING (job, rank, source, file_id, collective_id) WHERE l.layer = 'gradient_bucket' "
        "GROUP BY l.job, l.rank, l.source, l.file_id, l.collective_id) WHERE s IS DISTINCT FROM b"
    ).item()
    assert off == 0


def test_sample_loss_and_metrics_are_named(linked_sample: Path) -> None:
    rows = (
        pipeline.open(linked_sample)
        .sql(
            "SELECT layer, attributed_by, phase, parallel_dim, count(*), sum(bytes) "
            "FROM collective_links WHERE source = 'kineto' AND step = 2 "
            "AND layer IN ('loss', 'metrics') GROUP BY ALL ORDER BY ALL"
        )
        .rows()
    )
    # the vocab-parallel cross entropy's 3 fp32 [s, b] all-reduces a micro-batch on the 4
    # last-stage ranks; the loss report (2 fp32) once a step on each of them
    assert rows == [
        ("loss", "loss_op", "forward", "tp", 48, 48 * 128 * 2 * 4),
        ("metrics", "metrics", "other", "dp", 4, 4 * 8),
    ]


def test_ddp_bucket_splits_into_head_blocks_and_embedding(tmp_path: Path) -> None:
    """PyTorch DDP's one bucket carries the gradients in reverse registration order."""
    ds = linked("ddp", tmp_path / "ds")
    rows = ds.sql(
        "SELECT rank, layer, layer_index, layer_kind, bytes, attributed_by "
        "FROM gradient_bucket_layers WHERE source = 'kineto' AND step = 2 ORDER BY ALL"
    ).rows()
    block = BLOCK_PARAMS * FP32
    assert rows == [
        (r, name, index, kind, size, "bucket_plan")
        for r in (0, 1)
        for name, index, kind, size in sorted(
            [
                ("embedding", None, "embedding", EMBED * FP32),
                ("layers.0", 0, "transformer", block),
                ("layers.1", 1, "transformer", block),
                ("lm_head", None, "lm_head", HEAD * FP32),
            ]
        )
    ]
    assert sum(r[4] for r in rows) == 2 * PARAMS * FP32
    loss = ds.sql(
        "SELECT layer, bytes FROM collective_links WHERE source = 'kineto' AND step = 2 "
        "AND layer = 'metrics'"
    ).rows()
    assert loss == [("metrics", LOSS)] * 2


def test_fsdp1_reduce_scatters_and_prefetches_fall_on_their_units(tmp_path: Path) -> None:
    """FSDP1 names no unit in its ranges: the backward prefetches (block 1, then block 0)
    and the reduce-scatters (block 1, block 0, then the root) in issue order."""
    ds = linked("fsdp1", tmp_path / "ds")
    rows = ds.sql(
        "SELECT g.owner, g.layer, g.bytes FROM gradient_bucket_layers g "
        "JOIN collectives c USING (job, rank, source, file_id, collective_id) "
        "WHERE g.source = 'kineto' AND g.step = 2 AND g.rank = 0 ORDER BY c.start_ns"
    ).rows()
    block = BLOCK_PARAMS * FP32
    assert rows == [
        ("parameter_gather", "layers.1", block),
        ("parameter_gather", "layers.0", block),
        ("gradient_bucket", "layers.1", block),
        ("gradient_bucket", "layers.0", block),
        ("gradient_bucket", "root", (EMBED + HEAD) * FP32),
    ]


def test_pipeline_sends_and_receives_take_the_boundary_layer(tmp_path: Path) -> None:
    """torch.distributed.pipelining 1F1B, embedding + block 0 | block 1 + head: every
    message crosses between block 0 (stage 0's last) and block 1 (stage 1's first)."""
    ds = linked("pp_1f1b", tmp_path / "ds")
    rows = ds.sql(
        "SELECT rank, op, phase, layer, layer_index, attributed_by, count(*) "
        "FROM collectives_linked WHERE source = 'kineto' AND step = 2 GROUP BY ALL ORDER BY ALL"
    ).rows()
    assert rows == [
        (0, "recv", "backward", "_First_0/Block_0", 0, "pp_boundary", 4),
        (0, "send", "forward", "_First_0/Block_0", 0, "pp_boundary", 4),
        # (the stage's Block_0 is the model's layer 1)
        (1, "recv", "forward", "_Last_0/Block_0", 1, "pp_boundary", 4),
        (1, "send", "backward", "_Last_0/Block_0", 1, "pp_boundary", 4),
    ]
