"""The manifest's reader and writer leave the garbage collector as they found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from pipeline.dataset.store import FileEntry, Manifest, read_manifest, write_manifest
from pipeline.errors import DatasetError


def _manifest(files: int) -> Manifest:
    entries = {
        f"{i:016x}": FileEntry(
            file_id=f"{i:016x}",
            sha256=f"{i:064x}",
            path=f"/traces/rank{i}.json",
            job="job",
            format="kineto",
            ranks=[i],
            parts={"ops": [f"ops/job=job/part-{i:016x}.parquet"]},
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
