"""Collectives in a Kineto trace, in every form PyTorch has written them.

1. NCCL kernels carrying the collective's metadata in their args (PyTorch >= 2.2 or so).
2. Metadata only on the ``record_param_comms`` CPU op: joined to the kernel by ``External
   id``, else by the op that encloses the kernel's launch on the launching thread.
3. No metadata: op and input shape from the enclosing ``nccl:<op>`` annotation or
   launching op (``c10d::``, ``symm_mem::``; both buffers where it records them), else the
   op from the kernel name and ``bytes`` null (a warning).
4. gloo (CPU): each ``gloo:<op>`` annotation is a collective (it spans the work, on the
   process group's runloop thread); the ``c10d::<op>`` op that enqueued it is matched by
   order within its op, giving the peer of send/recv and the enqueue time. A trace with no
   communication kernels (recorded without CUDA activities) treats its ``nccl:<op>``
   annotations the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import polars as pl

from ...ingest.result import ENGINE
from ...ingest.values import fits_int64, int64_or_none, str_or_none
from ...vocab import (
    COLLECTIVE_LAUNCH_OP,
    METADATA_OPS,
    dtype_expr,
    dtype_size_expr,
    message_bytes_expr,
    op_expr,
)

if TYPE_CHECKING:
    from ...ingest.kineto.parse import Trace
    from ...ingest.result import Warnings

#: Collective metadata args (Kineto names in kineto.Args) carried on kernels and host ops.
COLLECTIVE_ARGS = [
    "collective_name",
    "in_nelems",
    "out_nelems",
    "group_size",
    "dtype",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "seq",
]
COLLECTIVE_COLUMNS = [
    "collective_id",
    "comm",
    "pg_name",
    "seq",
    "op",
    "op_name",
    "dtype",
    "count",
    "out_count",
    "bytes",
    "group_size",
    "peer",
    "start_ns",
    "end_ns",
    "dur_ns",
    "enqueue_ns",
    "stream",
    "correlation",
    "external_id",
    "step",
    "size_source",
    "launch_op_id",
]


def collectives_table(
    groups: list[dict[str, dict[str, Any]]],
    events: pl.DataFrame,
    ops: pl.DataFrame,
    meta: pl.DataFrame,
    kernels: pl.DataFrame,
    warnings: list[Warnings],
) -> pl.DataFrame:
    """One row per collective each file's rank executed (NCCL kernel or gloo work), the
    schema columns, ``file``, and ``_pg_desc`` and ``_pg_ranks`` for
    :func:`communicators_table`.

    Frames hold the events of one or more files (``file``: the index of the file's
    :func:`process_groups` in ``groups`` and its warnings in ``warnings``). ``events`` is the
    GPU activity; ``meta`` the collective metadata of every event that has some, by
    ``event_id`` (the kernels' and ``record_param_comms``').
    """
    gpu = _nccl_kernel_collectives(events, ops, meta, kernels)
    # a trace recorded without CUDA activities keeps the nccl:<op> annotations (with their
    # Input Dims) but no kernels: each is a collective, as gloo's work is
    with_kernels = gpu.get_column("file").unique().to_list() if not gpu.is_empty() else []
    cpu = _gloo_collectives(ops, warnings, with_kernels)
    frame = pl.concat([gpu, cpu], how="diagonal_relaxed") if not cpu.is_empty() else gpu
    if frame.is_empty():
        return _empty()
    frame = _finish(frame, groups)
    # (a metadata exchange, DeepEP's notify kernels, moves no data of its own to size)
    data = frame.filter(~pl.col("op").is_in(METADATA_OPS))
    missing = data.group_by("file").agg(pl.col("bytes").null_count())
    for file, count in missing.iter_rows():
        warnings[file].add(
            "collectives without size metadata (op taken from the kernel name)", count
        )
    return frame


def communicators_table(
    groups: list[dict[str, dict[str, Any]]], ranks: list[int], collectives: pl.DataFrame
) -> pl.DataFrame:
    """Process groups from ``distributedInfo.pg_config`` (``groups``, :func:`process_groups`
    of each file), plus groups only named on events; by file, then name."""
    rows: list[dict[str, dict[str, Any]]] = [dict(g) for g in groups]
    seen = collectives.filter(pl.col("pg_name").is_not_null()).unique(
        ["file", "pg_name"], keep="first"
    )
    for file, name, desc, ranks_text, size in seen.select(
        "file", "pg_name", "_pg_desc", "_pg_ranks", "group_size"
    ).iter_rows():
        if name not in rows[file]:
            listed = int_list(json_value(ranks_text))
            rows[file][name] = {
                "pg_name": name,
                "pg_desc": desc,
                "backend": None,
                "nranks": size if size is not None else (len(listed) if listed else None),
                "ranks": listed,
            }
    pgs = [(file, pg, rank) for file, (by_name, rank) in enumerate(zip(rows, ranks, strict=True))
           for pg in by_name.values()]  # fmt: skip
    # (built a column at a time: rows of dicts convert a world group's list of every rank
    # of the job several times slower, in each trace of the job)
    frame = pl.DataFrame(
        {
            "file": [file for file, _, _ in pgs],
            "comm": [f"pg:{pg['pg_name']}" for _, pg, _ in pgs],
            "pg_name": [pg["pg_name"] for _, pg, _ in pgs],
            "pg_desc": [pg.get("pg_desc") for _, pg, _ in pgs],
            "backend": [pg.get("backend") for _, pg, _ in pgs],
            "nranks": [pg.get("nranks") for _, pg, _ in pgs],
            "ranks": [pg.get("ranks") for _, pg, _ in pgs],
            "rank_in_comm": [_place(pg.get("ranks"), rank) for _, pg, rank in pgs],
        },
        schema=_COMMUNICATOR,
    )
    return frame.sort("file", "pg_name")


def _place(members: list[int] | None, rank: int) -> int | None:
    """Where ``rank`` is in a group's ``members`` (None: not there, or no list)."""
    try:
        return members.index(rank) if members else None
    except ValueError:
        return None


_COMMUNICATOR = {
    "file": pl.Int64,
    "comm": pl.String,
    "pg_name": pl.String,
    "pg_desc": pl.String,
    "backend": pl.String,
    "nranks": pl.Int64,
    "ranks": pl.List(pl.Int64),
    "rank_in_comm": pl.Int64,
}


def process_groups(trace: Trace) -> dict[str, dict[str, Any]]:
    """``distributedInfo.pg_config`` by group name (read once per trace: a world group lists
    every rank of the job)."""
    info = trace.distributedInfo or {}
    out: dict[str, dict[str, Any]] = {}
    for pg in info.get("pg_config") or []:
        if not isinstance(pg, dict) or pg.get("pg_name") is None:
            continue
        ranks = int_list(pg.get("ranks"))
        size = int64_or_none(pg.get("pg_size"))
        name = pg["pg_name"]
        if not isinstance(name, str) and int64_or_none(name) is None:
            continue  # (a name of another type: unknown, as an args value would be)
        out[str(name)] = {
            "pg_name": str(name),
            "pg_desc": str_or_none(pg.get("pg_desc")),
            "backend": str_or_none(pg.get("backend_config")),
            "nranks": size or (len(ranks) if ranks else None),
            "ranks": ranks,
        }
    return out


#: What names a thread in frames of several files.
_THREAD = ("file", "pid", "tid")


def _enclosing(inner: pl.LazyFrame, outer: pl.LazyFrame, prefix: str) -> pl.LazyFrame:
    """Join to each ``inner`` row (file, pid, tid, start_ns, end_ns) the latest-starting
    ``outer`` range on the same thread of the same file that contains it; outer columns get
    ``prefix`` (null where none does, and where ``outer`` has no rows)."""
    names = outer.collect_schema().names()
    renamed = outer.rename({c: f"{prefix}{c}" for c in names if c not in _THREAD})
    added = [f"{prefix}{c}" for c in names if c not in _THREAD]
    joined = inner.sort("start_ns").join_asof(
        renamed.sort(f"{prefix}start_ns"),
        left_on="start_ns",
        right_on=f"{prefix}start_ns",
        by=list(_THREAD),
        strategy="backward",
        check_sortedness=False,
    )
    inside = pl.col(f"{prefix}end_ns") >= pl.col("end_ns")
    return joined.with_columns(pl.when(inside).then(pl.col(c)).alias(c) for c in added)


def comm_by_launch(kernels: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """``kernels`` with the kernel a collective op launched classed ``comm`` where its name
    says nothing (kind ``other``): a custom all-reduce, a vendor's or a new library's kernel
    that :data:`~pipeline.vocab.COMM_KERNEL` does not list yet.

    The launching op is the ``c10d::`` / ``symm_mem::`` op
    (:data:`~pipeline.vocab.COLLECTIVE_LAUNCH_OP`) or ``nccl:<op>`` annotation around
    the runtime call that launched the kernel (same thread). Only an op that launched no
    kernel named as communication counts, and of its unnamed kernels only the first (one
    call, one collective); copies, memsets and kernels of a known kind stay what they are
    (packing a buffer is not the transfer). Its collective then takes the op from the
    launching op, as any kernel without metadata does (:func:`_nccl_kernel_collectives`).
    """
    kinds = kernels.get_column("kind")
    if not (kinds == "other").any():
        return kernels
    named = pl.col("name").str.contains(COLLECTIVE_LAUNCH_OP) & ~pl.col("name").str.contains("wait")
    annotated = (pl.col("kind") == "user_annotation") & pl.col("name").str.contains(
        r"^(nccl|rccl):"
    )
    launchers = ops.filter(named | annotated).select(
        *_THREAD, "start_ns", "end_ns", pl.col("op_id").alias("launcher_id")
    )
    if launchers.is_empty():
        return kernels
    # the rest is one lazy plan: on a small trace each eager step's fixed cost outweighs its rows
    candidates = kernels.lazy().filter(pl.col("kind").is_in(["comm", "other"]))
    calls = (
        ops.lazy()
        .filter(pl.col("kind").is_in(["cuda_runtime", "cuda_driver"]))
        .select("correlation", *_THREAD, "start_ns", "end_ns")
        .drop_nulls("correlation")
        .unique(["file", "correlation"], keep="first")
    )
    launched = candidates.select("file", "kernel_id", "kind", "correlation", "start_ns").join(
        calls.rename({"start_ns": "call_start_ns", "end_ns": "call_end_ns"}),
        on=["file", "correlation"],
    )
    host = launched.select(
        "kernel_id", *_THREAD, pl.col("call_start_ns").alias("start_ns"),
        pl.col("call_end_ns").alias("end_ns"),
    )  # fmt: skip
    around = _enclosing(host, launchers.lazy(), "l_").select("kernel_id", "l_launcher_id")
    by_op = launched.join(around, on="kernel_id").drop_nulls("l_launcher_id")
    unnamed = by_op.filter(
        (pl.col("kind") == "other") & ~(pl.col("kind") == "comm").any().over("l_launcher_id")
    )
    first = unnamed.sort("start_ns", "kernel_id").unique(
        "l_launcher_id", keep="first", maintain_order=True
    )
    first_ids = first.select("kernel_id").collect(engine=ENGINE).get_column("kernel_id")
    return kernels.with_columns(
        pl.when(pl.col("kernel_id").is_in(first_ids.implode()))
        .then(pl.lit("comm"))
        .otherwise(pl.col("kind"))
        .alias("kind")
    )


def _nccl_kernel_collectives(
    events: pl.DataFrame, ops: pl.DataFrame, meta: pl.DataFrame, kernels: pl.DataFrame
) -> pl.DataFrame:
    """The communication kernels with what the ops around their launch say of them: one lazy
    plan, run once (each eager step would be a query of its own, and a small trace's time
    goes to their fixed cost, not to its rows)."""
    comm_ids = kernels.filter(pl.col("kind") == "comm").select("kernel_id", "step")
    if comm_ids.is_empty():
        return pl.DataFrame(schema={"file": pl.Int64})
    ops_ = ops.lazy()
    launched = _launched(events.lazy(), ops_, comm_ids.lazy(), meta.lazy())
    # Launch times stand in for the kernel's own while finding the enclosing host ranges.
    host = launched.select(
        "collective_id",
        *_THREAD,
        pl.col("launch_start_ns").alias("start_ns"),
        pl.col("launch_end_ns").alias("end_ns"),
    ).filter(pl.col("start_ns").is_not_null())
    by_ext, around_rpc = _record_param_comms(host, ops_, meta.lazy())
    around_ann, around_c10d = _launching_ops(host, ops_)
    frame = (
        launched.join(by_ext, on=["file", "external_id"], how="left")
        .join(around_rpc.drop(*_THREAD, "start_ns", "end_ns"), on="collective_id", how="left")
        .join(around_ann.drop(*_THREAD, "start_ns", "end_ns"), on="collective_id", how="left")
        .join(around_c10d.drop(*_THREAD, "start_ns", "end_ns"), on="collective_id", how="left")
    )
    return _kernel_call_fields(frame).collect(engine=ENGINE)


def _launched(
    events: pl.LazyFrame, ops_: pl.LazyFrame, comm_ids: pl.LazyFrame, meta: pl.LazyFrame
) -> pl.LazyFrame:
    """The communication kernels with their metadata and the runtime call that launched
    each (``launch_*``)."""
    # (the metadata joined to the few communication kernels, not to every GPU activity)
    k = events.join(comm_ids, left_on="event_id", right_on="kernel_id")
    k = k.join(meta, on="event_id", how="left").select(
        pl.col("event_id").alias("collective_id"),
        "file",
        "name",
        "start_ns",
        "end_ns",
        "dur_ns",
        "stream",
        "correlation",
        "external_id",
        "step",
        *COLLECTIVE_ARGS,
    )
    launches = (
        ops_.filter(pl.col("kind").is_in(["cuda_runtime", "cuda_driver"]))
        .select(
            "correlation", *_THREAD, "start_ns", "end_ns", pl.col("op_id").alias("launch_op_id")
        )
        .drop_nulls("correlation")
        .unique(["file", "correlation"], keep="first")
    )
    return k.join(
        launches.rename({"start_ns": "launch_start_ns", "end_ns": "launch_end_ns"}),
        on=["file", "correlation"],
        how="left",
    )


def _record_param_comms(
    host: pl.LazyFrame, ops_: pl.LazyFrame, meta: pl.LazyFrame
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The record_param_comms ops with collective args: by external id (``x_*``), and the one
    enclosing each launch (``r_*``)."""
    rpc = (
        ops_.filter(pl.col("name") == "record_param_comms")
        .join(meta.rename({"event_id": "op_id"}), on="op_id", how="inner")
        .filter(pl.col("collective_name").is_not_null())
        .sort("op_id")
    )
    by_ext = rpc.select(
        "file",
        "external_id",
        *[pl.col(c).alias(f"x_{c}") for c in COLLECTIVE_ARGS],
        pl.col("start_ns").alias("x_start_ns"),
    ).unique(["file", "external_id"], keep="first")
    around_rpc = _enclosing(
        host, rpc.select(*_THREAD, "start_ns", "end_ns", *COLLECTIVE_ARGS), "r_"
    )
    return by_ext, around_rpc


def _launching_ops(host: pl.LazyFrame, ops_: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The ``nccl:``/``rccl:`` annotation (``a_*``) and the op that launched the work
    (``c_*``: c10d::allreduce_, symm_mem::multimem_all_reduce_, ...) around each launch."""
    annotations = ops_.filter(
        (pl.col("kind") == "user_annotation") & pl.col("name").str.contains(r"^(nccl|rccl):")
    ).select(*_THREAD, "start_ns", "end_ns", "name", "input_dims", "input_types")
    around_ann = _enclosing(host, annotations, "a_")
    c10d = ops_.filter(pl.col("name").str.contains(COLLECTIVE_LAUNCH_OP)).select(
        *_THREAD, "start_ns", "end_ns", "name", "input_dims", "input_types", "concrete_inputs"
    )
    return around_ann, _enclosing(host, c10d, "c_")


def _kernel_call_fields(frame: pl.LazyFrame) -> pl.LazyFrame:
    """A kernel's collective args from its own args, else record_param_comms'; its enqueue
    time, name and shapes from the ops around its launch."""
    source = (
        pl.when(pl.col("collective_name").is_not_null())
        .then(pl.lit("kernel_args"))
        .when(pl.col("x_collective_name").is_not_null() | pl.col("r_collective_name").is_not_null())
        .then(pl.lit("record_param_comms"))
    )
    meta_ = [pl.coalesce(c, f"x_{c}", f"r_{c}").alias(c) for c in COLLECTIVE_ARGS]
    return frame.with_columns(*meta_, source.alias("size_source")).with_columns(
        pl.coalesce(
            "x_start_ns", "r_start_ns", "c_start_ns", "a_start_ns", "launch_start_ns"
        ).alias("enqueue_ns"),
        pl.coalesce("collective_name", "c_name", "a_name", "name").alias("op_name"),
        pl.coalesce("a_input_dims", "c_input_dims").alias("input_dims"),
        pl.coalesce("a_input_types", "c_input_types").alias("input_types"),
        pl.coalesce("a_name", "c_name").alias("shape_from"),
        pl.col("c_concrete_inputs").alias("concrete_inputs"),
        pl.col("c_name").alias("launch_name"),
        pl.col("c_input_dims").alias("launch_dims"),
    )


def _gloo_collectives(
    ops: pl.DataFrame, warnings: list[Warnings], with_kernels: list[int]
) -> pl.DataFrame:
    """The ``gloo:<op>`` annotations of each file as collectives, and its ``nccl:<op>`` ones
    where the file has no communication kernels (``with_kernels``: the files that have),
    each matched with its ``c10d::`` call by order within its op."""
    nccl = pl.col("name").str.starts_with("nccl:") & ~pl.col("file").is_in(with_kernels)
    named = pl.col("name").str.starts_with("gloo:") | nccl
    work = ops.filter((pl.col("kind") == "user_annotation") & named).select(
        "file",
        pl.col("op_id").alias("collective_id"),
        "name",
        "tid",
        "start_ns",
        "end_ns",
        "dur_ns",
        "step",
        "input_dims",
        "input_types",
        pl.col("tid").alias("stream"),
        op_expr(pl.col("name")).alias("_op"),
    )
    if work.is_empty():
        return pl.DataFrame()
    calls = ops.filter(pl.col("name").str.starts_with("c10d::")).select(
        "file",
        pl.col("start_ns").alias("enqueue_ns"),
        pl.col("op_id").alias("launch_op_id"),
        "concrete_inputs",
        pl.col("name").alias("launch_name"),
        pl.col("input_dims").alias("launch_dims"),
        _gloo_runs_as(op_expr(pl.col("name")), work).alias("_op"),
        op_expr(pl.col("name")).alias("_call_op"),
    )
    order = pl.int_range(pl.len()).over("file", "_op").alias("_k")
    work = work.sort("file", "start_ns", maintain_order=True).with_columns(order)
    calls = calls.sort("file", "enqueue_ns", maintain_order=True).with_columns(order)
    frame = work.join(_matched_calls(work, calls, warnings), on=["file", "_op", "_k"], how="left")
    # the op is the call's where gloo ran it as another (a reduce-scatter's all-reduce)
    called = pl.col("_call_op").is_not_null() & (pl.col("_call_op") != pl.col("_op"))
    return (
        frame.with_columns(
            pl.when(called).then("launch_name").otherwise("name").alias("shape_from")
        )
        .with_columns(
            pl.lit(None, pl.String).alias(c)
            for c in COLLECTIVE_ARGS
            if c not in ("in_nelems", "out_nelems", "group_size", "seq")
        )
        .with_columns(
            pl.lit(None, pl.Int64).alias("in_nelems"),
            pl.lit(None, pl.Int64).alias("out_nelems"),
            pl.lit(None, pl.Int64).alias("group_size"),
            pl.lit(None, pl.Int64).alias("seq"),
            pl.col("name").alias("op_name"),
            pl.lit(None, pl.String).alias("size_source"),
        )
        .drop("_op", "_call_op", "_k", "tid")
    )


def _matched_calls(
    work: pl.DataFrame, calls: pl.DataFrame, warnings: list[Warnings]
) -> pl.DataFrame:
    """The calls of the (file, op)s that have as many calls as gloo work: the others cannot
    be matched by order (a warning per such op, on its file)."""
    counts_work = work.group_by("file", "_op").len()
    counts_call = calls.group_by("file", "_op").len()
    same = counts_work.join(counts_call, on=["file", "_op"], suffix="_c").filter(
        pl.col("len") == pl.col("len_c")
    )
    unmatched = counts_work.join(same, on=["file", "_op"], how="anti").group_by("file").len()
    for file, count in unmatched.iter_rows():
        warnings[file].add(
            "gloo work whose c10d call could not be matched by order (no enqueue time or peer)",
            count,
        )
    return calls.join(same.select("file", "_op"), on=["file", "_op"])


def _gloo_runs_as(call_op: pl.Expr, work: pl.DataFrame) -> pl.Expr:
    """The gloo work op that carries out a ``c10d::`` call of ``call_op``: its own, except a
    reduce-scatter in a file with no ``gloo:reduce_scatter`` work. gloo then runs
    ``c10d::_reduce_scatter_base_`` as a ``gloo:all_reduce`` of the call's whole input (the
    work's Input Dims are the call's input; the flight recorder names it ``gloo:all_reduce``
    too), so the call pairs with the all-reduces in order and keeps its own op and sizes."""
    own = work.filter(pl.col("_op") == "reduce_scatter").get_column("file").unique().to_list()
    runs_other = (call_op == "reduce_scatter") & ~pl.col("file").is_in(own)
    return pl.when(runs_other).then(pl.lit("all_reduce")).otherwise(call_op)


def _finish(frame: pl.DataFrame, groups: list[dict[str, dict[str, Any]]]) -> pl.DataFrame:
    """Normalize op and dtype, compute sizes and peers, number the calls per communicator
    (``groups``: each file's process groups)."""
    only = [next(iter(g.values())) if len(g) == 1 else {} for g in groups]
    only_name = pl.Series([g.get("pg_name") for g in only], dtype=pl.String)
    only_size = pl.Series([g.get("nranks") for g in only], dtype=pl.Int64)
    dims = _per_text(frame, "input_dims", _first_numel, pl.Int64)
    dims_dtype = _per_text(frame, "input_types", _first_type, pl.String)
    frame = frame.with_columns(
        op_expr(pl.coalesce("collective_name", "shape_from", "name")).alias("op"),
        dtype_expr(pl.coalesce("dtype", dims_dtype)).alias("dtype"),
        pl.when(pl.col("size_source").is_null() & dims.is_not_null())
        .then(pl.lit("input_dims"))
        .otherwise(pl.col("size_source"))
        .fill_null("none")
        .alias("size_source"),
        dims.alias("_dims_numel"),
        pl.coalesce("pg_name", pl.lit(only_name).gather(pl.col("file"))),
    )
    size = dtype_size_expr(pl.col("dtype"))
    group = pl.coalesce("group_size", pl.lit(only_size).gather(pl.col("file")))
    # the launching op of a flat all_gather / reduce_scatter records both buffers, output
    # first (c10d::_allgather_base_ and _reduce_scatter_base_: Input Dims [[out], [in]])
    both = _launch_buffers(frame)
    group = pl.coalesce(group, both["group"])
    count = pl.coalesce("in_nelems", both["in"], "_dims_numel")
    out_count = pl.coalesce(
        "out_nelems",
        both["out"],
        pl.when(pl.col("op").is_in(["all_gather", "gather"])).then(pl.col("_dims_numel") * group),
    )
    missing = [c for c in ("correlation", "external_id") if c not in frame.columns]
    plan = (
        frame.lazy()
        .with_columns(
            count.alias("count"),
            out_count.alias("out_count"),
            group.alias("group_size"),
        )
        .with_columns(
            message_bytes_expr(pl.col("op"), pl.col("count"), pl.col("out_count"), size).alias(
                "bytes"
            ),
            ("pg:" + pl.col("pg_name")).alias("comm"),
        )
        .with_columns(pl.lit(None, pl.Int64).alias(c) for c in missing)
    )
    plan = _with_peer(plan, groups, frame)
    # Like PyTorch's own counters, collectives and point-to-point calls count separately.
    # (collective_id last: two calls of equal times are numbered in the trace's order, the
    # same however the files are batched)
    plan = plan.sort("enqueue_ns", "start_ns", "collective_id", nulls_last=True).with_columns(
        pl.coalesce(
            "seq",
            pl.int_range(pl.len()).over("file", "comm", pl.col("op").is_in(["send", "recv"])),
        )
        .cast(pl.Int64)
        .alias("seq")
    )
    return (
        plan.select(
            "file",
            *COLLECTIVE_COLUMNS,
            pl.col("pg_desc").alias("_pg_desc"),
            pl.col("pg_ranks").alias("_pg_ranks"),
        )
        .sort("collective_id")
        .collect(engine=ENGINE)
    )


#: Launching ops whose Input Dims are [[output], [input]] (PyTorch's c10d registrations).
_OUT_IN_OPS = r"_allgather_base_|_reduce_scatter_base_|allgather_into_tensor|reduce_scatter_tensor"


def _launch_buffers(frame: pl.DataFrame) -> dict[str, pl.Expr]:
    """Input and output elements, and the group size they imply, from a launching op that
    records both buffers (null elsewhere)."""
    if "launch_dims" not in frame.columns:
        return {k: pl.lit(None, pl.Int64) for k in ("in", "out", "group")}
    out_n = _per_text(frame, "launch_dims", _first_numel, pl.Int64)
    in_n = _per_text(frame, "launch_dims", lambda t: _nth_numel(t, 1), pl.Int64)
    flat = pl.col("launch_name").str.contains(_OUT_IN_OPS).fill_null(False)
    flat = flat & out_n.is_not_null() & in_n.is_not_null() & (in_n > 0)
    gather = pl.col("op") == "all_gather"
    scatter = pl.col("op") == "reduce_scatter"
    full, shard = pl.max_horizontal(out_n, in_n), pl.min_horizontal(out_n, in_n)
    fits = (full % shard) == 0
    return {
        "in": pl.when(flat & (gather | scatter)).then(in_n),
        "out": pl.when(flat & (gather | scatter)).then(out_n),
        "group": pl.when(flat & (gather | scatter) & fits).then(full // shard),
    }


def _nth_numel(text: str | None, n: int) -> int | None:
    """Elements of the ``n``-th tensor of an Input Dims list, None when unknown."""
    dims = json_value(text)
    if not isinstance(dims, list) or len(dims) <= n:
        return None
    return _first_numel(msgspec.json.encode([dims[n]]).decode())


def _with_peer(
    plan: pl.LazyFrame, groups: list[dict[str, dict[str, Any]]], frame: pl.DataFrame
) -> pl.LazyFrame:
    """``plan`` with ``peer``: the send/recv peer from ``c10d::send``/``recv_`` Concrete
    Inputs (group rank), made global through the group's rank list in its file's
    ``groups`` when it is known."""
    local = _per_text(frame, "concrete_inputs", _peer_from_inputs, pl.Int64)
    p2p = pl.col("op").is_in(["send", "recv"])
    # only the groups of each file's sends and receives: every trace lists the world group,
    # and a table of its 16,384 ranks cost each trace of a 16,384-rank job 2.6 ms
    named = frame.filter(p2p & pl.col("pg_name").is_not_null()).select("file", "pg_name")
    rows = [
        (file, name, at, rank)
        for file, name in named.unique().iter_rows()
        for at, rank in enumerate(groups[file].get(name, {}).get("ranks") or [])
    ]
    plan = plan.with_columns(local.alias("_local_peer"))
    if rows:
        ranks = pl.DataFrame(
            rows, schema=["file", "pg_name", "_local_peer", "_global_peer"], orient="row"
        ).cast({"file": pl.Int64, "pg_name": pl.String, "_local_peer": pl.Int64})
        plan = plan.join(
            ranks.lazy(), on=["file", "pg_name", "_local_peer"], how="left", maintain_order="left"
        )
    else:
        plan = plan.with_columns(pl.lit(None, pl.Int64).alias("_global_peer"))
    peer = pl.coalesce(pl.col("_global_peer").cast(pl.Int64), "_local_peer")
    return plan.with_columns(pl.when(p2p).then(peer).alias("peer")).drop(
        "_local_peer", "_global_peer"
    )


def _per_text(frame: pl.DataFrame, column: str, read: Any, dtype: pl.DataType) -> pl.Expr:
    """``read`` (a function of one JSON text to a value or None) of each value of text
    ``column`` of ``frame``: run once per distinct text (a rank's collectives repeat a few
    shapes) and mapped in the plan, null where the text is null."""
    texts = {t for t in frame.get_column(column).to_list() if t is not None}
    values = {t: read(t) for t in texts}
    return pl.col(column).replace_strict(values, default=None, return_dtype=dtype)


def _peer_from_inputs(text: str | None) -> int | None:
    values = json_value(text)
    if not isinstance(values, list) or len(values) <= 2:
        return None
    peer = values[2]
    if isinstance(peer, str) and 0 < len(peer.lstrip("-")) <= 18 and peer.lstrip("-").isdigit():
        return int(peer)
    return int64_or_none(peer)


def _first_numel(text: str | None) -> int | None:
    dims = json_value(text)
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or not dims[0]:
        return None
    numel = 1
    for d in dims[0]:
        if int64_or_none(d) is None:
            return None
        numel *= d
        if not fits_int64(numel):
            return None  # (beyond int64: unknown)
    return numel


def _first_type(text: str | None) -> str | None:
    types = json_value(text)
    if isinstance(types, list) and types and isinstance(types[0], str) and types[0]:
        return None if types[0] in ("TensorList", "Scalar") else types[0]
    return None


def json_value(text: str | None) -> Any:
    """The value of JSON ``text``; None for null or malformed text."""
    if text is None:
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


def int_list(value: Any) -> list[int] | None:
    """``value`` when it is a list of int64s, else None (unknown).

    A list of plain ints is checked by its types, least and greatest (a world group lists
    every rank, in every rank's trace: checked one by one in Python, the 16,384 ranks of
    each trace of a 16,384-rank job took 10 ms of its parse); any other list one value at
    a time."""
    if not isinstance(value, list):
        return None
    if not value or (set(map(type, value)) == {int} and fits_int64(min(value))
                     and fits_int64(max(value))):  # fmt: skip
        return value
    if all(int64_or_none(v) is not None for v in value):
        return value
    return None


def _empty() -> pl.DataFrame:
    schema = {c: pl.Int64 for c in ("file", *COLLECTIVE_COLUMNS)}
    schema.update(
        {c: pl.String for c in ("comm", "pg_name", "op", "op_name", "dtype", "size_source")}
    )
    schema.update({"_pg_desc": pl.String, "_pg_ranks": pl.String})
    return pl.DataFrame(schema=schema)
