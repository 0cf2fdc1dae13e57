"""Small Kineto files parsed in a batch give each file exactly the tables it gets alone, and a
bad file of a batch fails alone, with the error it fails with alone."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from pipeline.dataset.schema import conform
from pipeline.errors import TraceFormatError
from pipeline.ingest import run
from pipeline.ingest.derive.attribution import attribute_collectives
from pipeline.ingest.derive.time_breakdown import add_time_breakdown
from pipeline.ingest.kineto import parse as kineto
from pipeline.ingest.result import ParseResult
from tests.conftest import REPO_ROOT

CPU_GLOO = REPO_ROOT / "tests" / "data" / "cpu_gloo"
#: Runs of several kinds (DDP, FSDP, MoE all-to-all, pipeline send/recv, TP, a recsys
#: all-to-all, a straggler): one batch of all their rank files.
RUNS = ("ddp4", "fsdp4", "moe4", "pp4", "tp_dp", "recsys_a2a", "straggler", "fsdp1_4", "pp_1f1b")


def _alone(path: Path, **options) -> ParseResult:
    """``path`` parsed alone, with what ingest derives per file."""
    result = kineto.parse(path, **options)
    attribute_collectives(result.tables)
    add_time_breakdown(result.tables)
    return result


def _conformed(name: str, table: pa.Table) -> pl.DataFrame:
    """A table as the writer writes it (the batch's come conformed, the writer's columns
    blank)."""
    return pl.from_arrow(conform(name, table, job="", source="kineto", file_id=""))


def _assert_same(batched: ParseResult, alone: ParseResult) -> None:
    assert sorted(batched.tables) == sorted(alone.tables)
    for name, table in alone.tables.items():
        got, want = _conformed(name, batched.tables[name]), _conformed(name, table)
        assert got.columns == want.columns, name
        assert_frame_equal(got, want)
    assert batched.warnings.messages() == alone.warnings.messages()
    assert (batched.rank_source, batched.format_version) == (
        alone.rank_source,
        alone.format_version,
    )


def _gloo_files() -> list[Path]:
    return [p for run_ in RUNS for p in sorted((CPU_GLOO / run_).glob("rank*.pt.trace.json.gz"))]


def test_a_batch_gives_each_file_its_own_tables() -> None:
    files = _gloo_files()
    results = kineto.parse_batch(files, derive=True)
    assert len(results) == len(files)
    for path, result in zip(files, results, strict=True):
        assert isinstance(result, ParseResult), path
        assert result.derived
        _assert_same(result, _alone(path))


def test_a_batch_with_step_markers(tmp_path: Path) -> None:
    """Files without ProfilerStep ranges take their steps from the marker, or the whole
    trace, each on its own, whatever the other files of the batch have."""
    files = _gloo_files()[:3]
    marker = r"ProfilerStep#\d+|nccl:all_reduce"
    results = kineto.parse_batch(files, step_marker=marker, derive=True)
    for path, result in zip(files, results, strict=True):
        _assert_same(result, _alone(path, step_marker=marker))


def _bad_files(folder: Path) -> list[Path]:
    """A truncated file, a malformed one, one whose event has a time out of range and one
    whose event's duration is no number (and its base time out of range)."""
    folder.mkdir()
    truncated = folder / "rank90.pt.trace.json"
    truncated.write_bytes(gzip.decompress(_gloo_files()[0].read_bytes())[:5000])
    malformed = folder / "rank91.pt.trace.json"
    malformed.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a",, }]}')
    bad_time = folder / "rank92.pt.trace.json"
    bad_time.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,'
        ' "ts": 1e30, "dur": 1}]}'
    )
    # a bad time, and a base time out of range found after it: the bad time is the error
    bad_base = folder / "rank93.pt.trace.json"
    bad_base.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,'
        ' "ts": 1, "dur": "x"}], "baseTimeNanoseconds": 9000000000000000000}'
    )
    return [truncated, malformed, bad_time, bad_base]


@pytest.mark.parametrize(
    ("batch_bytes", "waiting"),
    [
        (kineto.BATCH_BYTES, kineto.WAITING_EVENTS),  # every file's frames built at once
        (kineto.BATCH_BYTES, 1_000),  # a few files at a time
        (64 * 1024, kineto.WAITING_EVENTS),  # the good files' frames built as they are read
    ],
)
def test_a_bad_file_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_bytes: int, waiting: int
) -> None:
    monkeypatch.setattr(kineto, "WAITING_EVENTS", waiting)
    good = _gloo_files()[:4]
    bad = _bad_files(tmp_path / "bad")
    files = [good[0], bad[0], good[1], bad[1], good[2], bad[2], bad[2], bad[3], good[3]]
    results = kineto.parse_batch(files, derive=True, batch_bytes=batch_bytes)
    for path, result in zip(files, results, strict=True):
        if path in bad:
            assert isinstance(result, TraceFormatError), path
            with pytest.raises(TraceFormatError) as alone:
                kineto.parse(path)
            assert str(result) == str(alone.value)
            assert path != bad[3] or '.dur: "x" is not a time' in str(result)
        else:
            _assert_same(result, _alone(path, batch_bytes=batch_bytes))


def _ingest_one_by_one(files: list[Path], out: Path) -> run.IngestSummary:
    summaries = [run.ingest([f], out / f.name, job="job", jobs=1) for f in files]
    return run.IngestSummary([o for s in summaries for o in s.outcomes])


def test_ingest_of_a_folder_with_bad_files(tmp_path: Path) -> None:
    """Ingest of a folder: the bad files fail with the error each gives alone, the others
    are ingested, one outcome each, in input order, each reported once."""
    src = tmp_path / "job"
    src.mkdir()
    for path in _gloo_files()[:4]:  # (ddp4's 4 ranks)
        shutil.copy(path, src / path.name)
    _bad_files(src / "bad")
    seen: list[Path] = []
    summary = run.ingest([src], tmp_path / "ds", jobs=1, on_file=lambda o: seen.append(o.path))
    files = run.find_inputs([src], None).files
    assert [o.path for o in summary.outcomes] == [f.path for f in files]
    assert sorted(seen) == sorted(f.path for f in files)
    alone = _ingest_one_by_one([f.path for f in files], tmp_path / "alone")
    for batched, single in zip(summary.outcomes, alone.outcomes, strict=True):
        if batched.path.parent.name == "bad":
            assert batched.status == single.status == "failed"
            assert batched.error == single.error
        else:
            assert batched.status == single.status == "ingested"
            assert batched.warnings == single.warnings
            assert batched.rows == single.rows


def test_an_unexpected_error_in_a_batch_parses_its_files_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step over the whole batch that fails unexpectedly: each file is parsed alone."""
    split = kineto.split_tables

    def failing(tables, ranks, *args):
        if len(ranks) > 1:
            raise RuntimeError("a bug that only a batch meets")
        return split(tables, ranks, *args)

    monkeypatch.setattr(kineto, "split_tables", failing)
    files = _gloo_files()[:3]
    args = [(p, "job", False, f"{i:064x}", tmp_path / "ds", 1 << 30) for i, p in enumerate(files)]
    (tmp_path / "ds").mkdir()
    outs = run.parse_files(args)
    assert [o.status for o in outs] == ["ingested"] * 3
    assert [o.path for o in outs] == files
