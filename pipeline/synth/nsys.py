"""Write a small (or, for benchmarks, large) Nsight Systems SQLite export in the real schema.

The tables are created with the verbatim CREATE TABLE statements of a real nsys 2023.4
export (schema 3.7.2, ``nsys_schema.py``) and filled the way nsys fills them: strings
interned in ``StringIds``, ``globalPid``/``globalTid`` packed as
``(1 << 48) | pid << 24 | tid``, capture-relative timestamps plus
``TARGET_INFO_SESSION_START_TIME``, kernels linked to ``cudaLaunchKernel_v7000`` runtime
rows by ``correlationId``, NVTX push/pop ranges (eventType 59) per layer, and NCCL's own
domain (eventType 75 row named ``NCCL``) with one ``ncclAllReduce`` range (registered
string, ``textId``) around each NCCL kernel launch.

Each process of the report is one rank on device ``rank % 8``. Schema 3.7.2 has no column
for NVTX binary payloads; ``payloads=True`` adds the ``binaryData`` column that schema 3.28
documents (base64 text here, an assumption: no real 3.28 export has been seen) and fills
it with NCCL >= 2.25 payloads, including a ``ncclCommInitRank`` range per process that
carries its rank (per communicator of the rank, for a job's kernels: see :class:`JobComm`).
"""

from __future__ import annotations

import base64
import sqlite3
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..synth.nsys_schema import CREATE_TABLES, SCHEMA_VERSION

VM = 1 << 48
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
KERNEL_COLUMNS = 28  # CUPTI_ACTIVITY_KIND_KERNEL in schema 3.7.2
NVTX_COLUMNS = 19


@dataclass(frozen=True)
class Layout:
    """What each rank does: steps x layers x (gemm kernels + one all_reduce)."""

    steps: int = 2
    layers: int = 2
    gemms_per_layer: int = 3
    allreduce_bytes: int = 1 << 20
    comm_hash: int = 0x5AE77EB5EA4EC1EE
    gemm_ns: int = 20_000
    allreduce_ns: int = 50_000


@dataclass(frozen=True)
class JobKernel:
    """One kernel of a synthetic job (:mod:`pipeline.synth.scale`), with its launch call and,
    for NCCL kernels, the NCCL API call (``ncclAllReduce``...) that NCCL's NVTX range names
    and the fields of that call's NVTX payload (``comm_hash``, ``nbytes`` = count * type
    size, and the redop / root / peer the function records)."""

    name: str
    stream: int
    start_ns: int
    dur_ns: int
    launch_ns: int
    launch_dur_ns: int
    nccl_call: str | None = None
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    comm_hash: int | None = None
    nbytes: int | None = None
    redop: int = 0  # ncclRedOp_t: 0 is ncclSum
    root: int = 0  # group-local
    peer: int = 0  # group-local

    def shifted(self, ns: int) -> JobKernel:
        """The same kernel ``ns`` later."""
        return replace(self, start_ns=self.start_ns + ns, launch_ns=self.launch_ns + ns)

    def payload(self) -> bytes | None:
        """The NCCL >= 2.25 NVTX payload of the call (None without a comm hash or size)."""
        if self.nccl_call is None or self.comm_hash is None or self.nbytes is None:
            return None
        head = struct.pack("<QQ", self.comm_hash, self.nbytes)
        # the tail of each struct in nvtx_payload_schemas.h (see _COLL_TAIL in
        # pipeline/ingest/nsys/collectives.py)
        tail = {
            "ncclAllReduce": struct.pack("<i4x", self.redop),
            "ncclReduceScatter": struct.pack("<i4x", self.redop),
            "ncclAllGather": b"",
            "ncclAlltoAll": b"",
            "ncclBroadcast": struct.pack("<i4x", self.root),
            "ncclReduce": struct.pack("<ii", self.root, self.redop),
            "ncclSend": struct.pack("<i4x", self.peer),
            "ncclRecv": struct.pack("<i4x", self.peer),
        }.get(self.nccl_call)
        return None if tail is None else head + tail


@dataclass(frozen=True)
class JobComm:
    """One NCCL communicator a rank of a synthetic job belongs to: a ``ncclCommInitRank``
    range with payload {comm hash, nranks, rank in the communicator, cudaDev}."""

    comm_hash: int
    nranks: int
    rank: int


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        return self.ids.setdefault(value, len(self.ids))


def write_export(
    path: Path,
    *,
    ranks: Sequence[int] = (0,),
    world_size: int | None = None,
    layout: Layout = Layout(),
    session_start_ns: int = 1_767_225_600_000_000_000,
    payloads: bool = False,
    hostname: str = "node-0",
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    kernels: Mapping[int, Sequence[JobKernel]] | None = None,
    comms: Mapping[int, Sequence[JobComm]] | None = None,
) -> Path:
    """Write the export to ``path`` (replaced if present) and return ``path``.

    With ``kernels`` (rank -> that rank's kernels, times relative to the session start), each
    rank's kernels, launches and NCCL ranges are those instead of ``layout``'s; with
    ``payloads`` their NCCL ranges carry payloads and each of the rank's ``comms`` gets a
    ``ncclCommInitRank`` range before its first kernel.
    """
    path = Path(path)
    path.unlink(missing_ok=True)
    world = world_size or max(ranks) + 1
    con = sqlite3.connect(path)
    try:
        for table, ddl in CREATE_TABLES.items():
            con.execute(ddl)
            if table == "NVTX_EVENTS" and payloads:
                con.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN binaryData TEXT")
        strings = _Strings()
        for rank in ranks:
            if kernels is not None:
                mine = (comms or {}).get(rank, [])
                _write_job_rank(con, rank, kernels.get(rank, []), mine, strings, payloads)
            else:
                _write_rank(con, rank, world, layout, strings, payloads)
        _write_facts(con, ranks, strings, session_start_ns, hostname, gpu_name)
        con.executemany(
            "INSERT INTO StringIds VALUES (?, ?)", ((i, s) for s, i in strings.ids.items())
        )
        con.commit()
    finally:
        con.close()
    return path


def _write_rank(
    con: sqlite3.Connection, rank: int, world: int, lay: Layout, strings: _Strings, payloads: bool
) -> None:
    pid = 1000 + rank
    gtid, device = VM | pid << 24 | pid, rank % 8
    nvtx: list[tuple] = [_nvtx(1_000, None, 75, "NCCL", gtid, 1)]
    if payloads:
        init = struct.pack("<Qiii4x", lay.comm_hash, world, rank, device)
        nvtx.append(_nvtx(2_000, 900_000, 59, None, gtid, 1, strings("ncclCommInitRank"), init))
    con.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * KERNEL_COLUMNS)})",
        _kernels(rank, lay, strings),
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        _launches(rank, lay, strings),
    )
    nvtx += list(_ranges(rank, lay, strings, payloads))
    _write_nvtx_and_process(con, nvtx, payloads, pid, strings)


def _write_job_rank(
    con: sqlite3.Connection,
    rank: int,
    kernels: Sequence[JobKernel],
    comms: Sequence[JobComm],
    strings: _Strings,
    payloads: bool,
) -> None:
    """One rank's given kernels, their ``cudaLaunchKernel`` calls and NCCL's NVTX ranges."""
    pid = 1000 + rank
    gpid, gtid, device = VM | pid << 24, VM | pid << 24 | pid, rank % 8
    launch = strings("cudaLaunchKernel_v7000")
    rows, calls = [], []
    nvtx: list[tuple] = [_nvtx(1_000, None, 75, "NCCL", gtid, 1)]
    if payloads:
        nvtx += _init_ranges(comms, kernels, gtid, device, strings)
    for corr, k in enumerate(kernels, start=1):
        name = strings(k.name)
        short = strings(k.name.split("(")[0])
        end = k.start_ns + k.dur_ns
        rows.append(
            (k.start_ns, end, device, 1, None, k.stream, corr, gpid, name, short, None, 1, 0, 128)
            + k.grid
            + k.block
            + (0, 0, 0, 0, corr, None, None, 0)
        )
        calls.append((k.launch_ns, k.launch_ns + k.launch_dur_ns, 0, gtid, corr, launch, 0, None))
        if k.nccl_call is not None:
            text = strings(k.nccl_call)
            start, stop = k.launch_ns - 200, k.launch_ns + k.launch_dur_ns + 200
            payload = k.payload() if payloads else None
            nvtx.append(_nvtx(start, stop, 59, None, gtid, 1, text, payload))
    con.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * KERNEL_COLUMNS)})", rows
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", calls
    )
    _write_nvtx_and_process(con, nvtx, payloads, pid, strings)


def _write_nvtx_and_process(
    con: sqlite3.Connection, nvtx: list[tuple], payloads: bool, pid: int, strings: _Strings
) -> None:
    """A rank's NVTX rows (with the ``binaryData`` column when ``payloads``), its process and
    its thread's name."""
    gpid, gtid = VM | pid << 24, VM | pid << 24 | pid
    marks = ", ".join("?" * (NVTX_COLUMNS + (1 if payloads else 0)))
    con.executemany(
        f"INSERT INTO NVTX_EVENTS VALUES ({marks})",
        (r if payloads else r[:NVTX_COLUMNS] for r in nvtx),
    )
    con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid, pid, "python"))
    con.execute("INSERT INTO ThreadNames VALUES (?, ?, ?)", (strings("python"), 20, gtid))


def _init_ranges(
    comms: Sequence[JobComm],
    kernels: Sequence[JobKernel],
    gtid: int,
    device: int,
    strings: _Strings,
) -> list[tuple]:
    """A 1 ms ``ncclCommInitRank`` range per communicator, back to back, ending 1 ms before
    the rank's first launch (NCCL initializes a communicator before its first call)."""
    first = min((k.launch_ns for k in kernels), default=10_000_000)
    t = max(2_000, first - 1_000_000 - 1_000_000 * len(comms))
    text = strings("ncclCommInitRank")
    out = []
    for c in comms:
        init = struct.pack("<Qiii4x", c.comm_hash, c.nranks, c.rank, device)
        out.append(_nvtx(t, t + 900_000, 59, None, gtid, 1, text, init))
        t += 1_000_000
    return out


def _nvtx(
    start: int,
    end: int | None,
    etype: int,
    text: str | None,
    gtid: int,
    domain: int,
    text_id: int | None = None,
    payload: bytes | None = None,
) -> tuple:
    blob = base64.b64encode(payload).decode() if payload is not None else None
    return (
        start,
        end,
        etype,
        None,
        None,
        None,
        text,
        gtid,
        None,
        text_id,
        domain,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        blob,
    )


def _timeline(rank: int, lay: Layout) -> Iterator[tuple[int, int, int, int, bool]]:
    """(step, layer, launch time, kernel start, is_nccl) for every kernel of one rank."""
    t = 1_000_000 + rank * 1_000  # ranks start a little apart, as real ones do
    for step in range(lay.steps):
        for layer in range(lay.layers):
            for k in range(lay.gemms_per_layer + 1):
                nccl = k == lay.gemms_per_layer
                yield step, layer, t, t + 5_000, nccl
                t += (lay.allreduce_ns if nccl else lay.gemm_ns) + 2_000
            t += 10_000
        t += 100_000


def _kernels(rank: int, lay: Layout, strings: _Strings) -> Iterator[tuple]:
    gpid, device = VM | (1000 + rank) << 24, rank % 8
    gemm, nccl = strings(GEMM_KERNEL), strings(NCCL_KERNEL)
    gemm_short, nccl_short = strings(GEMM_KERNEL.split("(")[0]), strings(NCCL_KERNEL.split("(")[0])
    for corr, (_s, _l, _launch, start, is_nccl) in enumerate(_timeline(rank, lay), start=1):
        dur = lay.allreduce_ns if is_nccl else lay.gemm_ns
        stream = 20 if is_nccl else 7
        name, short = (nccl, nccl_short) if is_nccl else (gemm, gemm_short)
        grid = (32, 1, 1) if is_nccl else (132, 1, 1)
        block = (640, 1, 1) if is_nccl else (384, 1, 1)
        yield (
            start,
            start + dur,
            device,
            1,
            None,
            stream,
            corr,
            gpid,
            name,
            short,
            None,
            1,
            0,
            128,
            *grid,
            *block,
            0,
            0,
            0,
            0,
            corr,
            None,
            None,
            0,
        )


def _launches(rank: int, lay: Layout, strings: _Strings) -> Iterator[tuple]:
    gtid = VM | (1000 + rank) << 24 | (1000 + rank)
    launch = strings("cudaLaunchKernel_v7000")
    for corr, (_s, _l, t, _start, _nccl) in enumerate(_timeline(rank, lay), start=1):
        yield (t, t + 3_000, 0, gtid, corr, launch, 0, None)


def _ranges(rank: int, lay: Layout, strings: _Strings, payloads: bool) -> Iterator[tuple]:
    gtid = VM | (1000 + rank) << 24 | (1000 + rank)
    allreduce = strings("ncclAllReduce")
    spans: dict[tuple[int, int], list[int]] = {}
    steps: dict[int, list[int]] = {}
    for step, layer, t, _start, nccl in _timeline(rank, lay):
        span = spans.setdefault((step, layer), [t - 500, t])
        span[1] = t + 4_000
        step_span = steps.setdefault(step, [t - 1_000, t])
        step_span[1] = t + 4_500
        if nccl:
            payload = struct.pack("<QQi4x", lay.comm_hash, lay.allreduce_bytes, 0)
            yield _nvtx(
                t - 200, t + 3_500, 59, None, gtid, 1, allreduce, payload if payloads else None
            )
    for step, (s, e) in steps.items():
        yield _nvtx(s, e, 59, f"step_{step}", gtid, 0)
    for (_step, layer), (s, e) in spans.items():
        yield _nvtx(s, e, 59, f"layer_{layer}.forward", gtid, 0)


def _write_facts(
    con: sqlite3.Connection,
    ranks: Sequence[int],
    strings: _Strings,
    session_start_ns: int,
    hostname: str,
    gpu_name: str,
) -> None:
    con.execute(
        "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)", (session_start_ns, "", "")
    )
    major, minor, micro = SCHEMA_VERSION.split(".")
    meta = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems (tokenwire synth)"),
        ("EXPORT_SCHEMA_VERSION", SCHEMA_VERSION),
        ("EXPORT_SCHEMA_VERSION_MAJOR", major),
        ("EXPORT_SCHEMA_VERSION_MINOR", minor),
        ("EXPORT_SCHEMA_VERSION_MICRO", micro),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
    ]
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
    con.execute(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, ?, ?, ?, ?)",
        (VM, "Local (CLI)", "Hostname", 619, hostname),
    )
    gpu_cols = 41  # TARGET_INFO_GPU in schema 3.7.2
    for device in sorted({r % 8 for r in ranks}):
        row = [VM, device, gpu_name] + [None] * (gpu_cols - 3)
        con.execute(f"INSERT INTO TARGET_INFO_GPU VALUES ({', '.join('?' * gpu_cols)})", row)
