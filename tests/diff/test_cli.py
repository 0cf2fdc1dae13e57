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


def test_table_fits_a_terminal(runs: dict[str, Path]) -> None:
    """Every line within 120 columns by default (wide views in blocks of columns, each with
    the rows' keys), times in whole ns; --width 0 keeps each view one block."""
    import re

    result = _run(runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"])
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 120
    header = [line for line in lines if "time_ns_a" in line]
    assert header and all("parallel_dim" in line or "name" in line for line in header)
    ns_cells = [
        cell.strip()
        for line in lines
        if re.match(r"│ \w+_ns ", line)
        for cell in line.split("┆")[2:5]
    ]
    assert ns_cells and all(re.fullmatch(r"-?\d+|null", c) for c in ns_cells), ns_cells
    wide = _run(runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"], "--width", "0")
    assert max(map(len, wide.stdout.splitlines())) > 120


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
    _one_error(_run(runs["ddp"], "ddp", "x", "--other", tmp_path / "none"), "does not exist")


def test_job_not_linked(tmp_path: Path) -> None:
    ds = tmp_path / "raw"
    assert not ingest([DATA / "ddp"], ds, job="ddp", jobs=1).errors
    _one_error(_run(ds, "ddp", "ddp"), "not linked", "tokenwire link")


def test_sql_over_the_diff_views(runs: dict[str, Path]) -> None:
    """``--sql`` runs over the same views the tables print, and each job's side tables."""
    args = (runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"])
    query = (
        "SELECT parallel_dim, op, phase, calls_a, calls_b, bytes_a, bytes_b FROM diff_traffic "
        "ORDER BY ALL"
    )
    result = _run(*args, "--sql", query, "--format", "json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    view = json.loads(_run(*args, "--format", "json").stdout)["diff_traffic"]
    keys = ("parallel_dim", "op", "phase", "calls_a", "calls_b", "bytes_a", "bytes_b")
    expected = sorted(tuple(r[k] for k in keys) for r in view)
    assert [tuple(r[k] for k in keys) for r in rows] == expected
    # FSDP's all-gathers appear only in B.
    gathers = [r for r in rows if r["op"] == "all_gather"]
    assert gathers and all(r["bytes_a"] == 0 and r["bytes_b"] > 0 for r in gathers)
    sides = _run(*args, "--sql", "SELECT (SELECT count(*) FROM a_facts) + "
                 "(SELECT count(*) FROM b_facts) AS n", "--format", "csv")  # fmt: skip
    assert sides.exit_code == 0, sides.stderr
    assert sides.stdout.splitlines() == ["n", "2"]


def test_sql_from_stdin(runs: dict[str, Path]) -> None:
    result = CliRunner().invoke(
        cli, ["diff", str(runs["ddp"]), "ddp", "ddp", "--sql", "-", "--format", "csv"],
        input="SELECT count(*) AS n FROM diff_steps WHERE a IS DISTINCT FROM b",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["n", "0"]  # a job against itself changes nothing


def test_sql_reads_nothing_else_and_writes_nothing(runs: dict[str, Path], tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    args = (runs["ddp"], "ddp", "fsdp", "--other", runs["fsdp"], "--sql")
    before = _state(runs["ddp"]), _state(runs["fsdp"])
    _one_error(_run(*args, f"SELECT * FROM read_csv('{secret}')"), "Permission Error")
    _one_error(_run(*args, "SET lock_configuration = false"), "locked")
    _one_error(_run(*args, f"COPY a_facts TO '{tmp_path / 'x.csv'}'"), "refused")
    _one_error(_run(*args, "CREATE TABLE t AS SELECT 1"), "CREATE statement refused", "diff")
    _one_error(_run(*args, "SELECT * FROM no_such_view"), "no_such_view")
    _one_error(_run(*args, " "), "no SQL given")
    assert not (tmp_path / "x.csv").exists()
    assert (_state(runs["ddp"]), _state(runs["fsdp"])) == before


def test_sql_is_one_query(runs: dict[str, Path]) -> None:
    result = _run(runs["ddp"], "ddp", "ddp", "--sql", "SELECT 1", "--view", "traffic")
    assert result.exit_code == 2
    assert "--sql" in result.stderr
