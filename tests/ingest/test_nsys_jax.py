"""nsys-jax archives: the real 4-process Paxml FSDP job of ../shared/real_traces/nsys_jax and
the project's own sample (scripts/nsys_jax_sample.py); archives that are hostile."""

from __future__ import annotations

import io
import lzma
import re
import zipfile
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import TraceFormatError
from pipeline.ingest.detect import detect
from pipeline.ingest.nsys_jax import archive as archive_module
from pipeline.ingest.nsys_jax.parse import TRACE, parse
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "tests/data/nsys_jax/train_proc1.zip"
DUMP = "dump/module_0007.jit_train_step.sm_9.0_gpu_after_optimizations.hlo.pb.xz"
#: A collective thunk's name, matched without the parser: XLA's collective opcodes,
#: their ``-start`` where async, never the ``-done``.
THUNK = re.compile(
    r"^TSL:Thunk:#.*hlo_op=(?:all-gather-start|all-reduce-start|all-gather|all-reduce"
    r"|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute-start"
    r"|collective-permute|collective-broadcast)(?:\.\d+)?[#,]"
)


def _table(result, name: str) -> pl.DataFrame:
    return pl.from_arrow(result.tables[name])


def _thunks_counted_from_the_archive(path: Path) -> int:
    with zipfile.ZipFile(path) as z:
        names = pl.read_parquet(io.BytesIO(z.read(TRACE)), columns=["Name"])["Name"]
    return sum(bool(THUNK.match(n)) for n in names.drop_nulls().to_list())


def _rewritten(tmp_path: Path, changes: dict[str, bytes | None], name: str = "x.zip") -> Path:
    """The sample with members replaced (None: removed) or added."""
    out = tmp_path / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(SAMPLE) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename not in changes:
                dst.writestr(info, src.read(info))
        for member, data in changes.items():
            if data is not None:
                dst.writestr(member, data)
    return out


def test_sample_collectives() -> None:
    result = parse(SAMPLE)
    coll = _table(result, "collectives").sort("collective_id")
    assert coll.height == _thunks_counted_from_the_archive(SAMPLE) == 11
    per_step = ["all_gather", "reduce_scatter", "send_recv", "all_to_all", "all_reduce"]
    assert coll["op"].to_list() == ["all_reduce", *per_step, *per_step]
    assert coll["step"].to_list() == [None, *[0] * 5, *[1] * 5]
    step = coll.filter(pl.col("step") == 0)
    assert step.select("bytes", "dtype", "group_size", "comm").rows() == [
        (4 * 1024 * 2, "bfloat16", 4, "xla:0,1,2,3"),
        (4096 * 4, "float32", 4, "xla:0,1,2,3"),
        (8 * 128 * 2, "bfloat16", None, None),
        (8 * 128 * 2, "bfloat16", 2, "xla:0,1"),
        (None, None, None, None),  # all-reduce-start.9 is not in the dump
    ]
    assert "not found in its module's HLO dump" in result.warnings.messages()[0]
    assert _table(result, "ranks").select("rank", "host", "gpu_name").row(0) == (
        1,
        "tw-jax-sample",
        "NVIDIA H100 80GB HBM3",
    )
    comms = _table(result, "communicators").sort("comm")
    assert comms.select("comm", "nranks", "rank_in_comm").rows() == [
        ("xla:0,1", 2, 1),
        ("xla:0,1,2,3", 4, 1),
    ]


def test_sample_ops_nest_as_the_trace_says() -> None:
    ops = _table(parse(SAMPLE), "ops")
    group_end = ops.filter(pl.col("name") == "NCCL:ncclGroupEnd")
    parents = ops.filter(pl.col("op_id").is_in(group_end["parent_id"].implode()))
    assert parents["name"].unique().to_list() == ["TSL:Thunk:#hlo_op=all-gather-start.1#"]
    assert group_end["domain"].unique().to_list() == ["NCCL"]
    assert group_end["depth"].unique().to_list() == [2]


def test_member_names_that_climb_out_are_never_written(tmp_path: Path) -> None:
    """Nothing is extracted: a member named ../x or /x is only a name."""
    path = _rewritten(tmp_path / "in", {"../escaped.txt": b"x", "/tmp/absolute.txt": b"x"})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert _table(parse(path), "collectives").height == 11
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_zip_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "MIN_LIMIT_BYTES", 1 << 20)
    path = _rewritten(tmp_path, {TRACE: bytes(8 << 20)})
    with pytest.raises(TraceFormatError, match="once inflated, more than"):
        parse(path)


def test_an_xz_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "MIN_LIMIT_BYTES", 1 << 20)
    path = _rewritten(tmp_path, {DUMP: lzma.compress(bytes(64 << 20), format=lzma.FORMAT_XZ)})
    with pytest.raises(TraceFormatError, match=f"{re.escape(DUMP)}: more than"):
        parse(path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({TRACE: b"not parquet"}, "not a readable Parquet file"),
        ({DUMP: lzma.compress(b"\x0a\xff\xff\xff", format=lzma.FORMAT_XZ)},
         "not a readable HLO dump"),
        ({DUMP: b"this is no xz data at all"}, "broken xz data"),
    ],
)  # fmt: skip
def test_damaged_members_are_named(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        parse(_rewritten(tmp_path, changes))


def test_a_cut_off_archive_is_refused_not_skipped(tmp_path: Path) -> None:
    path = tmp_path / "proc1.zip"
    path.write_bytes(SAMPLE.read_bytes()[:4000])
    assert detect(path) == "nsys_jax"
    with pytest.raises(TraceFormatError, match="not a readable zip archive"):
        parse(path)


def test_a_zip_of_something_else_is_no_trace(tmp_path: Path) -> None:
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hello")
    assert detect(path) is None


def test_an_extracted_archive_reads_as_the_archive(tmp_path: Path) -> None:
    """The folder an archive was unzipped to: its trace.parquet is the archive's entry."""
    folder = tmp_path / "train_proc1"
    with zipfile.ZipFile(SAMPLE) as z:
        z.extractall(folder)
    trace = folder / TRACE
    assert detect(trace) == "nsys_jax"
    assert detect(folder / "device-metadata.parquet") is None
    extracted = _table(parse(trace), "collectives").drop("collective_id")
    assert extracted.equals(_table(parse(SAMPLE), "collectives").drop("collective_id"))
    out = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["ingest", str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "files: 1 ingested" in result.stderr
