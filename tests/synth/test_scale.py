"""Scaled synthetic jobs: Kineto copies, NCCL debug logs and the Nsight export, parsed back."""

from __future__ import annotations

import filecmp
import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from pipeline.ingest.detect import detect
from pipeline.ingest.kineto import parse as kineto
from pipeline.ingest.nccl import log as nccl_log
from pipeline.ingest.nsys import parse as nsys
from pipeline.synth import JobSpec, write_job
from pipeline.synth.job import DTYPE, process_groups
from pipeline.synth.scale import (
    period_ns,
    rank_state,
    schedule_job,
    simulated_job,
    write_scaled_job,
)

SPEC = JobSpec()  # the bundled sample: TP2 x PP2 x DP2, 2 steps
REPEATS = 3


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    out = tmp_path_factory.mktemp("scaled")
    return write_scaled_job(SPEC, out, repeats=REPEATS, formats=["kineto", "nccl", "nsys"])


def _raw_events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def _nccl_kernels(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]


def test_one_copy_is_the_plain_generator_byte_for_byte(tmp_path: Path) -> None:
    plain = write_job(SPEC, tmp_path / "plain")
    scaled = write_scaled_job(SPEC, tmp_path / "scaled", repeats=1)["kineto"]
    assert [p.name for p in plain] == [p.name for p in scaled]
    for a, b in zip(plain, scaled, strict=True):
        assert filecmp.cmp(a, b, shallow=False)


def test_copies_repeat_steps_with_fresh_ids(job: dict[str, list[Path]], tmp_path: Path) -> None:
    one = {p.name: p for p in write_job(SPEC, tmp_path / "one")}
    for path in job["kineto"]:
        events = _raw_events(path)
        base = _raw_events(one[path.name])
        x = Counter(e["cat"] for e in events if e.get("ph") == "X" and e.get("cat") != "Trace")
        x1 = Counter(e["cat"] for e in base if e.get("ph") == "X" and e.get("cat") != "Trace")
        assert x == Counter({k: REPEATS * n for k, n in x1.items()})
        steps = [e["name"] for e in events if e["name"].startswith("ProfilerStep#")]
        assert len(steps) == len(set(steps)) == REPEATS * SPEC.steps
        corr = [e["args"]["correlation"] for e in events if e.get("cat") == "kernel"]
        assert len(corr) == len(set(corr))
        ext = [e["args"]["External id"] for e in events if e.get("cat") == "cpu_op"]
        assert len(ext) == len(set(ext))
        # parsed: every step whole, collectives numbered without repeats per communicator
        result = kineto.parse(path)
        assert result.tables["steps"].num_rows == REPEATS * SPEC.steps
        comms = pl.from_arrow(result.tables["collectives"])
        assert comms.height == len(_nccl_kernels(events))
        assert comms.select(pl.struct("comm", "op", "seq").is_unique().all()).item()


def test_nccl_logs_parse_back_with_the_same_calls(job: dict[str, list[Path]]) -> None:
    traces = {int(re.match(r"rank(\d+)\.", p.name).group(1)): p for p in job["kineto"]}
    assert len(job["nccl"]) == SPEC.world
    for log in job["nccl"]:
        rank = int(re.match(r"rank(\d+)\.nccl\.log", log.name).group(1))
        assert detect(log) == "nccl_log"
        text = log.read_text()
        coll_lines = re.findall(r" NCCL INFO (\w+): opCount ", text)
        kernels = _nccl_kernels(_raw_events(traces[rank]))
        assert len(coll_lines) == len(kernels)
        result = nccl_log.parse(log)
        assert result.warnings.messages() == []
        rows = pl.from_arrow(result.tables["collectives"])
        assert rows.height == len(coll_lines)
        assert set(rows["rank"].to_list()) == {rank}
        want = Counter(e["args"]["Collective name"] for e in kernels)
        names = {
            "allreduce": "all_reduce",
            "send": "send",
            "recv": "recv",
            "broadcast": "broadcast",
        }
        assert dict(Counter(rows["op"].to_list())) == {names[k]: n for k, n in want.items()}
        init = re.findall(r"- Init COMPLETE", text)
        assert len(init) == result.tables["communicators"].num_rows


def test_nsys_export_holds_the_jobs_kernels(job: dict[str, list[Path]]) -> None:
    (export,) = job["nsys"]
    assert detect(export) == "nsys"
    result = nsys.parse(export)
    kernels = pl.from_arrow(result.tables["kernels"])
    collectives = pl.from_arrow(result.tables["collectives"])
    by_rank = dict(kernels.group_by("rank").len().iter_rows())
    comm_by_rank = dict(collectives.group_by("rank").len().iter_rows())
    for path in job["kineto"]:
        rank = int(re.match(r"rank(\d+)\.", path.name).group(1))
        events = _raw_events(path)
        assert by_rank[rank] == sum(e.get("cat") == "kernel" for e in events)
        assert comm_by_rank[rank] == len(_nccl_kernels(events))


def test_nsys_export_carries_nccl_payloads_ranks_and_communicators(
    job: dict[str, list[Path]],
) -> None:
    (export,) = job["nsys"]
    result = nsys.parse(export)
    assert result.warnings.messages() == []  # no "numbered by process order", no bare calls
    assert result.rank_source == "nccl_nvtx"
    ranks = pl.from_arrow(result.tables["ranks"])
    assert ranks["rank"].to_list() == list(range(SPEC.world))
    assert set(ranks["world_size"]) == {SPEC.world}
    # every call's bytes from its payload: count * dtype size, as the simulator issued it
    coll = pl.from_arrow(result.tables["collectives"])
    assert set(coll["size_source"]) == {"nvtx_payload"}
    _, states, _ = simulated_job(SPEC)
    for rank, state in states.items():
        mine = coll.filter(pl.col("rank") == rank)
        want = Counter((c.op, c.count * DTYPE[c.dtype][2]) for c in state.calls)
        got = Counter(mine.select("op", "bytes").iter_rows())
        assert got == Counter({k: REPEATS * n for k, n in want.items()})
    # one communicator per group of the rank, with its size, position and members
    comms = pl.from_arrow(result.tables["communicators"])
    assert set(comms["backend"]) == {"nccl"}
    for rank in range(SPEC.world):
        mine = comms.filter(pl.col("rank") == rank)
        got = {
            (n, i, tuple(r)) for n, i, r in mine.select("nranks", "rank_in_comm", "ranks").rows()
        }
        want = {
            (len(g.ranks), g.ranks.index(rank), g.ranks)
            for g in process_groups(SPEC)
            if rank in g.ranks
        }
        assert got == want
        assert set(coll.filter(pl.col("rank") == rank)["comm"]) <= set(mine["comm"])
    # a group's comm hash is the same on all its members
    assert comms.group_by("comm").agg(pl.col("ranks").n_unique())["ranks"].max() == 1


def test_nsys_export_is_deterministic(job: dict[str, list[Path]], tmp_path: Path) -> None:
    again = write_scaled_job(SPEC, tmp_path, repeats=REPEATS, formats=["nsys"])
    assert filecmp.cmp(job["nsys"][0], again["nsys"][0], shallow=False)


def test_a_rank_run_alone_does_what_it_did_in_the_whole_job() -> None:
    """The scaled writer simulates the job once without keeping events, then runs each rank
    again alone against the recorded end times: every event and NCCL call comes out the same
    as in the whole job's run (a layout other than the sample's, with a straggler)."""
    spec = JobSpec(tp=2, pp=4, dp=2, layers=4, global_batch=8, straggler_rank=5)
    groups, states, starts = simulated_job(spec)
    sched = schedule_job(spec)
    assert sched.starts == starts and sched.groups == groups
    assert sched.period == period_ns(states, starts)
    for rank, whole in states.items():
        alone = rank_state(spec, sched, rank)
        assert [e.render() for e in alone.trace.events] == [e.render() for e in whole.trace.events]
        assert alone.calls == whole.calls
        assert (alone.cpu_ns, alone.streams) == (whole.cpu_ns, whole.streams)
