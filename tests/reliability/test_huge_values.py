"""Small trace files that claim huge values (class 5 of docs/reliability.md): a string of
100 MB in a JSON trace (gzipped to some 100 KB), an Nsight SQLite export whose generated
column makes 100 MB of every row, or that stores a 100 MB value. Each is refused at its
place (the JSON path, the table and column) under the memory and CPU limits of
:func:`~tests.reliability.hostile.run_cli`, or read within them.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from pipeline.synth.nsys import Layout, write_export
from tests.conftest import REPO_ROOT
from tests.reliability.hostile import assert_one_error, run_cli

BIG = 100_000_000
SAMPLES = REPO_ROOT / "sample_traces"
ROCPROF = REPO_ROOT / "tests/data/rocprof/fsdp_rank1.rocprofv3.json.gz"
JAX = REPO_ROOT / "tests/data/jax_cpu"


def _gz_json(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    assert path.stat().st_size < 2_000_000  # (small on disk: the claim is the size inflated)
    return path


def _kineto(tmp: Path, change) -> Path:  # noqa: ANN001
    sample = next(SAMPLES.glob("rank0.*.pt.trace.json.gz"))
    doc = json.loads(gzip.decompress(sample.read_bytes()))
    change(doc["traceEvents"])
    return _gz_json(tmp / "in" / sample.name, doc)


def _first(events: list[dict], name: str | None = None) -> dict:
    return next(e for e in events if e.get("ph") == "X" and name in (None, e.get("name")))


def test_kineto_name_of_100_mb(tmp_path: Path) -> None:
    path = _kineto(tmp_path, lambda evs: _first(evs).update(name="x" * BIG))
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert_one_error(done, str(path), "Expected `str` of length <= 1048576", ".name`")
    assert not (tmp_path / "ds").exists()


def test_kineto_args_value_of_90_mb(tmp_path: Path) -> None:
    def change(evs: list[dict]) -> None:
        _first(evs).setdefault("args", {})["Input Dims"] = [[1] * (BIG // 3)]

    path = _kineto(tmp_path, change)
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    line = assert_one_error(done, str(path), ".args.Input Dims: ", "more than the 4,194,304")
    assert "$.traceEvents[" in line


def test_kineto_string_arg_of_100_mb_is_read_within_bounds(tmp_path: Path) -> None:
    """A process group's description of 100 MB: an args value kept as a string, read in
    the memory limit (the file's real size once inflated)."""

    def change(evs: list[dict]) -> None:
        _first(evs, "record_param_comms")["args"]["Process Group Description"] = "x" * BIG

    path = _kineto(tmp_path, change)
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert done.returncode == 0, done.stderr[-2000:]


def test_rocprof_kernel_name_of_100_mb(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(ROCPROF.read_bytes()))
    doc["rocprofiler-sdk-tool"][0]["kernel_symbols"][0]["kernel_name"] = "x" * BIG
    path = _gz_json(tmp_path / "rank1.rocprofv3.json.gz", doc)
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert_one_error(done, f"{path}: rocprofiler-sdk-tool[0].kernel_symbols[0].kernel_name: longer")


def test_jax_trace_name_of_100_mb(tmp_path: Path) -> None:
    sample = sorted(JAX.rglob("*.trace.json.gz"))[0]
    doc = json.loads(gzip.decompress(sample.read_bytes()))
    _first(doc["traceEvents"]).update(name="x" * BIG)
    path = _gz_json(tmp_path / sample.name, doc)
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    line = assert_one_error(done, str(path), ".name: longer than the 1,048,576 characters")
    assert f"{path}: $.traceEvents[" in line


def _export(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_export(path, ranks=(0,), layout=Layout(steps=1, layers=1, gemms_per_layer=1))
    return sqlite3.connect(path)


def test_nsys_generated_column_of_100_mb_a_row(tmp_path: Path) -> None:
    """StringIds.value computed on every read as 100 MB: the file stays small, a reader that
    fetched it would hold 100 MB per string."""
    path = tmp_path / "in" / "rank0.sqlite"
    con = _export(path)
    con.execute("ALTER TABLE StringIds RENAME TO old")
    con.execute(
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, short TEXT, value TEXT GENERATED "
        f"ALWAYS AS (short || printf('%.*c', {BIG}, 'x')) VIRTUAL)"
    )
    con.execute("INSERT INTO StringIds (id, short) SELECT id, value FROM old")
    con.execute("DROP TABLE old")
    con.commit()
    con.close()
    assert path.stat().st_size < 1_000_000
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert_one_error(done, f"{path}: StringIds: column 'value' is a generated column")


@pytest.mark.parametrize("value", ["printf('%.*c', {n}, 'x')", "zeroblob({n})"])
def test_nsys_stored_value_of_100_mb(tmp_path: Path, value: str) -> None:
    """A text or BLOB value of 100 MB stored in the file: refused by its size before it is
    fetched (limit 16 MiB), naming the table and the column."""
    path = tmp_path / "in" / "rank0.sqlite"
    con = _export(path)
    con.execute(f"UPDATE StringIds SET value = {value.format(n=BIG)} WHERE id = 1")
    assert con.total_changes == 1
    con.commit()
    con.close()
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert_one_error(done, f"{path}: StringIds: column 'value': a value longer than the 16,777,216")


def test_nsys_facts_of_another_type_read_as_absent(tmp_path: Path) -> None:
    """Report facts (capture environment, host, GPU and process names) stored as BLOBs or
    numbers: absent, as a wrong-typed Kineto arg is, never an internal error."""
    path = tmp_path / "in" / "rank0.sqlite"
    con = _export(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"META_DATA_CAPTURE", "TARGET_INFO_SYSTEM_ENV", "PROCESSES"} <= tables
    con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('a:ENVIRONMENT_VARIABLE', zeroblob(8))")
    con.execute("INSERT INTO META_DATA_CAPTURE VALUES (5, 'X=1')")
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = x'00ff' WHERE name = 'Hostname'")
    con.execute("UPDATE PROCESSES SET name = 7")
    con.commit()
    con.close()
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert done.returncode == 0, done.stderr[-2000:]


def test_ingest_writes_no_text_its_readers_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name of 1,000,000 characters (within the parser's limit) puts more text in a row
    group of ops than the (lowered) limit a reader takes from the footer: the file is refused
    by name before its part is written, and nothing is left."""
    monkeypatch.setenv("TOKENWIRE_MAX_TEXT_CHUNK_BYTES", "900000")
    path = _kineto(tmp_path, lambda evs: _first(evs, "aten::mm").update(name="x" * 1_000_000))
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert_one_error(done, f"{path}: ops.name: ", "more than the 900,000", "MAX_TEXT_CHUNK_BYTES")
    assert not (tmp_path / "ds").exists()


def test_nsys_json_export_text_of_100_mb(tmp_path: Path) -> None:
    from tests.reliability.corpus import nsys_json_lines

    lines = nsys_json_lines()
    nvtx = [x for x in lines if "NvtxEvent" in x]
    nvtx[-1]["NvtxEvent"]["Text"] = "x" * BIG
    path = tmp_path / "rank0.nsys.json.gz"
    text = "\n".join(json.dumps(x, separators=(",", ":")) for x in lines) + "\n"
    path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    done = run_cli("ingest", path, "-o", tmp_path / "ds")
    assert_one_error(done, f"{path}: NVTX events: column 'text': a text longer than the 1,048,576")
