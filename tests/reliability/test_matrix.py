"""Every command against every class of hostile input (issue 44, docs/reliability.md).

Each cell runs the real command line (forked from one process that imported it, under the
memory and CPU limits of :mod:`tests.reliability.hostile`) and asserts: the exit code (0, 1
or 2; never 3), one located ``Error:`` line or a correct result, nothing outside the dataset
changed, and the dataset unchanged or whole. A cell where a command takes no input of that
class is in :data:`NOT_APPLICABLE` with the reason instead of a test (every cell is one or
the other).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO_ROOT
from tests.reliability.hostile import run_cli
from tests.reliability.matrix import (
    CLASSES,
    COMMANDS,
    Watch,
    World,
    build_world,
    ok,
    refused,
    table_rows,
    usage_error,
)

Cell = Callable[[World, Path], None]
CELLS: dict[tuple[str, int], Cell] = {}
NOT_APPLICABLE: dict[tuple[str, int], str] = {}


def cell(command: str, klass: int) -> Callable[[Cell], Cell]:
    def register(fn: Cell) -> Cell:
        CELLS[command, klass] = fn
        return fn

    return register


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    w = build_world(tmp_path_factory.mktemp("matrix"))
    yield w
    w.run.close()


_BASE: dict[tuple, object] = {}


def base(w: World, key: str, *args: str | Path) -> object:
    """A command's result on the session's dataset at its plain path, run once."""
    if key not in _BASE:
        _BASE[key] = ok(w.run(*args))
    return _BASE[key]


def _args(command: str, w: World, ds: Path, out: Path) -> list[str | Path]:
    """A run of ``command`` that reads dataset ``ds`` and writes under ``out`` (a folder)."""
    return {
        "link": ["link", ds, "--config", w.job_yaml],
        "tables": ["tables", ds],
        "sql": ["sql", ds, "SELECT count(*) AS n, min(rank), max(rank), min(job) FROM collectives"],
        "report": ["report", ds, "-o", out / "r.html"],
        "export": ["export", ds, "-o", out / "t.json"],
        "export-flows": ["export", ds, "--flows", "-o", out / "f.csv"],
        "diff": ["diff", ds, "j", "j"],
        "predict": ["predict", "--from", ds, "--config", w.job_yaml],
        "hang": ["hang", ds],
    }[command]


# ------------------------------------------------------------------ class 1: location


def _hostile_location(w: World, tmp: Path) -> Path:
    """The dataset at ``rank=7/job=x/r[12]*``: glob characters, and ancestors a hive reader
    would take for partition values; beside it ``r1``, which that glob matches, holding a
    copy (a glob over the path would count every row twice)."""
    parent = tmp / "rank=7" / "job=x"
    w.copy(parent / "r1")
    return w.copy(parent / "r[12]*")


def _location_cell(command: str) -> Cell:
    def run(w: World, tmp: Path) -> None:
        ds = _hostile_location(w, tmp)
        out = tmp / "out"
        out.mkdir()
        sibling = Watch(ds.parent / "r1")
        result = ok(w.run(*_args(command, w, ds, out)), code=4 if command == "hang" else 0)
        plain_out = tmp / "plain"
        plain_out.mkdir()
        expected = (
            base(w, f"loc-{command}", *_args(command, w, w.dataset, w.root / f"base-{command}"))
            if command not in ("report", "export", "export-flows", "link")
            else None
        )
        if expected is not None:
            assert result.stdout.replace(str(ds), "DS") == expected.stdout.replace(
                str(w.dataset), "DS"
            )
        if command == "link":
            assert table_rows(ds) == w.rows
        if command in ("export", "export-flows"):
            name = "t.json" if command == "export" else "f.csv"
            (w.root / f"base-{command}").mkdir(exist_ok=True)
            base(w, f"loc-{command}", *_args(command, w, w.dataset, w.root / f"base-{command}"))
            got = (out / name).read_bytes().replace(str(ds).encode(), b"DS")
            want = (w.root / f"base-{command}" / name).read_bytes()
            assert got == want.replace(str(w.dataset).encode(), b"DS")
        sibling.unchanged()

    return run


for _command in ("link", "tables", "sql", "report", "export", "export-flows", "diff", "predict"):
    CELLS[_command, 1] = _location_cell(_command)


@cell("hang", 1)
def _hang_location(w: World, tmp: Path) -> None:
    ds = _hostile_location(w, tmp)
    expected = base(w, "loc-hang", "hang", w.dataset, "--format", "json")
    result = w.run("hang", ds, "--format", "json")
    assert result.code == expected.code == 0, result.stderr
    assert result.stdout == expected.stdout


@cell("ingest", 1)
def _ingest_location(w: World, tmp: Path) -> None:
    ds = _hostile_location(w, tmp)
    sibling = Watch(ds.parent / "r1")
    extra = tmp / "extra"
    extra.mkdir()
    shutil.copy(w.root.parent / "x" if False else _sample("rank2.nccl.log"), extra)
    ok(w.run("ingest", extra, "-o", ds, "--job", "j"))
    result = ok(w.run("sql", ds, "SELECT DISTINCT job, rank FROM collectives ORDER BY rank"))
    assert "x " not in result.stdout and "7 " not in result.stdout, result.stdout
    rows = table_rows(ds)
    assert rows["collectives"] > w.rows["collectives"]
    sibling.unchanged()


@pytest.mark.parametrize("where", ["ds*", "r[12]", "rank=7/job=x/ds"])
def test_each_location_reads_its_own_rows(world: World, tmp_path: Path, where: str) -> None:
    """Each hostile location alone, read in this process: a sibling the glob would match
    holds a copy, and the ancestors are ``key=value`` folders."""
    from pipeline.dataset.views import connect

    ds = world.copy(tmp_path / where)
    world.copy(tmp_path / where.replace("ds*", "dsX").replace("r[12]", "r1").replace("/ds", "/ds2"))
    con = connect(ds)
    got = con.execute("SELECT count(*), min(job), max(job), max(rank) FROM collectives").fetchone()
    assert got == (world.rows["collectives"], "j", "j", 1)


NOT_APPLICABLE["tokens", 1] = (
    "reads a text file and a tokenizer by their paths with Python's open (no dataset, no "
    "glob, no partition)"
)


def _sample(name: str) -> Path:
    return REPO_ROOT / "sample_traces" / name


# ----------------------------------------------------------- class 2: unwritable outputs


def _under_a_file(tmp: Path, name: str) -> Path:
    (tmp / "file").write_text("a file, not a folder")
    return tmp / "file" / name


def _no_output_left(folder: Path, watch: Watch) -> None:
    watch.unchanged()
    left = [p.name for p in folder.rglob("*") if ".tmp" in p.name]
    assert not left, left


@cell("ingest", 2)
def _ingest_unwritable(w: World, tmp: Path) -> None:
    target = _under_a_file(tmp, "ds")
    watch = Watch(tmp, w.src)
    refused(w.run("ingest", w.src, "-o", target), str(target))
    _no_output_left(tmp, watch)


@cell("link", 2)
def _link_efbig(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    watch = Watch(tmp)
    refused(w.run("link", ds, "--config", w.job_yaml, file_bytes=2048), str(ds))
    watch.unchanged()


def _stream_full(command: str, *args: str | Path) -> Cell:
    def run(w: World, tmp: Path) -> None:
        ds = w.copy(tmp / "ds")
        watch = Watch(tmp)
        argv = [a if a != "DS" else ds for a in args]
        refused(w.run(*argv, stdout="/dev/full"), "standard output")
        watch.unchanged()

    CELLS[command, 2] = run
    return run


_stream_full("tables", "tables", "DS")
_stream_full("predict", "predict", "--config", REPO_ROOT / "sample_traces" / "job.yaml")
_stream_full("hang", "hang", "DS")


@cell("tokens", 2)
def _tokens_full(w: World, tmp: Path) -> None:
    refused(w.run("tokens", w.text, stdout="/dev/full"), "standard output")


@cell("sql", 2)
def _sql_unwritable(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    under = _under_a_file(tmp, "out.csv")
    loop = tmp / "loop"
    loop.symlink_to(loop)
    watch = Watch(tmp)
    refused(w.run("sql", ds, "SELECT 1", "--format", "csv", "-o", under), str(under))
    long_name = tmp / ("x" * 300 + ".csv")
    refused(w.run("sql", ds, "SELECT 1", "--format", "csv", "-o", long_name), "too long")
    refused(w.run("sql", ds, "SELECT 1", stdout="/dev/full"), "standard output")
    refused(w.run("sql", ds, "SELECT 1", "-o", loop / "x.csv"), "symbolic links")
    _no_output_left(tmp, watch)
    # the statements from a standard input that is closed
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "sql", str(ds)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.close(0),  # noqa: PLW1509 - closed in the child
    )
    refused(_as_result(done), "standard input is closed")


@cell("report", 2)
def _report_unwritable(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    watch = Watch(tmp)
    long_name = tmp / ("r" * 300 + ".html")
    refused(w.run("report", ds, "-o", long_name), "too long")
    under = _under_a_file(tmp, "r.html")
    refused(w.run("report", ds, "-o", under), str(tmp / "file"))
    _no_output_left(tmp, Watch(tmp))
    watch.unchanged(except_=("file",))


@cell("report", 7)
def _report_renderer_limit(w: World, tmp: Path) -> None:
    """The PNG renderer (V8) aborts the process natively under a small ``ulimit -v``: the
    limit is checked first, before anything is written."""
    ds = w.copy(tmp / "ds")
    watch = Watch(tmp)
    refused(w.run("report", ds, "-o", tmp / "r.html", "--png-dir", tmp / "png"), "ulimit -v")
    watch.unchanged()


@cell("export", 2)
def _export_efbig(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    out = tmp / "out"
    out.mkdir()
    watch = Watch(tmp)
    refused(w.run("export", ds, "-o", out / "t.json", file_bytes=4096), str(out / "t.json"))
    _no_output_left(tmp, watch)
    # a folder without write permission (root's capabilities that pass it dropped)
    locked = tmp / "locked"
    locked.mkdir(mode=0o555)
    # (run on its own: a dropped bounding set holds from the next program it runs)
    done = run_cli("export", ds, "-o", locked / "t.json", unprivileged=True)
    refused(_as_result(done), "Permission denied")
    assert not list(locked.iterdir())


@cell("export-flows", 2)
def _flows_unwritable(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    under = _under_a_file(tmp, "f.csv")
    watch = Watch(tmp)
    refused(w.run("export", ds, "--flows", "-o", under), str(under))
    _no_output_left(tmp, watch)


@cell("diff", 2)
def _diff_unwritable(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    under = _under_a_file(tmp, "d.html")
    watch = Watch(tmp)
    refused(w.run("diff", ds, "j", "j", "--html", under), str(tmp / "file"))
    refused(w.run("diff", ds, "j", "j", stdout="/dev/full"), "standard output")
    _no_output_left(tmp, watch)


# ----------------------------------------------------------- class 3: special files


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _lock_link(w: World, tmp: Path, command: str) -> None:
    """``.lock`` a hard link to a file outside the dataset: refused, the file untouched."""
    ds = w.copy(tmp / "ds")
    victim = tmp / "victim"
    victim.mkdir()
    (victim / "important").write_text("someone's data\n")
    os.link(victim / "important", ds / ".lock")
    watch = Watch(victim, tmp / "ds")
    args = ["ingest", w.src, "-o", ds] if command == "ingest" else ["link", ds]
    refused(w.run(*args), ".lock", "hard link")
    watch.unchanged()


@cell("ingest", 3)
def _ingest_special(w: World, tmp: Path) -> None:
    _lock_link(w, tmp, "ingest")
    fifo = _fifo(tmp / "rank3.nccl.log")
    refused(w.run("ingest", fifo, "-o", tmp / "new"), str(fifo), "FIFO")
    assert not (tmp / "new").exists()


@cell("link", 3)
def _link_special(w: World, tmp: Path) -> None:
    _lock_link(w, tmp, "link")
    fifo = _fifo(tmp / "job.yaml")
    refused(w.run("link", tmp / "ds", "--config", fifo), str(fifo), "not a regular file")


def _planted(command: str, what: str, *, args: Callable[[World, Path, Path], list]) -> None:
    """A dataset with ``what`` planted (manifest.json a FIFO or a folder, a part a FIFO or a
    folder): one error naming it, nothing blocks, nothing changes."""

    def run(w: World, tmp: Path) -> None:
        ds = w.copy(tmp / "ds")
        if what.startswith("manifest"):
            target = ds / "manifest.json"
            target.unlink()
        else:
            target = w.part(ds, "collectives")
            target.unlink()
        if what.endswith("fifo"):
            os.mkfifo(target)
        else:
            target.mkdir()
        watch = Watch(tmp)
        out = tmp / "out"
        refused(w.run(*args(w, ds, out)), str(ds), "not a regular file")
        watch.unchanged()

    CELLS[command, 3] = run


_planted("tables", "manifest-fifo", args=lambda w, ds, out: ["tables", ds])
_planted("sql", "manifest-folder", args=lambda w, ds, out: ["sql", ds, "SELECT 1"])
_planted("report", "part-fifo", args=lambda w, ds, out: ["report", ds, "-o", f"{out}.html"])
_planted("export", "part-folder", args=lambda w, ds, out: ["export", ds, "-o", f"{out}.json"])
_planted(
    "export-flows",
    "manifest-fifo",
    args=lambda w, ds, out: ["export", ds, "--flows", "-o", f"{out}.csv"],
)
_planted("diff", "manifest-fifo", args=lambda w, ds, out: ["diff", ds, "j", "j"])
_planted("hang", "part-fifo", args=lambda w, ds, out: ["hang", ds])


@cell("predict", 3)
def _predict_special(w: World, tmp: Path) -> None:
    fifo = _fifo(tmp / "job.yaml")
    refused(w.run("predict", "--config", fifo), str(fifo), "not a regular file")
    refused(
        w.run("predict", "--config", w.job_yaml, "--nccl-tests", "/dev/zero"),
        "/dev/zero",
        "not a regular file",
    )


@cell("tokens", 3)
def _tokens_special(w: World, tmp: Path) -> None:
    fifo = _fifo(tmp / "text.txt")
    refused(w.run("tokens", fifo), str(fifo), "not a regular file")
    tok = _fifo(tmp / "tokenizer.json")
    refused(w.run("tokens", w.text, "--tokenizer", tok), str(tok), "not a regular file")
    refused(w.run("tokens", "/dev/zero"), "/dev/zero", "not a regular file")


# ------------------------------------------------------ class 4: parts out of the schema


def _rewrite(part: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    table = pq.read_table(part)
    pq.write_table(change(table), part)


def _set_column(name: str, array: Callable[[int], pa.Array]) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        i = table.schema.get_field_index(name)
        return table.set_column(i, name, array(table.num_rows))

    return change


def _nan_floats(n: int) -> pa.Array:
    return pa.array([float("nan")] + [float("inf")] * (n - 1), pa.float64())


def _decimal38(n: int) -> pa.Array:
    import decimal

    return pa.array([decimal.Decimal(10**30)] * n, pa.decimal128(38, 0))


def _timestamps(n: int) -> pa.Array:
    return pa.array(list(range(n)), pa.timestamp("ns"))


def _bad_utf8(n: int) -> pa.Array:
    return pa.array([b"\xff\xfe"] * n, pa.binary()).view(pa.string())


def _near_max(n: int) -> pa.Array:
    return pa.array([2**63 - 2] * n, pa.int64())


def _schema_cell(
    command: str,
    table: str,
    column: str,
    array: Callable[[int], pa.Array] | None,
    *fragments: str,
    args: Callable[[World, Path, Path], list],
) -> None:
    def run(w: World, tmp: Path) -> None:
        ds = w.copy(tmp / "ds")
        part = w.part(ds, table)
        if array is None:  # another table's columns
            other = w.part(ds, "ranks" if table != "ranks" else "steps")
            shutil.copy(other, part)
        else:
            _rewrite(part, _set_column(column, array))
        watch = Watch(tmp)
        out = tmp / "out"
        rel = str(part.relative_to(ds))
        refused(w.run(*args(w, ds, out)), rel, *fragments)
        watch.unchanged()

    CELLS[command, 4] = run


_schema_cell(
    "tables", "collectives", "", None, "not a column", args=lambda w, ds, o: ["tables", ds]
)
_schema_cell(
    "sql",
    "ops",
    "start_ns",
    _timestamps,
    "start_ns",
    "TIMESTAMP",
    args=lambda w, ds, o: ["sql", ds, "SELECT sum(start_ns) FROM ops"],
)
_schema_cell(
    "report",
    "collectives",
    "bytes",
    _nan_floats,
    "bytes",
    "DOUBLE",
    args=lambda w, ds, o: ["report", ds, "-o", f"{o}.html"],
)
_schema_cell(
    "link",
    "collectives",
    "bytes",
    _decimal38,
    "bytes",
    "DECIMAL",
    args=lambda w, ds, o: ["link", ds],
)
_schema_cell(
    "export",
    "ops",
    "name",
    _bad_utf8,
    "name",
    "UTF8",
    args=lambda w, ds, o: ["export", ds, "--ops", "-o", f"{o}.json"],
)
_schema_cell(  # a duration near int64's limit: a sum of two would overflow
    "export-flows",
    "collectives",
    "dur_ns",
    _near_max,
    "dur_ns",
    "outside",
    args=lambda w, ds, o: ["export", ds, "--flows", "-o", f"{o}.csv"],
)
_schema_cell("hang", "collectives", "", None, "not a column", args=lambda w, ds, o: ["hang", ds])
_schema_cell(
    "predict",
    "collectives",
    "dur_ns",
    _nan_floats,
    "dur_ns",
    args=lambda w, ds, o: ["predict", "--from", ds, "--config", w.job_yaml],
)


_decimal_link = CELLS["link", 4]


@cell("link", 4)
def _link_out_of_schema(w: World, tmp: Path) -> None:
    """A DECIMAL(38) column; then values each in their range that add up past int64."""
    _decimal_link(w, tmp / "decimal")
    ds = w.copy(tmp / "ds")
    for rel in json.loads((ds / "manifest.json").read_text())["tables"]["collectives"]:
        _rewrite(ds / rel, _set_column("bytes", lambda n: pa.array([2**62] * n, pa.int64())))
    watch = Watch(ds)
    refused(w.run("link", ds), str(ds), "add up past 64-bit integers", "column bytes")
    watch.unchanged()


@cell("diff", 4)
def _diff_twice(w: World, tmp: Path) -> None:
    """The same part listed twice in the manifest's index: every row would count twice."""
    ds = w.copy(tmp / "ds")
    doc = json.loads((ds / "manifest.json").read_text())
    rels = doc["tables"]["collectives"]
    rels.append(rels[0])
    (ds / "manifest.json").write_text(json.dumps(doc))
    watch = Watch(tmp)
    refused(w.run("diff", ds, "j", "j"), "manifest.json", "listed twice", rels[0])
    watch.unchanged()


@cell("ingest", 4)
def _ingest_merges_bad_part(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    part = w.part(ds, "collectives")
    _rewrite(part, _set_column("rank", _nan_floats))
    watch = Watch(tmp / "ds")
    extra = tmp / "extra"
    extra.mkdir()
    shutil.copy(_sample("rank2.nccl.log"), extra)
    refused(w.run("ingest", extra, "-o", ds, "--job", "j"), str(part.relative_to(ds)), "rank")
    watch.unchanged()


NOT_APPLICABLE["tokens", 4] = "reads no dataset"


def _near_limits(ds: Path, tables: tuple[str, ...] | None = None) -> None:
    """Every BIGINT ``*_ns``, ``*bytes`` and ``*count`` column of ``tables`` (all when
    None) set to the largest value its schema allows (2**62 where it states a range, else
    2**63 - 2; a ``start_ns`` 2**62): each value is valid, any two add up past int64."""
    from pipeline.dataset.schema import load_schemas

    schemas = load_schemas()
    doc = json.loads((ds / "manifest.json").read_text())
    for table, rels in doc["tables"].items():
        if tables is not None and table not in tables:
            continue
        for rel in dict.fromkeys(rels):
            part = pq.read_table(ds / rel)
            for column in schemas[table].columns:
                name = column.name
                if name not in part.column_names or column.type != pa.int64():
                    continue
                if not name.endswith(("_ns", "bytes", "count")):
                    continue
                top = int(column.range[1]) if column.range else 2**63 - 2
                value = 2**62 if name == "start_ns" else top
                part = _set_column(name, lambda n, v=value: pa.array([v] * n, pa.int64()))(part)
            pq.write_table(part, ds / rel)


#: Per command: the tables set near int64's limits, the run, and what it must give: exit 1
#: with the located overflow line (``None``), or a check of its correct result.
_SUMS: dict[str, tuple[tuple[str, ...] | None, Callable[[World, Path, Path], list]]] = {
    "tables": (None, lambda w, ds, o: ["tables", ds]),
    "sql": (
        None,
        lambda w, ds, o: [
            "sql",
            ds,
            "SELECT count(*) AS n, sum(bytes) AS s FROM token_wire",
            "--format",
            "csv",
        ],
    ),  # fmt: skip
    "report": (None, lambda w, ds, o: ["report", ds, "-o", f"{o}.html"]),
    "export": (("collectives",), lambda w, ds, o: ["export", ds, "-o", f"{o}.json"]),
    "export-flows": (
        None,
        lambda w, ds, o: ["export", ds, "--flows", "--window", "0:", "-o", f"{o}.csv"],
    ),  # fmt: skip
    "diff": (None, lambda w, ds, o: ["diff", ds, "j", "j", "--format", "json"]),
    "predict": (
        None,
        lambda w, ds, o: ["predict", "--from", ds, "--config", w.job_yaml, "--format", "json"],
    ),  # fmt: skip
    "hang": (None, lambda w, ds, o: ["hang", ds, "--format", "json"]),
}


def _sums_right(command: str, stdout: str) -> None:
    """The result of a command that answered over values near int64's limits: exact sums
    (HUGEINT) or floats, never a number wrapped negative."""
    if command == "sql":
        n, total = stdout.splitlines()[1].split(",")
        assert int(total) == int(n) * (2**63 - 2), stdout
    elif command == "predict":
        assert json.loads(stdout)["observed"]["step_s"] == pytest.approx((2**63 - 2) / 1e9)
    elif command == "diff":
        rows = json.loads(stdout)["diff_steps"]
        assert rows and all(r["a"] is None or r["a"] >= 0 for r in rows), rows


def _sums_cell(command: str) -> None:
    """The command's class 4 cell, then its dataset with values near int64's limits: one
    line naming the dataset and the SQL that adds them up, or a correct result."""
    schema_cell = CELLS[command, 4]
    tables, args = _SUMS[command]

    def run(w: World, tmp: Path) -> None:
        schema_cell(w, tmp / "schema")
        ds = w.copy(tmp / "sums" / "ds")
        _near_limits(ds, tables)
        watch = Watch(ds)
        result = w.run(*args(w, ds, tmp / "sums" / "out"))
        if command in ("report", "export", "export-flows"):
            refused(result, str(ds), "add up past 64-bit integers")
        else:
            ok(result, code=result.code if command == "hang" and result.code == 4 else 0)
            _sums_right(command, result.stdout)
        watch.unchanged()

    CELLS[command, 4] = run


for _command in _SUMS:
    _sums_cell(_command)

_hang_sums = CELLS["hang", 4]


@cell("hang", 4)
def _hang_counts_past_int64(w: World, tmp: Path) -> None:
    """Dumps read straight: an all_to_all whose four inputs of 2**62 elements add up to
    2**64 (0 once wrapped to int64) and whose outputs are empty is unbalanced; a byte count
    past the schema's range is refused naming the dump."""
    from tests.reliability.corpus import flight_recorder_doc

    _hang_sums(w, tmp / "dataset")
    dumps = tmp / "dumps"
    dumps.mkdir()
    for rank in range(4):
        doc = flight_recorder_doc(rank, entries=1)
        doc["pg_config"]["0"]["ranks"] = "[0, 1, 2, 3]"
        doc["entries"][0].update(
            profiling_name="nccl:all_to_all", input_sizes=[[2**62]], output_sizes=[[0]],
            input_dtypes=["Byte"], output_dtypes=["Byte"],
        )  # fmt: skip
        (dumps / f"rank{rank}.flight_recorder.json").write_text(json.dumps(doc))
    result = ok(w.run("hang", dumps), code=4)
    assert "all_to_all_total differs" in result.stdout, result.stdout
    doc["entries"][0]["input_sizes"] = [[2**63 - 1]]
    (dumps / "rank3.flight_recorder.json").write_text(json.dumps(doc))
    refused(w.run("hang", dumps), f"{dumps / 'rank3.flight_recorder.json'}: collectives.bytes")


# ----------------------------------------------------------- class 5: huge claims


@cell("ingest", 5)
def _ingest_huge_claims(w: World, tmp: Path) -> None:
    src = tmp / "src"
    src.mkdir()
    text = _sample("rank0.nccl.log").read_text()
    claim = text.replace("nranks 2 ", "nranks 1073741824 ", 1)
    assert claim != text
    (src / "rank0.nccl.log").write_text(claim)
    result = w.run("ingest", src, "-o", tmp / "a", "--job", "a")
    refused(result, f"{src / 'rank0.nccl.log'}:9: nranks 1073741824 is more than")
    long_line = tmp / "long" / "rank0.nccl.log"
    long_line.parent.mkdir()
    with long_line.open("w") as f:
        f.write(text.splitlines()[0] + "\n")
        f.write("x" * 50_000_000 + "\n")
    result = w.run("ingest", long_line, "-o", tmp / "b", "--job", "b")
    if result.code:
        refused(result, str(long_line))


@cell("tokens", 5)
def _tokens_huge(w: World, tmp: Path) -> None:
    letters = tmp / "a.txt"
    letters.write_text("a" * 200_000)
    result = w.run("tokens", letters, "--train-vocab", "4096")
    if result.code:
        refused(result, str(letters))
    usage_error(w.run("tokens", w.text, "--train-vocab", "1000000000"), "--train-vocab")


@cell("predict", 5)
def _predict_huge(w: World, tmp: Path) -> None:
    """A layout at the documented limit: refused with the limit, or answered in bounds."""
    result = w.run(
        "predict",
        "--config",
        w.job_yaml,
        "--dp",
        "1073741824",
        "--global-batch",
        str(2 * 1073741824),
    )
    if result.code:
        refused(result)
    _what_if_work(w, tmp)


#: job.yaml values, each within its documented limit, whose what-if over the whole world
#: would take long: a world of 2^30 ranks and 16,384 layers (229,249 pipeline stages to
#: project), and one of 735,134,400 = 2^6 3^3 5^2 7 11 13 17 ranks (136,080 layouts).
_WHAT_IF_WORLDS = {
    "MAX_STAGES": {"tp": 64, "dp": 16777216},
    "MAX_LAYOUTS": {"tp": 64, "dp": 11486475},
}


def _what_if_work(w: World, tmp: Path) -> None:
    """``predict --from`` over such a job.yaml: refused up front, naming the limit; the
    report's what-if section says why it is missing, the rest of the report is written."""
    for limit, parallel in _WHAT_IF_WORLDS.items():
        job = tmp / f"{limit}.yaml"
        job.write_text(
            "model: {layers: 16384, hidden: 256, heads: 64, kv_heads: 64, ffn_hidden: 1024, "
            "vocab: 8192, seq_len: 128}\n"
            f"parallel: {{tp: {parallel['tp']}, pp: 1, dp: {parallel['dp']}}}\n"
            f"batch: {{micro_batch: 1, global_batch: {parallel['dp']}}}\n"
        )
        result = w.run("predict", "--from", w.dataset, "--config", job)
        refused(result, f"{job}: what-if:", f"pipeline.model.whatif.{limit}")
    ds = w.copy(tmp / "ds")
    ok(w.run("report", ds, "--config", job, "-o", tmp / "r.html"))
    assert "pipeline.model.whatif.MAX_LAYOUTS" in (tmp / "r.html").read_text()


def _huge_communicator(command: str, args: Callable[[World, Path, Path], list]) -> None:
    """A communicators row claiming 2**30 ranks as a stored sequence (a few bytes): the view
    would expand it into a list of a billion ranks."""

    def run(w: World, tmp: Path) -> None:
        ds = w.copy(tmp / "ds")
        part = w.part(ds, "communicators")

        def change(table: pa.Table) -> pa.Table:
            n = table.num_rows
            table = table.set_column(
                table.schema.get_field_index("nranks"), "nranks", pa.array([2**30] * n, pa.int64())
            )
            table = table.set_column(
                table.schema.get_field_index("ranks_first"),
                "ranks_first",
                pa.array([0] * n, pa.int64()),
            )
            return table.set_column(
                table.schema.get_field_index("ranks_stride"),
                "ranks_stride",
                pa.array([1] * n, pa.int64()),
            )

        _rewrite(part, change)
        watch = Watch(tmp)
        result = w.run(*args(w, ds, tmp / "out"))
        if result.code:
            refused(result, str(part.relative_to(ds)), "nranks")
        watch.unchanged(except_=("out",))
        _long_text(w, tmp / "text", args)

    CELLS[command, 5] = run


def _long_text(w: World, tmp: Path, args: Callable[[World, Path, Path], list]) -> None:
    """An ops part with a name of 2 MB (a few KB of zstd), its row group's text past the
    limit (lowered to 1 MiB through TOKENWIRE_MAX_TEXT_CHUNK_BYTES, the same check as at
    the 1 GiB default): refused from the footer, naming the part and the column."""
    ds = w.copy(tmp / "ds")
    part = w.part(ds, "ops")
    table = pq.read_table(part)
    names = table.column("name").to_pylist()
    names[0] = "x" * 2_000_000
    table = table.set_column(table.schema.get_field_index("name"), "name", pa.array(names))
    pq.write_table(table, part, compression="zstd")
    assert part.stat().st_size < 1_000_000
    watch = Watch(tmp)
    result = w.run(*args(w, ds, tmp / "out"), env={"TOKENWIRE_MAX_TEXT_CHUNK_BYTES": "1048576"})
    refused(result, str(part.relative_to(ds)), "column 'name'", "TOKENWIRE_MAX_TEXT_CHUNK_BYTES")
    watch.unchanged()


_huge_communicator("link", lambda w, ds, o: ["link", ds])
_huge_communicator("sql", lambda w, ds, o: ["sql", ds, "SELECT sum(len(ranks)) FROM communicators"])
_huge_communicator("report", lambda w, ds, o: ["report", ds, "-o", f"{o}.html"])
_huge_communicator("tables", lambda w, ds, o: ["tables", ds])
_huge_communicator("export", lambda w, ds, o: ["export", ds, "-o", f"{o}.json"])
_huge_communicator("export-flows", lambda w, ds, o: ["export", ds, "--flows", "-o", f"{o}.csv"])
_huge_communicator("diff", lambda w, ds, o: ["diff", ds, "j", "j"])
_huge_communicator("hang", lambda w, ds, o: ["hang", ds])


# ------------------------------------------------------ class 6: numbers out of range


def _option_cell(command: str, option: str, values: list[str], *args: str) -> None:
    def run(w: World, tmp: Path) -> None:
        ds = w.copy(tmp / "ds")
        for value in values:
            argv = [ds if a == "DS" else w.job_yaml if a == "YAML" else a for a in args]
            usage_error(w.run(*argv, option, value), option)

    CELLS[command, 6] = run


_BAD_COUNTS = ["-1", "0", "99999999999999999999999", "1e9", "x"]
_option_cell(
    "export",
    "--step",
    ["-1", "99999999999999999999999", "1.5", "x"],
    "export",
    "DS",
    "-o",
    "/tmp/never.json",
)
_option_cell(
    "export-flows",
    "--window",
    ["5:-99999999999999999999999", "x:1", "9:1"],
    "export",
    "DS",
    "--flows",
    "-o",
    "/tmp/never.csv",
)
_option_cell(
    "predict", "--rank", ["-1", "99999999999999999999999", "1.5"], "predict", "--config", "YAML"
)


@cell("ingest", 6)
def _ingest_numbers(w: World, tmp: Path) -> None:
    for value in _BAD_COUNTS:
        usage_error(w.run("ingest", w.src, "-o", tmp / "ds", "--jobs", value), "--jobs")
    assert not (tmp / "ds").exists()
    # a negative count in an NCCL line: refused at its line
    text = _sample("rank0.nccl.log").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(text) if " count " in line)
    line = text[at]
    import re

    text[at] = re.sub(r" count (\d+)", " count -\\1", line, count=1)
    bad = tmp / "neg" / "rank0.nccl.log"
    bad.parent.mkdir()
    bad.write_text("".join(text))
    refused(w.run("ingest", bad, "-o", tmp / "neg.ds"), f"{bad}:{at + 1}:")
    # gzip with name and comment fields longer than a read of the file's head: valid gzip
    kineto = next(w.src.glob("rank1.*.pt.trace.json.gz"))
    gz = tmp / "gz" / "rank1.pt.trace.json.gz"
    gz.parent.mkdir()
    body = gzip.compress(gzip.decompress(kineto.read_bytes()), mtime=0)
    header = bytearray(body[:10])
    header[3] = 0x08 | 0x10  # FNAME, FCOMMENT
    fields = b"n" * 300_000 + b"\0" + b"c" * 300_000 + b"\0"
    gz.write_bytes(bytes(header) + fields + body[10:])
    ok(w.run("ingest", gz, "-o", tmp / "gz.ds"))


@cell("tokens", 6)
def _tokens_numbers(w: World, tmp: Path) -> None:
    for value in _BAD_COUNTS:
        usage_error(w.run("tokens", w.text, "--train-vocab", value), "--train-vocab")


for _command in ("link", "tables", "sql", "report", "diff", "hang"):
    NOT_APPLICABLE[_command, 6] = "takes no numeric option (numbers in its dataset: class 4)"


# ---------------------------------------------------------------- class 7: native code


@cell("tokens", 7)
def _tokens_native(w: World, tmp: Path) -> None:
    """Tokenizer files that the Rust libraries would panic on, checked in Python first."""
    bad = tmp / "tokenizer.json"
    bad.write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}))
    result = w.run("tokens", w.text, "--tokenizer", bad)
    if result.code:
        refused(result, str(bad))
    tik = tmp / "ranks.tiktoken"
    tik.write_text("!!!notbase64 0\nYQ== -5\n")
    refused(w.run("tokens", w.text, "--tokenizer", tik), str(tik))


@cell("sql", 7)
def _sql_native(w: World, tmp: Path) -> None:
    """Results Polars would panic on become text or one error."""
    ds = w.copy(tmp / "ds")
    for query in (
        "SELECT 1 AS a, 2 AS a",
        "SELECT {'x': 1}::STRUCT(x INT) AS s, [[[[]]]] AS l",
        "SELECT 170141183460469231731687303715884105727::HUGEINT AS h",
    ):
        result = w.run("sql", ds, query)
        if result.code:
            refused(result)


for _command in ("ingest", "link", "tables", "export", "export-flows", "diff", "predict", "hang"):
    NOT_APPLICABLE[_command, 7] = (
        "its inputs reach native code (pyarrow, DuckDB, Polars) only after the class 3, 4 "
        "and 6 checks; those cells cover it"
    )


# ------------------------------------------------------- class 8: signals and limits


def _nofile_cell(command: str, args: Callable[[World, Path, Path], list]) -> None:
    """Under ``ulimit -n 16``: done, or one line naming the limit."""

    def run(w: World, tmp: Path) -> None:
        ds = w.copy(tmp / "ds")
        watch = Watch(tmp / "ds")
        result = w.run(*args(w, ds, tmp / "out"), open_files=16)
        if result.code not in (0, 4):
            line = refused(result)
            assert "open files" in line, line
        if command not in ("ingest", "link"):
            watch.unchanged()

    CELLS[command, 8] = run


def _limits() -> None:
    """The memory and CPU limits of the forked cells, for a command run on its own."""
    import resource

    from tests.reliability.hostile import CPU_LIMIT_S, MEMORY_LIMIT

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))


def _as_result(done: subprocess.CompletedProcess):
    from tests.reliability.matrix import Result

    return Result(done.returncode, done.stdout, done.stderr)


_nofile_cell("tables", lambda w, ds, o: ["tables", ds])
_nofile_cell("report", lambda w, ds, o: ["report", ds, "-o", f"{o}.html"])
_nofile_cell("export", lambda w, ds, o: ["export", ds, "-o", f"{o}.json"])
_nofile_cell("export-flows", lambda w, ds, o: ["export", ds, "--flows", "-o", f"{o}.csv"])
_nofile_cell("diff", lambda w, ds, o: ["diff", ds, "j", "j"])
_nofile_cell("hang", lambda w, ds, o: ["hang", ds])
_nofile_cell("predict", lambda w, ds, o: ["predict", "--from", ds, "--config", w.job_yaml])
_nofile_cell("tokens", lambda w, ds, o: ["tokens", w.text])
_nofile_cell("link", lambda w, ds, o: ["link", ds])


@cell("sql", 8)
def _sql_interrupt(w: World, tmp: Path) -> None:
    """Ctrl-C stops a query that would run for hours."""
    ds = w.copy(tmp / "ds")
    # (hours of hashing in constant memory)
    query = "SELECT sum(hash(range)) FROM range(100000000000000)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "sql", str(ds), query],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limits,  # noqa: PLW1509 - the limits must be set in the child
    )
    try:
        time.sleep(4)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    refused(_as_result_code(proc.returncode, out, err), "interrupted", code=130)
    # under a ulimit -v too small to load its libraries: the limit named, exit 1
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "sql", str(ds), "SELECT count(*) FROM ops"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_small_address_space,  # noqa: PLW1509 - the limit must be set in the child
    )
    line = refused(_as_result(done), "out of memory")
    assert "ulimit -v 307,200" in line, line


def _small_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (300 << 20, 300 << 20))


def _as_result_code(code: int, out: str, err: str):
    from tests.reliability.matrix import Result

    return Result(code, out, err)


def _parent_killed(w: World, tmp: Path) -> None:
    """The parent of ``ingest --jobs 2`` killed: its workers exit too; the dataset stays as
    the last commit left it (here: not there)."""
    from tests.reliability.procs import make_job

    src = make_job(tmp / "job", events=20_000)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "ingest",
            str(src),
            "-o",
            str(tmp / "ds"),
            "--jobs",
            "2",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    children: list[int] = []
    while time.monotonic() < deadline and len(children) < 2:
        children = _children(proc.pid)
        time.sleep(0.05)
    assert children, "no worker started"
    proc.kill()
    proc.wait()
    end = time.monotonic() + 30
    while time.monotonic() < end and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    left = [pid for pid in children if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "workers outlived their parent"


@cell("ingest", 8)
def _ingest_workers(w: World, tmp: Path) -> None:
    _parent_killed(w, tmp)
    _worker_killed(w, tmp)


def _worker_killed(w: World, tmp: Path) -> None:
    """A worker of ``ingest --jobs 2`` killed: one line naming a file, exit 1, no dataset."""
    from tests.reliability.procs import make_job

    src = make_job(tmp / "job2", events=20_000)
    argv = ["ingest", str(src), "-o", str(tmp / "ds2"), "--jobs", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", *argv],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and not workers:
            workers = [p for p in _children(proc.pid) if _is_worker(p)]
            time.sleep(0.05)
        assert workers, "no worker started"
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    from tests.reliability.matrix import Result

    result = Result(proc.returncode, "", err)
    if result.code == 0:  # (the worker had finished its files)
        return
    refused(result, str(src), "worker process")
    assert not (tmp / "ds2").exists()


def _is_worker(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"spawn_main" in cmd


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -------------------------------------------------------------- class 9: terminal text

_CONTROL = "\x1b[31m\x07\r"


def _error_line_cell(command: str, args: Callable[[Path], list]) -> None:
    """A path holding ESC, BEL and CR: the error line shows them escaped."""

    def run(w: World, tmp: Path) -> None:
        missing = tmp / f"ds{_CONTROL}x"
        result = w.run(*args(missing))
        line = refused(result, code=result.code if result.code in (1, 2) else 1)
        assert "\\x1b" in line and "\\x07" in line and "\\r" in line, line

    CELLS[command, 9] = run


_error_line_cell("ingest", lambda p: ["ingest", p, "-o", p.parent / "o"])
_error_line_cell("link", lambda p: ["link", p])
_error_line_cell("tables", lambda p: ["tables", p])
_error_line_cell("report", lambda p: ["report", p, "-o", p.parent / "r.html"])
_error_line_cell("export", lambda p: ["export", p, "-o", p.parent / "t.json"])
_error_line_cell("export-flows", lambda p: ["export", p, "--flows", "-o", p.parent / "f.csv"])
_error_line_cell("diff", lambda p: ["diff", p, "j", "j"])
_error_line_cell("predict", lambda p: ["predict", "--config", p])
_error_line_cell("tokens", lambda p: ["tokens", p])


@cell("sql", 9)
def _sql_terminal(w: World, tmp: Path) -> None:
    ds = w.copy(tmp / "ds")
    result = ok(w.run("sql", ds, "SELECT chr(27) || '[31m' || chr(7) || chr(13) || 'x' AS v"))
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout, result.stdout
    assert "\\x1b" in result.stdout, result.stdout


@cell("hang", 9)
def _hang_terminal(w: World, tmp: Path) -> None:
    from tests.reliability.corpus import flight_recorder_doc

    src = tmp / "dumps"
    src.mkdir()
    for rank in (0, 1):
        doc = flight_recorder_doc(rank, entries=4 - rank)
        doc["pg_config"]["0"]["desc"] = f"pg{_CONTROL}name"
        for entry in doc["entries"]:
            entry["process_group"] = ["0", f"pg{_CONTROL}name"]
        (src / f"rank{rank}.flight_recorder.json").write_text(json.dumps(doc))
    result = w.run("hang", src)
    assert result.code in (0, 4), result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout, result.stdout
    assert "\r" not in result.stdout


# ------------------------------------------------------------------------- the matrix


def test_every_cell_is_a_test_or_not_applicable() -> None:
    for command in COMMANDS:
        for klass in CLASSES:
            key = (command, klass)
            assert (key in CELLS) != (key in NOT_APPLICABLE), key
    for reason in NOT_APPLICABLE.values():
        assert len(reason) > 10


#: The cells that apply, in the matrix's order (the others are NOT_APPLICABLE, each with
#: its reason: test_every_cell_is_a_test_or_not_applicable).
APPLICABLE = [(c, k) for c in COMMANDS for k in CLASSES if (c, k) in CELLS]


@pytest.mark.parametrize(
    ("command", "klass"), APPLICABLE, ids=[f"{k}-{CLASSES[k]}-{c}" for c, k in APPLICABLE]
)
def test_cell(world: World, tmp_path: Path, command: str, klass: int) -> None:
    key = (command, klass)
    outside = Watch(world.src, world.dataset)
    CELLS[key](world, tmp_path)
    outside.unchanged()
