"""MoE as DeepSeek runs it: DeepEP's kernels, which record no size, under DualPipe's chunk
annotations (training) or two overlapped micro-batches (serving).

The rules: dispatch and combine are all-to-alls of the expert-parallel dimension, in the
phase and layer their chunk annotation (or module scope) gives; ``notify_dispatch`` and
``cached_notify`` are metadata exchanges (op ``notify``); ``get_dispatch_layout`` is local
work, no collective; with a job.yaml a sizeless exchange takes its predicted item's size,
marked ``estimated`` in collective_links, the ledger, collective_instances and the wire.
Tested on the project's own traces (``tests/data/deepep``, scripts/make_deepep_traces.py)
and on DeepSeek's public profile."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

import pipeline
from pipeline.dataset.handle import Dataset
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.model.config import load_job
from pipeline.report.context import open_context
from pipeline.report.ledger import section as ledger_section
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT / "tests/data/deepep"
# the synthetic jobs: top-2 of 4 experts, T = 1 x 32 tokens a micro-batch, h = 64; dispatch
# in FP8, combine in BF16: M = k·T·h·e
DISPATCH, COMBINE = 2 * 32 * 64 * 1, 2 * 32 * 64 * 2

CALLS = """
SELECT c.rank, c.op, l.phase, l.layer, l.parallel_dim, l.bytes, l.size_source,
       regexp_extract(c.op_name, '::(\\w+)<', 1) AS kernel, c.start_ns
FROM collectives c JOIN collective_links l USING (job, rank, source, file_id, collective_id)
ORDER BY c.rank, c.start_ns
"""


def _linked(tmp_path_factory, name: str, config: Path | None) -> Dataset:
    dataset = tmp_path_factory.mktemp(name) / "ds"
    summary = ingest([DATA / name], dataset, job=name, jobs=1)
    assert not summary.errors
    link(dataset, config=config)
    return pipeline.open(dataset)


@pytest.fixture(scope="module")
def train(tmp_path_factory) -> Dataset:
    return _linked(tmp_path_factory, "train", DATA / "train/job.yaml")


@pytest.fixture(scope="module")
def serve(tmp_path_factory) -> Dataset:
    return _linked(tmp_path_factory, "serve", DATA / "serve/job.yaml")


def _calls(ds: Dataset) -> list[dict]:
    return ds.sql(CALLS).to_dicts()


def test_train_chunks_give_phase_layer_and_ep(train):
    calls = _calls(train)
    assert len(calls) == 4 * 16  # 4 ranks: 8 exchanges and 8 metadata exchanges each
    assert {c["parallel_dim"] for c in calls} == {"ep"}
    rank0 = [c for c in calls if c["rank"] == 0]
    # per layer: combine(B) runs the cached dispatch (towards the experts), dispatch(F) the
    # dispatch, dispatch(B) and combine(F) the combine; the backward chunk walks the layers
    # from the last
    exchanges = [(c["kernel"], c["phase"], c["layer"]) for c in rank0 if c["op"] == "all_to_all"]
    assert exchanges == [
        ("dispatch", "backward", "layers.1/combine"),
        ("dispatch", "forward", "layers.0/dispatch"),
        ("combine", "backward", "layers.1/dispatch"),
        ("combine", "forward", "layers.0/combine"),
        ("dispatch", "backward", "layers.0/combine"),
        ("dispatch", "forward", "layers.1/dispatch"),
        ("combine", "backward", "layers.0/dispatch"),
        ("combine", "forward", "layers.1/combine"),
    ]
    notify = [c["kernel"] for c in rank0 if c["op"] == "notify"]
    assert sorted(notify) == ["cached_notify"] * 6 + ["notify_dispatch"] * 2


def test_the_layout_kernel_is_no_collective(train):
    kinds = train.sql(
        "SELECT kind, count(*) FROM kernels WHERE name LIKE '%get_dispatch_layout%' GROUP BY 1"
    ).rows()
    assert kinds == [("other", 8)]  # 2 a rank
    assert train.sql(
        "SELECT count(*) FROM collectives WHERE op_name LIKE '%get_dispatch_layout%'"
    ).rows() == [(0,)]


def test_train_sizes_are_the_models_marked_estimated(train):
    calls = _calls(train)
    sized = {(c["kernel"], c["bytes"], c["size_source"]) for c in calls if c["op"] == "all_to_all"}
    # towards the experts (dispatch kernels, forward and backward) in FP8, back in BF16
    assert sized == {("dispatch", DISPATCH, "estimated"), ("combine", COMBINE, "estimated")}
    assert {(c["bytes"], c["size_source"]) for c in calls if c["op"] == "notify"} == {
        (None, "none")
    }
    ledger = train.sql(
        "SELECT parallel_dim, phase, purpose, status, calls, message_bytes, size_source "
        "FROM ledger ORDER BY parallel_dim DESC, phase DESC, message_bytes"
    ).rows()
    assert ledger[:4] == [
        ("ep", "forward", "expert dispatch", "matched", 8, DISPATCH, "estimated"),
        ("ep", "forward", "expert combine", "matched", 8, COMBINE, "estimated"),
        ("ep", "backward", "combine gradients (towards the experts)", "matched", 8, DISPATCH,
         "estimated"),
        ("ep", "backward", "dispatch gradients (back from the experts)", "matched", 8, COMBINE,
         "estimated"),
    ]  # fmt: skip
    # the traces hold no gradient reduction: the model's DP items are missing, nothing else
    assert {(r[0], r[3]) for r in ledger[4:]} == {("dp", "missing")}


def test_train_wire_spreads_the_estimates_over_the_ep_group(train):
    rows = train.sql(
        "SELECT phase, bool_and(estimated), sum(bytes), sum(bytes) FILTER (inter_host) "
        "FROM wire GROUP BY phase ORDER BY phase"
    ).rows()
    # per phase 2 instances of each size over 4 ranks: (n - 1)·M in all, pairwise M/n; each
    # rank has 2 of its 3 peers on the other host
    per_phase = 3 * 2 * (DISPATCH + COMBINE)
    assert rows == [
        ("backward", True, per_phase, per_phase * 2 / 3),
        ("forward", True, per_phase, per_phase * 2 / 3),
    ]
    instances = train.sql(
        "SELECT DISTINCT comm, size_source FROM collective_instances WHERE op = 'all_to_all'"
    ).rows()
    assert instances == [("job.yaml:ep:0", "estimated")]
    per_dim = train.sql(
        "SELECT parallel_dim, sum(bytes), sum(estimated_bytes) FROM token_wire "
        "WHERE calls > 0 GROUP BY 1"
    ).rows()
    assert per_dim == [("ep", 4 * 2 * 2 * (DISPATCH + COMBINE), 4 * 2 * 2 * (DISPATCH + COMBINE))]


def test_without_job_yaml_the_sizes_stay_unknown(tmp_path_factory):
    ds = _linked(tmp_path_factory, "train", None)
    calls = _calls(ds)
    assert {c["parallel_dim"] for c in calls} == {"ep"}
    assert {(c["bytes"], c["size_source"]) for c in calls} == {(None, "none")}
    assert ds.sql("SELECT count(*) FROM wire").rows() == [(0,)]


def test_without_annotations_deepep_is_still_ep(tmp_path):
    # the train traces with every chunk annotation renamed: no layer places the calls
    folder = tmp_path / "plain"
    folder.mkdir()
    for trace in sorted((DATA / "train").glob("*.json.gz")):
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        for event in doc["traceEvents"]:
            if re.fullmatch(r"\w+\([FBW]\)", str(event.get("name"))):
                event["name"] = "region"
        (folder / trace.name).write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    dataset = tmp_path / "ds"
    assert not ingest([folder], dataset, job="plain", jobs=1).errors
    link(dataset)
    calls = _calls(Dataset(dataset))
    assert {(c["op"], c["parallel_dim"], c["phase"], c["layer"]) for c in calls} == {
        ("all_to_all", "ep", "other", None), ("notify", "ep", "other", None)
    }  # fmt: skip


def test_serving_micro_batches_overlap_and_follow_the_same_rules(serve):
    calls = _calls(serve)
    assert {c["phase"] for c in calls} == {"forward"}
    assert {c["parallel_dim"] for c in calls} == {"ep"}
    rank0 = [c for c in calls if c["rank"] == 0 and c["op"] == "all_to_all"]
    # two micro-batches x 2 layers, each a dispatch and a combine, in its layer's MoE scope
    assert [c["layer"] for c in rank0] == [
        f"DeepseekV3DecoderLayer_{i}/DeepseekV3MoE_{i}" for i in (0, 0, 0, 0, 1, 1, 1, 1)
    ]
    assert {(c["kernel"], c["bytes"]) for c in rank0} == {
        ("dispatch", DISPATCH),
        ("combine", COMBINE),
    }
    # a dispatch or combine runs while an attention kernel of the other micro-batch does
    overlaps = serve.sql(
        "SELECT count(*) FROM kernels a JOIN kernels c USING (job, rank) "
        "WHERE a.kind = 'attention' AND c.kind = 'comm' AND c.name LIKE '%::dispatch<%' "
        "AND c.start_ns < a.end_ns AND a.start_ns < c.end_ns"
    ).rows()[0][0]
    assert overlaps > 0
    ledger = serve.sql(
        "SELECT purpose, status, calls, message_bytes, size_source FROM ledger ORDER BY 4"
    ).rows()
    # forward_only: the serving step's items, 2 micro-batches x 2 layers x 4 ranks each
    assert ledger == [
        ("expert dispatch", "matched", 16, DISPATCH, "estimated"),
        ("expert combine", "matched", 16, COMBINE, "estimated"),
    ]


def test_the_report_says_which_ledger_bytes_are_estimates(train, tmp_path):
    ctx = open_context(train.path, config=load_job(DATA / "train/job.yaml"))
    sec = ledger_section(ctx)
    notes = [b.text for b in sec.blocks if type(b).__name__ == "Note"]
    per_step = 4 * 2 * 2 * (DISPATCH + COMBINE)  # 4 ranks, 2 layers, 2 phases
    assert any(t.startswith("Estimated: ") and "(ep)" in t for t in notes), notes
    dims = ctx.query("ledger_dims").to_dicts()
    assert {d["parallel_dim"]: d["estimated_bytes"] for d in dims} == {"ep": per_step, "dp": 0}


def test_the_report_pages_say_which_figures_are_estimates(train, tmp_path):
    from pipeline.report import build_report

    out = tmp_path / "r.html"
    build_report(train.path, config=DATA / "train/job.yaml", output=out)
    page = out.read_text()
    # every exchange of the step: 4 ranks, 2 layers, forward and backward: 196,608 B
    assert "Estimated per step: ep 197 kB of the observed bytes" in page  # bytes section
    assert "Estimated: 197 kB per step of the observed bytes (ep)" in page  # ledger section
    assert "the trace recorded no size" in page  # the wire section
