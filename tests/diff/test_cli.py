"""``tokenwire diff`` on the command line: the formats, and one line and exit 1 for bad input
(an unknown job, not a dataset, a job not linked); neither dataset is written to."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.diff import VIEWS
from pipeline.ingest.run import ingest
from tests.cpu_gloo import DATA


def _run(*args: object):
    return CliRunner().invoke(cli, ["diff", *map(str, args)], catch_exceptions=False)


def _state(dataset: Path) -> dict[str, str]:
    """Every file of ``dataset`` and a hash of its content."""
    return {
        str(p.relative_to(dataset)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(dataset.rglob("*"))
        if p.is_file()
    }


def test_table_of_every_view(runs: dict[str, Path]) -> None:
    before = _state(runs["ddp"]), _state(runs["fsdp"])
    result = _run(runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    for name in VIEWS:
        assert f"\n{name}: " in "\n" + result.stdout
    assert "all_gather" in result.stdout
    assert (_state(runs["ddp"]), _state(runs["fsdp"])) == before  # read-only


def test_json_and_csv(runs: dict[str, Path]) -> None:
    result = _run(runs["ddp"], "ddp", "ddp_mb8", "--other", runs["ddp_mb8"], "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert list(data) == list(VIEWS)
    tokens = [r for r in data["diff_steps"] if r["metric"] == "tokens"]
    assert [(r["a"], r["b"]) for r in tokens] == [(256, 512)]
    result = _run(runs["ddp"], "ddp", "ddp_mb8", "--other", runs["ddp_mb8"], "--format", "csv",
                  "--view", "traffic")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("parallel_dim,op,phase,found,calls_a,calls_b,bytes_a,bytes_b,")
    assert [line.split(",")[:4] for line in lines[1:]] == [
        ["dp", "all_reduce", "backward", "both"],
        ["dp", "all_reduce", "other", "both"],
    ]


def test_csv_needs_one_view(runs: dict[str, Path]) -> None:
    result = _run(runs["ddp"], "ddp", "ddp", "--format", "csv")
    assert result.exit_code == 2
    assert "--view" in result.stderr


def test_html_is_written_outside_the_datasets(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "diff.html"
    result = _run(runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"], "--html", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "" and result.stderr.startswith(f"wrote {out} (")
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "vegaEmbed" in page
    inside = _run(runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"],
                  "--html", runs["fsdp"] / "d.html")  # fmt: skip
    assert inside.exit_code == 1
    assert inside.stderr.startswith("Error: ") and "inside the dataset" in inside.stderr


def _one_error(result, *words: str) -> None:
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    for word in words:
        assert word in result.stderr


def test_unknown_job(runs: dict[str, Path]) -> None:
    _one_error(_run(runs["ddp"], "ddp", "nope"), "no job 'nope'", "'ddp'")
    _one_error(_run(runs["ddp"], "ddp", "ddp", "--other", runs["fsdp"]), str(runs["fsdp"]))


def test_not_a_dataset(runs: dict[str, Path], tmp_path: Path) -> None:
    _one_error(_run(tmp_path, "a", "b"), "not a tokenwire dataset")
    _one_error(_run(runs["ddp"], "ddp", "x", "--other", tmp_path / "none"), "not a tokenwire")


def test_job_not_linked(tmp_path: Path) -> None:
    ds = tmp_path / "raw"
    assert not ingest([DATA / "ddp"], ds, job="ddp", jobs=1).errors
    _one_error(_run(ds, "ddp", "ddp"), "not linked", "tokenwire link")
