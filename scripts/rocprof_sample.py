"""Write tests/data/rocprof/fsdp_rank1.rocprofv3.json.gz: a small rocprofiler-sdk JSON file
(``rocprofv3 --output-format json``) laid out as rocprofv3 writes it, for the parser's
tests on a machine without ROCm.

One process on a host with two GPUs, two ``ProfilerStep#N`` ROCTx ranges, and per step a
GEMM and three RCCL kernels on their own queue, launched by an ``ncclAllGather`` call, an
``ncclReduceScatter`` call and a group of two ``ncclAllReduce`` calls (``rccl_api``
records). Kind and operation numbers index ``strings.buffer_records`` as in rocprofv3's
own files. Run: ``python scripts/rocprof_sample.py``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests/data/rocprof/fsdp_rank1.rocprofv3.json.gz"
KINDS = ["NONE", "HSA_CORE_API", "HSA_AMD_EXT_API", "HSA_IMAGE_EXT_API", "HSA_FINALIZE_EXT_API",
         "HIP_RUNTIME_API", "HIP_COMPILER_API", "MARKER_CORE_API", "MARKER_CONTROL_API",
         "MARKER_NAME_API", "MEMORY_COPY", "KERNEL_DISPATCH", "SCRATCH_MEMORY",
         "CORRELATION_ID_RETIREMENT", "RCCL_API", "OMPT", "MEMORY_ALLOCATION",
         "RUNTIME_INITIALIZATION", "ROCDECODE_API", "ROCJPEG_API", "HIP_STREAM",
         "HIP_RUNTIME_API_EXT", "HIP_COMPILER_API_EXT", "ROCDECODE_API_EXT",
         "KFD_EVENT_PAGE_MIGRATE", "KFD_EVENT_PAGE_FAULT", "KFD_EVENT_QUEUE",
         "KFD_EVENT_UNMAP_FROM_GPU", "KFD_EVENT_DROPPED_EVENTS", "KFD_PAGE_MIGRATE",
         "KFD_PAGE_FAULT", "KFD_QUEUE", "MARKER_CORE_RANGE_API"]  # fmt: skip
OPERATIONS = {
    "KERNEL_DISPATCH": ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE",
                        "KERNEL_DISPATCH_COMPLETE"],
    "RCCL_API": ["ncclAllGather", "ncclAllReduce", "ncclAllToAll", "ncclAllToAllv", "ncclBroadcast",
                 "ncclGather", "ncclReduce", "ncclReduceScatter", "ncclScatter", "ncclSend",
                 "ncclRecv", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclGroupStart",
                 "ncclGroupEnd"],
    "MARKER_CORE_RANGE_API": ["roctxMarkA", "roctxThreadRangeA", "roctxProcessRangeA",
                              "roctxGetThreadId"],
}  # fmt: skip
KIND = {name: i for i, name in enumerate(KINDS)}
PID, TID = 4242, 4242
GEMM, GENERIC, ALLGATHER = 1, 2, 3
SYMBOLS = {
    GEMM: ("Cijk_Ailk_Bljk_BBS_BH_MT64x32x256.kd", "Cijk_Ailk_Bljk_BBS_BH_MT64x32x256"),
    GENERIC: ("_Z23ncclDevKernel_Generic_124ncclDevKernelArgsStorageILm4096EE.kd",
              "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"),
    ALLGATHER: ("_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE.kd",
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
}  # fmt: skip


class Recorder:
    """Records with correlation ids handed out in call order, as the tool does."""

    def __init__(self) -> None:
        self.correlation = 0
        self.dispatch = 0
        self.buffers: dict[str, list] = {"kernel_dispatch": [], "marker_api": [], "rccl_api": []}
        self.messages: list[dict] = []

    def _next(self) -> dict:
        self.correlation += 1
        return {"internal": self.correlation, "external": 0}

    def call(self, kind: str, name: str, start: int, end: int, message: str | None = None) -> None:
        corr = self._next()
        record = {"size": 56, "kind": KIND[kind], "operation": OPERATIONS[kind].index(name),
                  "correlation_id": corr, "start_timestamp": start, "end_timestamp": end,
                  "thread_id": TID}  # fmt: skip
        key = "rccl_api" if kind == "RCCL_API" else "marker_api"
        self.buffers[key].append(record)
        if message is not None:
            self.messages.append({"key": corr["internal"], "value": message})

    def kernel(self, kernel_id: int, queue: int, start: int, end: int) -> None:
        self.dispatch += 1
        self.buffers["kernel_dispatch"].append(
            {
                "size": 184,
                "kind": KIND["KERNEL_DISPATCH"],
                "operation": 2,
                "thread_id": TID,
                "correlation_id": self._next(),
                "start_timestamp": start,
                "end_timestamp": end,
                "dispatch_info": {
                    "size": 72,
                    "agent_id": {"handle": 12},
                    "queue_id": {"handle": queue},
                    "kernel_id": kernel_id,
                    "dispatch_id": self.dispatch,
                    "private_segment_size": 0,
                    "group_segment_size": 0,
                    "workgroup_size": {"x": 256, "y": 1, "z": 1},
                    "grid_size": {"x": 1024, "y": 1, "z": 1},
                },
                "stream_id": {"handle": queue},
            }  # fmt: skip
        )


def record_step(rec: Recorder, step: int, t0: int, first_kernel: int) -> None:
    """One step: its range, a GEMM, then the four RCCL calls and their three kernels."""
    rec.call("MARKER_CORE_RANGE_API", "roctxThreadRangeA", t0, t0 + 40_000, f"ProfilerStep#{step}")
    rec.call("MARKER_CORE_RANGE_API", "roctxThreadRangeA", t0 + 100, t0 + 900, "layers.0.forward")
    rec.kernel(GEMM, 1, t0 + 1_000, t0 + 3_000)
    calls = [("ncclAllGather", 200), ("ncclReduceScatter", 400), ("ncclGroupStart", 600),
             ("ncclAllReduce", 620), ("ncclAllReduce", 640), ("ncclGroupEnd", 660)]  # fmt: skip
    for name, at in calls:
        rec.call("RCCL_API", name, t0 + at, t0 + at + 10)
    for i, kernel_id in enumerate([first_kernel, GENERIC, GENERIC]):
        rec.kernel(kernel_id, 2, t0 + 4_000 + 5_000 * i, t0 + 8_000 + 5_000 * i)


def document() -> dict:
    rec = Recorder()
    record_step(rec, 1, 1_000_000, GENERIC)
    record_step(rec, 2, 1_100_000, ALLGATHER)
    agents = [{"size": 312, "id": {"handle": 10}, "type": 1, "name": "AMD EPYC 9654",
               "product_name": "AMD EPYC 9654", "node_id": 0, "logical_node_id": 0,
               "logical_node_type_id": 0}]  # fmt: skip
    agents += [{"size": 312, "id": {"handle": 11 + i}, "type": 2, "name": "gfx942",
                "product_name": "AMD Instinct MI300X", "node_id": 1 + i, "logical_node_id": 1 + i,
                "logical_node_type_id": i} for i in range(2)]  # fmt: skip
    symbols = [{"size": 88, "kernel_id": k, "code_object_id": 1, "kernel_name": mangled,
                "formatted_kernel_name": formatted, "demangled_kernel_name": mangled,
                "truncated_kernel_name": mangled}
               for k, (mangled, formatted) in SYMBOLS.items()]  # fmt: skip
    names = [{"kind": k, "operations": OPERATIONS.get(k, [])} for k in KINDS]
    return {"rocprofiler-sdk-tool": [{
        "metadata": {"node": {"id": 0, "hostname": "tw-sample", "system_name": "Linux"},
                     "pid": PID, "init_time": 900_000, "fini_time": 1_300_000,
                     "command": ["python", "train.py"], "config": {"json_output": True}},
        "agents": agents, "counters": [],
        "strings": {"callback_records": names, "buffer_records": names,
                    "marker_api": rec.messages, "correlation_id": {"external": []}},
        "code_objects": [], "kernel_symbols": symbols, "host_functions": [], "summary": [],
        "callback_records": {"counter_collection": []},
        "buffer_records": {**rec.buffers, "hip_api": [], "hsa_api": [], "memory_copy": []},
    }]}  # fmt: skip


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document(), indent=1).encode()
    OUT.write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
