"""rocprofiler-sdk JSON (rocprofv3 --output-format json): the real FSDP2 rank of
../shared/real_traces/rocprof and the project's own sample (scripts/rocprof_sample.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import TraceFormatError
from pipeline.ingest.detect import detect
from pipeline.ingest.rocprof.parse import parse
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "tests/data/rocprof/fsdp_rank1.rocprofv3.json.gz"
REAL = "rocprof/mi350x_fsdp2_rank0_rocprofv3.json.gz"


def _table(result, name: str) -> pl.DataFrame:
    return pl.from_arrow(result.tables[name])


def _doc() -> dict:
    return json.loads(gzip.decompress(SAMPLE.read_bytes()))


def _write(tmp_path: Path, doc: dict, name: str = "rank1.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _rccl_kernels_counted_from_json(path: Path) -> int:
    """The RCCL dispatches of a file, counted from its JSON without the parser: dispatches
    whose kernel symbol is an ``ncclDevKernel``."""
    proc = json.loads(gzip.decompress(path.read_bytes()))["rocprofiler-sdk-tool"][0]
    rccl = {s["kernel_id"] for s in proc["kernel_symbols"] if "ncclDevKernel" in s["kernel_name"]}
    records = proc["buffer_records"]["kernel_dispatch"]
    return sum(r["dispatch_info"]["kernel_id"] in rccl for r in records)


def test_sample_collectives_take_their_op_from_the_rccl_calls() -> None:
    result = parse(SAMPLE)
    coll = _table(result, "collectives").sort("collective_id")
    assert coll.height == _rccl_kernels_counted_from_json(SAMPLE) == 6
    assert coll["op"].to_list() == ["all_gather", "reduce_scatter", "all_reduce"] * 2
    # a group of calls is one launch, one kernel
    assert coll["op_name"].to_list() == ["ncclAllGather", "ncclReduceScatter", "ncclGroupEnd"] * 2
    assert coll["step"].to_list() == [1, 1, 1, 2, 2, 2]
    assert coll["rank"].unique().to_list() == [1]
    assert (coll["enqueue_ns"] < coll["start_ns"]).all()
    assert coll["size_source"].unique().to_list() == ["none"]
    assert result.warnings.total == 0


def test_sample_markers_are_ops_and_steps() -> None:
    result = parse(SAMPLE)
    steps = _table(result, "steps")
    assert steps.select("step", "dur_ns").rows() == [(1, 40_000), (2, 40_000)]
    ops = _table(result, "ops")
    assert ops.group_by("kind").len().sort("kind").rows() == [("rccl_api", 12), ("roctx", 4)]
    layer = ops.filter(pl.col("name") == "layers.0.forward")
    parents = ops.filter(pl.col("op_id").is_in(layer["parent_id"].implode()))
    assert sorted(parents["name"].to_list()) == ["ProfilerStep#1", "ProfilerStep#2"]
    kernels = _table(result, "kernels")
    assert kernels.group_by("kind").len().sort("kind").rows() == [("comm", 6), ("gemm", 2)]
    assert kernels["grid"].to_list()[0] == [4, 1, 1]  # 1024 work-items in groups of 256
    assert kernels["device"].unique().to_list() == [1]


def test_without_rccl_calls_the_kernel_name_alone_gives_the_op(tmp_path: Path) -> None:
    doc = _doc()
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["rccl_api"] = []
    coll = _table(parse(_write(tmp_path, doc)), "collectives").sort("collective_id")
    assert coll["op"].to_list() == ["unknown"] * 3 + ["all_gather", "unknown", "unknown"]


def test_calls_and_kernels_that_do_not_pair_up_are_not_matched(tmp_path: Path) -> None:
    doc = _doc()
    calls = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["rccl_api"]
    del calls[0]  # the first step's ncclAllGather
    result = parse(_write(tmp_path, doc))
    coll = _table(result, "collectives")
    assert coll["op"].to_list().count("unknown") == 5
    assert "different number of RCCL launches" in result.warnings.messages()[0]


def test_without_a_rank_in_its_name_the_gpu_index_is_the_rank(tmp_path: Path) -> None:
    result = parse(_write(tmp_path, _doc(), "results.json"))
    assert _table(result, "collectives")["rank"].unique().to_list() == [1]
    assert result.rank_source == "gpu_index"
    assert "names no rank" in result.warnings.messages()[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["buffer_records"]["kernel_dispatch"][0].update(start_timestamp="x"),
         "kernel_dispatch: a record of the wrong shape"),
        (lambda p: p["buffer_records"].update(marker_api={}), "marker_api is not a list"),
        (lambda p: p["buffer_records"]["rccl_api"].append(7), "a value that is not an object"),
        (lambda p: p["buffer_records"]["kernel_dispatch"][0].update(end_timestamp=2**64 - 1),
         "a record of the wrong shape"),
    ],
)  # fmt: skip
def test_bad_records_name_the_list(tmp_path: Path, change, message: str) -> None:
    doc = _doc()
    change(doc["rocprofiler-sdk-tool"][0])
    with pytest.raises(TraceFormatError, match=message):
        parse(_write(tmp_path, doc))


def test_a_cut_off_file_is_refused_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "rank1.json"
    path.write_bytes(gzip.decompress(SAMPLE.read_bytes())[:3000])
    assert detect(path) == "rocprof"
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        parse(path)


def test_ingest_and_link_the_sample(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["ingest", str(SAMPLE.parent), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert CliRunner().invoke(cli, ["link", str(out)]).exit_code == 0
    query = (
        "SELECT op, count(*) AS n FROM collectives WHERE source = 'rocprof' GROUP BY op ORDER BY op"
    )
    sql = CliRunner().invoke(cli, ["sql", str(out), query, "--format", "csv"])
    assert sql.exit_code == 0, sql.output
    assert sql.stdout.split() == ["op,n", "all_gather,2", "all_reduce,2", "reduce_scatter,2"]
