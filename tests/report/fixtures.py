"""Test data for the report: tables added to a dataset, a stand-in for ``tokenwire link``, and a
generated 1,000-rank job.

``fake_link`` fills the derived tables from the raw ones with plain SQL so the report's
derived-table paths can be exercised before (and independently of) the real linker. Its
rules are crude on purpose (dimension from the process group's description, phase from the
sequence number's parity); the tests check the report draws what the tables hold, not that
these rules are right.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dataset.schema import conform, table_schema
from pipeline.dataset.store import part_path, read_manifest, split_by_rank, write_manifest
from pipeline.dataset.views import connect
from pipeline.model.predict import predictions_table


def add_table(
    dataset: Path,
    name: str,
    table: pa.Table | pl.DataFrame,
    *,
    job: str,
    file_id: str = "test0000000000000",
) -> None:
    """Conform ``table`` to schema ``name`` and add it to the dataset's manifest."""
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow()
    consts = {"job": job}
    cols = {c.name for c in table_schema(name).columns}
    if "source" in cols and "source" not in table.column_names:
        consts["source"] = "kineto"
    if "file_id" in cols and "file_id" not in table.column_names:
        consts["file_id"] = file_id
    table = conform(
        name, table.drop_columns([c for c in ("job",) if c in table.column_names]), **consts
    )
    manifest = read_manifest(dataset)
    parts = manifest.derived.setdefault(name, [])
    for rank, rows in split_by_rank(name, table):
        rel = part_path(name, job, rank, file_id)
        # plain writes: the store's fsync per part makes a 1,000-rank fixture slow
        (dataset / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, dataset / rel)
        if rel not in parts:
            parts.append(rel)
    write_manifest(dataset, manifest)
    return table


class _Linker:
    """One DuckDB connection over the dataset; each derived table, once computed, is written
    to the dataset and replaces its (empty) view, so the next query sees it."""

    def __init__(self, dataset: Path, job: str) -> None:
        self.dataset, self.job = dataset, job
        self.con = connect(dataset)

    def sql(self, sql: str) -> pl.DataFrame:
        return pl.from_arrow(self.con.sql(sql, params={"job": self.job}).to_arrow_table())

    def put(self, name: str, frame: pl.DataFrame | pa.Table) -> None:
        table = add_table(self.dataset, name, frame, job=self.job)
        self.con.execute(f"DROP VIEW {name}")
        self.con.register(name, table)


_DIMS = """
SELECT job, comm, any_value(nranks) AS nranks, any_value(ranks) AS ranks,
  CASE WHEN any_value(pg_desc) ILIKE '%TENSOR%' OR comm LIKE 'tp%' THEN 'tp'
       WHEN any_value(pg_desc) ILIKE '%PIPELINE%' OR comm LIKE 'pp%' THEN 'pp'
       WHEN any_value(pg_desc) ILIKE 'DATA%' OR comm LIKE 'dp%' THEN 'dp'
       WHEN any_value(pg_desc) = 'default_pg' THEN 'world' ELSE 'unknown' END AS parallel_dim,
  'rank_sets' AS dim_source
FROM communicators WHERE job = $job GROUP BY job, comm
"""

_LINKS = """
SELECT c.rank, c.source, c.file_id, c.collective_id, c.step,
  CASE WHEN d.parallel_dim = 'dp' THEN 'backward'
       WHEN c.seq % 2 = 0 THEN 'forward' ELSE 'backward' END AS phase,
  CASE WHEN d.parallel_dim = 'tp' THEN 'model/layers.' || (c.seq // 2 % 4) || '/' || c.op_name
       WHEN d.parallel_dim = 'pp' THEN 'model/boundary' END AS layer,
  CASE WHEN d.parallel_dim = 'tp' THEN c.seq // 2 % 4 END AS layer_index,
  CASE WHEN d.parallel_dim = 'tp' THEN 'transformer' END AS layer_kind,
  coalesce(d.parallel_dim, 'unknown') AS parallel_dim,
  CASE WHEN d.parallel_dim IN ('tp', 'pp') THEN 'module_scope' ELSE 'none' END AS attributed_by
FROM collectives c LEFT JOIN communicator_dims d ON d.job = c.job AND d.comm = c.comm
WHERE c.job = $job AND c.source <> 'flight_recorder'
"""

_INSTANCES = """
SELECT any_value(c.source) AS source, c.comm, c.seq, mode(c.op) AS op, max(c.bytes) AS bytes,
  max(c.group_size) AS group_size, count(*) AS ranks_seen,
  count(DISTINCT c.op) = 1 AND count(DISTINCT c.bytes) <= 1 AS consistent,
  min(c.start_ns) AS first_start_ns, max(c.start_ns) AS last_start_ns,
  max(c.start_ns) - min(c.start_ns) AS skew_ns, arg_max(c.rank, c.start_ns) AS late_rank,
  min(c.dur_ns) AS min_dur_ns, max(c.dur_ns) AS max_dur_ns,
  max(c.bytes) / min(c.dur_ns) AS algbw_gbps,
  max(c.bytes) / min(c.dur_ns) * CASE WHEN mode(c.op) = 'all_reduce'
      THEN 2.0 * (max(c.group_size) - 1) / max(c.group_size) ELSE 1.0 END AS busbw_gbps,
  min(l.step) AS step, any_value(l.phase) AS phase, any_value(l.layer) AS layer,
  any_value(l.layer_kind) AS layer_kind, any_value(l.parallel_dim) AS parallel_dim
FROM collectives c JOIN collective_links l USING (job, rank, file_id, collective_id)
WHERE c.job = $job AND c.op NOT IN ('send', 'recv') AND c.seq IS NOT NULL
GROUP BY c.comm, c.seq
"""

_TIME = """
WITH comm AS (
  SELECT c.rank, c.step, sum(c.dur_ns) AS comm_ns FROM collectives c
  WHERE c.job = $job AND c.step IS NOT NULL AND c.source <> 'flight_recorder' GROUP BY ALL),
comp AS (
  SELECT rank, step, sum(dur_ns) AS comp_ns FROM kernels
  WHERE job = $job AND kind <> 'comm' AND step IS NOT NULL GROUP BY ALL)
SELECT s.rank, s.step, 'gpu' AS timeline, s.dur_ns AS window_ns,
  CAST(coalesce(comp_ns, 0) * 0.8 AS BIGINT) AS compute_ns,
  CAST(least(coalesce(comp_ns, 0) * 0.2, coalesce(comm_ns, 0)) AS BIGINT) AS overlapped_comm_ns,
  CAST(greatest(coalesce(comm_ns, 0) - coalesce(comp_ns, 0) * 0.2, 0) AS BIGINT)
      AS exposed_comm_ns,
  CAST(greatest(s.dur_ns - coalesce(comp_ns, 0) - coalesce(comm_ns, 0), 0) AS BIGINT) AS idle_ns
FROM steps s LEFT JOIN comm USING (rank, step) LEFT JOIN comp USING (rank, step)
WHERE s.job = $job
"""

_TOKEN_WIRE = """
WITH pred AS (
  SELECT parallel_dim, op, phase, sum(calls) AS pc, sum(bytes) AS pb FROM predictions
  WHERE job = $job GROUP BY ALL)
SELECT o.*, pred.pc AS predicted_calls, pred.pb AS predicted_bytes,
  o.bytes / pred.pb AS ratio
FROM (
  SELECT l.step, l.parallel_dim, c.op, l.phase, count(*) AS calls, sum(c.bytes) AS bytes,
    $tokens AS tokens, sum(c.bytes) / $tokens AS bytes_per_token
  FROM collectives c JOIN collective_links l USING (job, rank, file_id, collective_id)
  WHERE c.job = $job GROUP BY ALL) o
LEFT JOIN pred USING (parallel_dim, op, phase)
"""


def fake_link(
    dataset: Path,
    job: str,
    *,
    config: Path | None = None,
    tokens: int | None = None,
    token_wire: bool = True,
) -> None:
    """Fill the derived tables of ``job`` from its raw tables (test stand-in for link)."""
    link = _Linker(dataset, job)
    try:
        link.put("communicator_dims", link.sql(_DIMS))
        link.put("collective_links", link.sql(_LINKS))
        link.put("collective_instances", link.sql(_INSTANCES))
        link.put("time_breakdown", link.sql(_TIME))
        if config is not None:
            ranks = link.sql("SELECT DISTINCT rank FROM ranks WHERE job = $job")
            link.put(
                "predictions", predictions_table(config, ranks["rank"].to_list(), world_size=8)
            )
        if token_wire:
            sql = _TOKEN_WIRE.replace("$tokens", str(int(tokens or 1)))
            link.put("token_wire", link.sql(sql))
    finally:
        link.con.close()


def large_job(dataset: Path, *, ranks: int = 1000, steps: int = 3, job: str = "big") -> None:
    """A generated job of ``ranks`` ranks (tp=8 groups, dp across them), linked.

    Per rank and step: 8 TP all-reduces, 2 DP all-reduces, 6 kernels; 8 channels of topology.
    """
    dataset.mkdir(parents=True, exist_ok=True)
    write_manifest(dataset, read_manifest(dataset))
    r = pl.DataFrame({"rank": pl.arange(0, ranks, eager=True).cast(pl.Int64)})
    step0 = 1_000_000_000
    step_ns = 50_000_000
    files = pl.DataFrame(
        {
            "file_id": [f"{i:016x}" for i in range(ranks)],
            "sha256": [f"{i:064x}" for i in range(ranks)],
            "path": [f"/traces/rank{i}.pt.trace.json.gz" for i in range(ranks)],
            "format": ["kineto"] * ranks,
            "size_bytes": [10_000_000] * ranks,
            "ranks": [[i] for i in range(ranks)],
            "rank_source": ["distributedInfo"] * ranks,
            "rows": [100] * ranks,
            "warnings": [0] * ranks,
            "warning_messages": [[]] * ranks,
            "ingested_at_ns": [0] * ranks,
        }
    )
    add_table(dataset, "files", files, job=job)
    add_table(
        dataset,
        "ranks",
        r.with_columns(
            world_size=pl.lit(ranks),
            host=pl.format("node{}", pl.col("rank") // 8),
            gpu_name=pl.lit("NVIDIA H100"),
            backend=pl.lit("nccl"),
        ),
        job=job,
    )
    tp = r.with_columns(
        comm=pl.format("tp{}", pl.col("rank") // 8),
        pg_desc=pl.lit("TENSOR_MODEL_PARALLEL_GROUP"),
        nranks=pl.lit(8),
    )
    dp = r.with_columns(
        comm=pl.format("dp{}", pl.col("rank") % 8),
        pg_desc=pl.lit("DATA_PARALLEL_GROUP"),
        nranks=pl.lit(ranks // 8),
    )
    add_table(dataset, "communicators", pl.concat([tp, dp]), job=job)
    s = r.join(pl.DataFrame({"step": list(range(steps))}), how="cross").with_columns(
        start_ns=step0 + pl.col("step") * step_ns
    )
    add_table(
        dataset,
        "steps",
        s.with_columns(
            end_ns=pl.col("start_ns") + step_ns - 1000,
            dur_ns=pl.lit(step_ns - 1000),
            tokens=pl.lit(4096),
        ),
        job=job,
    )
    calls = pl.DataFrame({"k": list(range(10))})
    coll = (
        s.join(calls, how="cross")
        .with_columns(
            comm=pl.when(pl.col("k") < 8)
            .then(pl.format("tp{}", pl.col("rank") // 8))
            .otherwise(pl.format("dp{}", pl.col("rank") % 8)),
            seq=pl.col("step") * 10 + pl.col("k"),
            op=pl.lit("all_reduce"),
            op_name=pl.lit("nccl:all_reduce"),
            bytes=pl.when(pl.col("k") < 8).then(pl.lit(4 << 20)).otherwise(pl.lit(64 << 20)),
            group_size=pl.when(pl.col("k") < 8).then(pl.lit(8)).otherwise(pl.lit(ranks // 8)),
            # rank 7 of every group arrives late; skew grows with the rank
            start_ns=pl.col("start_ns") + pl.col("k") * 4_000_000 + (pl.col("rank") % 97) * 1000,
        )
        .with_columns(
            dur_ns=pl.lit(300_000) + (pl.col("rank") % 13) * 5000,
            collective_id=pl.col("step") * 10 + pl.col("k"),
        )
        .with_columns(end_ns=pl.col("start_ns") + pl.col("dur_ns"))
        .drop("k")
    )
    add_table(dataset, "collectives", coll, job=job)
    kern = (
        s.join(pl.DataFrame({"k": list(range(6))}), how="cross")
        .with_columns(
            kernel_id=pl.col("step") * 6 + pl.col("k"),
            name=pl.format("sm90_xmma_gemm_bf16bf16_{}_kernel", pl.col("k")),
            kind=pl.lit("gemm"),
            start_ns=pl.col("start_ns") + pl.col("k") * 1_000_000,
            dur_ns=pl.lit(2_000_000) + pl.col("k") * 1000,
        )
        .with_columns(end_ns=pl.col("start_ns") + pl.col("dur_ns"))
        .drop("k")
    )
    add_table(dataset, "kernels", kern, job=job)
    topo = r.join(pl.DataFrame({"channel": list(range(8))}), how="cross").with_columns(
        kind=pl.lit("connection"),
        peer=(pl.col("rank") + 1) % ranks,
        transport=pl.when(pl.col("rank") % 8 == 7).then(pl.lit("NET/IB")).otherwise(pl.lit("P2P")),
    )
    add_table(dataset, "topology", topo, job=job)
    fake_link(dataset, job, tokens=4096 * ranks // 8)
