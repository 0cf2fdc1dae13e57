"""NCCL inside an Nsight report: NVTX payload decoding and the ``collectives`` table.

NCCL (>= 2.8, NVTX on) wraps every API call in a push/pop range of domain ``NCCL`` whose
message is the registered C function name (``ncclAllReduce``...). From 2.16 the range has a
binary payload; its C struct (``src/include/nvtx_payload_schemas.h``) is:

- 2.25+: ``u64 comm hash`` first, then ``size_t bytes`` and ``int root/peer/redop`` as the
  function needs; comm init/destroy: {comm, nranks, rank, cudaDev}; split adds parent comm,
  color, key;
- 2.16-2.24: the same without the leading comm hash.

Schema ids moved between NCCL versions (and older ones were registered dynamically), so a
payload is decoded by function name and payload size, both of which pin the layout. The
bytes NCCL records are count * type size of the call's ``count`` argument: the buffer for
all_reduce/broadcast/reduce/send/recv, the per-rank part for all_gather/reduce_scatter
(turned into the message size M here by multiplying by the communicator size).

A collective row is one NCCL API range (the host enqueue), joined to the NCCL kernel that
its thread launched next (the GPU execution; in a ncclGroupStart/End group every call of
the group gets the group's kernel). NCCL kernels that no range claims (NVTX off or filtered)
become rows of their own with the op from the kernel name and bytes null.

A communicators row is one (rank, comm hash) from the communicator-init payloads, or from
collectives whose communicator was initialized before the capture. Its ``ranks`` list holds
the global rank of every member that is a process of this report (all of them for a
one-file export of the whole job), nulls for the others.
"""

from __future__ import annotations

import polars as pl

from ...ingest.result import Warnings
from ...vocab import OP_NAMES, op_name_expr

#: NCCL API calls that are collectives: the vocabulary's names of NCCL's API (its only
#: ``nccl``-prefixed names).
RANGE_CALLS = [name for name in OP_NAMES if name.startswith("nccl")]
INIT_RANGES = (
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommSplit",
    "ncclCommShrink",
)

_U8, _I4, _PAD = pl.UInt64, pl.Int32, None  # _PAD: 4 bytes of struct padding
_COLL_TAIL = {  # fields after the comm hash (2.25+) / the whole struct (2.16-2.24)
    "ncclAllReduce": [("bytes", _U8), ("redop", _I4), ("_p", _PAD)],
    "ncclReduceScatter": [("bytes", _U8), ("redop", _I4), ("_p", _PAD)],
    "ncclAllGather": [("bytes", _U8)],
    "ncclAlltoAll": [("bytes", _U8)],
    "ncclBroadcast": [("bytes", _U8), ("root", _I4), ("_p", _PAD)],
    "ncclBcast": [("bytes", _U8), ("root", _I4), ("_p", _PAD)],
    "ncclGather": [("bytes", _U8), ("root", _I4), ("_p", _PAD)],
    "ncclScatter": [("bytes", _U8), ("root", _I4), ("_p", _PAD)],
    "ncclReduce": [("bytes", _U8), ("root", _I4), ("redop", _I4)],
    "ncclSend": [("bytes", _U8), ("peer", _I4), ("_p", _PAD)],
    "ncclRecv": [("bytes", _U8), ("peer", _I4), ("_p", _PAD)],
}
_INIT = [("comm", _U8), ("nranks", _I4), ("rank", _I4), ("cuda_dev", _I4), ("_p", _PAD)]
_LAYOUTS: dict[str, list[list[tuple[str, str]]]] = {
    name: [[("comm", _U8), *tail], tail] for name, tail in _COLL_TAIL.items()
}
_LAYOUTS |= {n: [_INIT] for n in INIT_RANGES if n != "ncclCommSplit"}
_LAYOUTS["ncclCommSplit"] = [
    [
        ("comm", _U8),
        ("parent", _U8),
        ("nranks", _I4),
        ("rank", _I4),
        ("cuda_dev", _I4),
        ("color", _I4),
        ("key", _I4),
        ("_p", _PAD),
    ]
]

REDOPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
PAYLOAD_SCHEMA = {
    "op_id": pl.Int64,
    "comm_hash": pl.UInt64,
    "bytes": pl.Int64,
    "redop": pl.Int64,
    "root": pl.Int64,
    "peer": pl.Int64,
    "nranks": pl.Int64,
    "rank": pl.Int64,
    "cuda_dev": pl.Int64,
}


def _size(layout: list[tuple[str, pl.DataType | None]]) -> int:
    return sum(8 if t == pl.UInt64 else 4 for _, t in layout)


def decode_payloads(ranges: pl.DataFrame, warnings: Warnings) -> pl.DataFrame:
    """Decode NCCL payloads of ``ranges`` (op_id, name, payload) into PAYLOAD_SCHEMA columns.

    Rows are grouped by (function, payload size); each group's fields are cut out of the
    payload column at their struct offsets and reinterpreted as little-endian integers.
    Payloads of an unknown size are counted as a warning.
    """
    have = ranges.filter(pl.col("payload").is_not_null() & pl.col("name").is_in(list(_LAYOUTS)))
    have = have.with_columns(pl.col("payload").bin.size().alias("size"))
    parts = [pl.DataFrame(schema=PAYLOAD_SCHEMA)]
    for (name, size), group in have.group_by(["name", "size"], maintain_order=True):
        layout = next((lay for lay in _LAYOUTS[name] if _size(lay) == size), None)
        if layout is None:
            warnings.add(
                f"NCCL NVTX payload of {name} with unexpected size {size} bytes: skipped",
                group.height,
            )
            continue
        fields, offset = [], 0
        for field, dtype in layout:
            width = 8 if dtype == pl.UInt64 else 4
            if dtype is not None:
                fields.append(
                    pl.col("payload")
                    .bin.slice(offset, width)
                    .bin.reinterpret(dtype=dtype, endianness="little")
                    .alias("comm_hash" if field == "comm" else field)
                )
            offset += width
        part = group.select("op_id", *fields)
        part = part.with_columns(
            [pl.lit(None).alias(c) for c in PAYLOAD_SCHEMA if c not in part.columns]
        )
        parts.append(part.select(list(PAYLOAD_SCHEMA)).cast(PAYLOAD_SCHEMA))
    return pl.concat(parts)


def _kernel_fields(names: pl.Expr) -> list[pl.Expr]:
    """op, dtype, algorithm, protocol from an NCCL kernel name (NCCL 2.7 to 2.30 kernel symbols;
    since 2.19 chosen by ``src/device/generate.py``, github.com/NVIDIA/nccl)."""
    func = pl.coalesce(
        names.str.extract(r"(?i)nccl(?:Dev)?Kernel_([A-Za-z]+)", 1),
        names.str.extract(
            r"(?i)^nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv)", 1
        ),
    )
    op = op_name_expr(func)
    dtype_token = names.str.extract(
        r"_(f16|f32|f64|bf16|i8|u8|i32|u32|i64|u64|half|float|double|__nv_bfloat16|int8_t"
        r"|uint8_t|int32_t|uint32_t|int64_t|uint64_t)(?:_|\(|$)",
        1,
    )
    dtype = dtype_token.replace_strict(
        {
            "f16": "float16",
            "half": "float16",
            "f32": "float32",
            "float": "float32",
            "f64": "float64",
            "double": "float64",
            "bf16": "bfloat16",
            "__nv_bfloat16": "bfloat16",
            "i8": "int8",
            "int8_t": "int8",
            "u8": "uint8",
            "uint8_t": "uint8",
            "i32": "int32",
            "int32_t": "int32",
            "u32": "uint32",
            "uint32_t": "uint32",
            "i64": "int64",
            "int64_t": "int64",
            "u64": "uint64",
            "uint64_t": "uint64",
        },
        default=None,
    )
    # Only the 2.8-2.18 names (ncclKernel_<Func>_<ALGO>_<PROTO>_...) say algorithm/protocol.
    algo = names.str.extract(r"^ncclKernel_[A-Za-z]+_([A-Z_]+?)_(?:LL128|LL|SIMPLE)_", 1)
    proto = names.str.extract(r"^ncclKernel_[A-Za-z]+_[A-Z_]+?_(LL128|LL|SIMPLE)_", 1)
    return [
        op.alias("kernel_op"),
        dtype.alias("dtype"),
        algo.str.to_lowercase().alias("algorithm"),
        proto.str.to_lowercase().alias("protocol"),
    ]


def collectives(
    ops: pl.DataFrame, kernels: pl.DataFrame, payloads: pl.DataFrame, warnings: Warnings
) -> pl.DataFrame:
    """The collectives rows (without ``rank``: columns pid, tid, device are left for the caller).

    ``ops``: NCCL-domain API ranges (op_id, pid, tid, name, start_ns, end_ns);
    ``kernels``: NCCL kernels with their launch (kernel_id, pid, device, stream, name,
    start_ns, end_ns, correlation, launch_tid, launch_ns).
    """
    calls = (
        ops.filter(pl.col("name").is_in(RANGE_CALLS))
        .select("op_id", "pid", "tid", "name", "start_ns")
        .with_columns(op_name_expr(pl.col("name")).alias("op"))
        .join(payloads, on="op_id", how="left")
        .sort("start_ns")
    )
    launches = kernels.drop_nulls(["launch_tid", "launch_ns"]).sort("launch_ns")
    matched = calls.join_asof(
        launches.select("kernel_id", "pid", pl.col("launch_tid").alias("tid"), "launch_ns"),
        left_on="start_ns",
        right_on="launch_ns",
        by=["pid", "tid"],
        strategy="forward",
        check_sortedness=False,
    )
    matched = matched.join(
        kernels.drop("pid", "launch_tid", "launch_ns").rename(
            {"start_ns": "k_start", "end_ns": "k_end", "name": "kernel_name"}
        ),
        on="kernel_id",
        how="left",
    )
    sizes = (
        payloads.filter(pl.col("nranks").is_not_null())
        .group_by("comm_hash")
        .agg(pl.col("nranks").max().alias("group_size"))
    )
    from_calls = matched.join(sizes, on="comm_hash", how="left").select(
        "pid",
        "tid",
        "device",
        pl.col("op"),
        pl.col("name").alias("op_name"),
        "comm_hash",
        "group_size",
        "redop",
        "root",
        "peer",
        "stream",
        "correlation",
        pl.col("bytes").alias("payload_bytes"),
        pl.col("k_start").alias("start_ns"),
        pl.col("k_end").alias("end_ns"),
        pl.col("start_ns").alias("enqueue_ns"),
        *_kernel_fields(pl.col("kernel_name"))[1:],
    )
    alone = kernels.join(matched.select("kernel_id").drop_nulls(), on="kernel_id", how="anti")
    from_kernels = alone.select(
        "pid",
        pl.col("launch_tid").alias("tid"),
        "device",
        "stream",
        "correlation",
        pl.col("name").alias("op_name"),
        "start_ns",
        "end_ns",
        pl.col("launch_ns").alias("enqueue_ns"),
        *_kernel_fields(pl.col("name")),
    ).rename({"kernel_op": "op"})
    out = pl.concat([from_calls, from_kernels], how="diagonal_relaxed")
    return _finish(out, warnings)


def _finish(out: pl.DataFrame, warnings: Warnings) -> pl.DataFrame:
    for col, dtype in (
        ("payload_bytes", pl.Int64),
        ("group_size", pl.Int64),
        ("redop", pl.Int64),
        ("comm_hash", pl.UInt64),
        ("root", pl.Int64),
        ("peer", pl.Int64),
    ):
        if col not in out.columns:
            out = out.with_columns(pl.lit(None, dtype).alias(col))
    out = out.join(_comm_names(out["comm_hash"]), on="comm_hash", how="left")
    per_rank = pl.col("op").is_in(["all_gather", "reduce_scatter"])
    out = out.with_columns(
        pl.when(per_rank)
        .then(pl.col("payload_bytes") * pl.col("group_size"))
        .otherwise(pl.col("payload_bytes"))
        .alias("bytes"),
        pl.col("redop").replace_strict(REDOPS, default=None, return_dtype=pl.Utf8),
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        pl.when(pl.col("payload_bytes").is_not_null())
        .then(pl.lit("nvtx_payload"))
        .otherwise(pl.lit("none"))
        .alias("size_source"),
    )
    no_payload = out.filter(pl.col("payload_bytes").is_null()).height
    warnings.add(
        "collective without NCCL NVTX payload: bytes unknown (SQLite exports up to "
        "schema 3.7.2 drop payloads; the json export keeps them)",
        no_payload,
    )
    no_size = out.filter(
        per_rank & pl.col("payload_bytes").is_not_null() & pl.col("group_size").is_null()
    ).height
    warnings.add("all_gather/reduce_scatter without communicator size: bytes unknown", no_size)
    return out.drop("payload_bytes", "comm_hash")


def _comm_names(hashes: pl.Series) -> pl.DataFrame:
    """comm_hash -> comm (``0x%x``); a job has few communicators, so each distinct hash is
    formatted once and joined."""
    distinct = hashes.drop_nulls().unique().sort()
    return pl.DataFrame(
        {"comm_hash": distinct, "comm": [f"0x{h:x}" for h in distinct.to_list()]},
        schema={"comm_hash": pl.UInt64, "comm": pl.Utf8},
    )


COMM_SCHEMA = {
    "rank": pl.Int64,
    "comm": pl.Utf8,
    "backend": pl.Utf8,
    "nranks": pl.Int64,
    "ranks": pl.List(pl.Int64),
    "rank_in_comm": pl.Int64,
}


def communicators(
    inits: pl.DataFrame, units: pl.DataFrame, collectives: pl.DataFrame
) -> pl.DataFrame:
    """The communicators rows (see the module docstring), COMM_SCHEMA columns.

    ``inits``: decoded communicator-init payloads (pid, cuda_dev, comm_hash, nranks, rank,
    start_ns); ``units``: the report's units (pid, device, rank, world_size, see
    :mod:`pipeline.ingest.nsys.ranks`); ``collectives``: rank, comm, group_size of the finished
    collectives.
    """
    by_dev = units.select("pid", pl.col("device").alias("cuda_dev"), pl.col("rank").alias("r"))
    by_pid = units.sort("rank").unique("pid", keep="first").select("pid", pl.col("rank").alias("p"))
    rows = (
        inits.drop_nulls(["comm_hash"])
        .join(by_dev, on=["pid", "cuda_dev"], how="left")
        .join(by_pid, on="pid", how="left")
        # the init's device names the unit; a process whose kernels ran elsewhere (or none)
        # falls back to its first rank
        .with_columns(pl.coalesce("r", "p").alias("global_rank"))
        .drop_nulls("global_rank")
        .sort("start_ns")
        # a re-initialized communicator (abort, then init again) keeps its last init
        .unique(["global_rank", "comm_hash"], keep="last")
        .join(_comm_names(inits["comm_hash"]), on="comm_hash")
        .select(
            pl.col("global_rank").alias("rank"),
            "comm",
            pl.col("nranks").cast(pl.Int64),
            pl.col("rank").cast(pl.Int64).alias("rank_in_comm"),
        )
    )
    seen = (
        collectives.drop_nulls(["rank", "comm"])
        .group_by("rank", "comm")
        .agg(pl.col("group_size").drop_nulls().max().alias("nranks"))
        .join(rows, on=["rank", "comm"], how="anti")
        .with_columns(pl.lit(None, pl.Int64).alias("rank_in_comm"))
    )
    rows = pl.concat([rows, seen.select(rows.columns)], how="vertical_relaxed")
    world = units.group_by("rank").agg(pl.col("world_size").max())
    return (
        rows.join(_member_lists(rows), on="comm", how="left")
        .join(world, on="rank", how="left")
        .with_columns(
            # the communicator this rank's global rank came from is the world: 0..n-1
            pl.when(
                (pl.col("nranks") == pl.col("world_size"))
                & (pl.col("rank_in_comm") == pl.col("rank"))
            )
            .then(pl.int_ranges(0, pl.col("nranks"), dtype=pl.Int64))
            .otherwise(pl.col("ranks"))
            .alias("ranks"),
            pl.lit("nccl").alias("backend"),
        )
        .select(list(COMM_SCHEMA))
        .cast(COMM_SCHEMA)
        .sort("rank", "comm")
    )


def _member_lists(rows: pl.DataFrame) -> pl.DataFrame:
    """comm -> ranks: position i holds the global rank of the report's member with
    rank_in_comm i, null where no process of the report is that member."""
    members = (
        rows.drop_nulls("rank_in_comm").group_by("comm", "rank_in_comm").agg(pl.col("rank").min())
    )
    positions = (
        rows.group_by("comm")
        .agg(pl.col("nranks").max())
        .drop_nulls("nranks")
        .with_columns(pl.int_ranges(0, pl.col("nranks"), dtype=pl.Int64).alias("rank_in_comm"))
        .explode("rank_in_comm")
    )
    return (
        positions.join(members, on=["comm", "rank_in_comm"], how="left")
        .sort("comm", "rank_in_comm")
        .group_by("comm", maintain_order=True)
        .agg(pl.col("rank").alias("ranks"))
    )
