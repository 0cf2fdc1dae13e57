"""Ingest through a Dask cluster writes the same dataset, row for row, as a local ingest."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from pipeline.dataset.store import read_manifest
from pipeline.dataset.views import connect
from pipeline.errors import ConfigError
from pipeline.ingest.run import ingest
from pipeline.ingest.values import rank_from_file_name

pytest.importorskip("distributed", reason="the dask extra is not installed")


def _jobs(real_traces: Path, into: Path) -> list[Path]:
    """One folder per job (links to the real files): the real traces come from unrelated jobs
    and several claim rank 0, so each source folder or single file is its own job."""
    sources = [real_traces / "kineto" / "dlrm_v100_8ranks"]
    sources += sorted((real_traces / "kineto").glob("*.json.gz"))
    sources += sorted(p for p in (real_traces / "kineto_cpu_gloo").glob("*/*") if p.is_dir())
    folders = []
    for i, src in enumerate(sources):
        folder = into / f"job{i}"
        folder.mkdir(parents=True)
        for f in sorted(src.iterdir()) if src.is_dir() else [src]:
            (folder / f.name).symlink_to(f)
        folders.append(folder)
    return folders


def _rows(dataset: Path) -> dict[str, list[tuple]]:
    con = connect(dataset)
    tables = [
        r[0]
        for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    ]
    out = {}
    for t in tables:
        cols = [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall() if r[0] != "ingested_at_ns"]
        sql = f"SELECT {', '.join(cols)} FROM {t} ORDER BY ALL"
        out[t] = con.execute(sql).fetchall()
    return out


def test_local_cluster_writes_the_same_dataset(real_traces: Path, tmp_path: Path) -> None:
    from distributed import LocalCluster

    folders = _jobs(real_traces, tmp_path / "in")
    local = ingest(folders, tmp_path / "local", jobs=1)
    assert not local.errors
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as c:
        remote = ingest(folders, tmp_path / "dask", scheduler=c.scheduler_address)
    assert not remote.errors
    assert [(o.path, o.status) for o in remote.outcomes] == [
        (o.path, o.status) for o in local.outcomes
    ]
    a, b = read_manifest(tmp_path / "local"), read_manifest(tmp_path / "dask")
    assert {k: e.to_json() for k, e in a.files.items()} == {
        k: e.to_json() for k, e in b.files.items()
    }
    rows_local, rows_dask = _rows(tmp_path / "local"), _rows(tmp_path / "dask")
    assert rows_local.keys() == rows_dask.keys()
    assert {"collectives", "ops", "kernels", "steps"} <= rows_local.keys()
    for table in rows_local:
        assert rows_local[table] == rows_dask[table], table
    # every distinct file: its bytes and the rank its name gives (the pp job's two flight
    # recorder dumps are byte for byte the same, ranks 0 and 1 by their names alone)
    distinct = {
        (hashlib.sha256(f.read_bytes()).hexdigest(), rank_from_file_name(f.name))
        for d in folders
        for f in d.iterdir()
    }
    assert len(rows_local["files"]) == len(distinct)


def test_without_dask_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = next((Path(__file__).parents[2] / "sample_traces").glob("rank0.*"))
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ConfigError, match=r"tokenwire\[dask\]"):
        ingest([trace], tmp_path / "ds", scheduler="tcp://127.0.0.1:1")
    assert not (tmp_path / "ds").exists()  # refused before the dataset was made


def test_the_client_reads_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers hash the files: the process that runs ``ingest`` never opens one (on a
    cluster, every byte it read would cross one machine's link to the shared file system)."""
    from distributed import LocalCluster

    from pipeline.ingest import run

    sample = Path(__file__).parents[2] / "sample_traces"
    local = ingest([sample], tmp_path / "local", jobs=1)

    def no_reading(path: Path) -> str:
        raise AssertionError(f"the client hashed {path}")

    monkeypatch.setattr(run, "_sha256", no_reading)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as c:
        remote = ingest([sample], tmp_path / "dask", scheduler=c.scheduler_address)
        again = ingest([sample], tmp_path / "dask", scheduler=c.scheduler_address)
    assert not remote.errors
    assert [(o.path, o.status) for o in remote.outcomes] == [
        (o.path, o.status) for o in local.outcomes
    ]
    assert _rows(tmp_path / "local") == _rows(tmp_path / "dask")
    # the second time every trace is known by the hash a worker computed
    assert again.count("skipped") == remote.count("ingested") > 0
    assert again.count("ingested") == 0


def test_batches_cut_by_bytes_and_count_in_order_as_items_come() -> None:
    from pipeline.ingest.distributed import _batches

    sized = [(10, "a"), (10, "b"), (100, "big"), (1, "c"), (1, "d"), (1, "e"), (5, "f")]
    assert list(_batches(iter(sized), 50, 3)) == [["a", "b", "big"], ["c", "d", "e"], ["f"]]
    assert list(_batches(iter(sized), 20, 10)) == [["a", "b"], ["big"], ["c", "d", "e", "f"]]
    taken = []

    def items():
        for n, item in sized:
            taken.append(item)
            yield n, item

    first = next(_batches(items(), 20, 10))
    assert first == ["a", "b"] and taken == ["a", "b"]  # no waiting for the rest


def test_a_file_the_workers_cannot_see_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers without the shared file system fail every file with ENOENT; the error says
    that the file is there for the client but not for them."""
    import contextlib
    import errno

    from pipeline.ingest import run

    class Blind:  # a cluster whose workers see no file
        def hashes(self, hash_files, paths, sizes):
            return [OSError(errno.ENOENT, "No such file or directory") for _ in paths]

    @contextlib.contextmanager
    def blind(scheduler):
        yield Blind()

    monkeypatch.setattr(run, "_cluster", blind)
    log = next((Path(__file__).parents[2] / "sample_traces").glob("rank0.nccl.log"))
    summary = ingest([log], tmp_path / "ds", scheduler="tcp://cluster:8786")
    [failed] = summary.errors
    assert failed.error == (
        f"{log}: cannot read file: No such file or directory on the Dask workers, though it is "
        "here: they must see it at this path"
    )
