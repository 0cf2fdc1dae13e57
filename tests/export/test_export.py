"""tokenwire export on the sample job, checked against the linked tables it was made from."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import polars as pl

import pipeline
from pipeline.export import Scope, export_timeline
from tests.conftest import edit_parts
from tests.export.conftest import copy_dataset
from tests.export.trace_format import SCHEMA, enclosing, improper_nesting, slices_by_track


def _x(trace: dict, cat: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def _ns(trace: dict, us: float) -> int:
    """An event time (µs from the origin) back to ns on the aligned clock."""
    return trace["otherData"]["origin_ns"] + round(us * 1000)


def _export(dataset: Path, tmp_path: Path, name: str = "t.json", **scope) -> dict:
    out = tmp_path / name
    export_timeline(dataset, output=out, scope=Scope(**scope))
    opener = gzip.open if name.endswith(".gz") else open
    with opener(out, "rb") as f:
        return json.load(f)


def test_trace_follows_the_event_format(whole: dict) -> None:
    jsonschema.validate(whole, SCHEMA)
    assert improper_nesting(whole["traceEvents"]) == []
    assert whole["displayTimeUnit"] == "ns"


def test_every_collective_once_per_rank(whole: dict, linked: Path) -> None:
    # the sample's profiler traces time every rank's calls: the source each rank exports
    calls = pipeline.open(linked).sql(
        "SELECT rank, comm, seq, op, parallel_dim, layer, phase, step, bytes, "
        "start_ns - o.offset_ns AS start_ns, dur_ns "
        "FROM collectives_linked JOIN clock_offsets o USING (job, rank) WHERE source = 'kineto'"
    )
    events = _x(whole, "collective")
    got = Counter(
        (e["pid"], e["args"]["comm"], e["args"]["seq"], e["args"]["op"], _ns(whole, e["ts"]))
        for e in events
    )
    want = Counter(calls.select("rank", "comm", "seq", "op", "start_ns").iter_rows())
    assert got == want and max(got.values()) == 1
    assert len(events) == calls.height == 824
    by_key = {(r["rank"], r["comm"], r["seq"]): r for r in calls.iter_rows(named=True)}
    for e in events:
        row, args = by_key[(e["pid"], e["args"]["comm"], e["args"]["seq"])], e["args"]
        assert e["name"] == f"{row['op']} {row['parallel_dim']}"
        assert (args["phase"], args["step"], args["bytes"]) == (
            row["phase"],
            row["step"],
            row["bytes"],
        )
        assert args.get("layer") == row["layer"]
        assert round(e["dur"] * 1000) == row["dur_ns"]


def test_collective_args_carry_tokens_and_waits(whole: dict, linked: Path) -> None:
    ds = pipeline.open(linked)
    waits = ds.sql("SELECT rank, comm, seq, wait_ns, transfer_ns, late_rank FROM collective_waits")
    tokens = dict(((r, s), t) for r, s, t in ds.sql("SELECT rank, step, tokens FROM steps").rows())
    by_key = {(r[0], r[1], r[2]): r[3:] for r in waits.rows()}
    for e in _x(whole, "collective"):
        a = e["args"]
        assert (a["wait_ns"], a["transfer_ns"], a["late_rank"]) == by_key[
            (e["pid"], a["instance_comm"], a["instance_seq"])
        ]
        assert a["wait_ns"] + a["transfer_ns"] == round(e["dur"] * 1000)
        assert a.get("tokens") == tokens[(e["pid"], a["step"])]
    # first pipeline stage: 1024 tokens a step; the last stage's ranks have no embedding input
    assert {a["args"].get("tokens") for a in _x(whole, "collective")} == {1024, None}


def test_flows_connect_the_ranks_of_one_instance(whole: dict, linked: Path) -> None:
    events = whole["traceEvents"]
    tracks = slices_by_track(events)
    flows = defaultdict(dict)
    for e in events:
        if e["ph"] in "sf":
            flows[e["id"]][e["ph"]] = e
    chains = defaultdict(set)
    for pair in flows.values():
        assert pair["f"]["bp"] == "e" and pair["s"]["ts"] <= pair["f"]["ts"]
        start, finish = enclosing(tracks, pair["s"]), enclosing(tracks, pair["f"])
        assert start["cat"] == finish["cat"] == "collective"
        key = (start["args"]["instance_comm"], start["args"]["instance_seq"])
        assert key == (finish["args"]["instance_comm"], finish["args"]["instance_seq"])
        assert start["pid"] != finish["pid"] and start["name"] == pair["s"]["name"]
        chains[key] |= {start["pid"], finish["pid"]}
    instances = pipeline.open(linked).sql(
        "SELECT comm, seq, ranks_seen FROM collective_instances "
        "WHERE source = 'kineto' AND ranks_seen > 1"
    )
    # a chain per instance through every rank that saw it: ranks_seen - 1 arrows
    assert {k: len(v) for k, v in chains.items()} == {(c, s): n for c, s, n in instances.rows()}
    assert len(flows) == sum(n - 1 for n in instances["ranks_seen"])
    # in arrival order: the last arrow ends on the rank that arrived last
    late = {(e["args"]["instance_comm"], e["args"]["instance_seq"]): e["args"]["late_rank"]
            for e in _x(whole, "collective")}  # fmt: skip
    last = {}
    for pair in sorted(flows.values(), key=lambda p: p["f"]["ts"]):
        finish = enclosing(tracks, pair["f"])
        last[(finish["args"]["instance_comm"], finish["args"]["instance_seq"])] = pair["f"]["pid"]
    assert last == {k: late[k] for k in last}


def test_clock_offsets_are_applied(linked: Path, tmp_path: Path) -> None:
    before = _export(linked, tmp_path, "before.json")
    shifted = copy_dataset(linked, tmp_path)
    edit_parts(
        shifted,
        "clock_offsets",
        lambda f: f.with_columns(
            offset_ns=pl.when(pl.col("rank") == 3).then(5_000_000).otherwise(pl.col("offset_ns"))
        ),
    )
    after = _export(shifted, tmp_path, "after.json")

    def starts(trace: dict, rank: int) -> list[int]:
        return sorted(_ns(trace, e["ts"]) for e in trace["traceEvents"]
                      if e["ph"] == "X" and e["pid"] == rank)  # fmt: skip

    assert [a - b for a, b in zip(starts(before, 3), starts(after, 3), strict=True)] == [
        5_000_000
    ] * len(starts(before, 3))
    assert starts(before, 2) == starts(after, 2)


def test_steps_and_phases_are_ranges_on_their_own_tracks(whole: dict, linked: Path) -> None:
    steps = pipeline.open(linked).sql("SELECT rank, step, start_ns, dur_ns FROM steps")
    got = {(e["pid"], e["args"]["step"], _ns(whole, e["ts"]), round(e["dur"] * 1000))
           for e in _x(whole, "step")}  # fmt: skip
    assert got == set(steps.rows())
    assert {e["name"] for e in _x(whole, "step")} == {"ProfilerStep#2", "ProfilerStep#3"}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in whole["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}  # fmt: skip
    assert {names[(e["pid"], e["tid"])] for e in _x(whole, "step")} == {"steps"}
    assert {names[(e["pid"], e["tid"])] for e in _x(whole, "phase")} == {"phases"}
    phases = _x(whole, "phase")
    linked_phases = pipeline.open(linked).sql("SELECT DISTINCT phase FROM collective_links")
    assert (
        {e["name"] for e in phases}
        == set(linked_phases["phase"])
        == {"forward", "backward", "other"}
    )
    # every collective lies in a phase range of its rank with its step and phase
    by_rank = defaultdict(list)
    for p in phases:
        by_rank[p["pid"]].append(p)
    assert sum(p["args"]["collectives"] for p in phases) == 824
    for c in _x(whole, "collective"):
        step, phase = c["args"]["step"], c["args"]["phase"]
        assert any(
            (p["args"]["step"], p["name"]) == (step, phase)
            and p["ts"] <= c["ts"] <= p["ts"] + p["dur"]
            for p in by_rank[c["pid"]]
        )


def test_processes_and_tracks_are_named(whole: dict) -> None:
    meta = [e for e in whole["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {r: f"rank {r} (node0)" for r in range(8)}
    threads = {e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {"steps", "phases", "stream 20", "stream 28", "stream 32"}


def test_kernels_and_ops_by_flag(linked: Path, tmp_path: Path) -> None:
    trace = _export(linked, tmp_path, "k.json.gz", kernels=True, ops=True)
    ds = pipeline.open(linked)
    kernels = ds.sql("SELECT count(*) FROM kernels WHERE source = 'kineto' AND kind <> 'comm'")
    ops = ds.sql("SELECT count(*) FROM ops WHERE source = 'kineto'")
    kinds = Counter(e["cat"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert kinds["kernel"] + kinds["gpu_memcpy"] + kinds["gpu_memset"] == kernels.item()
    assert (
        sum(
            n
            for k, n in kinds.items()
            if k not in ("kernel", "gpu_memcpy", "gpu_memset", "collective", "step", "phase")
        )
        == ops.item()
    )
    jsonschema.validate(trace, SCHEMA)
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"thread 48211", "stream 7", "annotations on stream 32"} <= threads
    # kernels, collectives and host ranges nest on every track; the profiler's GPU annotations,
    # on tracks of their own, overlap as the sample's traces recorded them
    bad = improper_nesting(trace["traceEvents"])
    assert bad and all(a["cat"] == b["cat"] == "gpu_user_annotation" for a, b in bad)


def test_step_scope(linked: Path, tmp_path: Path, whole: dict) -> None:
    trace = _export(linked, tmp_path, steps=(3, 3))
    assert {e["args"]["step"] for e in trace["traceEvents"] if e["ph"] == "X"} == {3}
    want = [e for e in _x(whole, "collective") if e["args"]["step"] == 3]
    assert len(_x(trace, "collective")) == len(want) == 412


def test_ranks_scope(linked: Path, tmp_path: Path) -> None:
    trace = _export(linked, tmp_path, ranks=(0, 1, 6))
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1, 6}
    tracks = slices_by_track(trace["traceEvents"])
    for e in trace["traceEvents"]:
        if e["ph"] in "sf":
            assert enclosing(tracks, e)["cat"] == "collective"
    n = pipeline.open(linked).sql(
        "SELECT count(*) FROM collectives WHERE source = 'kineto' AND rank IN (0, 1, 6)"
    )
    assert len(_x(trace, "collective")) == n.item()


def test_window_scope(linked: Path, tmp_path: Path, whole: dict) -> None:
    origin = whole["otherData"]["origin_ns"]
    lo, hi = origin + 10_000_000, origin + 12_000_000
    trace = _export(linked, tmp_path, window=(lo, hi))
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            assert _ns(trace, e["ts"]) <= hi and _ns(trace, e["ts"] + e["dur"]) >= lo
    want = [e for e in whole["traceEvents"] if e["ph"] == "X"
            and _ns(whole, e["ts"]) <= hi and _ns(whole, e["ts"] + e["dur"]) >= lo]  # fmt: skip
    assert Counter(e["cat"] for e in _x(trace, "collective")) == Counter(
        e["cat"] for e in want if e["cat"] == "collective"
    )
    assert len(_x(trace, "collective")) > 0
