"""``tokenwire export --flows``: the wire table of a linked job as a flow list (Parquet or
CSV), in scope, and one line and exit 1 for what it cannot write."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import pipeline
from pipeline.cli import cli
from pipeline.export.flows import COLUMNS
from tests.export.conftest import copy_dataset


def _run(*args: str):
    return CliRunner().invoke(cli, ["export", *map(str, args)], catch_exceptions=False)


def test_parquet_holds_every_flow_of_the_wire_table(linked: Path, tmp_path: Path) -> None:
    out = tmp_path / "flows.parquet"
    result = _run(linked, "--flows", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    flows = pl.read_parquet(out)
    assert tuple(flows.columns) == COLUMNS
    wire = pipeline.open(linked).sql("SELECT count(*) AS n, sum(bytes) AS b FROM wire").row(0)
    assert (flows.height, flows["bytes"].sum()) == pytest.approx(wire)
    assert f"{flows.height:,} flows" in result.stderr
    # ordered by start time
    assert flows["start_ns"].is_sorted()


def test_csv_in_scope(linked: Path, tmp_path: Path) -> None:
    out = tmp_path / "flows.csv"
    result = _run(linked, "--flows", "-o", out, "--step", "3", "--ranks", "4")
    assert result.exit_code == 0, result.stderr
    flows = pl.read_csv(out)
    assert set(flows["step"].to_list()) == {3}
    assert all(4 in (s, d) for s, d in flows.select("src_rank", "dst_rank").rows())
    want = pipeline.open(linked).sql(
        "SELECT count(*) FROM wire WHERE step = 3 AND (src_rank = 4 OR dst_rank = 4)"
    )
    assert flows.height == want.item() > 0


def test_window_keeps_the_flows_that_overlap_it(linked: Path, tmp_path: Path) -> None:
    ds = pipeline.open(linked)
    lo, hi = ds.sql("SELECT min(start_ns), max(start_ns) FROM wire").row(0)
    mid = (lo + hi) // 2
    out = tmp_path / "w.parquet"
    assert _run(linked, "--flows", "-o", out, "--window", f":{mid}").exit_code == 0
    flows = pl.read_parquet(out)
    assert flows.height == ds.sql(f"SELECT count(*) FROM wire WHERE start_ns < {mid}").item()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "{tmp}/f.json"], "--flows writes .parquet or .csv"),
        (["-o", "{tmp}/f.csv", "--kernels"], "options of the timeline"),
        (["-o", "{tmp}/f.csv", "--ranks", "99"], "no rank 99"),
        (["-o", "{tmp}/f.csv", "--step", "40"], "no flows in the scope"),
    ],
)
def test_bad_requests_fail_in_one_line(linked: Path, tmp_path: Path, args, message) -> None:
    result = _run(linked, "--flows", *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_dataset_linked_without_wire_rows_says_link_again(linked: Path, tmp_path: Path):
    ds = copy_dataset(linked, tmp_path)
    for part in (ds / "wire").rglob("*.parquet"):
        pl.read_parquet(part, hive_partitioning=False).head(0).write_parquet(part)
    result = _run(ds, "--flows", "-o", tmp_path / "f.csv")
    assert result.exit_code == 1
    assert "link it again" in result.stderr
