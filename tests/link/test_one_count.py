"""One count of everything: hosts reconciled across the sources of a rank, one op vocabulary
in every table, and the group size of every collective instance whose group any source knows."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

import pipeline
from pipeline.link.runner import link
from tests.conftest import REPO_ROOT, edit_parts


def _hosts(dataset: Path) -> int:
    from pipeline.report.context import open_context

    ctx = open_context(dataset)
    try:
        return ctx.row("glance_ranks")["hosts"]
    finally:
        ctx.con.close()


def _respell(dataset: Path, names: dict[tuple[str, int], str | None]) -> None:
    """Give the ranks rows of (source, rank) the host ``names`` names (others keep theirs)."""

    def change(frame: pl.DataFrame) -> pl.DataFrame:
        hosts = [
            names.get((source, rank), host)
            for source, rank, host in frame.select("source", "rank", "host").iter_rows()
        ]
        return frame.with_columns(pl.Series("host", hosts, dtype=pl.String))

    edit_parts(dataset, "ranks", change)


def test_the_sample_names_one_host_in_every_source(linked_sample: Path) -> None:
    ds = pipeline.open(linked_sample)
    named = ds.sql("SELECT DISTINCT source, host FROM ranks WHERE host IS NOT NULL ORDER BY 1")
    assert named["host"].unique().to_list() == ["node0"], named
    assert _hosts(linked_sample) == 1


def test_two_spellings_of_a_host_count_once(linked_sample: Path, tmp_path: Path) -> None:
    """An NCCL log's ``node0`` and an Nsight export's ``node-0`` for ranks 0-3 are one host,
    also for ranks 4-7 that only one of them names; a second machine stays a second host."""
    dataset = tmp_path / "ds"
    shutil.copytree(linked_sample, dataset)
    names: dict[tuple[str, int], str | None] = {}
    for rank in range(8):
        names["nccl_log", rank] = "node0" if rank < 6 else "node1"
        names["nsys", rank] = "node-0" if rank < 4 else None
        names["kineto", rank] = None
    _respell(dataset, names)
    link(dataset, config=REPO_ROOT / "sample_traces" / "job.yaml")
    ds = pipeline.open(dataset)
    hosts = ds.sql("SELECT rank, host FROM rank_hosts ORDER BY rank")["host"].to_list()
    assert hosts == ["node-0"] * 6 + ["node1"] * 2
    assert _hosts(dataset) == 2
    wire = ds.sql("SELECT DISTINCT src_host FROM wire ORDER BY 1")["src_host"].to_list()
    assert wire == ["node-0", "node1"]


#: Every table of a linked dataset with an op column.
_OP_TABLES = (
    "collectives",
    "collective_links",
    "collective_instances",
    "collective_waits",
    "wire",
    "token_wire",
    "ledger",
    "predictions",
)


def test_every_table_speaks_one_op_vocabulary(linked_sample: Path) -> None:
    """The tables name ops as vocab.OPS does, and a send/recv pair's instance is a ``send``
    as its calls are (not a name of its own only collective_instances has)."""
    from pipeline.vocab import OPS

    ds = pipeline.open(linked_sample)
    for table in _OP_TABLES:
        if "op" not in ds.sql(f"SELECT * FROM {table} LIMIT 0").columns:
            continue
        ops = set(ds.sql(f"SELECT DISTINCT op FROM {table}")["op"].to_list())
        assert ops <= set(OPS), table
    calls = set(ds.sql("SELECT DISTINCT op FROM collectives")["op"].to_list())
    instances = ds.sql("SELECT op, count(*) AS n FROM collective_instances GROUP BY ALL")
    assert set(instances["op"].to_list()) <= calls
    p2p = ds.sql("SELECT DISTINCT op FROM collective_instances WHERE comm LIKE '%p2p %->%'")[
        "op"
    ].to_list()
    assert p2p == ["send"]
    # the wire's send rows are the same transfers the calls' sends are
    sent = ds.sql(
        "SELECT sum(bytes) FROM collectives JOIN primary_sources USING (job, rank, source) "
        "WHERE op = 'send'"
    ).item()
    on_wire = ds.sql("SELECT sum(bytes) FROM wire WHERE op = 'send'").item()
    assert on_wire == sent


def test_group_size_is_known_wherever_a_source_knows_the_group(tmp_path: Path) -> None:
    """A gloo TP x DP run with flight-recorder dumps: its calls carry no group size, the
    profiler's pg_config does (tp and dp groups of 2, the world of 4)."""
    from pipeline.ingest.run import ingest

    run = REPO_ROOT / "tests" / "data" / "cpu_gloo" / "tp_dp"
    dataset = tmp_path / "ds"
    ingest([run], dataset, job="tp_dp", jobs=1)
    link(dataset, config=run / "job.yaml")
    ds = pipeline.open(dataset)
    sizes = ds.sql(
        "SELECT i.source, i.comm, i.group_size, d.nranks FROM collective_instances i "
        "LEFT JOIN communicator_dims d USING (job, comm) ORDER BY ALL"
    )
    assert sizes.height > 100 and set(sizes["source"]) == {"kineto", "flight_recorder"}
    assert sizes["group_size"].null_count() == 0
    assert sizes["group_size"].to_list() == sizes["nranks"].to_list()
    assert set(sizes["group_size"]) == {2, 4}
