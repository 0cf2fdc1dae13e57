"""The alpha-beta time of each item: NCCL's step counts by hand, a fit recovering the alpha and
beta a generated nccl-tests table was written with, and the recorded nccl-tests tables."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.ingest.nccl.nccl_tests import parse
from pipeline.model.config import Network, build_job
from pipeline.model.predict import predict
from pipeline.model.timing import call_time, choose, fit, steps, with_fits


def test_steps_by_hand() -> None:
    # NCCL src/graph/tuning.cc (2.18 to 2.21): ring all-reduce 2(n-1) steps, 2g of them
    # between nodes (never more than all); all-gather n-1, g-1; tree all-reduce 2(n/g-1)
    # inside and 2·log2(g) between nodes
    assert steps("all_reduce", 16, 2, "ring", intra=False) == (26, 4)
    assert steps("all_reduce", 2, 2, "ring", intra=False) == (0, 2)
    assert steps("all_gather", 16, 2, "ring", intra=False) == (14, 1)
    assert steps("all_reduce", 64, 8, "tree", intra=False) == (14, 6)
    assert steps("all_reduce", 8, 1, "nvls", intra=True) == (1, 0)
    assert steps("all_to_all", 8, 1, "nvls", intra=True) == (7, 0)
    assert steps("send", 2, 2, "ring", intra=False) == (0, 1)


def test_call_time_by_hand() -> None:
    net = Network(intra_node_GBps=100, inter_node_GBps=10, efficiency=0.5)
    # ring all-reduce of 8 ranks on one node, W = 1.4 MB: 8.4 + 14·3.4 = 56 µs + 1.4e6/50e9
    t, how = call_time(net, "all_reduce", 8, 8, wire=1.4e6, intra=1.4e6, inter=0, message=8e5)
    assert how == "model" and t == pytest.approx(56e-6 + 28e-6)
    # all-to-all over 2 nodes of 4: 7 steps, 4 between nodes; inside and across at once
    t, _ = call_time(net, "all_to_all", 8, 4, wire=7e5, intra=3e5, inter=4e5, message=8e5)
    assert t == pytest.approx((8.4 + 3 * 3.4 + 4 * 14.0) * 1e-6 + max(3e5 / 50e9, 4e5 / 5e9))


def test_hierarchical_and_the_fastest_algorithm_by_hand() -> None:
    # 16 ranks on 2 nodes of 8, M = 8 MB; links at 50% of 100 GB/s inside, 10 GB/s across
    net = Network(intra_node_GBps=100, inter_node_GBps=10, efficiency=0.5)
    m = 8e6
    # two-level: reduce-scatter inside (7 steps), all-reduce across the 2 nodes (2 steps), all-
    # gather inside (7 steps), 3 launches; 2·7/8·M = 14 MB inside, 2·(1/2)·M/8 = 1 MB across,
    # one phase after the other
    algo, w, intra, inter, t, how = _pick(net, "hierarchical", m)
    assert (algo, intra, inter, w) == ("hierarchical", 14e6, 1e6, 15e6)
    lat = 3 * 8.4 + 14 * 3.4 + 2 * 14.0
    assert t == pytest.approx(lat * 1e-6 + 14e6 / 50e9 + 1e6 / 5e9) and how == "model"
    # ring: 30 steps, 4 between nodes; W = 15 MB, W/8 of it across, both parts at once
    algo, w, intra, inter, t_ring, _ = _pick(net, "ring", m)
    assert (w, inter) == (15e6, 15e6 / 8)
    assert t_ring == pytest.approx((8.4 + 26 * 3.4 + 4 * 14.0) * 1e-6 + 1.875e6 / 5e9)
    # tree: 2·7 steps inside, 2·log2(2) between, the ring's bytes at 0.9 of its bandwidth
    _, _, _, _, t_tree, _ = _pick(net, "tree", m)
    assert t_tree == pytest.approx((8.4 + 14 * 3.4 + 2 * 14.0) * 1e-6 + 1.875e6 / 5e9 / 0.9)
    # auto takes the fastest: tree at 8 MB (its lower latency), ring at 64 MB (its bandwidth)
    assert t_tree < t_ring < t
    assert _pick(net, "auto", m)[0] == "tree"
    assert _pick(net, "auto", 8 * m)[0] == "ring"
    # an NVLink 10x slower makes the two-level scheme, which crosses with fewer bytes, fastest
    slow = Network(intra_node_GBps=1000, inter_node_GBps=10, efficiency=0.5)
    assert _pick(slow, "auto", 8 * m)[0] == "hierarchical"
    # on one node the hierarchical choice falls back to the ring; all-to-all stays pairwise
    assert choose(Network(algorithm="hierarchical"), "all_reduce", m, 8, 8)[0] == "ring"
    assert choose(Network(algorithm="auto"), "all_to_all", m, 16, 8)[0] == "pairwise"


def _pick(net: Network, algorithm: str, m: float) -> tuple:
    import dataclasses

    return choose(dataclasses.replace(net, algorithm=algorithm), "all_reduce", m, 16, 8)


def test_rows_show_the_algorithm_picked() -> None:
    # llama2-7b on 2 nodes of 8: DP 16 gradient all-reduces cross nodes, TP 8 stays inside
    keys = {"model.preset": "llama2-7b", "parallel.tp": 8, "parallel.dp": 2,
            "batch.global_batch": 16, "network.algorithm": ["ring", "hierarchical"]}  # fmt: skip
    rows = predict(build_job(None, keys), 0).rows
    tp = {r.algorithm for r in rows if r.parallel_dim == "tp"}
    dp = {r.algorithm for r in rows if r.parallel_dim == "dp" and r.op == "all_reduce"}
    assert tp == {"ring"}  # one node: no two-level form
    # DP pairs are one rank a node: a ring over nodes, no two-level form either
    assert dp == {"ring"}
    keys |= {"parallel.tp": 1, "parallel.dp": 16, "network.algorithm": "hierarchical"}
    rows = predict(build_job(None, keys), 0).rows
    big = [r for r in rows if r.parallel_dim == "dp" and r.op == "all_reduce" and r.calls]
    assert {r.algorithm for r in big if r.message > 8} == {"hierarchical"}
    for r in big:
        if r.message > 8:
            assert r.intra_node_bytes == pytest.approx(r.calls * 2 * 7 / 8 * r.message)
            assert r.inter_node_bytes == pytest.approx(r.calls * r.message / 8)


def _table(alpha_us: float, busbw: float, n: int = 8) -> str:
    """An nccl-tests all_reduce_perf output whose times are exactly α + W/busbw."""
    head = (
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5\n"
        "#\n# Using devices\n"
        + "".join(f"#  Rank {r} Group 0 Pid 1 on host device {r} [0x1] GPU\n" for r in range(n))
        + "#\n#       size         count      type   redop    root     time   algbw   busbw"
        " #wrong     time   algbw   busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)\n"
    )
    rows = []
    for p in range(3, 28):
        size = 2**p
        t = alpha_us + 2 * (n - 1) / n * size / (busbw * 1e3)
        alg = size / t / 1e3
        half = f"{t:10.2f} {alg:7.2f} {alg * 2 * (n - 1) / n:7.2f}      0"
        rows.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {half} {half}\n")
    return head + "".join(rows) + "# Avg bus bandwidth    : 1.0\n"


def test_fit_recovers_the_generated_alpha_and_beta(tmp_path: Path) -> None:
    # the reference: the α = 23 µs and busbw = 180 GB/s the table was written with (times
    # rounded to 0.01 µs, as nccl-tests prints them)
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(_table(23.0, 180.0))
    table = pl.from_arrow(parse(path).tables["bandwidth_tests"])
    (f,) = fit(table, path.name)
    assert (f.op, f.nranks, f.points) == ("all_reduce", 8, 25)
    assert f.alpha_us == pytest.approx(23.0, rel=0.01)
    assert f.busbw_GBps == pytest.approx(180.0, rel=0.01)
    # predict takes the fitted figures for the all-reduces of an 8-rank TP group
    job = with_fits(build_job(None, {"model.preset": "llama2-7b", "parallel.tp": 8,
                                     "batch.global_batch": 8}), [path])  # fmt: skip
    fitted = [r for r in predict(job, 0).rows if r.op == "all_reduce" and r.group_size == 8]
    assert fitted
    for r in fitted:
        m = r.bytes / r.calls
        want = r.calls * (23e-6 + 2 * 7 / 8 * m / 180e9)
        assert r.timing == "fit" and r.est_time_s == pytest.approx(want, rel=0.02)


def test_cli_says_which_figures(tmp_path: Path) -> None:
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(_table(10.0, 100.0))
    args = ["predict", "--model", "llama2-7b", "--tp", "8", "--global-batch", "8"]
    out = CliRunner().invoke(cli, [*args, "--nccl-tests", str(path)])
    assert out.exit_code == 0, out.output
    assert "all_reduce fitted to all_reduce_perf.txt (8 ranks, 25 sizes)" in out.output
    doc = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).output)
    assert doc["timing"]["fitted"] == [] and doc["timing"]["model"]["efficiency"] == 0.8


def test_exposed_communication_by_hand() -> None:
    from types import SimpleNamespace as Item

    from pipeline.model.timing import exposed

    rows = [
        Item(parallel_dim="tp", phase="forward", calls=10, est_time_s=1.0),  # exposed whole
        Item(parallel_dim="dp", phase="backward", calls=4, est_time_s=2.0),  # buckets, 0.5 each
        Item(parallel_dim="dp", phase="forward", calls=2, est_time_s=3.0),  # FSDP gathers
        Item(parallel_dim="dp", phase="optimizer", calls=1, est_time_s=0.25),  # exposed whole
    ]
    # forward 2 s hides 3 s of gathers but 1: max(3 - 2, 1.5 per call) = 1.5; backward 4 s
    # hides the 2 s of buckets but the last one, 0.5 s
    got = exposed(rows, forward_s=2.0, backward_s=4.0)
    assert got == {"comm_s": 6.25, "exposed_s": 1.0 + 0.25 + 1.5 + 0.5}
    # no compute hides nothing
    assert exposed(rows, 0.0, 0.0)["exposed_s"] == 6.25


def test_cli_exposed_step() -> None:
    # llama2-7b, DP 16 over 2 nodes: at 100 TFLOP/s the step computes 6·N·B·s / 16 / 1e14
    args = ["predict", "--model", "llama2-7b", "--dp", "16", "--global-batch", "16",
            "--peak-tflops", "100", "--format", "json"]  # fmt: skip
    doc = json.loads(CliRunner().invoke(cli, args).output)
    step = doc["timing"]["step"]
    assert step["compute_at_peak_s"] == pytest.approx(
        doc["compute"]["hardware_flops"] / 16 / 100e12
    )
    # the gradient buckets (backward, DP) hide behind the backward but the last bucket
    dp = [r for r in doc["rows"] if r["parallel_dim"] == "dp" and r["phase"] == "backward"]
    rest = sum(r["est_time_s"] for r in doc["rows"] if r not in dp)
    last = max(r["est_time_s"] / r["calls"] for r in dp)
    hidden = sum(r["est_time_s"] for r in dp)
    bwd = step["compute_at_peak_s"] * 2 / 3
    assert step["exposed_s"] == pytest.approx(rest + max(hidden - bwd, last))
    assert step["comm_s"] == pytest.approx(sum(r["est_time_s"] for r in doc["rows"]))


def test_point_to_point_takes_a_fitted_collective() -> None:
    from pipeline.model.timing import Fitted, fitted_for

    fits = (Fitted("all_reduce", 2, 550.0, 0.275, 2, "run"), Fitted("all_gather", 8, 5, 90, 4, "t"))
    # a send of 2 ranks without its own fit: the nearest rank count of any fitted op
    assert fitted_for(fits, "send", 2) == fits[0]
    assert fitted_for(fits, "all_to_all", 2) is None  # (collectives keep their own)
    net = Network(fitted=fits)
    t, how = call_time(net, "send", 2, 1, wire=1e6, intra=0, inter=1e6, message=1e6)
    assert how == "fit" and t == pytest.approx(550e-6 + 1e6 / 0.275e9)
