"""The dataset tables of one ``nsys-jax`` archive: ops (every NVTX range), steps,
collectives, ranks and communicators.

- **ops**: each range at its host time (``Orig Start``), nested as the trace's
  ``RangeId``/``ParentId`` say; ``domain`` is the name's prefix (``TSL``, ``NCCL``).
- **steps**: the executions of the XLA module whose name says ``step`` (Paxml's
  ``pjit__wrapped_step_fn``, a ``train_step``), numbered from 0 in time order, over their
  time on the GPU.
- **collectives**: the thunks of XLA's collective instructions (``all-gather-start``,
  ``all-reduce-start``, ``reduce-scatter``, ``all-to-all``, ``collective-permute-start``,
  ...; the ``-done`` halves are waits, not collectives), at their time on the GPU, enqueued
  at their host time, in the step of the module execution they belong to. The HLO dump
  gives the instruction's operands (size, element type) and replica groups (the group
  size; the communicator ``xla:<its ranks>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa

from ...ingest.nsys_jax.hlo import Instruction, array_bytes
from ...ingest.result import DUR_NS, Warnings, parsed_table, schema_columns
from ...ingest.values import fits_int64
from ...vocab import XLA_COLLECTIVES

STEP_MODULE = r"(?i)step"
_SIZES = {
    "module": pl.String,
    "program_id": pl.Int64,
    "instruction": pl.String,
    "opcode": pl.String,
    "count": pl.Int64,
    "out_count": pl.Int64,
    "bytes": pl.Int64,
    "dtype": pl.String,
    "group_size": pl.Int64,
    "comm": pl.String,
    "comm_ranks": pl.List(pl.Int64),
}


@dataclass
class Found:
    """What the archive gives, before the tables are built."""

    trace: pl.DataFrame
    rank: int
    local_rank: int | None
    host: str | None
    gpu_name: str | None
    hlo: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_SIZES))
    ranges: pl.DataFrame | None = None


def collective_modules(found: Found) -> list[tuple[str, int]]:
    """(module, program_id) of every module execution that ran a collective thunk."""
    thunks = _ranges(found).filter(_collective(pl.col("base_op")))
    pairs = thunks.select("module", "program_id").drop_nulls().unique().sort("program_id")
    return list(pairs.iter_rows())


def instruction_sizes(
    insts: list[Instruction], module: str, program_id: int, rank: int = 0
) -> pl.DataFrame:
    """One row per collective instruction of a module: opcode, element counts in and out,
    the message size M (``docs/dataset.md``), dtype, group size and the communicator of
    ``rank`` (its replica group)."""
    by_id = {i.id: i for i in insts if i.id is not None}
    rows = [
        (module, program_id, inst.name, inst.opcode, *_sizes(inst, by_id, rank))
        for inst in insts  # (one pass over a module's instructions, a few tens of thousands)
        if inst.opcode in XLA_COLLECTIVES
    ]
    return pl.DataFrame(rows, schema=_SIZES, orient="row")


def _sizes(inst: Instruction, by_id: dict[int, Instruction], rank: int) -> tuple:
    """count, out_count, bytes, dtype, group_size, comm, comm_ranks of one collective."""
    op = XLA_COLLECTIVES[inst.opcode]
    operands = [a for o in inst.operand_ids if o in by_id for a in by_id[o].arrays()]
    count, size, dtype = array_bytes(operands)
    group = next((g for g in inst.replica_groups if rank in g), None)
    group = group or (inst.replica_groups[0] if inst.replica_groups else None)
    n = len(group) if group else None
    out = count
    if op == "all_gather":  # the gathered output is the message (n: at most the varint's)
        out = count * n if count is not None and n and fits_int64(count * n) else None
        size = size * n if size is not None and n and fits_int64(size * n) else None
    elif op == "reduce_scatter":
        out = count // n if count is not None and n else None
    comm = None if group is None else "xla:" + ",".join(map(str, group))
    return count, out, size, dtype, n, comm, group


def build(found: Found, warnings: Warnings) -> dict[str, pa.Table]:
    """The archive's tables."""
    ranges = _ranges(found)
    named = found.trace.filter(pl.col("Name").is_not_null()).height
    warnings.add("NVTX range without a usable time: left out", named - ranges.height)
    steps = _steps(ranges)
    ranges = ranges.join(
        steps.select(pl.col("range_id").alias("root"), "step"), on="root", how="left"
    )
    coll = _collectives(ranges, found.hlo, warnings)
    frames = {
        "ops": _ops_table(ranges),
        "steps": steps.drop("range_id"),
        "collectives": coll.drop("comm_ranks"),
        "ranks": _ranks_table(found, ranges),
        "communicators": _communicators(found, coll),
    }
    rank = pl.lit(found.rank, pl.Int64).alias("rank")
    return {name: parsed_table(name, f.select(rank, pl.all())) for name, f in frames.items()}


def _ranges(found: Found) -> pl.DataFrame:
    """Every named range with its ids, times, module and collective op name (cached)."""
    if found.ranges is not None:
        return found.ranges
    # (the trace's first row, without a name, spans the whole capture; times of ns that fit
    # int64)
    fits = [pl.col(c).abs() < 9e18 for c in ("Orig Start", "Orig Duration")]
    fits += [pl.col(c).is_not_null() for c in ("Projected Start", "Projected Duration")]
    t = found.trace.filter(pl.col("Name").is_not_null() & pl.all_horizontal(fits).fill_null(False))
    name = pl.col("Name")
    ranges = t.with_row_index("op_id").select(
        pl.col("op_id").cast(pl.Int64),
        name.alias("name"),
        pl.col("PID").alias("pid"),
        pl.col("TID").alias("tid"),
        pl.col("Orig Start").round().cast(pl.Int64).alias("start_ns"),
        (pl.col("Orig Start") + pl.col("Orig Duration")).round().cast(pl.Int64).alias("end_ns"),
        pl.col("Projected Start").alias("gpu_start_ns"),
        (pl.col("Projected Start") + pl.col("Projected Duration")).alias("gpu_end_ns"),
        pl.col("Lvl").cast(pl.Int64).alias("depth"),
        pl.col("RangeId").cast(pl.Int64).alias("range_id"),
        pl.col("ParentId").cast(pl.Int64).alias("parent_range"),
        pl.col("RangeStack")
        .str.split(":")
        .list.get(1, null_on_oob=True)
        .cast(pl.Int64, strict=False)
        .alias("root"),  # fmt: skip
        name.str.extract(r"^([A-Za-z0-9_]+):", 1).alias("domain"),
        name.str.extract(r"^TSL:XlaModule:#.*?hlo_module=([^,#]+)", 1).alias("module_name"),
        name.str.extract(r"^TSL:XlaModule:#.*?program_id=(\d+)", 1).cast(pl.Int64).alias("pid_"),
        name.str.extract(r"^TSL:Thunk:#.*?hlo_op=([^,#]+)", 1).alias("hlo_op"),
    )
    modules = ranges.filter(pl.col("module_name").is_not_null()).select(
        pl.col("range_id").alias("root"),
        pl.col("module_name").alias("module"),
        pl.col("pid_").alias("program_id"),
    )
    parents = ranges.select(
        pl.col("range_id").alias("parent_range"), pl.col("op_id").alias("parent_id")
    )
    found.ranges = (
        ranges.drop("pid_")
        .join(modules, on="root", how="left")
        .join(parents.drop_nulls().unique("parent_range"), on="parent_range", how="left")
        .with_columns(pl.col("hlo_op").str.replace(r"\.\d+$", "").alias("base_op"))
        .sort("op_id")
    )
    return found.ranges


def _xla_op(opcode: pl.Expr) -> pl.Expr:
    """The op of an XLA opcode; null for one that is no collective."""
    return opcode.replace_strict(XLA_COLLECTIVES, default=None, return_dtype=pl.String)


def _collective(opcode: pl.Expr) -> pl.Expr:
    """An XLA opcode of a collective (the ``-done`` halves only wait for one: not listed)."""
    return _xla_op(opcode).is_not_null()


def _steps(ranges: pl.DataFrame) -> pl.DataFrame:
    runs = ranges.filter(pl.col("module_name").str.contains(STEP_MODULE))
    return runs.sort("gpu_start_ns").select(
        "range_id",
        pl.int_range(pl.len(), dtype=pl.Int64).alias("step"),
        pl.col("gpu_start_ns").alias("start_ns"),
        pl.col("gpu_end_ns").alias("end_ns"),
        (pl.col("gpu_end_ns") - pl.col("gpu_start_ns")).alias("dur_ns"),
        (pl.lit("XLA module ") + pl.col("module_name")).alias("marker"),
    )


def _collectives(ranges: pl.DataFrame, hlo: pl.DataFrame, warnings: Warnings) -> pl.DataFrame:
    thunks = ranges.filter(pl.col("hlo_op").is_not_null()).join(
        hlo.rename({"instruction": "hlo_op"}), on=["module", "program_id", "hlo_op"], how="left"
    )
    opcode = pl.coalesce("opcode", "base_op")
    coll = thunks.filter(_collective(opcode)).sort("gpu_start_ns", "op_id")
    warnings.add(
        "collective thunk not found in its module's HLO dump: no size",
        coll.filter(pl.col("opcode").is_null()).height,
    )
    return coll.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("collective_id"),
        "comm",
        pl.int_range(pl.len(), dtype=pl.Int64).over("comm").alias("seq"),
        _xla_op(pl.coalesce("opcode", "base_op")).alias("op"),
        pl.col("hlo_op").alias("op_name"),
        "dtype",
        "count",
        "out_count",
        "bytes",
        "group_size",
        pl.col("gpu_start_ns").alias("start_ns"),
        pl.col("gpu_end_ns").alias("end_ns"),
        (pl.col("gpu_end_ns") - pl.col("gpu_start_ns")).alias("dur_ns"),
        pl.col("start_ns").alias("enqueue_ns"),
        "step",
        pl.when(pl.col("bytes").is_not_null())
        .then(pl.lit("hlo_dump"))
        .otherwise(pl.lit("none"))
        .alias("size_source"),  # fmt: skip
        (_xla_op(pl.coalesce("opcode", "base_op")) == "send_recv").alias("is_p2p"),
        pl.col("op_id").alias("launch_op_id"),
        "comm_ranks",
    )


def _ops_table(r: pl.DataFrame) -> pl.DataFrame:
    return schema_columns("ops", r, kind=pl.lit("nvtx"), dur_ns=DUR_NS)


def _ranks_table(found: Found, ranges: pl.DataFrame) -> pl.DataFrame:
    pid = ranges.get_column("pid").drop_nulls()
    return pl.DataFrame(
        {
            "host": [found.host],
            "pid": [pid[0] if pid.len() else None],
            "local_rank": [found.local_rank],
            "device": [None if found.local_rank is None else f"cuda:{found.local_rank}"],
            "gpu_name": [found.gpu_name],
            "backend": ["nccl"],
        },
        schema={
            "host": pl.String,
            "pid": pl.Int64,
            "local_rank": pl.Int64,
            "device": pl.String,
            "gpu_name": pl.String,
            "backend": pl.String,
        },  # fmt: skip
    )


def _communicators(found: Found, coll: pl.DataFrame) -> pl.DataFrame:
    comms = coll.filter(pl.col("comm").is_not_null()).unique("comm", keep="first")
    return comms.select(
        "comm",
        pl.lit("nccl").alias("backend"),
        pl.col("comm_ranks").list.len().cast(pl.Int64).alias("nranks"),
        pl.col("comm_ranks").alias("ranks"),
        pl.col("comm_ranks")
        .list.eval(pl.element().index_of(found.rank))
        .list.first()
        .cast(pl.Int64)
        .alias("rank_in_comm"),  # fmt: skip
    )
