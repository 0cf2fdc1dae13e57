"""Small tables written as one part per table and job at commit, and small parts of a job
merged then: the same rows, fewer files, every later ingest merging its own small parts with
them; a dataset of the version before (rank folders) still read as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipeline
from pipeline.dataset import compact, store
from pipeline.dataset.schema import load_schemas
from pipeline.dataset.store import read_manifest
from pipeline.ingest import run
from pipeline.ingest.run import ingest
from pipeline.synth.job import JobSpec, job_traces

RAW = [name for name, schema in load_schemas().items() if not schema.derived]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kineto traces of a 4-rank job, one folder per pair of ranks."""
    root = tmp_path_factory.mktemp("traces")
    for name, text in job_traces(JobSpec(tp=2, pp=1, dp=2, layers=2, global_batch=4)).items():
        rank = int(name.split(".")[0].removeprefix("rank"))
        folder = root / ("first" if rank < 2 else "second")
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(text)
    return root


def _ingest(dataset: Path, *folders: Path, jobs: int = 1) -> None:
    assert not ingest(list(folders), dataset, job="job", jobs=jobs).errors


def _rows(dataset: Path) -> dict[str, list[tuple]]:
    """Every row of every raw table, sorted; the time a file was ingested left out."""
    ds = pipeline.open(dataset)
    return {
        name: ds.sql(f"SELECT * EXCLUDE (ingested_at_ns) FROM {name} ORDER BY ALL").rows()
        if name == "files"
        else ds.sql(f"SELECT * FROM {name} ORDER BY ALL").rows()
        for name in RAW
    }


def _on_disk(dataset: Path) -> set[str]:
    return {p.relative_to(dataset).as_posix() for p in dataset.rglob("*.parquet")}


def _listed(dataset: Path) -> set[str]:
    manifest = read_manifest(dataset)
    return {p for name in load_schemas() for p in manifest.parts(name)}


def test_small_parts_merge_into_one_per_table_with_the_same_rows(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged = tmp_path / "merged"
    _ingest(merged, traces / "first", traces / "second")
    monkeypatch.setattr(compact, "SMALL_PART_ROWS", 0)  # nothing is small: a part per file
    apart = tmp_path / "apart"
    _ingest(apart, traces / "first", traces / "second")

    assert _rows(merged) == _rows(apart)
    manifest = read_manifest(merged)
    for name in RAW:
        parts = manifest.parts(name)
        small = [p for p in parts if pq.read_metadata(merged / p).num_rows < 4096]
        assert len(small) <= 1, (name, parts)
    assert len(_on_disk(merged)) < len(_on_disk(apart))
    assert len(read_manifest(apart).parts("steps")) == 4  # a part per file
    # a merged part is listed under each of the four files whose rows it holds
    assert all(len(e.parts["steps"]) == 1 for e in manifest.files.values())
    assert len({e.parts["steps"][0] for e in manifest.files.values()}) == 1


def test_small_tables_from_worker_processes_are_written_once_per_table(
    traces: Path, tmp_path: Path
) -> None:
    """Two spawned workers send their small tables back: the commit writes them as it does
    in-process, one part per table, the same rows in the same files."""
    inline = tmp_path / "inline"
    _ingest(inline, traces / "first", traces / "second")
    pooled = tmp_path / "pooled"
    _ingest(pooled, traces / "first", traces / "second", jobs=2)

    assert _rows(pooled) == _rows(inline)
    assert _on_disk(pooled) == _on_disk(inline) == _listed(pooled)
    for name in RAW:
        assert len(read_manifest(pooled).parts(name)) <= 1, name


def test_small_tables_past_the_memory_limit_are_written_then_merged(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past :data:`run.SMALL_TABLES_BYTES`, the small tables held are written at once (here
    after every file: memory stays bounded), and the commit merges those parts: the same
    rows and files."""
    held = tmp_path / "held"
    _ingest(held, traces / "first", traces / "second")
    monkeypatch.setattr(run, "SMALL_TABLES_BYTES", 0)
    written: list[int] = []
    write_small_tables = run._write_small_tables

    def spy(dataset: Path, job: str, outs: list) -> None:
        written.append(sum(bool(out.small) for out in outs))
        write_small_tables(dataset, job, outs)

    monkeypatch.setattr(run, "_write_small_tables", spy)
    apart = tmp_path / "apart"
    _ingest(apart, traces / "first", traces / "second")

    assert _rows(apart) == _rows(held)
    assert written == [1, 1, 1, 1, 0]  # each file's as it came, nothing left for the commit
    assert len(_on_disk(apart)) == len(_on_disk(held))
    assert _on_disk(apart) == _listed(apart)


def test_a_later_ingest_merges_its_small_parts_with_the_earlier_ones(
    traces: Path, tmp_path: Path
) -> None:
    dataset = tmp_path / "ds"
    _ingest(dataset, traces / "first")
    first = _on_disk(dataset)
    _ingest(dataset, traces / "second")
    once = tmp_path / "once"
    _ingest(once, traces / "first", traces / "second")

    assert _rows(dataset) == _rows(once)
    # the parts merged again are gone; every file on disk is listed
    assert _on_disk(dataset) == _listed(dataset)
    assert {p.split("/")[0] for p in first - _on_disk(dataset)} >= {"ranks", "steps", "files"}
    # re-ingest of the same files changes nothing
    before = _on_disk(dataset)
    _ingest(dataset, traces / "first", traces / "second")
    assert _on_disk(dataset) == before


def test_a_part_written_before_a_column_was_added_is_merged_with_nulls_there(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part per file, one of them older (a nullable column missing): the next ingest into
    the job merges them all under the current schema."""
    dataset = tmp_path / "ds"
    with monkeypatch.context() as patch:
        patch.setattr(compact, "SMALL_PART_ROWS", 0)
        _ingest(dataset, traces / "first")
    old = sorted((dataset / "ranks").rglob("*.parquet"))[0]
    table = pq.read_table(old)
    assert table.column("pid").null_count == 0
    pq.write_table(table.drop_columns(["pid"]), old)

    _ingest(dataset, traces / "second")
    ranks = read_manifest(dataset).parts("ranks")
    assert len(ranks) == 1 and {p for p in _on_disk(dataset) if p.startswith("ranks/")} == {
        ranks[0]
    }
    ds = pipeline.open(dataset)
    assert ds.sql("SELECT count(*) FROM ranks WHERE pid IS NULL").item() == table.num_rows > 0
    assert ds.sql("SELECT count(DISTINCT rank) FROM ranks").item() == 4


def test_a_version_2_dataset_with_rank_folders_reads_the_same(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2 kept each rank's part in a ``rank=<rank>`` folder, without the column: the
    views read such a dataset (here one made from a version 3 one) row for row the same."""
    monkeypatch.setattr(compact, "SMALL_PART_ROWS", 0)
    current = tmp_path / "v3"
    _ingest(current, traces / "first", traces / "second")
    old = tmp_path / "v2"
    shutil.copytree(current, old)
    doc = json.loads((old / "manifest.json").read_text())
    doc["version"] = 2
    del doc["tables"]  # (version 2 had no index of parts by table)
    for entry in doc["files"].values():
        for table, rels in entry["parts"].items():
            if table == "files":
                continue
            [rel] = rels
            rows = pq.read_table(old / rel)
            [rank] = set(rows.column("rank").to_pylist())
            moved = rel.replace("/part-", f"/rank={rank}/part-")
            (old / moved).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows.drop_columns(["rank"]), old / moved)
            (old / rel).unlink()
            entry["parts"][table] = [moved]
    (old / "manifest.json").write_text(json.dumps(doc))
    assert any("/rank=" in p for p in _on_disk(old))
    assert _rows(old) == _rows(current)


def test_other_engines_read_each_table_folder_as_it_is(traces: Path, tmp_path: Path) -> None:
    """Two jobs, one merged and one of a single file (its parts left as written), then
    link: DuckDB and Polars read every table's folder with its job folders and get the rows
    and ranks tokenwire's views give."""
    import duckdb
    import polars as pl

    from pipeline.link.runner import link

    dataset = tmp_path / "ds"
    _ingest(dataset, traces / "first")
    one = next((traces / "second").iterdir())
    assert not ingest([one], dataset, job="single", jobs=1).errors
    link(dataset)
    ds = pipeline.open(dataset)
    for name in ("ops", "steps", "collectives", "ranks", "collective_links", "clock_offsets"):
        query = f"SELECT job, rank, count(*) AS n FROM {name} GROUP BY ALL ORDER BY ALL"
        expected = ds.sql(query).rows()
        assert {job for job, _, _ in expected} == {"job", "single"}, name
        glob = str(dataset / name / "**" / "*.parquet")
        source = f"read_parquet('{glob}', hive_partitioning = true)"
        assert duckdb.sql(query.replace(f"FROM {name}", f"FROM {source}")).fetchall() == expected
        frame = pl.scan_parquet(glob, hive_partitioning=True).group_by("job", "rank").len()
        assert frame.sort("job", "rank").collect().rows() == expected, name


def test_row_groups_are_bounded_by_rows_and_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces gather into row groups of ROW_GROUP_ROWS rows, or fewer when the rows are wide
    (a world-sized communicator's row lists every rank), never splitting a piece."""
    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 10)
    monkeypatch.setattr(store, "ROW_GROUP_BYTES", 1000)
    narrow = [pa.table({"rank": [r, r]}) for r in range(12)]  # 16 bytes each
    assert [sum(t.num_rows for t in g) for g in store.row_groups(narrow)] == [10, 10, 4]
    wide = [pa.table({"ranks": [list(range(100))]}) for _ in range(5)]  # 8 x 100 bytes each
    assert [len(g) for g in store.row_groups(wide)] == [2, 2, 1]
    assert [len(g) for g in store.row_groups([])] == []
