"""Each collective's launch op, phase and layer, read from its own file's ops at ingest."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.ingest.derive.attribution import attribute_collectives

_OPS = pa.schema(
    [
        ("rank", pa.int64()),
        ("op_id", pa.int64()),
        ("parent_id", pa.int64()),
        ("name", pa.string()),
        ("kind", pa.string()),
        ("module_path", pa.string()),
        ("seq_nr", pa.int64()),
        ("correlation", pa.int64()),
    ]
)


def _ops(*rows: tuple) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(_OPS.names, r, strict=True)) for r in rows], _OPS)


def _calls(*rows: tuple, given: dict | None = None) -> pa.Table:
    table = pa.table(
        {
            "collective_id": list(range(len(rows))),
            "rank": [r[0] for r in rows],
            "correlation": [r[1] for r in rows],
            "launch_op_id": pa.array([r[2] for r in rows], pa.int64()),
        }
    )
    for name, values in (given or {}).items():
        table = table.append_column(name, pa.array(values, pa.string()))
    return table


def _attributed(ops: pa.Table, calls: pa.Table) -> list[dict]:
    tables = {"ops": ops, "collectives": calls}
    attribute_collectives(tables)
    return (
        tables["collectives"]
        .select(["launch_op_id", "phase", "layer", "attributed_by", "backward_op"])
        .to_pylist()
    )


def test_each_rank_of_a_file_matches_its_own_runtime_calls():
    # Two processes of one Nsight file reuse correlation id 7: each kernel belongs to the
    # runtime call of its own rank, and takes that call's surroundings.
    ops = _ops(
        (0, 1, None, "encoder", "module", "encoder", None, None),
        (0, 2, 1, "cudaLaunchKernel", "cuda_runtime", None, None, 7),
        (1, 3, None, "Optimizer.step#AdamW.step", "cpu_op", None, None, None),
        (1, 5, 3, "aten::_foreach_add_", "cpu_op", None, None, None),
        (1, 4, 5, "cudaLaunchKernel", "cuda_runtime", None, None, 7),
    )
    got = _attributed(ops, _calls((0, 7, None), (1, 7, None)))
    assert got == [
        {"launch_op_id": 2, "phase": "forward", "layer": "encoder",
         "attributed_by": "module_scope", "backward_op": None},
        # (a collective of the optimizer outside any module is the optimizer's)
        {"launch_op_id": 4, "phase": "optimizer", "layer": "optimizer",
         "attributed_by": "optimizer", "backward_op": None},
    ]  # fmt: skip


def test_backward_work_takes_the_layer_of_its_forward_op():
    autograd = "autograd::engine::evaluate_function: MmBackward0"
    ops = _ops(
        (0, 1, None, "aten::mm", "cpu_op", "model/mlp", 41, None),
        (0, 2, None, autograd, "cpu_op", None, 41, None),
        (0, 3, 2, "c10d::allreduce_", "cpu_op", None, None, None),
        (0, 4, None, "range: backward pass", "nvtx", None, None, None),
        (0, 5, 4, "c10d::allreduce_", "cpu_op", None, None, None),
    )
    got = _attributed(ops, _calls((0, None, 3), (0, None, 5)))
    assert got == [
        {"launch_op_id": 3, "phase": "backward", "layer": "model/mlp",
         "attributed_by": "backward_of_forward_op", "backward_op": autograd},
        {"launch_op_id": 5, "phase": "backward", "layer": "range: backward pass",
         "attributed_by": "nvtx", "backward_op": None},
    ]  # fmt: skip


def test_what_the_source_says_stays():
    ops = _ops((0, 1, None, "forward", "user_annotation", "model/attn", None, None))
    calls = _calls((0, None, 1), given={"phase": ["backward"], "layer": ["decoder.3"]})
    assert _attributed(ops, calls) == [
        {"launch_op_id": 1, "phase": "backward", "layer": "decoder.3",
         "attributed_by": "source", "backward_op": None},
    ]  # fmt: skip


def test_a_cycle_of_parents_ends_the_walk():
    ops = _ops(
        (0, 1, 2, "forward", "user_annotation", None, None, None),
        (0, 2, 1, "c10d::allreduce_", "cpu_op", None, None, None),
    )
    assert _attributed(ops, _calls((0, None, 2)))[0]["phase"] == "forward"


@pytest.mark.parametrize("missing", ["ops", "collectives"])
def test_a_file_without_ops_or_collectives_is_left_alone(missing):
    tables = {"ops": _ops(), "collectives": _calls((0, 1, None))}
    tables.pop(missing)
    before = dict(tables)
    attribute_collectives(tables)
    assert tables == before


def test_real_phase_names_are_hints():
    # names real jobs use for their phases: fenced record_function ranges (TorchRec, DLRM),
    # DistributedDataParallel.forward, Lightning's [pl][profile] prefixes; Megatron's
    # forward-backward encloses both phases and says nothing
    ops = _ops(
        (0, 1, None, "## forward ##", "user_annotation", None, None, None),
        (0, 2, 1, "c10d::alltoall_base_", "cpu_op", None, None, None),
        (0, 3, None, "DistributedDataParallel.forward", "user_annotation", None, None, None),
        (0, 4, 3, "c10d::allreduce_", "cpu_op", None, None, None),
        (0, 5, None, "[pl][profile][Strategy]DDPStrategy.backward", "cpu_op", None, None, None),
        (0, 6, 5, "c10d::allreduce_", "cpu_op", None, None, None),
        (0, 7, None, "[pl][profile]optimizer_step", "cpu_op", None, None, None),
        (0, 8, 7, "c10d::allreduce_", "cpu_op", None, None, None),
        (0, 9, None, "forward-backward", "nvtx", None, None, None),
        (0, 10, 9, "c10d::allreduce_", "cpu_op", None, None, None),
        (0, 11, None, "## sparse_data_dist ##", "user_annotation", None, None, None),
        (0, 12, 11, "c10d::alltoall_base_", "cpu_op", None, None, None),
        (0, 13, None, "All2All_Pooled_WaitBackward", "cpu_op", None, None, None),
        (0, 14, 13, "c10d::alltoall_base_", "cpu_op", None, None, None),
    )
    got = _attributed(ops, _calls(*[(0, None, i) for i in (2, 4, 6, 8, 10, 12, 14)]))
    phases = [g["phase"] for g in got]
    assert phases == ["forward", "forward", "backward", "optimizer", None, "forward", None]


def test_launches_on_the_autograd_engine_thread_are_backward():
    # The GPU autograd engine runs on its own thread (evaluate_function ops, no ProfilerStep);
    # CPU autograd runs on the calling thread, whose other work keeps no phase.
    autograd = "autograd::engine::evaluate_function: SumBackward1"
    rows = [
        (0, 1, None, "ProfilerStep#3", 1, 1),
        (0, 2, 1, "c10d::allreduce_", 1, 1),
        (0, 3, None, autograd, 1, 1),
        (0, 4, None, autograd, 1, 2),
        (0, 5, None, "c10d::allreduce_", 1, 2),
    ]
    ops = pa.Table.from_pylist(
        [
            {"rank": r, "op_id": i, "parent_id": p, "name": n, "kind": "cpu_op",
             "pid": pid, "tid": tid}
            for r, i, p, n, pid, tid in rows
        ]
    )  # fmt: skip
    got = _attributed(ops, _calls((0, None, 2), (0, None, 5)))
    assert [g["phase"] for g in got] == [None, "backward"]


def test_embedding_all_to_alls_take_their_layer_from_torchrec_ranges():
    # a trace without module information (as TorchRec's DLRM traces): an all-to-all inside
    # TorchRec's ranges takes the outermost as its layer; a module path or NVTX range comes
    # first; other ops, and ranges named otherwise, place nothing
    ops = _ops(
        (0, 1, None, "## sparse_data_dist ##", "user_annotation", None, None, None),
        (0, 2, 1, "## all2all_data:kjt splits ##", "user_annotation", None, None, None),
        (0, 3, 2, "c10d::alltoall_base_", "cpu_op", None, None, None),
        (0, 4, None, "## alltoall_bwd_single ##", "user_annotation", None, None, None),
        (0, 5, 4, "c10d::alltoall_base_", "cpu_op", None, None, None),
        (0, 6, None, "## alltoall_fwd_single ##", "user_annotation", "sparse/ebc", None, None),
        (0, 7, 6, "c10d::alltoall_base_", "cpu_op", "sparse/ebc", None, None),
        (0, 8, None, "alltoall_fwd_single", "nvtx", None, None, None),
        (0, 9, 8, "c10d::alltoall_base_", "cpu_op", None, None, None),
        (0, 10, None, "## alltoall_fwd_single ##", "user_annotation", None, None, None),
        (0, 11, 10, "c10d::allreduce_", "cpu_op", None, None, None),
        (0, 12, None, "## moe_dispatch ##", "user_annotation", None, None, None),
        (0, 13, 12, "c10d::alltoall_base_", "cpu_op", None, None, None),
    )
    launches = (3, 5, 7, 9, 11, 13)
    ops_of = ["all_to_all"] * 4 + ["all_reduce", "all_to_all"]
    got = _attributed(ops, _calls(*[(0, None, i) for i in launches], given={"op": ops_of}))
    assert [(g["layer"], g["attributed_by"]) for g in got] == [
        ("embedding/sparse_data_dist", "embedding_range"),
        ("embedding/alltoall_bwd_single", "embedding_range"),
        ("sparse/ebc", "module_scope"),
        ("alltoall_fwd_single", "nvtx"),
        (None, None),
        (None, None),
    ]


def test_send_recv_take_their_phase_from_the_schedule_names():
    """Interleaved 1F1B on 2 ranks: rank 0's send in ``PP:2SEND_B0`` goes to rank 1 as its
    forward sends do; the schedule's name says backward. A DualPipe chunk annotation
    ``(B)`` likewise; a send outside any such name keeps NULL (link's direction rule). An
    all-reduce inside the chunk annotation takes its phase from the chunk itself
    (chunk_annotation_context), not from the send/recv rule."""
    ops = _ops(
        (0, 1, None, "forward_backward", "user_annotation", None, None, None),
        (0, 2, 1, "PP:0SEND_F0", "user_annotation", None, None, None),
        (0, 3, 2, "c10d::send", "cpu_op", None, None, None),
        (0, 4, 1, "PP:2SEND_B0", "user_annotation", None, None, None),
        (0, 5, 4, "c10d::send", "cpu_op", None, None, None),
        (0, 6, 1, "PP:2RECV_F1", "user_annotation", None, None, None),
        (0, 7, 6, "c10d::recv_", "cpu_op", None, None, None),
        (0, 8, None, "combine(B)", "user_annotation", None, None, None),
        (0, 9, 8, "c10d::recv_", "cpu_op", None, None, None),
        (0, 10, None, "c10d::send", "cpu_op", None, None, None),
        (0, 11, 8, "c10d::allreduce_", "cpu_op", None, None, None),
    )
    calls = _calls(*((0, None, i) for i in (3, 5, 7, 9, 10, 11)))
    calls = calls.append_column("op", pa.array(["send", "send", "recv", "recv", "send",
                                                "all_reduce"]))  # fmt: skip
    got = [r["phase"] for r in _attributed(ops, calls)]
    assert got == ["forward", "backward", "forward", "backward", None, "backward"]
