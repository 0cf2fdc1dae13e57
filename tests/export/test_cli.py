"""``tokenwire export`` on the command line: the summary, and one line and exit 1 for bad
input (an unlinked dataset, an unknown step or rank, an output inside the dataset)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.export import ExportError, parse_ranks, parse_steps, parse_window
from pipeline.ingest.run import ingest
from tests.conftest import REPO_ROOT


def _run(*args: str):
    return CliRunner().invoke(cli, ["export", *map(str, args)], catch_exceptions=False)


def test_writes_a_gzipped_trace_and_says_what(linked: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json.gz"
    result = _run(linked, "-o", out, "--step", "2", "--ranks", "0-3", "--kernels")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(f"wrote {out} (")
    assert "job sample" in result.stderr and " kernels" in result.stderr
    with gzip.open(out) as f:
        trace = json.load(f)
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1, 2, 3}
    assert trace["otherData"]["scope"]["steps"] == [2, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "9"], "Error: --step: job 'sample' has no step 9 on the ranks asked for "
         "(its steps: 2-3)\n"),
        (["--ranks", "6-12"], "Error: {ds}: --ranks: job 'sample' has no rank 8-12 "
         "(its ranks: 0-7)\n"),
        (["--job", "other"], "Error: {ds}: no job 'other' in the dataset (jobs: sample)\n"),
    ],
)  # fmt: skip
def test_bad_scope_is_one_line(linked: Path, tmp_path: Path, args: list, message: str) -> None:
    out = tmp_path / "t.json"
    result = _run(linked, "-o", out, *args)
    assert (result.exit_code, result.stderr) == (1, message.format(ds=linked))
    assert not out.exists()


def test_window_outside_the_data_names_the_job_s_window(linked: Path, tmp_path: Path) -> None:
    import re

    out = tmp_path / "t.json"
    result = _run(linked, "-o", out, "--window", "5:10")
    assert result.exit_code == 1 and not out.exists()
    found = re.fullmatch(
        r"Error: --window 5:10: job 'sample' has no event there; its collectives in scope lie "
        r"in (\d+):(\d+) \(ns on the aligned clock\)\n",
        result.stderr,
    )
    assert found, result.stderr
    result = _run(linked, "-o", out, "--window", f"{found[1]}:{found[2]}")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "3-2"], "Error: Invalid value for '--step': range '3-2' ends before it "
         "starts\n"),
        (["--step", "99999999999999999999"], "Error: Invalid value for '--step': 1e+20 is "
         "outside 64-bit integers\n"),
        (["--ranks", "0-3,x"], "Error: Invalid value for '--ranks': 'x' is not a rank or a range "
         "(e.g. 0-7,12)\n"),
        (["--window", "12"], "Error: Invalid value for '--window': '12' is not START_NS:END_NS "
         "(ns on the aligned clock; either end may be left out)\n"),
    ],
)  # fmt: skip
def test_a_scope_that_is_not_one_is_a_usage_error(
    linked: Path, tmp_path: Path, args: list, message: str
) -> None:
    out = tmp_path / "t.json"
    result = _run(linked, "-o", out, *args)
    assert result.exit_code == 2
    assert result.stderr.endswith(message), result.stderr
    assert not out.exists()


def test_unlinked_dataset_is_refused(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    ingest([REPO_ROOT / "sample_traces" / "rank0.nccl.log"], dataset, job="x", jobs=1)
    result = _run(dataset, "-o", tmp_path / "t.json")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {dataset}: job 'x' is not linked (run tokenwire link {dataset}); the timeline "
        "needs its steps, phases, instances and clock offsets\n"
    )


def test_output_inside_the_dataset_needs_allow_writes(linked: Path) -> None:
    out = linked / "timeline.json"
    result = _run(linked, "-o", out, "--step", "2")
    assert result.exit_code == 1 and "-o is inside the dataset" in result.stderr
    assert not out.exists()
    result = _run(linked, "-o", out, "--step", "2", "--allow-writes")
    assert result.exit_code == 0, result.stderr
    out.unlink()  # (the session's dataset stays as link left it)


def test_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = _run(tmp_path / "empty", "-o", tmp_path / "t.json")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {tmp_path / 'empty'}: not a tokenwire dataset")


def test_scope_parsing() -> None:
    assert parse_ranks("0-3,12, 2") == (0, 1, 2, 3, 12)
    assert parse_ranks("5") == (5,)
    assert parse_steps("3") == (3, 3) and parse_steps("2:4") == (2, 4)
    assert parse_window("10:20") == (10, 20)
    assert parse_window(":20") == (None, 20) and parse_window("10:") == (10, None)
    for bad in ("", "1-", "-1", "a", "1,,2"):
        with pytest.raises(ExportError, match="--ranks"):
            parse_ranks(bad)
    for bad in (":", "a:b", "20:10", "1"):
        with pytest.raises(ExportError, match="--window"):
            parse_window(bad)
