"""The link SQL files' headers say what each reads, creates and takes, and the run order
follows from them: checked against the SQL itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.dataset.views import connect
from pipeline.link.plan import PlanError, SqlFile, created_objects, plan, sql_files, strip_comments

#: the runner's own inputs, registered before any file runs (runner._register_job_inputs)
RUNNER_INPUTS = {
    "_job_layout", "_job_facts", "_alternative_bytes", "_gradient_plan",
    "predictions",
    "_layout_ep_groups", "_layout_ep_members", "_ep_directions",
    "_moe_exchange_kernels", "_moe_library",
}  # fmt: skip
FILES = sql_files()
MADE = {f.name: created_objects(f.text) for f in FILES}


def _sql(f: SqlFile) -> str:
    """The file's statements without comments and string literals."""
    return re.sub(r"'[^']*'", "''", strip_comments(f.text))


def _references(f: SqlFile) -> set[str]:
    """Names the file uses as a table, view or function."""
    sql = _sql(f)
    return set(re.findall(r"\b(?:FROM|JOIN|TABLE)\s+(\w+)", sql, re.I)) | set(
        re.findall(r"(\w+)\s*\(", sql)
    )


def _others(f: SqlFile) -> set[str]:
    return {obj for name, made in MADE.items() if name != f.name for obj in made}


@pytest.fixture(scope="module")
def external(linked_sample: Path) -> set[str]:
    """What a link file may read besides other files' objects: the dataset's tables, views
    and macros, and the runner's inputs."""
    con = connect(linked_sample, derived=False)
    names = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal "
        "UNION SELECT table_name FROM duckdb_tables() "
        "UNION SELECT function_name FROM duckdb_functions() WHERE NOT internal"
    ).fetchall()
    return {n for (n,) in names} | RUNNER_INPUTS


@pytest.mark.parametrize("f", FILES, ids=[f.name for f in FILES])
def test_creates_header_matches_the_sql(f: SqlFile) -> None:
    assert f.creates, f"{f.name} states no creates"
    assert set(f.creates) <= set(MADE[f.name]), f"{f.name} states creates it does not make"
    # what it makes and does not state is its own: no other file names it
    private = set(MADE[f.name]) - set(f.creates)
    for other in FILES:
        if other.name != f.name:
            named = private & set(re.findall(r"\w+", _sql(other)))
            assert not named, f"{other.name} names {sorted(named)}, private to {f.name}"


@pytest.mark.parametrize("f", FILES, ids=[f.name for f in FILES])
def test_reads_header_matches_the_sql(f: SqlFile, external: set[str]) -> None:
    used = {n for n in _references(f) if n in _others(f) | external} - set(MADE[f.name])
    assert set(f.reads) == used, f"{f.name}: header reads {sorted(f.reads)}, SQL {sorted(used)}"


@pytest.mark.parametrize("f", FILES, ids=[f.name for f in FILES])
def test_no_file_changes_another_files_objects(f: SqlFile) -> None:
    sql = _sql(f)
    renamed = re.findall(r"\bALTER\s+TABLE\s+(\w+)\s+RENAME\s+TO\b", sql, re.I)
    assert set(renamed) == set(f.takes), f"{f.name}: takes {f.takes}, renames {renamed}"
    assert set(f.takes) <= set(f.reads)
    changed = re.findall(
        r"\b(?:UPDATE|INSERT\s+INTO|DELETE\s+FROM|ALTER\s+TABLE|TRUNCATE|"
        r"DROP\s+(?:TABLE|VIEW|MACRO)(?:\s+IF\s+EXISTS)?|"
        r"CREATE\s+OR\s+REPLACE\s+(?:TEMP\s+)?(?:TABLE|VIEW|MACRO))\s+(\w+)",
        sql,
        re.I,
    )
    foreign = {name for name in changed if name not in MADE[f.name] and name not in f.takes}
    assert not foreign, f"{f.name} changes {sorted(foreign)}, made by another file"


def test_every_object_has_one_creator() -> None:
    seen: dict[str, str] = {}
    for f in FILES:
        for obj in MADE[f.name]:
            assert obj not in seen, f"{obj} is created by {seen[obj]} and {f.name}"
            seen[obj] = f.name


def test_order_is_valid(external: set[str]) -> None:
    steps = plan()
    assert {f.name for f in steps.files} == {f.name for f in FILES}
    position = {f.name: i for i, f in enumerate(steps.files)}
    creator = {obj: f.name for f in FILES for obj in f.creates}
    for f in steps.files:
        for obj in f.reads:
            assert obj in creator or obj in external, f"{f.name} reads {obj}, made by no one"
            if obj in creator:
                assert position[creator[obj]] < position[f.name], f"{f.name} before {obj}"
        for obj in f.takes:
            readers = [g.name for g in FILES if obj in g.reads and g.name != f.name]
            assert all(position[r] < position[f.name] for r in readers), (f.name, obj)
    # every derived table of the dataset is published, and nothing else
    assert set(steps.published) == {
        "collective_matches",
        "collective_links",
        "communicator_dims",
        "clock_offsets",
        "collective_instances",
        "collective_waits",
        "step_stragglers",
        "straggler_ops",
        "gradient_bucket_layers",
        "critical_path",
        "token_wire",
        "ledger",
        "wire",
    }


def test_working_objects_dropped_after_their_last_reader() -> None:
    steps = plan()
    position = {f.name: i for i, f in enumerate(steps.files)}
    dropped = {obj: name for name, objs in steps.drops_after.items() for _, obj in objs}
    for f in FILES:
        for obj in f.reads:
            if obj in dropped:
                assert position[f.name] <= position[dropped[obj]], (f.name, obj)
    assert not set(dropped) & set(steps.published)


def test_each_derived_table_completed_once_after_its_last_reader() -> None:
    """The runner writes and drops each derived table once the file ``complete_after`` lists
    it under has run: every one is listed once, under a file at or after its creator and
    every file that reads it."""
    steps = plan()
    position = {f.name: i for i, f in enumerate(steps.files)}
    completed = [(obj, name) for name, objs in steps.complete_after.items() for obj in objs]
    assert sorted(obj for obj, _ in completed) == sorted(steps.published)
    for obj, name in completed:
        users = [f.name for f in FILES if obj in f.reads or obj in f.creates]
        assert users and all(position[u] <= position[name] for u in users), (obj, name)
        assert name in users, (obj, name)
    # (the wire is read by no other file: written from the file that makes it)
    assert dict(completed)["wire"] == "wire.sql"


def _file(name: str, reads: str, creates: str) -> SqlFile:
    return SqlFile(name, "", tuple(reads.split()), tuple(creates.split()), ())


def test_a_cycle_is_an_error_naming_the_files() -> None:
    files = [_file("a.sql", "y", "x"), _file("b.sql", "x", "y")]
    with pytest.raises(PlanError, match=r"cycle.*(a\.sql|b\.sql)"):
        plan(files)


def test_an_object_created_twice_is_an_error() -> None:
    files = [_file("a.sql", "", "x"), _file("b.sql", "", "x")]
    with pytest.raises(PlanError, match=r"x is created by both a\.sql and b\.sql"):
        plan(files)


def test_order_follows_reads_not_names() -> None:
    files = [_file("a.sql", "z", "x"), _file("b.sql", "", "z"), _file("c.sql", "x", "w")]
    assert [f.name for f in plan(files).files] == ["b.sql", "a.sql", "c.sql"]
