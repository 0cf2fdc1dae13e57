"""Ingest of the real CPU/gloo runs in tests/data/cpu_gloo: every file read, and each rank's
collectives (op, message size, count) equal to what the model's shapes say, in the two
profiled steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.cpu_gloo import (
    A2A,
    ACT,
    BLOCK,
    CE,
    EMBED,
    FP32,
    HEAD,
    LOSS,
    MOE_DENSE,
    PARAMS,
    STEPS,
    TP_PARAMS,
    WORLD,
    counts,
    ingested,
)

if TYPE_CHECKING:
    from pipeline.dataset.handle import Dataset  # the type pipeline.open returns

_DDP = {("all_reduce", PARAMS * FP32): 2, ("all_reduce", LOSS): 2}
_TP = {("all_reduce", ACT): 20, ("all_reduce", CE): 6}
#: (op, bytes) -> collectives of one rank in the 2 profiled steps, the same on every rank.
#: ddp: one gradient bucket a step; tp: per step 2 all-reduces per layer forward and 2
#: backward, the embedding's forward, the LM head's backward (10 of [b,s,h]) and the 3
#: cross-entropy reductions [b,s]; moe: dispatch + combine, forward + backward, per layer.
EXPECTED = {
    "ddp": _DDP,
    "straggler": _DDP,
    "tp": _TP,
    "tp_dp": {**_TP, ("all_reduce", TP_PARAMS * FP32): 2, ("all_reduce", LOSS): 2},
    "pp": {("send", ACT): 4, ("recv", ACT): 4},
    "moe": {("all_to_all", A2A): 16, ("all_reduce", MOE_DENSE * FP32): 2, ("all_reduce", LOSS): 2},
}
#: FSDP2 units: embed, each block, head. Each all-gathers its parameters forward and again
#: backward (bytes: the gathered output, the whole unit) and reduce-scatters its gradient
#: (bytes: the full input, the whole unit).
_UNITS = {EMBED * FP32: 1, BLOCK * FP32: 2, HEAD * FP32: 1}
FSDP_GATHERS = {("all_gather", size): 2 * n * len(STEPS) for size, n in _UNITS.items()}
FSDP_SCATTERS = {("reduce_scatter", size): n * len(STEPS) for size, n in _UNITS.items()}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dataset]:
    """Every run, each ingested into its own dataset."""
    return {run: ingested(run, tmp_path_factory.mktemp(run) / "ds") for run in WORLD}


def _kineto(ds: Dataset, rank: int):
    return ds.sql(f"SELECT * FROM collectives WHERE source = 'kineto' AND rank = {rank}")


@pytest.mark.parametrize("run", sorted(WORLD))
def test_every_file_ingested_with_its_rank(datasets: dict[str, Dataset], run: str) -> None:
    files = datasets[run].sql("SELECT format, ranks, rank_source FROM files")
    world = WORLD[run]
    assert counts(files, "format") == {("kineto",): world, ("flight_recorder",): world}
    kineto = files.filter(files["format"] == "kineto")
    assert sorted(r[0] for r in kineto["ranks"].to_list()) == list(range(world))
    assert set(kineto["rank_source"]) == {"distributedInfo"}


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_collectives_per_rank_match_the_model_shapes(
    datasets: dict[str, Dataset], run: str
) -> None:
    for rank in range(WORLD[run]):
        got = counts(_kineto(datasets[run], rank), "op", "bytes")
        assert got == EXPECTED[run], f"rank {rank}"


@pytest.mark.parametrize("run", sorted(WORLD))
def test_collectives_fall_in_the_two_profiled_steps(datasets: dict[str, Dataset], run: str) -> None:
    steps = datasets[run].sql(
        "SELECT rank, step, count(*) AS n FROM collectives WHERE source = 'kineto' GROUP BY ALL"
    )
    assert steps["step"].null_count() == 0
    per_rank = {(r, s) for r, s, _ in steps.iter_rows()}
    assert per_rank == {(r, s) for r in range(WORLD[run]) for s in STEPS}


def test_fsdp_all_gathers_are_the_units(datasets: dict[str, Dataset]) -> None:
    for rank in range(2):
        got = counts(_kineto(datasets["fsdp"], rank).filter(op="all_gather"), "op", "bytes")
        assert got == FSDP_GATHERS


def test_fsdp_gradients_are_reduce_scatters(datasets: dict[str, Dataset]) -> None:
    """gloo runs each c10d::_reduce_scatter_base_ as a gloo:all_reduce of the whole input: the
    work pairs with its call, which gives the op and the sizes."""
    for rank in range(2):
        got = counts(_kineto(datasets["fsdp"], rank).filter(op="reduce_scatter"), "op", "bytes")
        assert got == FSDP_SCATTERS
        reduces = counts(_kineto(datasets["fsdp"], rank).filter(op="all_reduce"), "op", "bytes")
        assert reduces == {("all_reduce", LOSS): 2}


def test_pp_peers_are_the_other_stage(datasets: dict[str, Dataset]) -> None:
    for rank in range(2):
        peers = set(_kineto(datasets["pp"], rank)["peer"])
        assert peers == {1 - rank}


def test_single_group_traces_name_their_communicator(datasets: dict[str, Dataset]) -> None:
    for run in ("ddp", "fsdp", "pp", "moe"):
        comms = datasets[run].sql("SELECT DISTINCT comm FROM collectives WHERE source = 'kineto'")
        assert comms["comm"].to_list() == ["pg:0"], run


def test_multi_group_traces_leave_the_communicator_to_link(datasets: dict[str, Dataset]) -> None:
    """A rank in several gloo groups: its trace names no group per call (gloo emits no
    record_param_comms), so one file alone cannot tell them apart; link takes each call's
    group from the flight recorder (tests/link/test_cpu_gloo.py)."""
    for rank in range(4):
        assert _kineto(datasets["tp_dp"], rank)["comm"].null_count() == 15 * len(STEPS)


def test_flight_recorder_holds_every_step_but_no_send_recv(datasets: dict[str, Dataset]) -> None:
    """The dump covers the whole run (5 steps, set-up, the closing barrier); PyTorch records no
    point-to-point work of gloo in it."""
    fr = datasets["ddp"].sql(
        "SELECT rank, op, bytes FROM collectives WHERE source = 'flight_recorder'"
    )
    for rank in range(2):
        got = counts(fr.filter(rank=rank, op="all_reduce"), "bytes")
        assert got == {(PARAMS * FP32,): 5, (LOSS,): 5}
    pp = datasets["pp"].sql("SELECT DISTINCT op FROM collectives WHERE source = 'flight_recorder'")
    assert pp["op"].to_list() == ["barrier"]
