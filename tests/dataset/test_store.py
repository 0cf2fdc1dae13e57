"""The manifest: its reader and writer leave the garbage collector as they found it, and the
index of parts by table that readers take is the one its files give."""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import pytest

from pipeline.dataset.commit import write_manifest
from pipeline.dataset.store import (
    FileEntry,
    Manifest,
    read_manifest,
    read_parts_by_table,
)
from pipeline.errors import DatasetError


def _manifest(files: int) -> Manifest:
    entries = {
        f"job/{i:016x}": FileEntry(
            file_id=f"{i:016x}",
            sha256=f"{i:064x}",
            path=f"/traces/rank{i}.json",
            job="job",
            format="kineto",
            ranks=[i],
            # (a merged part listed under each file whose rows it holds)
            parts={
                "ops": [f"ops/job=job/part-{i:016x}.parquet"],
                "ranks": ["ranks/job=job/part-merged.parquet"],
            },
        )
        for i in range(files)
    }
    return Manifest(files=entries)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_only_while_the_manifest_is_read_or_written(
    tmp_path: Path, enabled: bool
) -> None:
    manifest = _manifest(100)
    (gc.enable if enabled else gc.disable)()
    try:
        write_manifest(tmp_path, manifest)
        assert gc.isenabled() == enabled
        assert read_manifest(tmp_path).files == manifest.files
        assert gc.isenabled() == enabled
        (tmp_path / "manifest.json").write_text('{"format": "tokenwire-dataset", "files": 3}')
        with pytest.raises(DatasetError, match="unreadable manifest"):
            read_manifest(tmp_path)
        assert gc.isenabled() == enabled
    finally:
        gc.enable()


def test_readers_take_the_parts_index_the_manifest_holds(tmp_path: Path) -> None:
    manifest = _manifest(3)
    manifest.derived = {"collective_links": ["collective_links/job=job/part-link-1.parquet"]}
    write_manifest(tmp_path, manifest)
    expected = {
        "ops": [f"ops/job=job/part-{i:016x}.parquet" for i in range(3)],
        "ranks": ["ranks/job=job/part-merged.parquet"],
        "collective_links": ["collective_links/job=job/part-link-1.parquet"],
    }
    assert manifest.parts_by_table() == expected
    doc = json.loads((tmp_path / "manifest.json").read_text())
    assert doc["tables"] == expected
    assert read_parts_by_table(tmp_path) == expected

    # The index is what readers go by: one that differs from the files is the one returned.
    doc["tables"] = {"ops": ["ops/job=job/part-only.parquet"]}
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    assert read_parts_by_table(tmp_path) == {"ops": ["ops/job=job/part-only.parquet"]}


def test_a_manifest_without_the_index_is_listed_from_its_files(tmp_path: Path) -> None:
    # as a tokenwire before the index wrote it (and writes it still, dropping the key)
    write_manifest(tmp_path, _manifest(2))
    doc = json.loads((tmp_path / "manifest.json").read_text())
    del doc["tables"]
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    assert read_parts_by_table(tmp_path) == {
        "ops": [f"ops/job=job/part-{i:016x}.parquet" for i in range(2)],
        "ranks": ["ranks/job=job/part-merged.parquet"],
    }
    assert read_parts_by_table(tmp_path / "none") == {}


@pytest.mark.parametrize(
    ("tables", "reason"),
    [
        ([], "tables: unreadable manifest: expected an object, found a list"),
        ({"ops": "ops/part.parquet"}, "tables.'ops': unreadable manifest: expected a list"),
        ({"ops": [3]}, "tables.'ops': unreadable manifest: 3 is not a part path"),
    ],
)
def test_a_broken_parts_index_is_an_unreadable_manifest(
    tmp_path: Path, tables: object, reason: str
) -> None:
    write_manifest(tmp_path, _manifest(1))
    doc = json.loads((tmp_path / "manifest.json").read_text())
    doc["tables"] = tables
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    for read in (read_parts_by_table, read_manifest):
        with pytest.raises(DatasetError, match=rf"manifest.json: {re.escape(reason)}"):
            read(tmp_path)
