"""A dataset folder is input too: a crafted one never leads tokenwire outside it.

Each test makes its dataset with the inline seeds, damages it as a hostile copy would, runs
the real command in a child process under memory and CPU limits (:mod:`hostile`) and
checks the exit code, the one ``Error:`` line, and that nothing outside the dataset (and
no input) changed.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline import output
from pipeline.cli import cli
from tests.reliability.corpus import kineto_doc, write_inline_seeds
from tests.reliability.hostile import assert_one_error, digest, edit_manifest, errors, run_cli

#: The commands that read a dataset, with their arguments after the dataset's path.
READERS = {
    "sql": ("sql", "{ds}", "SELECT count(*) FROM ops"),
    "tables": ("tables", "{ds}"),
    "link": ("link", "{ds}"),
    "report": ("report", "{ds}", "-o", "{out}/r.html"),
    "hang": ("hang", "{ds}"),
    "ingest": ("ingest", "{more}", "-o", "{ds}", "--job", "job"),
}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("seeds") / "job"
    write_inline_seeds(folder)
    return folder


@pytest.fixture
def world(tmp_path: Path, seeds: Path) -> dict[str, Path]:
    """A dataset of the seeds, a victim folder outside it, one more trace to ingest, and an
    output folder."""
    ds = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["ingest", str(seeds), "-o", str(ds)])
    assert result.exit_code == 0, result.output
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "important").write_text("keep me")
    more = tmp_path / "more"
    more.mkdir()
    (more / "rank5.pt.trace.json").write_text(__import__("json").dumps(kineto_doc(5)))
    out = tmp_path / "out"
    out.mkdir()
    return {"ds": ds, "victim": victim, "more": more, "out": out, "root": tmp_path}


def _args(command: str, world: dict[str, Path]) -> list[str]:
    return [a.format(**world) for a in READERS[command]]


def _first_entry(doc: dict) -> dict:
    return doc["files"][next(iter(doc["files"]))]


def _point_ops_at(rel: str):
    def edit(doc: dict) -> None:
        _first_entry(doc)["parts"]["ops"] = [rel]
        doc["tables"]["ops"] = [rel]

    return edit


@pytest.mark.parametrize("command", sorted(READERS))
@pytest.mark.parametrize(
    "rel",
    ["../victim/important", "{victim}/important", "ops/job=..%2F..%2Fvictim/part-1.parquet"],
    ids=["dotdot", "absolute", "encoded-partition"],
)
def test_a_manifest_path_out_of_the_dataset_is_refused(
    world: dict[str, Path], command: str, rel: str
) -> None:
    edit_manifest(world["ds"], _point_ops_at(rel.format(**world)))
    before, ds_before = digest(world["victim"]), digest(world["ds"])
    outcome = run_cli(*_args(command, world))
    assert_one_error(outcome, "manifest.json", "is not a part path")
    # The entry is named: the file's key and table, or the index's table.
    assert re.search(r"(files\.'[^']+'\.parts|tables)\.'ops': ", outcome.stderr), outcome.stderr
    assert digest(world["victim"]) == before
    assert digest(world["ds"]) == ds_before


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_linked_table_folder_is_not_followed(world: dict[str, Path], command: str) -> None:
    """``ops`` replaced by a link to a folder outside that holds the same parts."""
    ds, victim = world["ds"], world["victim"]
    os.rename(ds / "ops", victim / "ops")
    os.symlink(victim / "ops", ds / "ops")
    before = digest(victim)
    outcome = run_cli(*_args(command, world))
    assert_one_error(outcome, "ops/job=job/", "symbolic link")
    assert digest(victim) == before


def test_a_linked_part_is_not_read(world: dict[str, Path]) -> None:
    ds = world["ds"]
    part = next((ds / "ops").rglob("*.parquet"))
    os.rename(part, world["victim"] / "p.parquet")
    os.symlink(world["victim"] / "p.parquet", part)
    for command in ("sql", "link", "ingest"):
        assert_one_error(run_cli(*_args(command, world)), "the part is a symbolic link")


def test_a_linked_lock_file_is_never_truncated(world: dict[str, Path]) -> None:
    os.symlink(world["victim"] / "important", world["ds"] / ".lock")
    before = digest(world["victim"])
    for command in ("ingest", "link"):
        assert_one_error(run_cli(*_args(command, world)), ".lock", "symbolic link")
    assert digest(world["victim"]) == before


def test_a_linked_spill_folder_is_removed_not_written(world: dict[str, Path]) -> None:
    os.symlink(world["victim"], world["ds"] / ".link-spill")
    before = digest(world["victim"])
    outcome = run_cli("link", world["ds"])
    assert outcome.returncode == 0, outcome.stderr
    assert digest(world["victim"]) == before
    assert not os.path.lexists(world["ds"] / ".link-spill")


def test_stray_part_names_outside_are_never_cleaned(world: dict[str, Path]) -> None:
    """Unlisted parts are removed by the writer; one reached through a linked folder is
    not the dataset's."""
    outside = world["victim"] / "job=job"
    outside.mkdir()
    (outside / "part-0123.parquet").write_text("not ours")
    os.symlink(world["victim"], world["ds"] / "extra")
    before = digest(world["victim"])
    assert run_cli(*_args("ingest", world)).returncode == 0
    assert digest(world["victim"]) == before


def test_ingest_into_a_folder_that_is_not_a_dataset_is_refused(world: dict[str, Path]) -> None:
    folder = world["victim"]
    (folder / "sub").mkdir()
    (folder / "sub" / "part-00.parquet").write_text("someone's file")
    before = digest(folder)
    outcome = run_cli("ingest", world["more"], "-o", folder)
    assert_one_error(outcome, str(folder), "not a tokenwire dataset", "not empty")
    assert digest(folder) == before


@pytest.mark.parametrize(
    "args",
    [
        ("sql", "{ds}", "SELECT 1", "-o", "{ds}/manifest.json"),
        ("sql", "{ds}", "SELECT 1", "--format", "parquet", "-o", "{part}"),
        ("report", "{ds}", "-o", "{ds}/manifest.json"),
        ("report", "{ds}", "-o", "{out}/r.html", "--png-dir", "{ds}/ops"),
    ],
    ids=["sql-manifest", "sql-part", "report-manifest", "report-png-dir"],
)
def test_an_output_inside_the_dataset_is_refused(world: dict[str, Path], args) -> None:  # noqa: ANN001
    ds = world["ds"]
    part = str(next((ds / "ops").rglob("*.parquet")))
    before = digest(ds)
    outcome = run_cli(*[a.format(part=part, **world) for a in args])
    assert_one_error(outcome, "is inside the dataset")
    assert digest(ds) == before


def test_sql_writes_into_the_dataset_when_asked(world: dict[str, Path]) -> None:
    target = world["ds"] / "export.csv"
    outcome = run_cli("sql", world["ds"], "SELECT 1 AS one", "-o", target, "--allow-writes")
    assert outcome.returncode == 0, outcome.stderr
    assert target.read_text() == "one\n1\n"


@pytest.mark.parametrize("command", ["ingest", "link", "sql", "tables", "report", "hang"])
def test_a_dataset_path_that_is_a_file_is_refused(world: dict[str, Path], command: str) -> None:
    file = world["victim"] / "important"
    args = [a.format(**{**world, "ds": file}) for a in READERS[command]]
    outcome = run_cli(*args)
    assert outcome.returncode == 1, outcome
    assert len(errors(outcome)) == 1 and str(file) in errors(outcome)[0], outcome.stderr
    assert file.read_text() == "keep me"


def _truncate_small_part(ds: Path, table: str = "ranks") -> str:
    part = next((ds / table).rglob("*.parquet"))
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    return str(part.relative_to(ds))


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_truncated_part_is_named(world: dict[str, Path], command: str) -> None:
    rel = _truncate_small_part(world["ds"])
    before = digest(world["ds"])
    outcome = run_cli(*_args(command, world))
    assert_one_error(outcome, rel, "unreadable Parquet part")
    assert digest(world["ds"]) == before


def test_an_unknown_statement_type_is_refused(world: dict[str, Path]) -> None:
    outcome = run_cli("sql", world["ds"], "UPDATE EXTENSIONS")
    assert_one_error(outcome, "UPDATE statement refused")


def test_sql_reads_no_file_of_the_current_folder(world: dict[str, Path]) -> None:
    """DuckDB may always reach its temporary folder (``.tmp`` of the current folder by
    default): tokenwire gives it one of its own."""
    cwd = world["root"]
    (cwd / ".tmp").mkdir()
    (cwd / ".tmp" / "secret").write_text("password")
    for query in ("SELECT * FROM read_text('.tmp/secret')", "SELECT * FROM glob('.tmp/*')"):
        outcome = run_cli("sql", world["ds"], query, cwd=cwd)
        assert_one_error(outcome, "reads only the dataset's own files")
        assert "password" not in outcome.stdout


#: (column, its value as JSON and Parquet give it, as the table shows it): a type Polars
#: cannot hold, or CSV and JSON cannot write, comes as DuckDB's text of it; the others as
#: themselves.
RESULT_TYPES = [
    ("INTERVAL 1 DAY", "1 day", "1 day"),
    ("'ab'::BLOB", "ab", "ab"),
    ("MAP {1: [2]}", "{1=[2]}", "{1=[2]}"),
    ("union_value(k := 1)", "1", "1"),
    ("[1, 2]::INTEGER[2]", [1, 2], "[1, 2]"),
    ("'101'::BIT", "101", "101"),
    ("[{'a': [1]}]", [{"a": [1]}], "[{[1]}]"),
    ("1::HUGEINT", 1, "1"),
    ("[INTERVAL 1 DAY]", "[1 day]", "[1 day]"),
]


@pytest.mark.parametrize(
    ("column", "value", "shown"), RESULT_TYPES, ids=[c for c, *_ in RESULT_TYPES]
)
@pytest.mark.parametrize("fmt", ["table", "csv", "json", "csv-file", "parquet-file"])
def test_every_result_type_is_printed(
    world: dict[str, Path], column: str, value: object, shown: str, fmt: str
) -> None:
    """Each value printed as it is, in every format (module's RESULT_TYPES)."""
    args = ["sql", str(world["ds"]), f"SELECT {column} AS v"]
    out = world["out"] / "result"
    if fmt.endswith("-file"):
        args += ["--format", fmt.removesuffix("-file"), "-o", str(out)]
    else:
        args += ["--format", fmt]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    # (a CSV cell holds a list as compact JSON, quoted)
    cell = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if fmt == "table":
        assert f"│ {shown} " in result.stdout, result.stdout
    elif fmt == "json":
        assert json.loads(result.stdout) == [{"v": value}]
    elif fmt == "parquet-file":
        assert pq.read_table(out).column("v").to_pylist() == [value]
    else:
        text = out.read_text() if fmt == "csv-file" else result.stdout
        assert list(csv.reader(io.StringIO(text))) == [["v"], [cell]]


def test_a_failed_output_leaves_no_file(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write the disk refuses stops the command with one line and leaves neither a
    partial file nor a temporary one: a file size limit for a query result, a full disk at
    the rename for a report."""
    out = world["out"]
    query = "SELECT range AS i, repeat('x', 100) AS s FROM range(100000)"
    outcome = run_cli("sql", world["ds"], query, "-o", out / "big.csv", file_bytes=1 << 20)
    assert_one_error(outcome, "big.csv", "cannot write")
    assert os.listdir(out) == []
    outcome = run_cli("sql", world["ds"], "SELECT 1", "-o", out)
    assert_one_error(outcome, str(out), "is a folder")
    # (in-process: the report's chart renderer reserves more address space than the limit)
    under_a_file = world["victim"] / "important" / "r.html"
    result = CliRunner().invoke(cli, ["report", str(world["ds"]), "-o", str(under_a_file)])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: {under_a_file.parent}: cannot write: ")

    def disk_full(src, dst):  # noqa: ANN001
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output.os, "replace", disk_full)
    result = CliRunner().invoke(cli, ["report", str(world["ds"]), "-o", str(out / "r.html")])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == f"Error: {out / 'r.html'}: disk full while writing it"
    assert os.listdir(out) == []


def test_a_failed_new_dataset_never_removes_what_another_writer_committed(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first ingest that fails removes its new folder while it still holds the lock; once
    the lock is released, another ingest may commit into that folder, and it stays."""
    from pipeline.dataset import commit

    ds = world["root"] / "new"
    release = commit._Lock.release
    raced = []

    def release_then_race(lock) -> None:  # noqa: ANN001
        release(lock)
        if not raced:  # a second ingest gets in as soon as the first lets go
            raced.append(True)
            more = ["ingest", str(world["more"]), "-o", str(ds)]
            assert CliRunner().invoke(cli, more).exit_code == 0

    monkeypatch.setattr(commit._Lock, "release", release_then_race)
    bad = world["root"] / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [')
    result = CliRunner().invoke(cli, ["ingest", str(bad), "-o", str(ds)])
    assert result.exit_code == 1, result.output
    assert raced
    count = CliRunner().invoke(cli, ["sql", str(ds), "SELECT count(*) AS n FROM files"])
    assert count.exit_code == 0 and "1" in count.stdout, count.output
