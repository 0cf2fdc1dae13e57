"""What each collective's own file says about where it came from: the host op that launched
it, its phase and its layer, read from the ops that enclose that launch.

This is per-file work (a collective and the ops around it always come from the same file), so
ingest does it in its workers, next to the parse, and ``tokenwire link`` never reads the ops:
linking then costs in proportion to the collectives, not to every host event of every rank.

Evidence, from the issuing op (``launch_op_id``, else the runtime call with the kernel's
correlation) and the ops enclosing it (``parent_id``), innermost first:

- phase: of a send/recv, the pipeline schedule's own name for the action around it
  (:func:`p2p_schedule_phase`); an enclosing autograd ``evaluate_function`` -> backward; an
  enclosing op or range
  named as :data:`pipeline.vocab.PHASE_HINTS` says (optimizer, then backward, then
  forward; a module scope is forward); else a launch on the autograd engine's own thread (one
  that runs ``evaluate_function`` ops and no ``ProfilerStep``) -> backward; else NULL (link
  decides: send/recv direction, or ``other``).
- layer: the innermost module path (``module_scope``); else, under an FSDP2 range that names
  its unit (``FSDP::all_gather (blocks.0)``, ``FSDP::post_backward_reduce (embed)``: the
  ``record_function`` ranges of torch/distributed/fsdp/_fully_shard), the module path that
  unit's ``FSDP::pre_forward (<unit>)`` runs in (``fsdp_unit``): backward gathers and
  reduce-scatters run in autograd hooks, outside any module scope; for other backward work
  the module path of the forward op with the same autograd sequence number
  (``backward_of_forward_op``); else the innermost NVTX range that is not a communication
  library's own (``nvtx``; :data:`pipeline.vocab.LIBRARY_RANGE`); else ``loss`` inside
  a forward op that computes a loss (``loss_op``), ``optimizer`` in the optimizer phase
  (``optimizer``); for an all-to-all that none of those places, the outermost of TorchRec's
  ranges around its embedding exchanges (:data:`pipeline.vocab.EMBEDDING_EXCHANGE_RANGE`)
  as ``embedding/<range>`` (``embedding_range``); for a pipeline send/recv, the layer of the
  op that produced (send) or consumes (recv) its tensor (``pp_boundary``).
  ``attributed_by`` says which; link names the rest (gradient buckets, metrics).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from ...ingest.derive.nesting import rows_of
from ...ingest.result import ENGINE, columns, values_at
from ...vocab import (
    CHUNK_ANNOTATION,
    EMBEDDING_EXCHANGE_RANGE,
    LIBRARY_RANGE,
    LOSS_OP,
    PHASE_HINTS,
    chunk_annotation_expr,
    phase_name_expr,
)

#: The longest chain of enclosing ops followed (a guard against a cyclic parent_id).
MAX_HOPS = 512
_AUTOGRAD = "autograd::engine::evaluate_function:"
#: FSDP2's ranges that name the unit they work on (``FSDP::all_gather (blocks.0)``); the
#: capture is the unit's module name relative to the root
_FSDP_UNIT = r"^FSDP::\w+ \((.+)\)$"
#: The range FSDP2 opens in each unit's forward pre-hook, inside the unit's module scope
_FSDP_PRE_FORWARD = r"^FSDP::pre_forward \((.+)\)$"
_RUNTIME_KINDS = ("cuda_runtime", "cuda_driver")
#: The integer columns of ``ops`` the walk needs; text is read only at the rows it reaches
#: (a big trace's op names would otherwise be copied whole).
_OP_KEYS = {
    "rank": pl.Int64,
    "op_id": pl.Int64,
    "parent_id": pl.Int64,
    "correlation": pl.Int64,
    "seq_nr": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "start_ns": pl.Int64,
}
#: torch.distributed.pipelining's range around each action of a schedule it runs
#: (``_get_profiler_function_name``, torch/distributed/pipelining/schedules.py, v2.13.0:
#: ``PP:`` + stage, action, micro-batch, as ``PP:2SEND_B3``); the capture is the action
_PP_ACTION = r"^PP:\d+(F|I|B|W|SEND_F|RECV_F|SEND_B|RECV_B)\d*$"
_P2P_OPS = ("send", "recv", "send_recv")
_COLLECTIVE_COLUMNS = {
    "op": pl.String,
    "rank": pl.Int64,
    "launch_op_id": pl.Int64,
    "correlation": pl.Int64,
    # what the source itself says, which ops never override
    "phase": pl.String,
    "layer": pl.String,
}
_WALK = ("call", "hops", "pos")
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
    context = _embedding_exchanges(context, launch, host, collectives, ops)
    context = chunk_annotation_context(context, launch, host, calls, ops)
    context = _pipeline_boundaries(context, launch, host, collectives, ops)
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
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for hops in range(MAX_HOPS + 1):
        if rows.size == 0:
            break
        levels.append((calls, np.full(rows.size, hops, np.int64), rows))
        rows = parent[rows]
        keep = rows >= 0
        calls, rows = calls[keep], rows[keep]
    # one frame of the levels' arrays (a frame per level would be a query per level)
    empty = np.empty(0, np.int64)
    return pl.DataFrame(
        {n: np.concatenate([level[i] for level in levels] or [empty]) for i, n in enumerate(_WALK)},
        schema=dict.fromkeys(_WALK, pl.Int64),
    )


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
    ).lazy()
    ancestors = ancestors.with_columns(phase_name_expr(pl.col("name")).alias("lname"))
    name, lname, nvtx = pl.col("name"), pl.col("lname"), pl.col("kind") == "nvtx"
    autograd = name.str.starts_with(_AUTOGRAD)
    backward_node = name.str.contains("Backward", literal=True)
    return (
        ancestors.group_by("call")
        .agg(
            autograd.any().alias("in_autograd"),
            lname.str.contains(PHASE_HINTS["optimizer"]).any().alias("in_optimizer"),
            lname.str.contains(PHASE_HINTS["backward"]).any().alias("in_backward"),
            (lname.str.contains(PHASE_HINTS["forward"]) | (pl.col("kind") == "module"))
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
            # (a library's own range names the call, not the layer)
            name.filter(nvtx & ~name.str.contains(LIBRARY_RANGE)).first().alias("nvtx_range"),
            name.filter(autograd).first().alias("backward_op"),
            name.str.extract(_FSDP_UNIT).drop_nulls().first().alias("fsdp_unit"),
            pl.coalesce(name.str.extract(_PP_ACTION), name.str.extract(CHUNK_ANNOTATION, 2))
            .drop_nulls()
            .first()
            .alias("schedule_action"),
            # (a forward op: a backward node such as NllLossBackward0 runs hooks of others)
            (name.str.to_lowercase().str.contains(LOSS_OP) & ~autograd & ~backward_node)
            .any()
            .alias("in_loss"),
        )
        .collect(engine=ENGINE)
    )


def _engine_threads(host: pl.DataFrame, ops: pa.Table) -> pl.LazyFrame:
    """(rank, pid, tid) of the autograd engine's own threads: they run ``evaluate_function``
    ops and no ``ProfilerStep`` (CPU autograd runs on the calling thread, which has steps)."""
    name = columns(ops, {"name": pl.String}).get_column("name")
    threads = host.select("rank", "pid", "tid").with_columns(
        name.str.starts_with(_AUTOGRAD).alias("autograd"),
        name.str.starts_with("ProfilerStep#").alias("step"),
    )
    return (
        threads.lazy()
        .group_by("rank", "pid", "tid")
        .agg(pl.col("autograd").any(), pl.col("step").any())
        .filter(pl.col("autograd") & ~pl.col("step"))
        .select("rank", "pid", "tid", pl.lit(True).alias("on_engine_thread"))
    )


def forward_module_paths(ops: pl.LazyFrame, keys: tuple[str, ...]) -> pl.LazyFrame:
    """The one rule that places a backward op in a layer: per ``keys`` (a rank's ops) and
    autograd sequence number, the module path of the first forward op (by ``op_id``) with
    that number. PyTorch records ``Sequence number`` on the forward op that created an
    autograd node and on the node's ``evaluate_function``, and the forward op ran in the
    module. ``ops`` has ``keys``, ``op_id``, ``seq_nr``, ``name`` and ``module_path``; the
    result (``keys``, ``backward_seq_nr``, ``forward_module_path``). Link's
    ``backward_of_forward_op`` and the compute split of ``predict --from``
    (:mod:`pipeline.model.whatif`) both place backward work so."""
    name = pl.col("name")
    return (
        ops.filter(
            (pl.col("seq_nr") >= 0)
            & pl.col("module_path").is_not_null()
            & ~name.str.contains("Backward", literal=True)
            & ~name.str.starts_with("autograd::")
        )
        .group_by(*keys, pl.col("seq_nr").alias("backward_seq_nr"))
        .agg(pl.col("module_path").sort_by("op_id").first().alias("forward_module_path"))
    )


def _forward_ops(host: pl.DataFrame, ops: pa.Table, seq_nrs: pl.Series) -> pl.LazyFrame:
    """The module path of the forward op of each of these autograd sequence numbers
    (:func:`forward_module_paths`; text is read only at the ops of these numbers)."""
    wanted = host.filter(
        (pl.col("seq_nr") >= 0) & pl.col("seq_nr").is_in(seq_nrs.drop_nulls().unique().implode())
    )
    text = values_at(ops, wanted["pos"].to_numpy(), ("name", "module_path"))
    return forward_module_paths(pl.concat([wanted, text], how="horizontal").lazy(), ("rank",))


def _fsdp_unit_layers(host: pl.DataFrame, ops: pa.Table) -> pl.LazyFrame:
    """(rank, fsdp_unit, fsdp_layer): the module path each FSDP2 unit's forward pre-hook
    (``FSDP::pre_forward (<unit>)``) runs in, the unit's own module scope."""
    name = columns(ops, {"name": pl.String}).get_column("name")
    rows = name.str.starts_with("FSDP::pre_forward (").arg_true().to_numpy()
    return (
        pl.concat(
            [host.select("rank", "op_id")[rows], values_at(ops, rows, ("name", "module_path"))],
            how="horizontal",
        )
        .lazy()
        .filter(pl.col("module_path").is_not_null())
        .with_columns(pl.col("name").str.extract(_FSDP_PRE_FORWARD).alias("fsdp_unit"))
        .filter(pl.col("fsdp_unit").is_not_null())
        .group_by("rank", "fsdp_unit")
        .agg(pl.col("module_path").sort_by("op_id").first().alias("fsdp_layer"))
    )


def _context(
    launch: pl.DataFrame, host: pl.DataFrame, calls: pl.DataFrame, ops: pa.Table
) -> pl.DataFrame:
    """Per collective (in row order): launch_op_id, phase, layer, attributed_by, backward_op.

    Two lazy plans, each collected once (a file's frames are small: the fixed cost of each
    query is most of the time)."""
    evidence = _evidence(launch, host, ops)
    found = (
        launch.lazy()
        .join(evidence.lazy(), on="call", how="left", maintain_order="left")
        .join(
            _forward_ops(host, ops, evidence["backward_seq_nr"]),
            on=["rank", "backward_seq_nr"],
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
        .join(
            _fsdp_unit_layers(host, ops),
            on=["rank", "fsdp_unit"],
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
        .sort("call")
        .collect(engine=ENGINE)
    )
    thread = host.select("pid", "tid").gather(found["pos"].fill_null(0))
    found = (
        pl.concat([found, thread], how="horizontal")
        .lazy()
        .join(
            _engine_threads(host, ops),
            on=["rank", "pid", "tid"],
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
        .with_columns(pl.col("on_engine_thread") & pl.col("pos").is_not_null())
    )
    found = found.with_columns(
        calls.get_column("op").alias("op"),
        calls.get_column("phase").alias("given_phase"),
        calls.get_column("layer").alias("given_layer"),
    )
    return found.select(
        "launch_op_id",
        _phase().alias("phase"),
        _layer().alias("layer"),
        _attributed_by().alias("attributed_by"),
        "backward_op",
    ).collect(engine=ENGINE)


def p2p_schedule_phase() -> pl.Expr:
    """The phase of a send/recv from the pipeline schedule's own name for the action it runs
    in (innermost first): torch.distributed.pipelining's ``PP:<stage><action><mb>`` (F,
    SEND_F, RECV_F forward; B, I, W, SEND_B, RECV_B backward) or a DualPipe chunk
    annotation (``(F)`` forward, ``(B)``, ``(W)`` backward). With stages looping over the
    ranks (interleaved 1F1B, DualPipe's V) a peer's direction says nothing of the phase.
    NULL for other ops and outside such names."""
    action = pl.col("schedule_action")
    forward = action.is_in(["F", "SEND_F", "RECV_F"])
    return (
        pl.when(~pl.col("op").is_in(_P2P_OPS) | action.is_null())
        .then(pl.lit(None, pl.String))
        .when(forward)
        .then(pl.lit("forward"))
        .otherwise(pl.lit("backward"))
    )


def _phase() -> pl.Expr:
    """A collective's phase: the source's own, else the strongest structural evidence."""
    return (
        pl.when(pl.col("given_phase").is_not_null())
        .then(pl.col("given_phase"))
        .when(p2p_schedule_phase().is_not_null())
        .then(p2p_schedule_phase())
        .when(pl.col("in_autograd"))
        .then(pl.lit("backward"))
        .when(pl.col("in_optimizer"))
        .then(pl.lit("optimizer"))
        .when(pl.col("in_backward"))
        .then(pl.lit("backward"))
        .when(pl.col("in_forward"))
        .then(pl.lit("forward"))
        .when(pl.col("on_engine_thread"))
        .then(pl.lit("backward"))
    )


def _attributed_by() -> pl.Expr:
    """Which evidence gave the layer, in the order :func:`_layer` takes it."""
    return (
        pl.when(pl.col("given_layer").is_not_null())
        .then(pl.lit("source"))
        .when(pl.col("module_path").is_not_null())
        .then(pl.lit("module_scope"))
        .when(pl.col("fsdp_layer").is_not_null())
        .then(pl.lit("fsdp_unit"))
        .when(pl.col("forward_module_path").is_not_null())
        .then(pl.lit("backward_of_forward_op"))
        .when(pl.col("nvtx_range").is_not_null())
        .then(pl.lit("nvtx"))
        .when(pl.col("in_loss"))
        .then(pl.lit("loss_op"))
        .when(_phase() == "optimizer")
        .then(pl.lit("optimizer"))
    )


def _layer() -> pl.Expr:
    """The layer: the first evidence present, strongest first."""
    return pl.coalesce(
        "given_layer",
        "module_path",
        "fsdp_layer",
        "forward_module_path",
        "nvtx_range",
        # named owners of the work outside layers
        pl.when(pl.col("in_loss")).then(pl.lit("loss")),
        pl.when(_phase() == "optimizer").then(pl.lit("optimizer")),
    )


def _embedding_exchanges(
    context: pl.DataFrame,
    launch: pl.DataFrame,
    host: pl.DataFrame,
    collectives: pa.Table,
    ops: pa.Table,
) -> pl.DataFrame:
    """``context`` with a layer for the all-to-alls of a recommendation model's sharded
    embeddings that nothing else placed.

    TorchRec records no module scope around them, but wraps each in a named range
    (:data:`pipeline.vocab.EMBEDDING_EXCHANGE_RANGE`): the outermost such range around
    the launch names the layer ``embedding/<range>`` (``embedding/sparse_data_dist``: the
    input features sent to the ranks holding their tables), so link gives it the kind
    ``embedding``. Names are hints only: a module path, the forward op's module or an NVTX
    range comes first, and no other op is placed so.
    """
    op = columns(collectives, {"op": pl.String}).get_column("op")
    unplaced = (op == "all_to_all") & context.get_column("layer").is_null()
    open_calls = launch.filter(unplaced.fill_null(False) & launch.get_column("pos").is_not_null())
    if open_calls.height == 0:
        return context
    walk = _walk(open_calls, host)
    names = values_at(ops, walk["pos"].to_numpy(), ("name",)).get_column("name")
    found = (
        walk.with_columns(names.str.extract(EMBEDDING_EXCHANGE_RANGE, 1).alias("range"))
        .filter(pl.col("range").is_not_null())
        .group_by("call")
        .agg(pl.col("range").sort_by("hops").last())
    )
    layer = pl.concat_str(pl.lit("embedding/"), "range")
    return _place(context, found, pl.col("range").is_not_null(), layer, "embedding_range")


def chunk_annotations(host: pl.DataFrame, ops: pa.Table) -> pl.DataFrame:
    """(pos, part, phase, layer_index) of every op that is a pipeline schedule's chunk
    annotation (``attn(F)``, ``dispatch(B)``, ``mlp(W)``: :func:`chunk_annotation_expr`).

    A chunk runs its layers one after another, each through the same parts, so the k-th
    range of one name among those of its enclosing range (DualPipe's ``1F1B``) is layer k of
    the chunk; the backward (B, W) walks the layers from the last, so there it is layer
    ``n − 1 − k`` of the ``n``. Indices count from 0 within the chunk (a stage's layers, as
    PyTorch numbers a stage's modules)."""
    name = columns(ops, {"name": pl.String}).get_column("name")
    # (literal suffixes first: a big trace's millions of names never meet the pattern)
    ends = name.str.ends_with("(F)") | name.str.ends_with("(B)") | name.str.ends_with("(W)")
    candidates = ends.fill_null(False).arg_true()
    found = (
        name.gather(candidates).to_frame().select(chunk_annotation_expr(pl.col("name")).alias("c"))
    )["c"]
    keep = found.struct.field("part").is_not_null()
    rows, found = candidates.filter(keep).to_numpy(), found.filter(keep)
    if rows.size == 0:
        return pl.DataFrame(schema={"pos": pl.Int64, "part": pl.String, "chunk_phase": pl.String,
                                    "layer_index": pl.Int64})  # fmt: skip
    start = columns(ops, {"start_ns": pl.Int64}).get_column("start_ns")
    k = pl.int_range(pl.len()).over("rank", "parent_id", "name", order_by=["start_ns", "op_id"])
    n = pl.len().over("rank", "parent_id", "name")
    return (
        pl.concat(
            [
                host.select("pos", "rank", "op_id", "parent_id")[rows],
                pl.DataFrame([name.gather(rows), start.gather(rows)]),
                found.struct.unnest(),
            ],
            how="horizontal",
        )
        .with_columns(
            pl.when(pl.col("phase") == "forward").then(k).otherwise(n - 1 - k).alias("layer_index")
        )
        .select(
            pl.col("pos").cast(pl.Int64),
            "part",
            pl.col("phase").alias("chunk_phase"),
            pl.col("layer_index").cast(pl.Int64),
        )  # fmt: skip
    )


def chunk_annotation_context(
    context: pl.DataFrame,
    launch: pl.DataFrame,
    host: pl.DataFrame,
    calls: pl.DataFrame,
    ops: pa.Table,
) -> pl.DataFrame:
    """``context`` with the phase and layer of each collective launched inside a chunk
    annotation (:func:`chunk_annotations`, the innermost around its launch).

    The annotation is the schedule's own word, so its phase comes before the structure's and
    the names' (a DualPipe backward chunk runs in no ``evaluate_function`` the profiler saw;
    its W pass is backward too); only a phase the source itself states comes first. The
    layer ``layers.<k>/<part>`` (``layers.2/dispatch``) is taken where nothing stronger
    than an NVTX range placed the call (attributed_by ``chunk_annotation``)."""
    marks = chunk_annotations(host, ops)
    placed = launch.filter(pl.col("pos").is_not_null())
    if marks.height == 0 or placed.height == 0:
        return context
    found = (
        _walk(placed, host)
        .join(marks, on="pos")
        .sort("call", "hops")
        .group_by("call", maintain_order=True)
        .first()
        .select("call", "part", "chunk_phase", "layer_index")
    )
    weak = pl.col("attributed_by").is_null() | (pl.col("attributed_by") == "nvtx")
    marked = pl.col("part").is_not_null()
    chunk_layer = pl.format("layers.{}/{}", "layer_index", "part")
    given = pl.lit(calls.get_column("phase"))
    phase = pl.coalesce(given, "chunk_phase", "phase").alias("phase")
    return _place(context, found, marked & weak, chunk_layer, "chunk_annotation", phase)


def _pipeline_boundaries(
    context: pl.DataFrame,
    launch: pl.DataFrame,
    host: pl.DataFrame,
    collectives: pa.Table,
    ops: pa.Table,
) -> pl.DataFrame:
    """``context`` with a layer for the pipeline send/recv that nothing else placed.

    A pipeline schedule issues its sends and receives between the stage's forward and
    backward work, outside any module. The message carries a stage boundary's tensor: a send
    what the work just before it produced (the last layer's activations after a forward, the
    first layer's input gradients after a backward), a receive what the work just after it
    consumes. So a send takes the layer of the rank's last placed op that started before it,
    a receive that of the first that starts after it (``pp_boundary``); a placed op is a
    forward op in a module, or a backward node placed by :func:`_forward_ops`. Link cuts the
    module path to its layer. Neither the direction nor the phase is read, so any schedule
    (1F1B, interleaved, looped) gives the layer whose tensor crosses.
    """
    op = columns(collectives, {"op": pl.String}).get_column("op")
    unplaced = op.is_in(["send", "recv"]) & context.get_column("layer").is_null()
    calls = launch.filter(unplaced.fill_null(False) & launch.get_column("pos").is_not_null())
    if calls.height == 0:
        return context
    placed = _placed_ops(host, ops)
    calls = calls.with_columns(
        host.get_column("start_ns").gather(calls["pos"]).alias("start_ns"),
        op.gather(calls["call"]).alias("op"),
    ).sort("start_ns")
    found = pl.concat(
        [
            calls.filter(pl.col("op") == kind).join_asof(
                placed, on="start_ns", by="rank", strategy=strategy, check_sortedness=False
            )
            for kind, strategy in (("send", "backward"), ("recv", "forward"))
        ]
    ).select("call", pl.col("boundary_layer"))
    hit = pl.col("boundary_layer").is_not_null()
    return _place(context, found, hit, pl.col("boundary_layer"), "pp_boundary")


def _place(
    context: pl.DataFrame,
    found: pl.DataFrame,
    hit: pl.Expr,
    layer: pl.Expr,
    rule: str,
    *also: pl.Expr,
) -> pl.DataFrame:
    """``context`` with ``layer`` as the layer of each call where ``hit`` holds, attributed
    by ``rule``, and ``also`` worked out beside them. ``found`` has a row for each call a
    rule places (``call``: the call's row number in ``context``) and the columns the
    expressions read."""
    return (
        context.with_row_index("call")
        .with_columns(pl.col("call").cast(pl.Int64))
        .join(found, on="call", how="left", maintain_order="left")
        .with_columns(
            *also,
            pl.when(hit).then(layer).otherwise("layer").alias("layer"),
            pl.when(hit).then(pl.lit(rule)).otherwise("attributed_by").alias("attributed_by"),
        )
        .select(context.columns)
    )


def _placed_ops(host: pl.DataFrame, ops: pa.Table) -> pl.DataFrame:
    """(rank, start_ns, boundary_layer), by start: the ops whose layer is known, forward ops
    in a module (not the module scopes themselves, which open before their first op) and
    backward nodes through the forward op of their sequence number."""
    info = columns(ops, {"kind": pl.String, "name": pl.String})
    has_path = (
        pl.from_arrow(ops.column("module_path").is_valid())
        if "module_path" in ops.column_names
        else pl.repeat(False, ops.num_rows, eager=True)
    )
    forward = (has_path & (info.get_column("kind") != "module")).fill_null(False)
    rows = forward.arg_true().to_numpy()
    forward_ops = pl.concat(
        [host.select("rank", "start_ns")[rows], values_at(ops, rows, ("module_path",))],
        how="horizontal",
    ).rename({"module_path": "boundary_layer"})
    nodes = host.with_columns(info.get_column("name")).filter(
        pl.col("name").str.starts_with(_AUTOGRAD) & (pl.col("seq_nr") >= 0)
    )
    backward_ops = (
        nodes.lazy()
        .rename({"seq_nr": "backward_seq_nr"})
        .join(
            _forward_ops(host, ops, nodes.get_column("seq_nr")),
            on=["rank", "backward_seq_nr"],
            how="inner",
        )
        .select("rank", "start_ns", pl.col("forward_module_path").alias("boundary_layer"))
        .collect(engine=ENGINE)
    )
    return (
        pl.concat([forward_ops, backward_ops])
        .filter(pl.col("boundary_layer").is_not_null() & pl.col("start_ns").is_not_null())
        .sort("start_ns")
    )
