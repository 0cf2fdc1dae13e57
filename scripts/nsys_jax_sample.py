"""Write tests/data/nsys_jax/train_proc1.zip: a small ``nsys-jax`` archive laid out as
JAX-Toolbox's ``nsys-jax`` writes one, for the parser's tests on a machine without a GPU.

Process 1 of 4 (XLA global device 1). A ``jit__psum`` module runs one all-reduce before
training; then two executions of ``jit_train_step``, each with an async all-gather (its
``-start`` and ``-done`` thunks and NCCL's ``ncclGroupEnd`` range inside the start), a local
``reduce``, a fusion, a reduce-scatter, a collective-permute, an all-to-all over the pairs
{0,1} and {2,3}, and an all-reduce the HLO dump does not hold. The HLO dumps are
``xla.HloProto`` messages written field by field (hlo.proto's numbers), xz-compressed.
Run: ``python scripts/nsys_jax_sample.py``.
"""

from __future__ import annotations

import io
import lzma
import zipfile
from pathlib import Path

import polars as pl

OUT = Path(__file__).resolve().parents[1] / "tests/data/nsys_jax/train_proc1.zip"
PID, TID = 5151, 5151
BF16, F32, S32 = 16, 11, 4
WORLD = [[0, 1, 2, 3]]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _shape(element_type: int, *dims: int) -> bytes:
    return _field(2, element_type) + _field(3, b"".join(_varint(d) for d in dims))


def _tuple(*shapes: bytes) -> bytes:
    return _field(2, 13) + b"".join(_field(4, s) for s in shapes)


def _inst(name: str, opcode: str, ident: int, shape: bytes, operands=(), groups=()) -> bytes:
    body = _field(1, name) + _field(2, opcode) + _field(3, shape) + _field(35, ident)
    if operands:
        body += _field(36, b"".join(_varint(o) for o in operands))
    for g in groups:
        body += _field(49, _field(1, b"".join(_varint(r) for r in g)))
    return body


def _module(name: str, insts: list[bytes]) -> bytes:
    computation = _field(1, "main") + b"".join(_field(2, i) for i in insts)
    return lzma.compress(_field(1, _field(1, name) + _field(3, computation)), format=lzma.FORMAT_XZ)


def train_step_dump() -> bytes:
    p_ag, p_rs, p_x = _shape(BF16, 1024), _shape(F32, 4096), _shape(BF16, 8, 128)
    return _module("jit_train_step", [
        _inst("p0", "parameter", 1, p_ag),
        _inst("p1", "parameter", 2, p_rs),
        _inst("p2", "parameter", 3, p_x),
        _inst("all-gather-start.1", "all-gather-start", 4, _tuple(p_ag, _shape(BF16, 4096)),
              [1], WORLD),
        _inst("all-gather-done.1", "all-gather-done", 5, _shape(BF16, 4096), [4]),
        _inst("reduce.3", "reduce", 6, _shape(F32), [2]),
        _inst("reduce-scatter.4", "reduce-scatter", 7, _shape(F32, 1024), [2], WORLD),
        _inst("collective-permute-start.5", "collective-permute-start", 8,
              _tuple(p_x, p_x, _shape(6), _shape(6)), [3]),
        _inst("all-to-all.6", "all-to-all", 9, p_x, [3], [[0, 1], [2, 3]]),
    ])  # fmt: skip


def psum_dump() -> bytes:
    scalar = _shape(S32)
    return _module("jit__psum", [
        _inst("p0", "parameter", 1, scalar),
        _inst("all-reduce-start", "all-reduce-start", 2, scalar, [1], WORLD),
    ])  # fmt: skip


class Ranges:
    """NVTX push/pop ranges with their host time and their time projected on the GPU."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, name: str, host: int, gpu: int, dur: int, parent: dict | None = None) -> dict:
        rid = len(self.rows) + 1
        stack = (parent["RangeStack"] if parent else "") + f":{rid}"
        row = {"Name": name, "Projected Start": gpu, "Projected Duration": dur,
               "Orig Start": float(host), "Orig Duration": float(dur // 2), "Style": "PushPop",
               "PID": PID, "TID": TID, "NumGPUOps": 1, "Lvl": float(stack.count(":") - 1),
               "NumChild": 0, "RangeId": float(rid),
               "ParentId": parent["RangeId"] if parent else None, "RangeStack": stack,
               "Rank": 0}  # fmt: skip
        self.rows.append(row)
        return row


def train_step(r: Ranges, t: int) -> None:
    module = r.add("TSL:XlaModule:#hlo_module=jit_train_step,program_id=7#", t, t + 500, 90_000)
    thunks = [("all-gather-start.1", 10_000), ("all-gather-done.1", 2_000),
              ("reduce.3", 3_000), ("loop_add_fusion", 4_000), ("reduce-scatter.4", 9_000),
              ("collective-permute-start.5", 5_000), ("all-to-all.6", 6_000),
              ("all-reduce-start.9", 1_000)]  # fmt: skip
    at = t + 1_000
    for hlo_op, dur in thunks:
        thunk = r.add(f"TSL:Thunk:#hlo_op={hlo_op}#", at - 500, at, dur, module)
        if hlo_op.endswith("-start.1"):
            r.add("NCCL:ncclGroupEnd", at - 400, at, dur, thunk)
        at += dur + 1_000


def trace() -> pl.DataFrame:
    r = Ranges()
    psum = r.add("TSL:XlaModule:#hlo_module=jit__psum,program_id=1#", 1_000, 2_000, 5_000)
    r.add(
        "TSL:Thunk:#name=jit(_psum)/jit(main)/reduce_sum,hlo_op=all-reduce-start#",
        1_100,
        2_100,
        4_000,
        psum,
    )
    train_step(r, 100_000)
    train_step(r, 200_000)
    return pl.DataFrame(r.rows)


def main() -> None:
    device = pl.DataFrame({"('TARGET_INFO_GPU', 'name')": ["NVIDIA H100 80GB HBM3"],
                           "('TARGET_INFO_NVTX_CUDA_DEVICE', 'name')":
                               ["Xla:#global=1,local=1,process=1,slice=0#"],
                           "cuDevice": [1]})  # fmt: skip
    system = pl.DataFrame({"name": ["CpuCores", "Hostname"], "value": ["8", "tw-jax-sample"]})
    members = {
        "nvtx_gpu_proj_trace/trace.parquet": trace(),
        "device-metadata.parquet": device,
        "system-metadata.parquet": system,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(OUT, "w") as archive:
        for name, frame in members.items():
            buf = io.BytesIO()
            frame.write_parquet(buf)
            archive.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), buf.getvalue())
        dumps = {
            "dump/module_0001.jit__psum": psum_dump(),
            "dump/module_0007.jit_train_step": train_step_dump(),
        }
        for prefix, data in dumps.items():
            name = f"{prefix}.sm_9.0_gpu_after_optimizations.hlo.pb.xz"
            archive.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
