"""The JAX profiler's trace-viewer JSON: a 2-process JAX job on CPU recorded by
scripts/jax_cpu_trace.py (tests/data/jax_cpu)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import TraceFormatError
from pipeline.ingest.detect import detect
from pipeline.ingest.jax_trace.parse import parse
from pipeline.vocab import XLA_COLLECTIVES
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT / "tests/data/jax_cpu"


def _collective_events(path: Path) -> int:
    """XLA collective thunks counted from the JSON without the parser."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops = [e.get("args", {}).get("hlo_op", "") for e in events if e.get("ph") == "X"]
    return sum(op.rsplit(".", 1)[0] in XLA_COLLECTIVES or op in XLA_COLLECTIVES for op in ops)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_yields_its_collectives_in_their_steps(rank: int) -> None:
    path = DATA / f"rank{rank}.trace.json.gz"
    assert detect(path) == "jax_trace"
    result = parse(path)
    coll = pl.from_arrow(result.tables["collectives"])
    assert coll.height == _collective_events(path) == 6
    # per step: the weights' all-gather, the gradients' reductions (XLA:CPU lowers the
    # reduce-scatter to an all-reduce)
    assert coll["op"].to_list() == ["all_gather", "all_reduce", "all_reduce"] * 2
    assert coll["step"].to_list() == [1, 1, 1, 2, 2, 2]
    assert coll["rank"].unique().to_list() == [rank]
    assert pl.from_arrow(result.tables["steps"])["step"].to_list() == [1, 2]
    assert result.rank_source == "file_name"


def test_the_job_ingests_as_two_ranks(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["ingest", str(DATA), "-o", str(out)])
    assert result.exit_code == 0, result.output
    query = "SELECT rank, count(*) AS n FROM collectives GROUP BY rank ORDER BY rank"
    sql = CliRunner().invoke(cli, ["sql", str(out), query, "--format", "csv"])
    assert sql.stdout.split() == ["rank,n", "0,6", "1,6"]


def test_without_a_rank_in_its_path_the_rank_is_0_and_said(tmp_path: Path) -> None:
    path = Path(shutil.copy(DATA / "rank1.trace.json.gz", tmp_path / "vm.trace.json.gz"))
    result = parse(path)
    assert pl.from_arrow(result.tables["collectives"])["rank"].unique().to_list() == [0]
    assert "no rank in the file's path" in result.warnings.messages()[0]


def test_an_event_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress((DATA / "rank0.trace.json.gz").read_bytes()))
    next(e for e in doc["traceEvents"] if e.get("ph") == "X")["ts"] = "soon"
    path = tmp_path / "rank0.trace.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match="traceEvents: an event of the wrong shape"):
        parse(path)
