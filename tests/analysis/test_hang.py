"""Hang analysis: the recorded dumps are healthy; hangs and desyncs made from them are found.

The dumps are the project's own (tests/data/cpu_gloo, recorded by scripts/record_cpu_runs.py:
the DDP, MoE and FSDP runs, one process group each, and the pipeline run's); every expected
value is worked out from the dump it is made from.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.analysis import hang
from pipeline.cli import cli
from pipeline.errors import TokenwireError
from tests.conftest import REPO_ROOT

#: The project's recorded runs (a folder per run).
PROJECT = REPO_ROOT / "tests" / "data" / "cpu_gloo"
#: Runs of one process group each, every dump with all_reduce entries.
RUNS = ["ddp", "moe", "fsdp"]
#: A DDP run.
DDP = ["ddp"]
#: A run with all_to_all entries.
MOE = ["moe"]


def _folder(run: str) -> Path:
    return PROJECT / run


def _raw(run: str, rank: int) -> dict:
    with gzip.open(_folder(run) / f"rank{rank}.flight_recorder.json.gz", "rt") as f:
        return json.load(f)


def _all_reduces(doc: dict) -> list[int]:
    """The indices of a dump's all_reduce entries."""
    return [i for i, e in enumerate(doc["entries"]) if e["profiling_name"] == "gloo:all_reduce"]


def _write(folder: Path, docs: dict[int, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, doc in docs.items():
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return folder


def _run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["hang", *args])
    return result.exit_code, result.output


def _only_group(report: hang.HangReport) -> hang.GroupReport:
    assert len(report.groups) == 1
    return report.groups[0]


# --------------------------------------------------------------------------- real dumps


@pytest.mark.parametrize("run", RUNS)
def test_recorded_dumps_are_healthy(run: str) -> None:
    folder = _folder(run)
    n = len(_raw(run, 0)["entries"])
    report = hang.analyze_paths([folder])
    assert not report.problem_found
    g = _only_group(report)
    assert (g.comm, g.pg_desc, g.ranks) == ("pg:0", "default_pg", [0, 1])
    assert g.last_completed_by_all == n
    assert g.first_disagreement is None and g.mismatches == []
    assert g.last_entered == {0: n, 1: n}
    code, out = _run_cli(str(folder))
    assert code == 0, out
    assert "no hang or mismatch found" in out


def test_dumps_without_entries_have_no_collectives(tmp_path: Path) -> None:
    # (PyTorch's flight recorder leaves out the "entries" key where a rank recorded no
    # collective, as a pipeline run's gloo send/recv are not recorded: the pp run's dumps
    # without their one barrier)
    docs = {r: _raw("pp", r) for r in (0, 1)}
    assert [[e["profiling_name"] for e in d["entries"]] for d in docs.values()] == [
        ["gloo:barrier"],
        ["gloo:barrier"],
    ]
    for doc in docs.values():
        del doc["entries"]
    report = hang.analyze_paths([_write(tmp_path / "pp", docs)])
    assert report.groups == [] and report.dumped_ranks == [0, 1]
    assert not report.problem_found


# --------------------------------------------------------------------------- hangs made from them


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("cut", [1, 3])
def test_rank_that_stopped_early(run: str, tmp_path: Path, cut: int) -> None:
    r0, r1 = _raw(run, 0), _raw(run, 1)
    n = len(r0["entries"])
    # rank 1 never issued its last `cut` collectives; rank 0 waits in the first of them
    r1["entries"] = r1["entries"][:-cut]
    r0["entries"] = r0["entries"][: n - cut + 1]
    r0["entries"][-1]["retired"] = False
    hung_seq = r0["entries"][-1]["collective_seq_id"]
    folder = _write(tmp_path / run, {0: r0, 1: r1})

    g = _only_group(hang.analyze_paths([folder]))
    assert g.last_completed_by_all == hung_seq - 1
    assert g.first_disagreement == g.focus_seq == hung_seq
    assert g.never_entered == [1]
    assert [(s.rank, s.status, s.retired) for s in g.stuck] == [(0, "scheduled", False)]
    assert g.last_entered == {0: hung_seq, 1: hung_seq - 1}

    code, out = _run_cli(str(folder))
    assert code == hang.EXIT_PROBLEM
    assert "process group 0 (default_pg) [pg:0]" in out
    assert f"first unfinished collective: seq {hung_seq}" in out
    assert "never entered: ranks [1]" in out
    assert "stuck in it: rank 0 (scheduled; state=scheduled, retired=false)" in out

    code, out = _run_cli(str(folder / "rank0.json"), str(folder / "rank1.json"), "--format", "json")
    assert code == hang.EXIT_PROBLEM
    doc = json.loads(out)
    assert doc["problem_found"] is True
    group = doc["groups"][0]
    assert group["comm"] == "pg:0" and group["focus_seq"] == hung_seq
    assert group["never_entered"] == [1] and group["stuck"][0]["rank"] == 0


@pytest.mark.parametrize("run", DDP)
def test_deleted_entries_alone_show_the_missing_rank(run: str, tmp_path: Path) -> None:
    r0, r1 = _raw(run, 0), _raw(run, 1)
    n = len(r1["entries"])  # (sequence ids 1..n)
    r0["entries"] = r0["entries"][:-2]
    folder = _write(tmp_path / "ddp", {0: r0, 1: r1})
    g = _only_group(hang.analyze_paths([folder]))
    # rank 0 lost its last two: n - 1 is the first it lacks, n - 2 the last both completed
    assert g.first_disagreement == g.focus_seq == n - 1
    assert g.never_entered == [0] and g.stuck == [] and g.completed_at_focus == [1]
    assert g.last_completed_by_all == n - 2


@pytest.mark.parametrize("run", RUNS)
def test_size_changed_on_one_rank(run: str, tmp_path: Path) -> None:
    r0, r1 = _raw(run, 0), _raw(run, 1)
    # an all_reduce (sizes must agree); all_to_all splits may differ by design
    i = next(i for i, e in enumerate(r1["entries"]) if e["profiling_name"] == "gloo:all_reduce")
    e = r1["entries"][i]
    seq = e["collective_seq_id"]
    e["input_sizes"] = [[e["input_sizes"][0][0] + 1, *e["input_sizes"][0][1:]]]
    folder = _write(tmp_path / run, {0: r0, 1: r1})

    g = _only_group(hang.analyze_paths([folder]))
    assert g.first_disagreement == seq
    m = g.mismatches[0]
    assert (m.seq, m.what, m.op_name, m.odd_ranks) == (seq, "count", "gloo:all_reduce", [1])
    n0 = sum(_numel(s) for s in r0["entries"][i]["input_sizes"])
    assert m.values == {0: str(n0), 1: str(_numel(e["input_sizes"][0]))}

    code, out = _run_cli(str(folder))
    assert code == hang.EXIT_PROBLEM
    assert f"MISMATCH seq {seq} (gloo:all_reduce): count differs" in out
    assert f"rank 1: {_numel(e['input_sizes'][0])}" in out


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.parametrize("run", RUNS)
def test_dtype_and_op_changed(run: str, tmp_path: Path) -> None:
    r0, r1 = _raw(run, 0), _raw(run, 1)
    # the first all_reduce of rank 1 in bf16, its third one a broadcast
    first, _, third, *_ = _all_reduces(r1)
    r1["entries"][first]["input_dtypes"] = ["BFloat16"]
    r1["entries"][third]["profiling_name"] = "gloo:broadcast"
    seq = [r1["entries"][i]["collective_seq_id"] for i in (first, third)]
    folder = _write(tmp_path / "tp", {0: r0, 1: r1})
    g = _only_group(hang.analyze_paths([folder]))
    found = {(m.seq, m.what) for m in g.mismatches}
    assert found == {(seq[0], "dtype"), (seq[1], "op")}
    op = next(m for m in g.mismatches if m.what == "op")
    assert op.values == {0: "gloo:all_reduce", 1: "gloo:broadcast"}
    assert g.first_disagreement == seq[0]


@pytest.mark.parametrize("run", MOE)
def test_all_to_all_that_does_not_add_up(run: str, tmp_path: Path) -> None:
    r0, r1 = _raw(run, 0), _raw(run, 1)
    i = next(i for i, e in enumerate(r1["entries"]) if e["profiling_name"] == "gloo:all_to_all")
    seq = r1["entries"][i]["collective_seq_id"]
    r1["entries"][i]["output_sizes"][0][0] += 7
    folder = _write(tmp_path / "moe", {0: r0, 1: r1})
    g = _only_group(hang.analyze_paths([folder]))
    assert [(m.seq, m.what) for m in g.mismatches] == [(seq, "all_to_all_total")]


@pytest.mark.parametrize("run", DDP)
def test_majority_names_the_odd_rank(run: str, tmp_path: Path) -> None:
    base = _raw(run, 0)
    base["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}}
    docs = {r: copy.deepcopy(base) for r in range(3)}
    i = _all_reduces(base)[0]
    docs[2]["entries"][i]["input_sizes"] = [[5]]
    seq = base["entries"][i]["collective_seq_id"]
    folder = _write(tmp_path / "three", docs)
    g = _only_group(hang.analyze_paths([folder]))
    m = g.mismatches[0]
    assert (m.seq, m.what, m.odd_ranks, m.majority) == (seq, "count", [2], True)
    code, out = _run_cli(str(folder))
    assert code == hang.EXIT_PROBLEM and "odd ranks [2]" in out


@pytest.mark.parametrize("run", DDP)
def test_missing_dump_is_reported_not_a_hang(run: str, tmp_path: Path) -> None:
    base = _raw(run, 0)
    base["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}}
    folder = _write(tmp_path / "partial", {0: base, 1: copy.deepcopy(base)})
    report = hang.analyze_paths([folder])
    g = _only_group(report)
    assert g.ranks == [0, 1, 2] and g.ranks_without_dump == [2]
    assert not report.problem_found


@pytest.mark.parametrize("run", RUNS)
def test_ring_buffer_windows_are_aligned(run: str, tmp_path: Path) -> None:
    r0, r1 = _raw(run, 0), _raw(run, 1)
    n = len(r0["entries"])  # (sequence ids 1..n)
    # rank 0's buffer kept its last n - 2, rank 1's its last n - 5: the window both hold
    # starts at sequence id 6
    r0["entries"] = r0["entries"][2:]
    r1["entries"] = r1["entries"][5:]
    folder = _write(tmp_path / "ring", {0: r0, 1: r1})
    report = hang.analyze_paths([folder])
    g = _only_group(report)
    assert (g.seq_first, g.seq_last) == (6, n)
    assert not report.problem_found


# --------------------------------------------------------------------------- NCCL-style states


def _nccl(seq: int, state: str, retired: bool, name: str = "nccl:all_reduce", **kw: object) -> dict:
    e = {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": name,
        "time_created_ns": 1000 + seq,
        "input_sizes": [[16]],
        "input_dtypes": ["Float"],
        "output_sizes": [[16]],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": 5 if state != "scheduled" else 0,
        "time_discovered_completed_ns": 6 if state == "completed" else 0,
        "retired": retired,
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    e.update(kw)
    return e


def _nccl_doc(entries: list[dict], ranks: str = "[0, 1]") -> dict:
    return {
        "version": "2.7",
        "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "pg_status": {},
        "entries": entries,
    }


def test_nccl_states(tmp_path: Path) -> None:
    done = [_nccl(s, "completed", True) for s in (1, 2)]
    docs = {
        0: _nccl_doc([*done, _nccl(3, "started", False)]),
        1: _nccl_doc([*done, _nccl(3, "scheduled", True)]),  # retired, never done: timed out
    }
    g = _only_group(hang.analyze_paths([_write(tmp_path / "nccl", docs)]))
    assert g.last_completed_by_all == 2 and g.focus_seq == 3
    assert g.first_disagreement is None  # both entered, neither finished, same op and size
    assert [(s.rank, s.status) for s in g.stuck] == [(0, "started"), (1, "timed_out")]


def test_unfinished_send_without_a_recv(tmp_path: Path) -> None:
    send = _nccl(0, "started", False, "nccl:send 0->1", is_p2p=True, p2p_seq_id=1)
    recv_other = _nccl(0, "completed", True, "nccl:recv 1<-0", is_p2p=True, p2p_seq_id=1)
    docs = {0: _nccl_doc([send]), 1: _nccl_doc([recv_other])}
    report = hang.analyze_paths([_write(tmp_path / "p2p", docs)])
    g = _only_group(report)
    assert [(p.rank, p.op, p.peer) for p in g.p2p] == [(0, "send", 1)]
    assert g.p2p[0].peer_side == "peer has no unfinished recv from rank 0"
    assert report.problem_found


# --------------------------------------------------------------------------- input errors


@pytest.mark.parametrize("run", DDP)
def test_two_dumps_of_the_same_rank(run: str, tmp_path: Path) -> None:
    """Two dumps claiming rank 0 (not the same bytes): ingest's rank rule refuses the
    second, as ``tokenwire ingest`` would."""
    r0 = _raw(run, 0)
    folder = _write(tmp_path / "dup", {0: r0})
    (folder / "copy_rank0.json").write_text(json.dumps({**r0, "entries": r0["entries"][:-1]}))
    taken = f"{folder / 'rank0.json'}: rank 0 of job 'dup' is already taken by"
    with pytest.raises(TokenwireError, match=re.escape(taken)):
        hang.analyze_paths([folder])
    code, out = _run_cli(str(folder))
    assert code == 1 and out.startswith(f"Error: {taken}")


@pytest.mark.parametrize("run", DDP)
def test_the_same_dump_twice_is_read_once(run: str, tmp_path: Path) -> None:
    """The same bytes under names of two ranks, the dump stating its rank (0): one dump,
    of rank 0."""
    r0 = {**_raw(run, 0), "rank": 0}
    folder = _write(tmp_path / "twice", {0: r0, 1: r0})
    assert hang.analyze_paths([folder]).dumped_ranks == [0]
    from pipeline.ingest.run import ingest

    summary = ingest([folder], tmp_path / "ds", job="twice")
    assert [(o.path.name, o.status) for o in summary.outcomes] == [
        ("rank0.json", "ingested"),
        ("rank1.json", "skipped"),
    ]
    assert summary.outcomes[1].file_id == summary.outcomes[0].file_id


def test_identical_dumps_whose_names_give_their_ranks_are_one_each(tmp_path: Path) -> None:
    """Dumps without a rank key, the same bytes (a pipeline stage that ran no collective),
    each rank's told by its file name: every rank is read, by hang as by ingest, and the
    folder they are in is left as it was."""
    from pipeline.dataset.views import connect
    from pipeline.ingest.run import ingest

    doc = _nccl_doc([_nccl(s, "completed", True) for s in (1, 2)])
    folder = _write(tmp_path / "pp", {0: doc, 1: doc, 2: doc})
    before = sorted(p.name for p in folder.iterdir())
    report = hang.analyze_paths([folder])
    assert report.dumped_ranks == [0, 1, 2] and not report.problem_found
    assert sorted(p.name for p in folder.iterdir()) == before
    dataset = tmp_path / "ds"
    summary = ingest([folder], dataset, job="pp")
    assert [o.status for o in summary.outcomes] == ["ingested"] * 3
    rows = (
        connect(dataset)
        .execute("SELECT ranks, rank_source FROM files ORDER BY ranks[1]")
        .fetchall()
    )
    assert rows == [([0], "file_name"), ([1], "file_name"), ([2], "file_name")]
    ids = {o.file_id for o in summary.outcomes}
    assert len(ids) == 3 and summary.outcomes[0].file_id == summary.outcomes[0].sha256[:16]
    assert hang.analyze_dataset(dataset).to_json() == report.to_json()
    again = ingest([folder], dataset, job="pp")  # (each file held already: skipped)
    assert [(o.status, o.held) for o in again.outcomes] == [("skipped", True)] * 3


def test_folder_without_dumps(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, out = _run_cli(str(tmp_path))
    assert code == 1 and "no flight recorder dumps" in out


def test_broken_dump_file(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_text('{"version": "2.10", "entries": [')
    code, out = _run_cli(str(path))
    assert code == 1 and out.startswith("Error: ") and "invalid JSON" in out
    assert "Traceback" not in out


@pytest.mark.parametrize("run", DDP)
def test_hang_from_an_ingested_dataset(run: str, tmp_path: Path) -> None:
    """Dumps ingested next to the profiler traces give the same verdict as the dump files."""
    from pipeline.ingest.run import ingest

    healthy = tmp_path / "ds"
    assert not ingest([_folder(run)], healthy, job="ddp").errors
    assert _run_cli(str(healthy))[0] == 0
    r0, r1 = _raw(run, 0), _raw(run, 1)
    n = len(r1["entries"])
    r0["entries"] = r0["entries"][:-2]
    hung = tmp_path / "hung"
    assert not ingest([_write(tmp_path / "dumps", {0: r0, 1: r1})], hung, job="hung").errors
    code, out = _run_cli(str(hung), "--format", "json")
    assert code == hang.EXIT_PROBLEM
    group = json.loads(out)["groups"][0]
    assert (group["first_disagreement"], group["never_entered"]) == (n - 1, [0])
    assert not ingest([_folder("moe")], hung, job="moe").errors
    code, out = _run_cli(str(hung))
    assert code == 1  # two jobs with dumps: --job picks one
    assert _run_cli(str(hung), "--job", "moe")[0] == 0


# --------------------------------------------------------------------------- many ranks


def test_rank_lists_are_written_as_runs_strides_and_counts() -> None:
    assert hang.rank_list([1]) == "[1]"
    assert hang.rank_list([1, 0]) == "[0, 1]"
    assert hang.rank_list([0, 1, 2, 5]) == "[0-2, 5]"
    assert hang.rank_list(range(4096)) == "[0-4095] (4,096 ranks)"
    assert hang.rank_list([*range(7), *range(8, 4096)]) == "[0-6, 8-4095] (4,095 ranks)"
    assert hang.rank_list(range(3, 4096, 8)) == "[3, 11, ..., 4091] (512 ranks, 8 apart)"
    assert hang.rank_list([*range(0, 40, 2), 41]) == (
        "[0, 2, 4, 6, 8, 10, 12, 14, 16, 18, ..., 38, 41] (21 ranks)"
    )


def test_a_hang_of_many_ranks_reads_in_a_few_lines_from_files_and_from_a_dataset(
    tmp_path: Path,
) -> None:
    """64 ranks, rank 7 never started the last collective: the text names runs of ranks and
    groups the stuck ones by how they wait; a dataset of the same dumps (the group's list
    stored as a sequence) gives the same report."""
    from pipeline.ingest.run import ingest

    world = list(range(64))

    def entries(rank: int) -> list[dict]:
        # (each rank's own creation times: identical dumps would be one file to ingest)
        done = [_nccl(s, "completed", True, time_created_ns=s * 100 + rank) for s in range(1, 5)]
        state = "scheduled" if rank == 7 else "started"
        return [*done, _nccl(5, state, False, time_created_ns=500 + rank)]

    docs = {r: _nccl_doc(entries(r), str(world)) for r in world}
    folder = _write(tmp_path / "dumps", docs)
    code, out = _run_cli(str(folder))
    assert code == hang.EXIT_PROBLEM
    assert "  ranks: [0-63] (64 ranks) (from pg_config)" in out
    assert "  last completed/entered per rank: ranks [0-63] (64 ranks): 4/5" in out
    assert (
        "stuck in it: ranks [0-6, 8-63] (63 ranks) (started; state=started, retired=false)" in out
    )
    assert "stuck in it: rank 7 (scheduled; state=scheduled, retired=false)" in out
    assert len(out.splitlines()) < 20

    dataset = tmp_path / "ds"
    assert not ingest([folder], dataset, job="job").errors
    from_files = hang.analyze_paths([folder])
    assert hang.analyze_dataset(dataset).to_json() == from_files.to_json()
    assert _only_group(from_files).membership == "pg_config"
