"""Nsight Systems exports: every real export, bad input, generated exports, real nsys."""

from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from pipeline.dataset.schema import conform
from pipeline.errors import TraceFormatError
from pipeline.ingest.nsys import parse as nsys
from pipeline.synth import JobSpec
from pipeline.synth.nsys import Layout, write_export
from pipeline.synth.scale import job_comms, job_kernels, simulated_job

NSYS_FILES = [
    "a100_vector_add/vector_add_profile_v3.sqlite",
    "cpu_nvtx_nccl_like/nsys2023.4_cpu_nvtx_nccl_like.sqlite",
    "cpu_nvtx_nccl_like/nsys2023.4_cpu_nvtx_nccl_like.json.gz",
]
SQLITE_FILES = [f for f in NSYS_FILES if f.endswith(".sqlite")]


def _head(path: Path) -> bytes:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return fh.read(65536)


def _tables(path: Path) -> dict[str, pl.DataFrame]:
    result = nsys.parse(path)
    assert result.format == "nsys"
    out = {}
    for name, table in result.tables.items():
        out[name] = pl.from_arrow(conform(name, table, job="j", source="nsys", file_id="f"))
    return out


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _has_table(path: Path, table: str) -> bool:
    return bool(_sql(path, f"SELECT 1 FROM sqlite_master WHERE name = '{table}'"))


def test_generated_export_without_payloads_warns_and_leaves_bytes_null(tmp_path: Path) -> None:
    # the generator's default: NCCL ranges without payloads, one all-reduce per layer and step
    result = nsys.parse(write_export(tmp_path / "job.sqlite"))
    coll = pl.from_arrow(result.tables["collectives"])
    lay = Layout()
    assert coll.height == lay.steps * lay.layers == coll["bytes"].null_count()
    assert set(coll["op"]) == {"all_reduce"}
    assert any("without NCCL NVTX payload" in m for m in result.warnings.messages())


# --- bad input ------------------------------------------------------------------------------


def _one_line_error(path: Path) -> str:
    with pytest.raises(TraceFormatError) as info:
        nsys.parse(path)
    text = str(info.value)
    assert str(path) in text and "\n" not in text
    return text


def test_sqlite_that_is_not_nsight(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    assert not nsys.sniff(path, path.read_bytes()[:65536])
    assert "not an Nsight Systems export" in _one_line_error(path)


def test_corrupt_database(tmp_path: Path) -> None:
    src = write_export(tmp_path / "whole.sqlite")
    data = bytearray(src.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(bytes(data))
    assert "cannot read SQLite database" in _one_line_error(path)


def test_locked_database(tmp_path: Path) -> None:
    path = write_export(tmp_path / "locked.sqlite")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert "locked" in _one_line_error(path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # the generator's one rank: a GEMM per layer and step for each of its GEMMs, and the
    # layer's NCCL kernel
    lay = Layout()
    kernels = lay.steps * lay.layers * (lay.gemms_per_layer + 1)
    assert nsys.parse(path).tables["kernels"].num_rows == kernels


@pytest.mark.parametrize("content", [b"", b"garbage", b'{"data":["a"]}\n{not json\n'])
def test_empty_or_bad_json(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    _one_line_error(path)


# --- generated exports ----------------------------------------------------------------------


def test_generated_export_gives_every_ranks_kernels_and_calls(tmp_path: Path) -> None:
    path = write_export(tmp_path / "job.sqlite", ranks=[0, 1, 2, 3])
    t = _tables(path)
    lay = Layout()
    per_rank = lay.steps * lay.layers * (lay.gemms_per_layer + 1)
    assert t["kernels"].height == 4 * per_rank
    assert t["ranks"]["rank"].sort().to_list() == [0, 1, 2, 3]
    assert t["kernels"].group_by("rank").len()["len"].to_list() == [per_rank] * 4
    coll = t["collectives"]
    assert coll.height == 4 * lay.steps * lay.layers and set(coll["op"]) == {"all_reduce"}
    assert coll["start_ns"].null_count() == 0  # every call found its kernel
    gemm = t["kernels"].filter(pl.col("kind") == "gemm")
    assert set(gemm["nvtx_range"]) == {"layer_0.forward", "layer_1.forward"}


def test_generated_export_with_payloads_gives_ranks_and_bytes(tmp_path: Path) -> None:
    path = write_export(tmp_path / "node1.sqlite", ranks=[8, 9], world_size=16, payloads=True)
    result = nsys.parse(path)
    assert result.rank_source == "nccl_nvtx"
    ranks = pl.from_arrow(result.tables["ranks"])
    assert ranks["rank"].to_list() == [8, 9] and set(ranks["world_size"]) == {16}
    coll = pl.from_arrow(result.tables["collectives"])
    assert set(coll["bytes"]) == {Layout().allreduce_bytes} and set(coll["group_size"]) == {16}


def test_rank_from_file_name(tmp_path: Path) -> None:
    path = write_export(tmp_path / "job_rank5.sqlite", ranks=[0])
    result = nsys.parse(path)
    assert result.rank_source == "file_name"
    assert pl.from_arrow(result.tables["ranks"])["rank"].to_list() == [5]


# --- real nsys --------------------------------------------------------------------------------

_NVTX_PROGRAM = """
import ctypes, time
lib = ctypes.CDLL("libnvToolsExt.so.1")
lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
lib.nvtxMarkA.argtypes = [ctypes.c_char_p]
for step in range(2):
    lib.nvtxRangePushA(f"step_{step}".encode())
    for layer in range(3):
        lib.nvtxRangePushA(f"layer_{layer}".encode())
        time.sleep(0.001)
        lib.nvtxRangePop()
    lib.nvtxMarkA(b"optimizer.step")
    lib.nvtxRangePop()
"""


def _libnvtx() -> bool:
    import ctypes.util

    return ctypes.util.find_library("nvToolsExt") is not None


@pytest.mark.skipif(
    shutil.which("nsys") is None,
    reason="nsys not on PATH (scripts/install-nsys.sh installs it on Debian)",
)
@pytest.mark.skipif(not _libnvtx(), reason="libnvToolsExt.so.1 not installed (libnvtoolsext1)")
def test_real_nsys_profile_of_a_cpu_program(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(_NVTX_PROGRAM)
    run = {"cwd": tmp_path, "capture_output": True, "timeout": 300, "check": True}
    profile = [
        "nsys", "profile", "-t", "nvtx,osrt", "--sample=none", "--cpuctxsw=none", "-o", "rep",
        "--force-overwrite=true", sys.executable, str(prog),
    ]  # fmt: skip
    try:
        subprocess.run(profile, env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"}, **run)
    except subprocess.CalledProcessError as exc:
        # The tool itself failing here (another session holding its daemon, a missing
        # component) says nothing about tokenwire's parser.
        last = (exc.stderr or exc.stdout or b"").decode(errors="replace").strip().splitlines()
        pytest.skip(f"nsys profile failed on this machine: {last[-1] if last else exc}")
    if not (tmp_path / "rep.nsys-rep").exists() and not (tmp_path / "rep.qdrep").exists():
        pytest.skip("nsys wrote no report (QdstrmImporter missing: run scripts/install-nsys.sh)")
    report = next(tmp_path.glob("rep.*rep"))
    subprocess.run(["nsys", "export", "--type", "sqlite", "-o", "rep.sqlite", str(report)], **run)
    path = tmp_path / "rep.sqlite"
    assert nsys.sniff(path, _head(path))
    t = _tables(path)
    ops = t["ops"].filter(pl.col("kind") == "nvtx")
    assert ops.filter(pl.col("name").str.starts_with("layer_")).height == 6
    assert set(ops.filter(pl.col("name").str.starts_with("layer_"))["depth"]) == {1}
    assert ops.filter(pl.col("name") == "optimizer.step").height == 2
    assert t["ranks"].height == 1


def _job_export(path: Path, ranks: list[int], comms: dict | None = None) -> Path:
    """An export of some ranks of the default synthetic job, with NCCL payloads."""
    sim = simulated_job(JobSpec())
    return write_export(
        path,
        ranks=ranks,
        kernels=job_kernels(sim, 1),
        comms=job_comms(sim) if comms is None else comms,
        payloads=True,
    )


def test_one_rank_export_knows_only_its_own_place_in_subgroups(tmp_path: Path) -> None:
    result = nsys.parse(_job_export(tmp_path / "report.sqlite", [3]))
    assert result.rank_source == "nccl_nvtx"
    comms = pl.from_arrow(result.tables["communicators"])
    lists = {n: r for n, r in comms.select("nranks", "ranks").rows() if n != 2}
    # the world communicator (the rank's own source) lists 0..7; others only rank 3
    assert lists == {8: list(range(8)), 4: [None, 3, None, None]}
    for n, i, r in comms.select("nranks", "rank_in_comm", "ranks").rows():
        assert len(r) == n and r[i] == 3 and r.count(None) == (0 if n == 8 else n - 1)


def test_subgroup_rank_is_not_taken_for_the_global_rank(tmp_path: Path) -> None:
    sim = simulated_job(JobSpec())
    comms = job_comms(sim)
    comms[5] = [c for c in comms[5] if c.nranks < 8]  # rank 5 traced no world init
    result = nsys.parse(_job_export(tmp_path / "report.sqlite", [4, 5], comms))
    ranks = pl.from_arrow(result.tables["ranks"])
    assert ranks.filter(pl.col("pid") == 1004)["rank"].to_list() == [4]
    # rank 5's places in its subgroups (3, 1, 1, 0) are no global rank: it is numbered
    assert result.rank_source == "nccl_nvtx,process_order"
    assert any("numbered by process order" in m for m in result.warnings.messages())
