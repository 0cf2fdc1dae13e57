"""The real CPU/gloo runs kept in tests/data/cpu_gloo (recorded by scripts/record_cpu_runs.py):
where they are, the model's shapes, the message sizes derived from them by hand, and ingest
(and link) of one run through the public entry points."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import yaml

import pipeline
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT

if TYPE_CHECKING:
    from pipeline.dataset.handle import Dataset  # the type pipeline.open returns

DATA = REPO_ROOT / "tests" / "data" / "cpu_gloo"
#: ranks of each run
WORLD = {"ddp": 2, "fsdp": 2, "tp": 2, "tp_dp": 4, "pp": 2, "moe": 2, "straggler": 2}
#: the profiled steps (schedule wait=1, warmup=1, active=2: ProfilerStep#2 and #3)
STEPS = [2, 3]

# The model (scripts/record_cpu_runs.py): fp32, GPT-style, biases everywhere but the LM head.
V, H, F, L, S, B = 256, 64, 256, 2, 32, 4
FP32 = 4
EXPERTS, CAPACITY = 4, 32
TP = 2

EMBED = V * H + S * H  # word + learned position embeddings
BLOCK = 2 * (2 * H) + 4 * (H * H + H) + (H * F + F) + (F * H + H)  # 2 LN, q k v o, fc1, fc2
HEAD = 2 * H + V * H  # final LN + untied LM head
PARAMS = EMBED + L * BLOCK + HEAD
# one TP rank's shard: vocab-parallel embedding and head, column-parallel q k v fc1 (weights
# and biases), row-parallel o fc2 (weights; their biases whole)
TP_EMBED = V // TP * H + S * H
TP_BLOCK = 2 * (2 * H) + 3 * (H * H // TP + H // TP) + (H * H // TP + H)
TP_BLOCK += (H * F // TP + F // TP) + (F * H // TP + H)
TP_HEAD = 2 * H + V // TP * H
TP_PARAMS = TP_EMBED + L * TP_BLOCK + TP_HEAD
# MoE: every MLP is EXPERTS experts of the same shape behind a router (H x EXPERTS, no bias);
# DDP reduces all but the experts
MOE_DENSE = EMBED + L * (2 * (2 * H) + 4 * (H * H + H) + H * EXPERTS) + HEAD

ACT = B * S * H * FP32  # one micro-batch's activations [b, s, h]
CE = B * S * FP32  # one vocab-parallel cross-entropy reduction [b, s]
A2A = EXPERTS * CAPACITY * H * FP32  # one all_to_all buffer: every expert's slots
LOSS = 2 * FP32  # the loss report [loss sum, tokens]


def ingested(run: str, dataset: Path) -> Dataset:
    """``run`` ingested into ``dataset`` (one process), with no errors."""
    summary = ingest([DATA / run], dataset, job=run, jobs=1)
    assert not summary.errors, summary.errors
    return pipeline.open(dataset)


def linked(run: str, dataset: Path) -> Dataset:
    """``run`` ingested and linked with its job.yaml."""
    ds = ingested(run, dataset)
    link(dataset, config=DATA / run / "job.yaml")
    return ds


def linked_as_torch(run: str, folder: Path) -> Dataset:
    """``run`` ingested into ``folder/ds`` and linked with its job.yaml, its conventions
    replaced by ``framework: torch`` alone (written to ``folder/job.yaml``)."""
    config = yaml.safe_load((DATA / run / "job.yaml").read_text())
    config["conventions"] = {"framework": "torch"}
    (folder / "job.yaml").write_text(yaml.safe_dump(config))
    ds = ingested(run, folder / "ds")
    link(folder / "ds", config=folder / "job.yaml")
    return ds


def counts(frame: pl.DataFrame, *keys: str) -> dict[tuple, int]:
    """Rows of ``frame`` per value of ``keys``."""
    grouped = frame.group_by(list(keys)).len()
    return {tuple(r[k] for k in keys): r["len"] for r in grouped.iter_rows(named=True)}
