"""What each collective's own file says about where it came from: the host op that launched
it, its phase and its layer, read from the ops that enclose that launch.

This is per-file work (a collective and the ops around it always come from the same file), so
ingest does it in its workers, next to the parse, and ``tokenwire link`` never reads the ops:
linking then costs in proportion to the collectives, not to every host event of every rank.

Evidence, from the issuing op (``launch_op_id``, else the runtime call with the kernel's
correlation) and the ops enclosing it (``parent_id``), innermost first:

- phase: an enclosing autograd ``evaluate_function`` -> backward; ``Optimizer.step`` /
  ``zero_grad`` or an ``optimizer`` range -> optimizer; a ``backward`` range -> backward; a
  ``forward`` range or a module scope -> forward; else NULL (link decides: send/recv
  direction, or ``other``).
- layer: the innermost module path (``module_scope``); for backward work the module path of
  the forward op with the same autograd sequence number (``backward_of_forward_op``); else
  the innermost NVTX range (``nvtx``). ``attributed_by`` says which.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.ingest.derive.nesting import rows_of
from pipeline.ingest.result import columns, values_at

#: The longest chain of enclosing ops followed (a guard against a cyclic parent_id).
MAX_HOPS = 512
_AUTOGRAD = "autograd::engine::evaluate_function:"
_RUNTIME_KINDS = ("cuda_runtime", "cuda_driver")
#: The integer columns of ``ops`` the walk needs; text is read only at the rows it reaches
#: (a big trace's op names would otherwise be copied whole).
_OP_KEYS = {
    "rank": pl.Int64,
    "op_id": pl.Int64,
    "parent_id": pl.Int64,
    "correlation": pl.Int64,
    "seq_nr": pl.Int64,
}
_COLLECTIVE_COLUMNS = {
    "rank": pl.Int64,
    "launch_op_id": pl.Int64,
    "correlation": pl.Int64,
    # what the source itself says, which ops never override
    "phase": pl.String,
    "layer": pl.String,
}
#: The columns this module sets on ``collectives``.
ADDED = ("launch_op_id", "phase", "layer", "attributed_by", "backward_op")


def attribute_collectives(tables: dict[str, pa.Table]) -> None:
    """Set each collective's launch op, phase and layer in ``tables`` (one file's parse).

    Replaces ``tables["collectives"]`` in place; files without both ops and collectives are
    left as they are.
    """
    collectives, ops = tables.get("collectives"), tables.get("ops")
    if collectives is None or ops is None or collectives.num_rows == 0 or ops.num_rows == 0:
        return
    calls = columns(collectives, _COLLECTIVE_COLUMNS)
    host = columns(ops, _OP_KEYS).with_row_index("pos")
    launch = _launch_ops(calls, host, ops)
    context = _context(launch, host, calls, ops)
    out = collectives
    for name in ADDED:
        column = context.get_column(name).to_arrow()
        if name in out.column_names:
            out = out.set_column(out.column_names.index(name), name, column)
        else:
            out = out.append_column(name, column)
    tables["collectives"] = out


def _launch_ops(calls: pl.DataFrame, host: pl.DataFrame, ops: pa.Table) -> pl.DataFrame:
    """Per collective (in row order): its rank, launch op's id and row in ``host``."""
    calls = calls.with_row_index("call")
    if calls.get_column("launch_op_id").null_count():
        # no launch op from the parser (Nsight): the runtime call with the kernel's correlation
        kind = columns(ops, {"kind": pl.String}).get_column("kind")
        is_runtime = kind.is_in(pl.Series(_RUNTIME_KINDS).implode()).fill_null(False)
        runtime = (
            host.filter(is_runtime & pl.col("correlation").is_not_null())
            .group_by("rank", "correlation")
            .agg(pl.col("op_id").min().alias("runtime_op_id"))
        )
        # correlation ids are per process, so a file with several ranks matches within each
        calls = calls.join(
            runtime, on=["rank", "correlation"], how="left", nulls_equal=True, maintain_order="left"
        ).with_columns(pl.coalesce("launch_op_id", "runtime_op_id").alias("launch_op_id"))
    rows = rows_of(host.get_column("op_id"), calls.get_column("launch_op_id"))
    return calls.select("call", "rank", "launch_op_id").with_columns(
        pl.Series("pos", rows).replace(-1, None)
    )


def _walk(launch: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    """(call, hops, pos) for the launch op (hops 0) and every op enclosing it."""
    parent = rows_of(host.get_column("op_id"), host.get_column("parent_id"))
    start = launch.filter(pl.col("pos").is_not_null())
    calls = start["call"].to_numpy().astype(np.int64)
    rows = start["pos"].to_numpy().astype(np.int64)
    levels = [pl.DataFrame(schema={"call": pl.Int64, "hops": pl.Int64, "pos": pl.Int64})]
    for hops in range(MAX_HOPS + 1):
        if rows.size == 0:
            break
        levels.append(pl.DataFrame({"call": calls, "hops": np.full(rows.size, hops), "pos": rows}))
        rows = parent[rows]
        keep = rows >= 0
        calls, rows = calls[keep], rows[keep]
    return pl.concat(levels)


def _evidence(launch: pl.DataFrame, host: pl.DataFrame, ops: pa.Table) -> pl.DataFrame:
    """Per collective with a launch op: the phase flags and the layer candidates."""
    walk = _walk(launch, host).sort("call", "hops")
    ancestors = pl.concat(
        [
            walk,
            values_at(ops, walk["pos"].to_numpy(), ("name", "kind", "module_path")),
            host.get_column("seq_nr").gather(walk["pos"]).to_frame(),
        ],
        how="horizontal",
    ).with_columns(pl.col("name").str.to_lowercase().alias("lname"))
    name, lname, nvtx = pl.col("name"), pl.col("lname"), pl.col("kind") == "nvtx"
    autograd = name.str.starts_with(_AUTOGRAD)
    return ancestors.group_by("call").agg(
        autograd.any().alias("in_autograd"),
        (
            lname.str.starts_with("optimizer.step")
            | lname.str.starts_with("optimizer.zero_grad")
            | (lname == "optimizer")
            | (nvtx & lname.str.contains("optimizer", literal=True))
        )
        .any()
        .alias("in_optimizer"),
        ((lname == "backward") | (nvtx & lname.str.contains("backward", literal=True)))
        .any()
        .alias("in_backward"),
        (
            (lname == "forward")
            | (pl.col("kind") == "module")
            | (nvtx & lname.str.contains("forward", literal=True))
        )
        .any()
        .alias("in_forward"),
        pl.col("module_path").drop_nulls().first().alias("module_path"),
        pl.col("seq_nr")
        .filter(
            pl.col("seq_nr").is_not_null()
            & (autograd | name.str.contains("Backward", literal=True))
        )
        .first()
        .alias("backward_seq_nr"),
        name.filter(nvtx).first().alias("nvtx_range"),
        name.filter(autograd).first().alias("backward_op"),
    )


def _forward_ops(host: pl.DataFrame, ops: pa.Table, seq_nrs: pl.Series) -> pl.DataFrame:
    """The module path of the first forward op of each of these autograd sequence numbers."""
    wanted = host.rename({"seq_nr": "backward_seq_nr"}).filter(
        (pl.col("backward_seq_nr") >= 0)
        & pl.col("backward_seq_nr").is_in(seq_nrs.drop_nulls().unique().implode())
    )
    text = values_at(ops, wanted["pos"].to_numpy(), ("name", "module_path"))
    name = pl.col("name")
    return (
        pl.concat([wanted, text], how="horizontal")
        .filter(
            pl.col("module_path").is_not_null()
            & ~name.str.contains("Backward", literal=True)
            & ~name.str.starts_with("autograd::")
        )
        .group_by("rank", "backward_seq_nr")
        .agg(pl.col("module_path").sort_by("op_id").first().alias("forward_module_path"))
    )


def _context(
    launch: pl.DataFrame, host: pl.DataFrame, calls: pl.DataFrame, ops: pa.Table
) -> pl.DataFrame:
    """Per collective (in row order): launch_op_id, phase, layer, attributed_by, backward_op."""
    evidence = _evidence(launch, host, ops)
    found = launch.join(evidence, on="call", how="left", maintain_order="left")
    found = found.join(
        _forward_ops(host, ops, evidence["backward_seq_nr"]),
        on=["rank", "backward_seq_nr"],
        how="left",
        nulls_equal=True,
        maintain_order="left",
    ).sort("call")
    found = found.with_columns(
        calls.get_column("phase").alias("given_phase"),
        calls.get_column("layer").alias("given_layer"),
    )
    phase = (
        pl.when(pl.col("given_phase").is_not_null())
        .then(pl.col("given_phase"))
        .when(pl.col("in_autograd"))
        .then(pl.lit("backward"))
        .when(pl.col("in_optimizer"))
        .then(pl.lit("optimizer"))
        .when(pl.col("in_backward"))
        .then(pl.lit("backward"))
        .when(pl.col("in_forward"))
        .then(pl.lit("forward"))
    )
    by = (
        pl.when(pl.col("given_layer").is_not_null())
        .then(pl.lit("source"))
        .when(pl.col("module_path").is_not_null())
        .then(pl.lit("module_scope"))
        .when(pl.col("forward_module_path").is_not_null())
        .then(pl.lit("backward_of_forward_op"))
        .when(pl.col("nvtx_range").is_not_null())
        .then(pl.lit("nvtx"))
    )
    layer = pl.coalesce("given_layer", "module_path", "forward_module_path", "nvtx_range")
    return found.select(
        "launch_op_id",
        phase.alias("phase"),
        layer.alias("layer"),
        by.alias("attributed_by"),
        "backward_op",
    )
