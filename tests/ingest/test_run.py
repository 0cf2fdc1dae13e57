"""``tokenwire ingest`` end to end: dataset layout, idempotence, bad input, rank clashes."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.dataset.schema import load_schemas
from pipeline.dataset.small_parts import unpack_table
from pipeline.dataset.store import read_manifest
from pipeline.dataset.views import connect
from pipeline.ingest import run
from tests.conftest import tree_digest

TINY = {
    "schemaVersion": 1,
    "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2},
    "traceEvents": [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 7,
            "tid": 7,
            "ts": 100,
            "dur": 50,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "c10d::allreduce_",
            "pid": 7,
            "tid": 7,
            "ts": 110,
            "dur": 1,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "gloo:all_reduce",
            "pid": 7,
            "tid": 8,
            "ts": 111,
            "dur": 20,
            "args": {"Input Dims": [[1024]], "Input type": ["float"]},
        },
    ],
}


def _trace(folder: Path, name: str, rank: int = 0) -> Path:
    doc = json.loads(json.dumps(TINY))
    doc["distributedInfo"]["rank"] = rank
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


def _ingest(*args: str):
    return CliRunner().invoke(cli, ["ingest", *args])


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A dataset holding two good ranks of job ``good``."""
    src = tmp_path / "good"
    _trace(src, "rank0.json", 0)
    _trace(src, "rank1.json", 1)
    out = tmp_path / "ds"
    result = _ingest(str(src), "-o", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_layout_and_rows(dataset: Path) -> None:
    con = connect(dataset)
    assert con.execute("SELECT job, rank, op, bytes FROM collectives ORDER BY rank").fetchall() == [
        ("good", 0, "all_reduce", 4096),
        ("good", 1, "all_reduce", 4096),
    ]
    assert con.execute("SELECT count(*) FROM files").fetchall()[0] == (2,)
    # each table's small parts of a job are merged into one, with rank as a column
    parts = sorted(p.relative_to(dataset).as_posix() for p in dataset.rglob("*.parquet"))
    assert [p for p in parts if p.startswith("collectives/")] == read_manifest(dataset).parts(
        "collectives"
    )
    assert re.fullmatch(r"collectives/job=good/part-[0-9a-f]{16}\.parquet", parts[0])
    assert sorted(pq.read_table(dataset / parts[0]).column("rank").to_pylist()) == [0, 1]
    assert not [p for p in parts if "/rank=" in p]


def test_every_part_matches_its_schema_exactly(dataset: Path) -> None:
    manifest = read_manifest(dataset)
    for name, schema in load_schemas().items():
        for rel in manifest.parts(name):
            folders = re.findall(r"(\w+)=[^/]*/", rel)
            expected = schema.part_arrow(folders)
            assert pq.read_schema(dataset / rel).remove_metadata() == expected, rel


def test_reingest_is_a_noop(dataset: Path, tmp_path: Path) -> None:
    before = tree_digest(dataset)
    result = _ingest(str(tmp_path / "good"), "-o", str(dataset))
    assert result.exit_code == 0
    assert "0 ingested, 2 skipped" in result.stderr
    assert tree_digest(dataset) == before


def _assert_refused(result, dataset: Path, before: dict, needle: str) -> None:
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert needle in errors[0]
    assert "Traceback" not in result.stderr
    assert tree_digest(dataset) == before


def test_truncated_json(dataset: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "rank2.json"
    bad.parent.mkdir()
    text = json.dumps(TINY)
    bad.write_text(text[:250])
    before = tree_digest(dataset)
    result = _ingest(str(bad), "-o", str(dataset))
    _assert_refused(result, dataset, before, f"{bad}: byte 250: JSON ends early")


def test_malformed_json_names_the_byte(dataset: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "rank2.json"
    bad.parent.mkdir()
    bad.write_text('{"traceEvents": [ {"ph": "X",, } ]}')
    before = tree_digest(dataset)
    result = _ingest(str(bad), "-o", str(dataset))
    _assert_refused(result, dataset, before, f"{bad}: byte 29: malformed JSON")


def test_gzip_with_broken_crc(dataset: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "rank2.json.gz"
    bad.parent.mkdir()
    data = bytearray(gzip.compress(json.dumps(TINY).encode()))
    data[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    bad.write_bytes(bytes(data))
    before = tree_digest(dataset)
    result = _ingest(str(bad), "-o", str(dataset))
    _assert_refused(result, dataset, before, f"{bad}: byte {len(data) - 5}: broken gzip data")


def test_json_that_is_not_a_trace(dataset: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"model": "gpt", "layers": 4}))
    before = tree_digest(dataset)
    result = _ingest(str(bad), "-o", str(dataset))
    _assert_refused(result, dataset, before, f"{bad}: not a trace format tokenwire reads")


def test_trace_with_wrong_types(dataset: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "rank2.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": 5}]}))
    before = tree_digest(dataset)
    result = _ingest(str(bad), "-o", str(dataset))
    _assert_refused(result, dataset, before, "$.traceEvents[0].name")


def test_empty_folder(dataset: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    before = tree_digest(dataset)
    result = _ingest(str(empty), "-o", str(dataset))
    _assert_refused(result, dataset, before, f"{empty}: no files in this folder")


def test_two_files_with_one_rank(dataset: Path, tmp_path: Path) -> None:
    clash = tmp_path / "good2"
    _trace(clash, "rank0-again.json", 0)
    doc = json.loads((clash / "rank0-again.json").read_text())
    doc["traceEvents"][0]["dur"] = 60  # other bytes, same rank
    (clash / "rank0-again.json").write_text(json.dumps(doc))
    before = tree_digest(dataset)
    result = _ingest(str(clash), "-o", str(dataset), "--job", "good")
    _assert_refused(result, dataset, before, "rank 0 of job 'good' is already taken by")


def test_two_files_with_one_rank_in_one_run(tmp_path: Path) -> None:
    src = tmp_path / "job"
    _trace(src, "a.json", 0)
    doc = json.loads((src / "a.json").read_text())
    doc["traceEvents"][0]["dur"] = 60
    (src / "b.json").write_text(json.dumps(doc))
    result = _ingest(str(src), "-o", str(tmp_path / "ds"))
    assert result.exit_code == 1
    assert "b.json: rank 0 of job 'job' is already taken by" in result.stderr
    con = connect(tmp_path / "ds")
    assert con.execute("SELECT count(*) FROM files").fetchall()[0] == (1,)
    # the refused file's rows are nowhere (its small tables waited for the commit with a's)
    kept = con.execute("SELECT file_id FROM files").fetchall()
    for table in ("ranks", "ops"):
        ids = con.execute(f"SELECT DISTINCT file_id FROM {table}").fetchall()
        assert ids == kept, table
    assert not list((tmp_path / "ds").rglob("*.tmp-*"))


def test_a_refused_file_is_taken_out_of_small_tables_written_with_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three files' small tables pass the memory limit together and are written as parts
    they share; then one of them is refused for its rank: those parts are written again
    without its rows."""
    src = tmp_path / "job"
    _trace(src, "a.json", 0)
    doc = json.loads((src / "a.json").read_text())
    doc["traceEvents"][0]["dur"] = 60
    (src / "b.json").write_text(json.dumps(doc))
    _trace(src, "c.json", 1)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # (parsed together, as the ingest parses them: each file's share of the tables they
    # share)
    outs = run.parse_files([(f, "job", False, "0" * 64, scratch, 4096) for f in src.iterdir()])
    sizes = [sum(r.nbytes for r in out.small.values()) for out in outs]
    # held until the third file, then written together
    monkeypatch.setattr(run, "SMALL_TABLES_BYTES", sum(sizes) - min(sizes) // 2)
    rewritten = []
    copy_part_without = run.copy_part_without

    def spy(dataset: Path, rel: str, new: str, file_ids: set[str]) -> None:
        rewritten.append(rel)
        copy_part_without(dataset, rel, new, file_ids)

    monkeypatch.setattr(run, "copy_part_without", spy)
    result = _ingest(str(src), "-o", str(tmp_path / "ds"))
    assert result.exit_code == 1
    assert "b.json: rank 0 of job 'job' is already taken by" in result.stderr
    assert rewritten  # the shared parts, written again
    con = connect(tmp_path / "ds")
    kept = sorted(con.execute("SELECT file_id FROM files").fetchall())
    assert len(kept) == 2
    for table in ("ranks", "ops"):
        ids = con.execute(f"SELECT DISTINCT file_id FROM {table} ORDER BY 1").fetchall()
        assert ids == kept, table
    assert con.execute("SELECT list(rank ORDER BY rank) FROM ranks").fetchall()[0] == ([0, 1],)
    listed = {p for name in load_schemas() for p in read_manifest(tmp_path / "ds").parts(name)}
    on_disk = {
        p.relative_to(tmp_path / "ds").as_posix() for p in (tmp_path / "ds").rglob("*.parquet")
    }
    assert on_disk == listed


def test_bad_file_into_new_dataset_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{")
    result = _ingest(str(bad), "-o", str(tmp_path / "new"))
    assert result.exit_code == 1
    assert not (tmp_path / "new").exists()


def test_tables_and_sql_commands(dataset: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["tables", str(dataset)])
    assert result.exit_code == 0
    assert "collectives (2 rows)" in result.output
    assert "bytes" in result.output and "[bytes]" in result.output
    result = runner.invoke(
        cli,
        [
            "sql",
            str(dataset),
            "SELECT rank, bytes FROM collectives ORDER BY rank",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0
    assert result.output == "rank,bytes\n0,4096\n1,4096\n"
    result = runner.invoke(
        cli, ["sql", str(dataset), "--format", "json"], input="SELECT count(*) AS n FROM steps"
    )
    assert json.loads(result.output) == [{"n": 2}]
    result = runner.invoke(cli, ["sql", str(dataset), "SELECT * FROM nope"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: Catalog Error")
    result = runner.invoke(cli, ["sql", str(dataset / "missing"), "SELECT 1"])
    assert result.exit_code == 1
    assert result.stderr == f"Error: {dataset / 'missing'}: does not exist\n"


def test_bundled_sample_job(tmp_path: Path) -> None:
    """The sample job's collectives per rank and step, as docs/sample-job.md tabulates them."""
    from tests.conftest import REPO_ROOT

    result = _ingest(str(REPO_ROOT / "sample_traces"), "-o", str(tmp_path / "ds"))
    assert result.exit_code == 0, result.output
    con = connect(tmp_path / "ds")
    rows = con.execute(
        "SELECT rank, step, count(*), sum(bytes)::BIGINT, count(*) FILTER (size_source = "
        "'kernel_args') FROM collectives WHERE source = 'kineto' GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    per_stage = {0: (45, 9_512_448), 1: (58, 9_460_232)}
    expected = [(r, s, *per_stage[r // 4], per_stage[r // 4][0]) for r in range(8) for s in (2, 3)]
    assert rows == expected
    # each rank's NCCL log holds the same calls (both steps; a log has no step markers)
    logged = con.execute(
        "SELECT rank, count(*), sum(bytes)::BIGINT, count(step) FROM collectives "
        "WHERE source = 'nccl_log' GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert logged == [(r, 2 * per_stage[r // 4][0], 2 * per_stage[r // 4][1], 0) for r in range(8)]
    assert con.execute("SELECT sum(tokens) FROM steps").fetchall() == [(4 * 2 * 1024,)]


def test_files_that_are_not_traces_are_skipped_and_named(tmp_path: Path) -> None:
    """A folder walk skips what is not a trace: a job.yaml beside the traces gets a note that
    says where it belongs, any other file a warning; the traces are ingested."""
    src = tmp_path / "job"
    _trace(src, "rank0.json", 0)
    (src / "job.yaml").write_text("model: {layers: 2}\n")
    (src / "notes.txt").write_text("nothing to see\n")
    result = _ingest(str(src), "-o", str(tmp_path / "ds"))
    assert result.exit_code == 0, result.output
    assert "files: 1 ingested, 0 skipped, 2 not traces" in result.stderr
    assert f"Note: {src / 'job.yaml'}: not a trace, skipped" in result.stderr
    assert "--config" in result.stderr
    assert f"Warning: {src / 'notes.txt'}: not a trace format tokenwire reads" in result.stderr


def test_workers_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes start with POLARS_MAX_THREADS = cores / workers (not cores each) and
    Arrow's system allocator; the variables are set only while they start, and a value the
    user set is left alone."""
    import os

    from pipeline.ingest.run import _worker_environment

    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    with _worker_environment(4, True):
        assert os.environ["POLARS_MAX_THREADS"] == "4"
        assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    assert "POLARS_MAX_THREADS" not in os.environ
    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ
    with _worker_environment(32, True):
        assert os.environ["POLARS_MAX_THREADS"] == "1"
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    with _worker_environment(4, True):
        assert os.environ["POLARS_MAX_THREADS"] == "3"
        assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "jemalloc"
    assert os.environ["POLARS_MAX_THREADS"] == "3"
    assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "jemalloc"


def test_the_same_bytes_under_another_job_are_that_jobs_files(
    dataset: Path, tmp_path: Path
) -> None:
    # dedup is per job: the same two files under --job again are ingested as job 'again',
    # and a second ingest under either job skips them
    result = _ingest(str(tmp_path / "good"), "-o", str(dataset), "--job", "again")
    assert result.exit_code == 0, result.output
    assert "2 ingested, 0 skipped" in result.stderr
    con = connect(dataset)
    rows = con.execute(
        "SELECT job, count(*), count(DISTINCT file_id) FROM collectives GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert rows == [("again", 2, 2), ("good", 2, 2)]
    assert con.execute("SELECT count(*) FROM files").fetchall()[0] == (4,)
    assert len(read_manifest(dataset).files) == 4
    before = tree_digest(dataset)
    for job in ("good", "again"):
        result = _ingest(str(tmp_path / "good"), "-o", str(dataset), "--job", job)
        assert "0 ingested, 2 skipped" in result.stderr
    assert tree_digest(dataset) == before


def _nccl_log(path: Path, rank: int) -> Path:
    """A small NCCL log of ``rank`` of a two-rank communicator: its init and one call."""
    prefix = f"n:{5 + rank}:{5 + rank} [0] NCCL INFO"
    path.write_text(
        f"{prefix} comm 0x30 rank {rank} nranks 2 cudaDev {rank} busId {rank + 1}000 - "
        "Init COMPLETE\n"
        f"{prefix} AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 "
        "root 0 comm 0x30 [nranks=2] stream 0x0\n"
    )
    return path


def test_a_batch_whose_small_tables_are_refused_together_fails_only_the_file_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker conforms the small tables of its batch's files at once; where that refuses a
    row, each file's tables are conformed alone, and only the file whose row it is fails,
    with its path and the message conform gives, holding no small table."""
    from pipeline.dataset.schema import conform
    from pipeline.errors import DatasetError

    good, bad = _nccl_log(tmp_path / "good.log", 0), _nccl_log(tmp_path / "bad.log", 1)

    def refusing(name, table, **constants):  # (rank 1's ranks row, as a range check would)
        if name == "ranks" and 1 in table.column("rank").to_pylist():
            raise DatasetError("ranks.rank: 1 is outside 0..0")
        return conform(name, table, **constants)

    monkeypatch.setattr(run, "conform", refusing)
    ds = tmp_path / "ds"
    ds.mkdir()
    outs = run.parse_files([(p, "job", False, f"{i}" * 64, ds, 4096) for i, p in
                            enumerate((good, bad))])  # fmt: skip
    assert [o.status for o in outs] == ["ingested", "failed"]
    assert outs[1].error == f"{bad}: ranks.rank: 1 is outside 0..0"
    assert outs[1].small == {} and outs[1].parts == {}
    held = outs[0].small
    assert {"ranks", "communicators", "collectives"} <= set(held)
    # the good file's rows, packed alone, as its part will hold them
    ranks = unpack_table(held["ranks"].packed).slice(held["ranks"].start, held["ranks"].count)
    assert ranks.column("rank").to_pylist() == [0]
    assert set(ranks.column("file_id").to_pylist()) == {"0" * 16}


def test_a_batchs_small_tables_are_each_files_rows_as_conformed_alone(tmp_path: Path) -> None:
    """The small tables of a batch's files, conformed and packed together, give each file
    the rows (values, columns and types) its tables conformed and packed alone hold."""
    logs = [_nccl_log(tmp_path / f"rank{r}.log", r) for r in (0, 1)]
    ds = tmp_path / "ds"
    ds.mkdir()
    args = [(p, "job", False, f"{i}" * 64, ds, 4096) for i, p in enumerate(logs)]
    together = run.parse_files(args)
    assert together[0].small["ranks"].packed is together[1].small["ranks"].packed  # (shared)
    for a, out in zip(args, together, strict=True):
        alone = run.parse_file(*a)
        assert set(out.small) == set(alone.small)
        for name, rows in out.small.items():
            mine = unpack_table(rows.packed).slice(rows.start, rows.count)
            assert mine.equals(unpack_table(alone.small[name].packed)), name
