"""The dataset tables of a rocprofiler-sdk JSON file's processes: kernels, collectives,
ops, steps and ranks.

- **kernels**: every kernel dispatch; ``device`` is the GPU's index among the host's GPUs,
  ``stream`` the HSA queue it ran on (rocprofiler-sdk's HIP stream ids are not given for
  every dispatch), grid in workgroups (HSA grids count work-items).
- **collectives**: the dispatches of communication kernels (RCCL's ``ncclDevKernel_*``,
  :data:`~pipeline.vocab.COMM_KERNEL`), their op read from the kernel name. RCCL
  builds its generic kernel (``ncclDevKernel_Generic_1``) for every collective: its name
  says no op, so the op comes from the RCCL calls when the file has them
  (:mod:`pipeline.ingest.rocprof.rccl`), and is ``unknown`` otherwise. The records hold no
  message size (``size_source`` ``none``).
- **ops**: ROCTx ranges and marks (kind ``roctx``) and RCCL calls (kind ``rccl_api``), nested
  per thread.
- **steps**: ROCTx ranges named ``ProfilerStep#N``; kernels, collectives and ops take the
  step they start in.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from ...ingest.derive.nesting import add_nesting
from ...ingest.result import DUR_NS, Warnings, parsed_table, schema_columns
from ...ingest.rocprof.rccl import match_calls
from ...ingest.rocprof.records import Process
from ...vocab import kernel_kind_expr, op_expr, per_distinct

STEP_RANGE = r"^ProfilerStep#(\d+)$"


def build(procs: list[Process], named_rank: int | None, warnings: Warnings) -> dict[str, pa.Table]:
    """The tables of ``procs`` (one file); ``named_rank``: the rank its name gives."""
    ranks = _ranks(procs, named_rank)
    kernels = pl.concat([_kernels(p, i) for i, p in enumerate(procs)], how="vertical_relaxed").join(
        ranks.select("proc", "rank"), on="proc"
    )
    calls = pl.concat(
        [
            p.calls.with_columns(pl.lit(i).alias("proc"), pl.lit(p.pid, pl.Int64).alias("pid"))
            for i, p in enumerate(procs)
        ],  # fmt: skip
        how="vertical_relaxed",
    ).join(ranks.select("proc", "rank"), on="proc")
    kernels = _timed(kernels, "kernel dispatch", warnings)
    calls = _timed(calls, "API record", warnings)
    ops = _ops(calls)
    steps = _steps(ops)
    coll = match_calls(kernels.filter(pl.col("kind") == "comm"), calls, warnings)
    return {
        "kernels": parsed_table("kernels", _kernel_table(_with_step(kernels, steps))),
        "collectives": parsed_table("collectives", _collective_table(_with_step(coll, steps))),
        "ops": parsed_table("ops", _op_table(_with_step(ops, steps))),
        "steps": parsed_table("steps", steps),
        "ranks": parsed_table("ranks", ranks.drop("proc")),
    }


def _ranks(procs: list[Process], named_rank: int | None) -> pl.DataFrame:
    """One row per process: the GPU it dispatched most kernels to gives its device (and,
    without a rank in the file name, its rank)."""
    rows = []
    for i, p in enumerate(procs):  # (a file holds one process, rarely a few)
        busiest = p.dispatches.group_by("agent").len().sort("len", descending=True).head(1)
        gpu = busiest.join(p.gpus, on="agent", how="left")
        index = gpu["gpu_index"][0] if gpu.height else None
        rows.append(
            {
                "proc": i,
                "rank": named_rank
                if named_rank is not None
                else (index if index is not None else i),
                "host": p.host,
                "pid": p.pid,
                "local_rank": index,
                "device": None if index is None else f"gpu:{index}",
                "gpu_name": gpu["gpu_name"][0] if gpu.height else None,
                "backend": "rccl" if _has_comm(p) else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "proc": pl.Int64,
            "rank": pl.Int64,
            "host": pl.String,
            "pid": pl.Int64,
            "local_rank": pl.Int64,
            "device": pl.String,
            "gpu_name": pl.String,
            "backend": pl.String,
        },  # fmt: skip
        orient="row",
    )


def _has_comm(p: Process) -> bool:
    names = p.dispatches.select(pl.col("name").unique())
    return bool(names.filter(kernel_kind_expr(pl.col("name")) == "comm").height) or bool(
        p.calls.filter(pl.col("kind") == "rccl_api").height
    )


def _kernels(p: Process, proc: int) -> pl.DataFrame:
    d = p.dispatches.join(p.gpus.select("agent", "gpu_index"), on="agent", how="left")
    kind = per_distinct(d, ["name"], kernel_kind_expr(pl.col("name")))
    grid = [
        (pl.col("grid_size").struct.field(a) + pl.col("workgroup_size").struct.field(a) - 1)
        // pl.col("workgroup_size").struct.field(a)
        for a in "xyz"
    ]
    return d.with_columns(
        pl.lit(proc).alias("proc"),
        pl.lit(p.pid, pl.Int64).alias("pid"),
        kind.alias("kind"),
        pl.concat_list(grid).alias("grid"),
        pl.concat_list([pl.col("workgroup_size").struct.field(a) for a in "xyz"]).alias("block"),
    ).drop("grid_size", "workgroup_size")


def _timed(frame: pl.DataFrame, what: str, warnings: Warnings) -> pl.DataFrame:
    """``frame``'s records that have both timestamps (the others are counted, left out)."""
    timed = pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
    warnings.add(f"{what} without a start or end timestamp: left out", frame.filter(~timed).height)
    frame = frame.filter(timed)
    bad = frame.filter(pl.col("end_ns") < pl.col("start_ns")).height
    warnings.add(f"{what} that ends before it starts: its duration is negative", bad)
    return frame


def _ops(calls: pl.DataFrame) -> pl.DataFrame:
    ops = (
        calls.sort("proc", "start_ns", "correlation")
        .with_row_index("op_id")
        .with_columns(
            pl.col("op_id").cast(pl.Int64),
            pl.when(pl.col("kind") == "marker_api")
            .then(pl.lit("roctx"))
            .otherwise("kind")
            .alias("kind"),  # fmt: skip
        )
    )
    if ops.is_empty():
        return ops.with_columns(
            pl.lit(None, pl.Int64).alias("depth"), pl.lit(None, pl.Int64).alias("parent_id")
        )
    return add_nesting(ops)


def _steps(ops: pl.DataFrame) -> pl.DataFrame:
    steps = ops.filter((pl.col("kind") == "roctx") & pl.col("name").str.contains(STEP_RANGE))
    return (
        steps.select(
            "rank",
            pl.col("name").str.extract(STEP_RANGE, 1).cast(pl.Int64, strict=False).alias("step"),
            "start_ns",
            "end_ns",
            (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
            pl.lit("ProfilerStep").alias("marker"),
        )
        .drop_nulls("step")
        .unique(["rank", "step"], keep="first")
        .sort("rank", "step")
    )


def _with_step(frame: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the ``step`` each row starts in (rows between steps: null)."""
    if steps.is_empty() or frame.is_empty():
        return frame.with_columns(pl.lit(None, pl.Int64).alias("step"))
    windows = steps.select(
        "rank", "step", pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e")
    )
    found = (
        frame.with_row_index("_row")
        .select("_row", "rank", "start_ns")
        .sort("start_ns")
        .join_asof(
            windows.sort("s"),
            left_on="start_ns",
            right_on="s",
            by="rank",
            check_sortedness=False,
        )
        .select("_row", pl.when(pl.col("start_ns") < pl.col("e")).then("step").alias("step"))
        .sort("_row")
    )
    return frame.with_columns(found.get_column("step"))


def _kernel_table(k: pl.DataFrame) -> pl.DataFrame:
    return schema_columns(
        "kernels",
        k.sort("proc", "start_ns", "dispatch_id"),
        kernel_id=pl.int_range(pl.len(), dtype=pl.Int64),
        device="gpu_index",
        stream="queue",
        dur_ns=DUR_NS,
    )


def _collective_table(c: pl.DataFrame) -> pl.DataFrame:
    op = op_expr(pl.col("name"))
    return schema_columns(
        "collectives",
        c.sort("rank", "start_ns", "dispatch_id"),
        collective_id=pl.int_range(pl.len(), dtype=pl.Int64),
        seq=pl.int_range(pl.len(), dtype=pl.Int64).over("rank"),
        op=pl.coalesce(pl.when(op != "unknown").then(op), "call_op", pl.lit("unknown")),
        op_name=pl.coalesce("call_name", "name"),
        dur_ns=DUR_NS,
        enqueue_ns="call_ns",
        stream="queue",
        size_source=pl.lit("none"),
        is_p2p=pl.lit(False).or_(pl.col("call_op").is_in(["send", "recv"]).fill_null(False)),
    )


def _op_table(o: pl.DataFrame) -> pl.DataFrame:
    return schema_columns("ops", o, name=pl.col("name").fill_null(""), dur_ns=DUR_NS)
