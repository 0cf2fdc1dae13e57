"""The op name each format's parser gives each spelling of a collective its source writes.

One table per format: the spelling as the source writes it, and the dataset's op for it.
The spellings are the ones the sources write (NCCL's ``ncclFuncToString`` names in INFO
lines and kernel symbols, the NCCL API names of its NVTX ranges, nccl-tests' binaries,
PyTorch c10d's profiling names in flight-recorder dumps), plus a few they do not, to pin
what a parser makes of a name it does not know.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipeline.ingest.flight_recorder.parse import _op_from_profiling_name
from pipeline.ingest.nccl import log as nccl_log
from pipeline.ingest.nccl import nccl_tests
from pipeline.ingest.nsys.collectives import PAYLOAD_SCHEMA, collectives
from pipeline.ingest.result import Warnings
from pipeline.vocab import op_expr

#: NCCL INFO ``<Func>: opCount ...`` lines: NCCL's function names (``ncclFuncToString``,
#: src/collectives.cc).
NCCL_LOG = [
    ("AllReduce", "all_reduce"),
    ("Broadcast", "broadcast"),
    ("Reduce", "reduce"),
    ("AllGather", "all_gather"),
    ("ReduceScatter", "reduce_scatter"),
    ("Send", "send"),
    ("Recv", "recv"),
    ("AlltoAll", "all_to_all"),
    ("Gather", "gather"),
    ("Scatter", "scatter"),
    ("SendRecv", "unknown"),
    ("AllToAll", "unknown"),
    ("allreduce", "unknown"),
    ("Hypercube", "unknown"),
]


def test_nccl_log_op_names(tmp_path: Path) -> None:
    head = "h:100:100 [0] NCCL INFO "
    coll = (
        "{op}: opCount {oc} sendbuff 0x7f0000000000 recvbuff 0x7f0000100000 count 8 datatype 7"
        " op 0 root 0 comm 0x1000 [nranks=2] stream 0x5500"
    )
    lines = [
        head + "comm 0x1000 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init COMPLETE"
    ]
    lines += [head + coll.format(op=op, oc=i) for i, (op, _) in enumerate(NCCL_LOG)]
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    c = pl.from_arrow(nccl_log.parse(path).tables["collectives"]).sort("op_count")
    assert c["op"].to_list() == [op for _, op in NCCL_LOG]


#: nccl-tests binaries (``<name>_perf``), as its ``# Collective test starting:`` lines and its
#: file names give them.
NCCL_TESTS = [
    ("all_reduce", "all_reduce"),
    ("all_gather", "all_gather"),
    ("reduce_scatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("sendrecv", "send_recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("hypercube", "hypercube"),
    ("all_to_all", None),
    ("send", None),
    ("allreduce", None),
]

_TABLE_HEAD = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong"
)
_TABLE_ROW = (
    "        {size}           256     float     sum      -1    10.00    0.10    0.15      0"
    "    9.50    0.11    0.16      0"
)


def test_nccl_tests_op_names_from_test_lines(tmp_path: Path) -> None:
    """A test whose name is not known takes the op of the test before it (the first,
    ``unknown``)."""
    lines = ["# Collective test starting: mystery_perf", _TABLE_HEAD, _TABLE_ROW.format(size=1)]
    for i, (name, _) in enumerate(NCCL_TESTS, 2):
        lines += [f"# Collective test starting: {name}_perf", _TABLE_HEAD]
        lines.append(_TABLE_ROW.format(size=i))
    path = tmp_path / "out.txt"
    path.write_text("\n".join(lines) + "\n")
    t = pl.from_arrow(nccl_tests.parse(path).tables["bandwidth_tests"])
    got = t.filter(pl.col("placement") == "in_place").sort("size_bytes")["op"].to_list()
    want, last = ["unknown"], "unknown"
    for _, op in NCCL_TESTS:
        last = op or last
        want.append(last)
    assert got == want


@pytest.mark.parametrize(("name", "op"), NCCL_TESTS)
def test_nccl_tests_op_names_from_file_names(tmp_path: Path, name: str, op: str | None) -> None:
    path = tmp_path / f"{name}_perf.txt"
    path.write_text("\n".join([_TABLE_HEAD, _TABLE_ROW.format(size=1)]) + "\n")
    t = pl.from_arrow(nccl_tests.parse(path).tables["bandwidth_tests"])
    assert t["op"].unique().to_list() == [op or "unknown"]


#: NCCL API calls, the names of NCCL's NVTX ranges in Nsight Systems exports (nccl.h); a range
#: of another name is no collective.
NSYS_RANGES = [
    ("ncclAllReduce", "all_reduce"),
    ("ncclAllGather", "all_gather"),
    ("ncclReduceScatter", "reduce_scatter"),
    ("ncclBroadcast", "broadcast"),
    ("ncclBcast", "broadcast"),
    ("ncclReduce", "reduce"),
    ("ncclSend", "send"),
    ("ncclRecv", "recv"),
    ("ncclAlltoAll", "all_to_all"),
    ("ncclGather", "gather"),
    ("ncclScatter", "scatter"),
    ("ncclGroupStart", None),
    ("ncclCommInitRank", None),
    ("ncclAllToAll", None),
    ("AllReduce", None),
    ("all_reduce", None),
    ("ncclSendRecv", None),
]

#: NCCL kernels without an API range around their launch: the op is the kernel's function
#: (NCCL 2.8-2.18 ``ncclKernel_<Func>_...``, 2.19+ ``ncclDevKernel_<Func>_...``, 2.7
#: ``nccl<Func><Algo><Proto>Kernel_...``).
NSYS_KERNELS = [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "all_reduce"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "reduce_scatter"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast"),
    ("ncclDevKernel_Reduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce"),
    ("ncclDevKernel_AlltoAll_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)", "all_to_all"),
    ("ncclDevKernel_Gather_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)", "gather"),
    ("ncclDevKernel_Scatter_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)", "scatter"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "unknown"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "unknown"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "unknown"),
    ("ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)", "all_reduce"),
    ("ncclBroadcastRingLLKernel_copy_i8(CollectiveArgs)", "broadcast"),
    ("ncclReduceScatterRingLLKernel_sum_f16(CollectiveArgs)", "reduce_scatter"),
    ("ncclSendRecvKernel_copy_i8(CollectiveArgs)", "unknown"),
]  # fmt: skip


def _nsys_kernels(names: list[str]) -> pl.DataFrame:
    n = len(names)
    return pl.DataFrame(
        {
            "kernel_id": range(n),
            "pid": [1] * n,
            "device": [0] * n,
            "stream": [7] * n,
            "name": names,
            "start_ns": [1000 + 100 * i for i in range(n)],
            "end_ns": [1050 + 100 * i for i in range(n)],
            "correlation": range(n),
            "launch_tid": [1] * n,
            "launch_ns": [900 + 100 * i for i in range(n)],
        },
        schema_overrides={"kernel_id": pl.Int64, "correlation": pl.Int64},
    )


def test_nsys_op_names_of_api_ranges() -> None:
    """Each range is followed by the launch of its kernel, so each collective row's op is its
    range's; ranges of no collective leave their kernel alone (op from its name)."""
    names = [n for n, _ in NSYS_RANGES]
    n = len(names)
    ops = pl.DataFrame(
        {
            "op_id": range(n),
            "pid": [1] * n,
            "tid": [1] * n,
            "name": names,
            "start_ns": [890 + 100 * i for i in range(n)],
            "end_ns": [895 + 100 * i for i in range(n)],
        },
        schema_overrides={"op_id": pl.Int64},
    )
    kernels = _nsys_kernels(["ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"] * n)
    payloads = pl.DataFrame(schema=PAYLOAD_SCHEMA)
    out = collectives(ops, kernels, payloads, Warnings()).sort("start_ns")
    assert out["op"].to_list() == [op or "unknown" for _, op in NSYS_RANGES]
    ranged = out.filter(pl.col("op_name").str.starts_with("ncclDevKernel").not_())
    assert ranged["op_name"].to_list() == [name for name, op in NSYS_RANGES if op]


def test_nsys_op_names_of_kernels() -> None:
    ops = pl.DataFrame(
        schema={
            "op_id": pl.Int64,
            "pid": pl.Int64,
            "tid": pl.Int64,
            "name": pl.String,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
        }
    )
    kernels = _nsys_kernels([n for n, _ in NSYS_KERNELS])
    out = collectives(ops, kernels, pl.DataFrame(schema=PAYLOAD_SCHEMA), Warnings())
    assert out.sort("start_ns")["op"].to_list() == [op for _, op in NSYS_KERNELS]


#: PyTorch c10d profiling names (``ProcessGroupNCCL.cpp``, ``ProcessGroupGloo.cpp``) as
#: flight-recorder dumps record them, ``<backend>:<name>[ <src/dst>]``.
FLIGHT_RECORDER = [
    ("nccl:all_reduce", "all_reduce"),
    ("nccl:allreduce", "all_reduce"),
    ("nccl:all_reduce_coalesced", "all_reduce"),
    ("nccl:all_reduce_barrier", "barrier"),
    ("nccl:barrier", "barrier"),
    ("nccl:broadcast", "broadcast"),
    ("nccl:_broadcast_oop", "broadcast"),
    ("nccl:reduce", "reduce"),
    ("nccl:_reduce_oop", "reduce"),
    ("nccl:all_gather", "all_gather"),
    ("nccl:allgather", "all_gather"),
    ("nccl:_allgather_base", "all_gather"),
    ("nccl:all_gather_into_tensor_coalesced", "all_gather"),
    ("nccl:allgather_into_tensor_coalesced", "all_gather"),
    ("nccl:allgather_coalesced", "all_gather"),
    ("nccl:reduce_scatter", "reduce_scatter"),
    ("nccl:_reduce_scatter_base", "reduce_scatter"),
    ("nccl:reduce_scatter_tensor_coalesced", "reduce_scatter"),
    ("nccl:all_to_all", "all_to_all"),
    ("nccl:alltoall", "all_to_all"),
    ("nccl:alltoall_base", "all_to_all"),
    ("nccl:gather", "gather"),
    ("nccl:scatter", "scatter"),
    ("nccl:send 0->1", "send"),
    ("nccl:recv 0<-1", "recv"),
    ("nccl:coalesced", "unknown"),
    ("gloo:all_reduce", "all_reduce"),
    ("gloo:allgather", "all_gather"),
    ("gloo:all_gather", "all_gather"),
    ("gloo:all_to_all", "all_to_all"),
    ("gloo:broadcast", "broadcast"),
    ("gloo:barrier", "barrier"),
    ("gloo:send", "send"),
    ("gloo:recv", "recv"),
    ("gloo:recvAnySource", "unknown"),
    ("nccl:ALLREDUCE", "all_reduce"),
    ("all_reduce", "all_reduce"),
    ("nccl:mystery", "unknown"),
]


@pytest.mark.parametrize(("name", "op"), FLIGHT_RECORDER)
def test_flight_recorder_op_names(name: str, op: str) -> None:
    assert _op_from_profiling_name(name)[0] == op


@pytest.mark.parametrize(
    ("name", "op"), [c for c in FLIGHT_RECORDER if "recvAnySource" not in c[0]]
)
def test_kineto_reads_c10d_names_as_the_flight_recorder_does(name: str, op: str) -> None:
    """A profiler trace's ``nccl:*`` annotation and a dump's profiling name are the same c10d
    string; both sources give it the same op, so their calls can pair (collective_matches).
    (gloo's ``recvAnySource`` never reaches a profiler annotation: gloo records none.)"""
    got = pl.select(op_expr(pl.lit(name))).item()
    assert got == op
