"""The ledger: observed collectives against the model's items, row by row. The sample job
(Megatron conventions) matches every item; one change to its job.yaml shows up as the items
it changes; the recorded CPU/gloo runs with their job.yaml match item by item."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import pipeline
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT
from tests.cpu_gloo import (
    A2A,
    ACT,
    BLOCK,
    CE,
    DATA,
    EMBED,
    FP32,
    HEAD,
    LOSS,
    MOE_DENSE,
    PARAMS,
    TP_BLOCK,
    TP_EMBED,
    TP_HEAD,
    counts,
    ingested,
    linked,
    linked_as_torch,
)

_ROW = ("parallel_dim", "op", "phase", "status", "predicted_calls", "predicted_message_bytes",
        "calls", "message_bytes")  # fmt: skip


def _ledger(dataset: Path, step: int = 2) -> list[tuple]:
    columns = ", ".join(_ROW)
    return (
        pipeline.open(dataset)
        .sql(f"SELECT {columns} FROM ledger WHERE step = {step} ORDER BY ALL")
        .rows()
    )


def test_the_sample_job_matches_every_item(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    statuses = ds.sql("SELECT DISTINCT status FROM ledger")["status"].to_list()
    assert statuses == ["matched"]
    # every predicted item of the traced ranks, and every observed call of a step, is a row
    per_step = ds.sql(
        "SELECT step, sum(predicted_bytes) AS predicted, sum(bytes) AS observed "
        "FROM ledger GROUP BY step ORDER BY step"
    )
    assert per_step["predicted"].to_list() == per_step["observed"].to_list()
    observed = ds.sql(
        "SELECT sum(bytes) FROM collective_links JOIN primary_sources USING (job, rank, source) "
        "WHERE step IS NOT NULL"
    ).item()
    assert per_step["observed"].sum() == observed
    # (8 ranks: TP 2 x PP 2 x DP 2; 4 micro-batches; 2 layers per stage)
    assert ("tp", "all_reduce", "forward", "matched", 144, 131_072, 144, 131_072) in _ledger(
        linked_sample
    )


def _relinked(linked_sample: Path, tmp_path: Path, **batch_or_parallel: dict) -> Path:
    """The linked sample copied and linked again with one change to its job.yaml."""
    config = yaml.safe_load((REPO_ROOT / "sample_traces" / "job.yaml").read_text())
    for section, values in batch_or_parallel.items():
        config[section].update(values)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    dataset = tmp_path / "ds"
    shutil.copytree(linked_sample, dataset)
    link(dataset, config=tmp_path / "job.yaml")
    return dataset


def test_a_larger_micro_batch_resizes_the_activation_items(
    linked_sample: Path, tmp_path: Path
) -> None:
    """micro_batch 2 -> 4 (global batch kept): half the micro-batches, messages twice the
    size. The TP and PP items are resized, with the observed bytes equal to the predicted:
    the ledger says so; the gradient buckets do not change."""
    rows = _ledger(_relinked(linked_sample, tmp_path, batch={"micro_batch": 4}))
    assert ("tp", "all_reduce", "forward", "size differs", 72, 262_144, 144, 131_072) in rows
    assert ("pp", "send", "forward", "size differs", 8, 262_144, 16, 131_072) in rows
    resized = [r for r in rows if r[3] != "matched"]
    assert {r[0] for r in resized} == {"tp", "pp"}
    reasons = pipeline.open(tmp_path / "ds").sql(
        "SELECT DISTINCT reason FROM ledger WHERE status = 'size differs' AND parallel_dim = 'pp'"
    )
    assert reasons["reason"].to_list() == [
        "the same bytes in calls of another size: check micro_batch"
    ]
    assert [r for r in rows if r[0] == "dp"] == [r for r in _ledger(linked_sample) if r[0] == "dp"]


def test_sequence_parallel_turns_the_all_reduces_into_gathers_and_scatters(
    linked_sample: Path, tmp_path: Path
) -> None:
    """sequence_parallel: true predicts all-gathers and reduce-scatters where the run did
    all-reduces: those items are missing, the all-reduces unpredicted."""
    dataset = _relinked(linked_sample, tmp_path, parallel={"sequence_parallel": True})
    rows = _ledger(dataset)
    tp = {(r[1], r[3]) for r in rows if r[0] == "tp"}
    assert ("all_gather", "missing") in tp and ("reduce_scatter", "missing") in tp
    assert ("all_reduce", "unpredicted") in tp
    assert all(r[3] == "matched" for r in rows if r[0] == "dp")


#: The payload bytes of one rank's profiled step in each recorded run, from the shapes in
#: tests/data/cpu_gloo/README.md (fp32: 4 B an element), and its ranks. Every call counts its
#: message: a send and its recv each, an all-gather its gathered unit, gloo's reduce-scatter
#: the all-reduce of the whole unit it runs.
RECORDED_STEP_BYTES = {
    # the gradient bucket, 134,912 elements; the loss report, 2
    "ddp": (2, 134_912 * 4 + 2 * 4),
    # each unit gathered forward and again backward (the whole model, 134,912 elements,
    # twice); its gradient reduced whole once; the loss report
    "fsdp": (2, 2 * 134_912 * 4 + 134_912 * 4 + 2 * 4),
    # 10 all-reduces of [4, 32, 64] and 3 of [4, 32]
    "tp": (2, 10 * 4 * 32 * 64 * 4 + 3 * 4 * 32 * 4),
    # as tp, plus one rank's TP shard (68,928) and the loss report over DP
    "tp_dp": (4, 10 * 4 * 32 * 64 * 4 + 3 * 4 * 32 * 4 + 68_928 * 4 + 2 * 4),
    # 2 sends and 2 recvs of [4, 32, 64]
    "pp": (2, 4 * 4 * 32 * 64 * 4),
    # 8 all-to-alls of [128, 64]; the dense parameters, 69,248; the loss report
    "moe": (2, 8 * 128 * 64 * 4 + 69_248 * 4 + 2 * 4),
}


@pytest.mark.parametrize("run", list(RECORDED_STEP_BYTES))
def test_recorded_runs_match_item_by_item(tmp_path: Path, run: str) -> None:
    ds = linked(run, tmp_path / "ds")
    ledger = ds.sql("SELECT * FROM ledger")
    assert set(ledger["status"]) == {"matched"}
    ranks, step_bytes = RECORDED_STEP_BYTES[run]
    # every rank's 2 profiled steps, observed and predicted
    assert ledger["bytes"].sum() == ledger["predicted_bytes"].sum() == ranks * 2 * step_bytes


#: The 4-rank runs, ledger rows of step 2 over the 4 ranks (parallel_dim, op, phase, status,
#: predicted calls and size, observed calls and size). tp4: per rank 2 all-reduces per layer
#: forward and backward, the embedding's forward and the LM head's backward, 3
#: cross-entropy reductions; pp4 (4 stages, 2 micro-batches): 3 stage boundaries, each
#: crossed by 2 activations forward and 2 gradients backward; moe4 (ep 4, one expert a
#: rank): dispatch and combine per layer forward and backward, DDP's one bucket of the
#: dense parameters and the loss report; fsdp4 (FSDP2 over 4 ranks, a unit for the
#: embedding, each block and the head): each unit gathered forward and again backward and
#: its gradient reduce-scattered (gloo: an all-reduce of the whole unit), and the loss report.
FOUR_RANKS = {
    "tp4": [
        ("tp", "all_reduce", "backward", "matched", 20, ACT, 20, ACT),
        ("tp", "all_reduce", "forward", "matched", 12, CE, 12, CE),
        ("tp", "all_reduce", "forward", "matched", 20, ACT, 20, ACT),
    ],
    "pp4": [
        ("pp", op, phase, "matched", 6, ACT, 6, ACT)
        for op in ("recv", "send")
        for phase in ("backward", "forward")
    ],
    "moe4": [
        ("dp", "all_reduce", "backward", "matched", 4, MOE_DENSE * FP32, 4, MOE_DENSE * FP32),
        ("dp", "all_reduce", "other", "matched", 4, LOSS, 4, LOSS),
        ("ep", "all_to_all", "backward", "matched", 16, A2A, 16, A2A),
        ("ep", "all_to_all", "forward", "matched", 16, A2A, 16, A2A),
    ],
    "fsdp4": sorted(
        [
            *(
                ("dp", op, phase, "matched", 4 * n, unit * FP32, 4 * n, unit * FP32)
                for op, phase in [
                    ("all_gather", "forward"),
                    ("all_gather", "backward"),
                    ("reduce_scatter", "backward"),
                ]
                for unit, n in ((EMBED, 1), (BLOCK, 2), (HEAD, 1))
            ),
            ("dp", "all_reduce", "other", "matched", 4, LOSS, 4, LOSS),
        ]
    ),
}


@pytest.mark.parametrize("run", sorted(FOUR_RANKS))
def test_four_rank_runs_match_row_by_row(tmp_path: Path, run: str) -> None:
    """TP, PP, MoE and FSDP2 over 4 ranks (a world-sized TP group, 4 stages, ep = dp = 4 on
    the same ranks): every item matched, each dimension labelled from the evidence."""
    ds = linked(run, tmp_path / "ds")
    assert _ledger(tmp_path / "ds") == FOUR_RANKS[run]
    assert set(ds.sql("SELECT status FROM ledger")["status"]) == {"matched"}


#: tp_fsdp, step 2 over its 4 ranks: the TP items of tp_dp, and FSDP2 over each TP rank's
#: DP group with that rank's shards as units (embedding, 2 blocks, head)
TP_FSDP = sorted(
    [
        ("tp", "all_reduce", "backward", "matched", 20, ACT, 20, ACT),
        ("tp", "all_reduce", "forward", "matched", 12, CE, 12, CE),
        ("tp", "all_reduce", "forward", "matched", 20, ACT, 20, ACT),
        ("dp", "all_reduce", "other", "matched", 4, LOSS, 4, LOSS),
        *(
            ("dp", op, phase, "matched", 4 * n, unit * FP32, 4 * n, unit * FP32)
            for op, phase in [
                ("all_gather", "forward"),
                ("all_gather", "backward"),
                ("reduce_scatter", "backward"),
            ]
            for unit, n in ((TP_EMBED, 1), (TP_BLOCK, 2), (TP_HEAD, 1))
        ),
    ]
)


def test_tp_by_fsdp_pairs_every_call_with_its_group(tmp_path: Path) -> None:
    """TP 2 x FSDP2 2 (gloo): a rank's trace names none of its groups, so each call takes its
    group from the flight recorder, by time, sizes agreeing; the gradient reduce-scatters too,
    which gloo runs (and the recorder names) as all-reduces of the whole unit. Every item
    matched, TP and DP told apart."""
    ds = linked("tp_fsdp", tmp_path / "ds")
    assert _ledger(tmp_path / "ds") == TP_FSDP
    assert set(ds.sql("SELECT status FROM ledger")["status"]) == {"matched"}
    calls = ds.sql(
        "SELECT c.op, m.source, m.sizes_agree, l.instance_comm FROM collectives c "
        "JOIN collective_links l USING (rank, source, file_id, collective_id) "
        "LEFT JOIN collective_matches m ON m.primary_file_id = c.file_id "
        "AND m.primary_collective_id = c.collective_id "
        "WHERE c.source = 'kineto' AND c.step IS NOT NULL AND c.rank = 0"
    )
    # rank 0: TP group {0,1} is pg:1, its DP group {0,2} pg:3
    assert counts(calls, "op", "source", "sizes_agree", "instance_comm") == {
        ("all_reduce", "flight_recorder", True, "pg:1"): 26,
        ("all_reduce", "flight_recorder", True, "pg:3"): 2,
        ("all_gather", "flight_recorder", True, "pg:3"): 16,
        ("reduce_scatter", "flight_recorder", True, "pg:3"): 8,
    }


def test_torch_conventions_on_the_recorded_ddp_run(tmp_path: Path) -> None:
    """The recorded DDP run with framework: torch: its one gradient bucket (under 1 MiB)
    matches PyTorch's first-bucket rule, and the loss all-reduce its script adds (a Megatron
    habit plain torch does not have) is unpredicted, in phase other."""
    ds = linked_as_torch("ddp", tmp_path)
    rows = ds.sql(
        "SELECT status, purpose, phase, predicted_calls, calls, message_bytes FROM ledger "
        "WHERE step = 2 ORDER BY status"
    ).rows()
    assert rows == [
        ("matched", "first gradient bucket", "backward", 2, 2, PARAMS * FP32),
        ("unpredicted", None, "other", 0, 2, LOSS),
    ]


def test_a_tie_of_layers_goes_to_the_first_name(tmp_path: Path) -> None:
    """FSDP's two blocks gather the same size forward: the row's layer is the first name,
    whatever order the calls come in, so every link of the dataset gives the same row."""
    ds = linked("fsdp", tmp_path / "ds")
    rows = ds.sql(
        "SELECT DISTINCT layer FROM ledger WHERE op = 'all_gather' AND phase = 'forward' "
        "AND layer LIKE '%Block%'"
    )
    assert rows["layer"].to_list() == ["FSDPTinyGPT_0/FSDPBlock_0"]


def test_a_job_yaml_of_another_world_size_is_named_by_its_path(tmp_path: Path) -> None:
    from pipeline.errors import ConfigError

    ingested("ddp", tmp_path / "ds")  # 2 ranks; the sample job.yaml lays out 8
    config = REPO_ROOT / "sample_traces" / "job.yaml"
    with pytest.raises(ConfigError) as err:
        link(tmp_path / "ds", config=config)
    assert str(err.value).startswith(f"{config}: the layout gives 8 ranks but job 'ddp'")
    assert link(tmp_path / "ds", config=DATA / "ddp" / "job.yaml").config == str(
        DATA / "ddp" / "job.yaml"
    )
