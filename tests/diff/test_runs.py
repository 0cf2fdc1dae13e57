"""tokenwire diff on real runs recorded for it (tests/data/cpu_gloo: the same tiny GPT under
DDP, under FSDP, and under DDP at twice the micro-batch), row by row against the sizes
derived by hand in tests/cpu_gloo.py, and on the sample job against itself."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import pipeline
from pipeline.diff import VIEWS, diff_jobs
from tests.cpu_gloo import BLOCK, EMBED, FP32, HEAD, LOSS, PARAMS, B, S

RANKS = 2
GRADS = RANKS * PARAMS * FP32  # one all-reduce of every gradient, over both ranks
TOKENS = RANKS * B * S  # tokens per step (job.yaml: dp 2 x micro-batch 4 x 32)


def _rows(frame: pl.DataFrame, *keys: str) -> dict[tuple, dict]:
    return {tuple(r[k] for k in keys): r for r in frame.iter_rows(named=True)}


def _traffic(frame: pl.DataFrame) -> dict[tuple, dict]:
    return _rows(frame, "parallel_dim", "op", "phase")


@pytest.fixture(scope="module")
def ddp_fsdp(runs: dict[str, Path]):
    return diff_jobs(runs["ddp"], "ddp", "fsdp", other=runs["fsdp"])


@pytest.fixture(scope="module")
def ddp_mb8(runs: dict[str, Path]):
    return diff_jobs(runs["ddp"], "ddp", "ddp_mb8", other=runs["ddp_mb8"])


def test_ddp_to_fsdp_traffic_row_by_row(ddp_fsdp) -> None:
    rows = _traffic(ddp_fsdp.views["diff_traffic"])
    assert set(rows) == {
        ("dp", "all_reduce", "backward"),
        ("dp", "all_reduce", "other"),
        ("dp", "all_gather", "forward"),
        ("dp", "all_gather", "backward"),
        ("dp", "reduce_scatter", "backward"),
    }
    # DDP's gradient all-reduce in backward vanishes
    grads = rows["dp", "all_reduce", "backward"]
    assert grads["found"] == "a"
    assert (grads["calls_a"], grads["calls_b"]) == (RANKS, 0)
    assert (grads["bytes_a"], grads["bytes_b"], grads["bytes_change"]) == (GRADS, 0, -GRADS)
    assert grads["bytes_per_token_a"] == GRADS / TOKENS and grads["bytes_per_token_b"] == 0
    assert grads["time_ns_a"] > 0 and grads["time_ns_b"] is None
    # FSDP gathers every unit's parameters in forward and again in backward (4 units a rank)
    for phase in ("forward", "backward"):
        gather = rows["dp", "all_gather", phase]
        assert gather["found"] == "b"
        assert (gather["calls_a"], gather["calls_b"]) == (0, 4 * RANKS)
        assert (gather["bytes_a"], gather["bytes_b"]) == (0, GRADS)
        assert gather["time_ns_b"] > 0 and gather["wait_ns_b"] + gather["transfer_ns_b"] > 0
    # FSDP reduce-scatters every unit's gradient (which gloo runs as an all-reduce of the
    # whole unit: ingested as the reduce-scatter its c10d call was, in backward)
    scatter = rows["dp", "reduce_scatter", "backward"]
    assert scatter["found"] == "b"
    assert (scatter["calls_a"], scatter["calls_b"]) == (0, 4 * RANKS)
    assert (scatter["bytes_a"], scatter["bytes_b"]) == (0, GRADS)
    # the loss report both jobs have
    other = rows["dp", "all_reduce", "other"]
    assert other["found"] == "both"
    assert (other["calls_a"], other["calls_b"]) == (RANKS, RANKS)
    assert (other["bytes_a"], other["bytes_b"]) == (RANKS * LOSS, RANKS * LOSS)
    assert other["bytes_change"] == 0


def test_ddp_to_fsdp_gathers_per_layer(ddp_fsdp) -> None:
    layers = ddp_fsdp.views["diff_layers"].filter(
        (pl.col("op") == "all_gather") & (pl.col("phase") == "forward")
    )
    by_unit = {r["layer"].rsplit("/", 1)[-1]: r for r in layers.iter_rows(named=True)}
    assert {u: r["bytes_b"] for u, r in by_unit.items()} == {
        "FSDPEmbed_0": RANKS * EMBED * FP32,
        "FSDPBlock_0": RANKS * BLOCK * FP32,
        "FSDPBlock_1": RANKS * BLOCK * FP32,
        "FSDPHead_0": RANKS * HEAD * FP32,
    }
    assert all(r["calls_b"] == RANKS and r["found"] == "b" for r in by_unit.values())
    # the layers add up to the traffic row
    traffic = _traffic(ddp_fsdp.views["diff_traffic"])
    assert (
        sum(r["bytes_b"] for r in by_unit.values())
        == traffic["dp", "all_gather", "forward"]["bytes_b"]
    )


def test_ddp_to_fsdp_predicted_next_to_observed(ddp_fsdp) -> None:
    rows = _rows(ddp_fsdp.views["diff_predicted"], "parallel_dim", "op")
    assert set(rows) == {("dp", "all_reduce"), ("dp", "all_gather"), ("dp", "reduce_scatter")}
    reduce = rows["dp", "all_reduce"]
    assert (reduce["predicted_bytes_a"], reduce["predicted_bytes_b"]) == (
        GRADS + RANKS * LOSS,
        RANKS * LOSS,
    )
    # (gloo runs FSDP's reduce-scatter as an all-reduce of the whole unit: ingested as the
    # reduce-scatter its c10d call was, the observed change is the predicted one)
    assert reduce["predicted_change"] == reduce["observed_change"] == -GRADS
    gather = rows["dp", "all_gather"]
    assert gather["predicted_change"] == gather["observed_change"] == 2 * GRADS
    scatter = rows["dp", "reduce_scatter"]
    assert scatter["predicted_change"] == scatter["observed_change"] == GRADS


def test_ddp_to_fsdp_steps(ddp_fsdp) -> None:
    steps = _rows(ddp_fsdp.views["diff_steps"], "metric", "timeline")
    assert steps["tokens", "step"]["a"] == steps["tokens", "step"]["b"] == TOKENS
    assert steps["bytes", "step"]["a"] == GRADS + RANKS * LOSS
    assert steps["bytes", "step"]["change"] == 2 * GRADS  # gathers added, gradients as before
    assert {("step_ns", "steps"), ("compute_ns", "host"), ("idle_ns", "host"),
            ("exposed_comm_ns", "host"), ("wait_ns", "collectives"),
            ("transfer_ns", "collectives")} <= set(steps)  # fmt: skip
    for row in steps.values():
        assert row["a"] is not None and row["b"] is not None
        assert row["change"] == pytest.approx(row["b"] - row["a"])


def test_ddp_to_fsdp_ops(ddp_fsdp) -> None:
    ops = ddp_fsdp.views["diff_ops"]
    assert set(ops["kind"]) == {"cpu_op"}  # CPU runs: no kernels
    assert ops.height == 15
    change = ops["time_change_ns"].abs().to_list()
    assert change == sorted(change, reverse=True)
    for r in ops.iter_rows(named=True):
        assert r["time_change_ns"] == pytest.approx(r["time_ns_b"] - r["time_ns_a"])
        assert (r["found"] == "a") == (r["calls_b"] == 0)
        assert (r["found"] == "b") == (r["calls_a"] == 0)
    # which names each job has does not depend on timing: DDP's reducer only in A, FSDP's
    # all-gather copy-in only in B (the 15 listed are the largest changes of one recording)
    names_a = set(ddp_fsdp.a.tables["op_time"].column("name").to_pylist())
    names_b = set(ddp_fsdp.b.tables["op_time"].column("name").to_pylist())
    assert any("reducer" in n for n in names_a - names_b)
    assert "fsdp::all_gather_copy_in" in names_b - names_a


def test_micro_batch_doubles_tokens_not_gradients(ddp_mb8) -> None:
    rows = _traffic(ddp_mb8.views["diff_traffic"])
    assert set(rows) == {("dp", "all_reduce", "backward"), ("dp", "all_reduce", "other")}
    grads = rows["dp", "all_reduce", "backward"]
    assert grads["found"] == "both"
    assert (grads["calls_a"], grads["calls_b"]) == (RANKS, RANKS)
    assert (grads["bytes_a"], grads["bytes_b"], grads["bytes_change"]) == (GRADS, GRADS, 0)
    # the same bytes over twice the tokens
    assert grads["bytes_per_token_a"] == GRADS / TOKENS
    assert grads["bytes_per_token_b"] == GRADS / (2 * TOKENS)
    loss = rows["dp", "all_reduce", "other"]
    assert (loss["bytes_a"], loss["bytes_b"]) == (RANKS * LOSS, RANKS * LOSS)
    steps = _rows(ddp_mb8.views["diff_steps"], "metric", "timeline")
    assert (steps["tokens", "step"]["a"], steps["tokens", "step"]["b"]) == (TOKENS, 2 * TOKENS)
    assert steps["tokens", "step"]["change_share"] == 1.0
    assert steps["bytes", "step"]["change"] == 0
    predicted = _rows(ddp_mb8.views["diff_predicted"], "parallel_dim", "op")
    assert set(predicted) == {("dp", "all_reduce")}
    assert predicted["dp", "all_reduce"]["predicted_change"] == 0
    assert predicted["dp", "all_reduce"]["observed_change"] == 0


def test_sample_against_itself_changes_nothing(sample: Path) -> None:
    diff = diff_jobs(sample, "sample", "sample")
    assert set(diff.views) == set(VIEWS)
    for name in ("diff_traffic", "diff_layers", "diff_ops"):
        frame = diff.views[name]
        assert frame.height > 0, name
        assert set(frame["found"]) == {"both"}, name
    traffic = diff.views["diff_traffic"]
    # the sample's traffic (TP 2 x PP 2 x DP 2, 1F1B): TP all-reduces forward and backward,
    # pipeline sends and receives both ways, DP's gradient buckets and loss report; each a
    # step's mean of token_wire's two profiled steps on both sides
    per_step = pipeline.open(sample).sql(
        "SELECT parallel_dim, op, phase, sum(calls) / 2 AS calls_a, sum(bytes) / 2 AS bytes_a "
        "FROM token_wire GROUP BY ALL ORDER BY ALL"
    )
    assert per_step.select("parallel_dim", "op", "phase").rows() == [
        ("dp", "all_reduce", "backward"), ("dp", "all_reduce", "other"),
        ("pp", "recv", "backward"), ("pp", "recv", "forward"),
        ("pp", "send", "backward"), ("pp", "send", "forward"),
        ("tp", "all_reduce", "backward"), ("tp", "all_reduce", "forward"),
    ]  # fmt: skip
    got = traffic.sort("parallel_dim", "op", "phase")
    assert_frame_equal(got.select(per_step.columns), per_step, check_dtypes=False)
    assert_frame_equal(
        got.select(pl.col("calls_b").alias("calls_a"), pl.col("bytes_b").alias("bytes_a")),
        per_step.select("calls_a", "bytes_a"),
        check_dtypes=False,
    )
    assert traffic["bytes_change"].to_list() == [0] * traffic.height
    assert (traffic["calls_a"] == traffic["calls_b"]).all()
    assert (traffic["busbw_gbps_a"].fill_null(-1) == traffic["busbw_gbps_b"].fill_null(-1)).all()
    assert {"tp", "pp", "dp"} <= set(traffic["parallel_dim"])
    assert (
        diff.views["diff_layers"]["bytes_change"].to_list()
        == [0] * diff.views["diff_layers"].height
    )
    assert set(diff.views["diff_ops"]["kind"]) == {"kernel", "cpu_op"}
    assert diff.views["diff_ops"]["time_change_ns"].to_list() == [0] * 30
    steps = diff.views["diff_steps"]
    assert steps["change"].to_list() == [0] * steps.height
    predicted = diff.views["diff_predicted"]
    assert predicted.height > 0
    assert (predicted["predicted_change"] == 0).all() and (predicted["observed_change"] == 0).all()
    assert (predicted["observed_bytes_a"] == predicted["predicted_bytes_a"]).all()


def test_two_jobs_of_one_dataset_without_job_yaml(tmp_path: Path) -> None:
    """Both runs in one dataset, linked without a job.yaml: tokens come from the embeddings
    the traces saw, and there is nothing predicted to set beside the change."""
    from pipeline.ingest.run import ingest
    from pipeline.link.runner import link
    from tests.cpu_gloo import DATA

    ds = tmp_path / "both"
    for run in ("ddp", "ddp_mb8"):
        assert not ingest([DATA / run], ds, job=run, jobs=1).errors
    link(ds)
    diff = diff_jobs(ds, "ddp", "ddp_mb8")
    assert diff.facts("a")["predicted"] is False and diff.facts("b")["predicted"] is False
    assert diff.views["diff_predicted"].height == 0
    traffic = diff.views["diff_traffic"]
    assert traffic["predicted_bytes_a"].null_count() == traffic.height
    grads = _traffic(traffic)["dp", "all_reduce", "backward"]
    assert (grads["bytes_a"], grads["bytes_b"]) == (GRADS, GRADS)
    assert (grads["bytes_per_token_a"], grads["bytes_per_token_b"]) == (
        GRADS / TOKENS,
        GRADS / (2 * TOKENS),
    )
