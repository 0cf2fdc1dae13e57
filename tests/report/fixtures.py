"""Test data for the report: tables added to a dataset, and a generated 1,000-rank job that
``tokenwire link`` then links like any other."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from altair.utils.schemapi import debug_mode

from pipeline.dataset.commit import write_manifest
from pipeline.dataset.schema import conform, table_schema
from pipeline.dataset.store import (
    FileEntry,
    file_key,
    part_columns,
    part_path,
    read_manifest,
)
from pipeline.ingest.derive.time_breakdown import add_time_breakdown
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.report import page

#: A kernel name that is markup: the report must show it as text, never run it.
EVIL = "<script>alert(1)</script>"


def sample_with_evil_kernel(sample: Path, dataset: Path) -> Path:
    """``sample`` ingested into ``dataset``, plus one long kernel on rank 0 named :data:`EVIL`."""
    ingest([sample], dataset)
    kernel = pl.DataFrame({
        "rank": [0], "kernel_id": [10**9], "name": [EVIL], "kind": ["gemm"],
        "start_ns": [0], "end_ns": [10**12], "dur_ns": [10**12],
    })  # fmt: skip
    add_table(dataset, "kernels", kernel, job=sample.name)
    return dataset


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
    if table_schema(name).derived:
        parts = manifest.derived.setdefault(name, [])
    else:
        entry = manifest.files.setdefault(
            file_key(job, file_id),
            FileEntry(file_id, file_id, f"test/{file_id}", job, "kineto", []),
        )
        parts = entry.parts.setdefault(name, [])
    rel = part_path(name, job, file_id)
    # a plain write: the store's fsync per part makes a 1,000-rank fixture slow
    (dataset / rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(part_columns(name, table), dataset / rel)
    if rel not in parts:
        parts.append(rel)
    write_manifest(dataset, manifest)
    return table


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
    # what ingest makes from each rank's file (here, all ranks at once)
    parsed = {"steps": s.to_arrow(), "kernels": kern.to_arrow(), "collectives": coll.to_arrow()}
    add_time_breakdown(parsed)
    add_table(dataset, "time_breakdown", parsed["time_breakdown"], job=job)
    topo = r.join(pl.DataFrame({"channel": list(range(8))}), how="cross").with_columns(
        kind=pl.lit("connection"),
        peer=(pl.col("rank") + 1) % ranks,
        transport=pl.when(pl.col("rank") % 8 == 7).then(pl.lit("NET/IB")).otherwise(pl.lit("P2P")),
    )
    add_table(dataset, "topology", topo, job=job)
    link(dataset)


def _points_chart(name: str, n: int, *, concatenated: bool = False) -> page.Chart:
    data = alt.Data(values=[{"rank": i, "ms": i % 7} for i in range(n)])
    if concatenated:  # the rows under a concatenation, as the time-per-rank chart has them
        bars = alt.Chart().mark_bar().encode(x=alt.X("rank:O"), y=alt.Y("ms:Q"))
        return page.Chart(name, alt.vconcat(bars, bars.mark_tick(), data=data))
    return page.Chart(name, alt.Chart(data).mark_bar().encode(x=alt.X("rank:O"), y=alt.Y("ms:Q")))


def page_of_small_and_big_charts() -> str:
    """A page of four charts: 50 rows, the canvas threshold's rows, one more, and one more
    under a concatenation."""
    big = page.CANVAS_MIN_ROWS + 1
    with debug_mode(False):  # (Altair would validate every row)
        charts = [
            _points_chart("small", 50),
            _points_chart("edge", page.CANVAS_MIN_ROWS),
            _points_chart("big", big),
            _points_chart("big_concatenated", big, concatenated=True),
        ]
    return page.render("t", "s", [page.Section("s", "S", list(charts))])
