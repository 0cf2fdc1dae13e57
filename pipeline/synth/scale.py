"""Large synthetic jobs, fast: one simulated window repeated as bytes, in three formats.

The simulator (:mod:`pipeline.synth.job`) builds Python objects per event, which is fine
for the bundled sample but far too slow for a 1 GB job. Here the job is simulated once
(``spec.steps`` steps), each rank's events are rendered once into a *template* whose
changing numbers are left open, and the template is written ``repeats`` times with those
numbers moved on: times by one period (the same for every rank, so ranks stay aligned),
ids (External id, correlation, Ev Idx, Python id, autograd sequence numbers) by their count
in one window, ``ProfilerStep#N`` by ``spec.steps``. Writing a copy is a ``str.join``.

Memory holds one rank's events, not the job's: the simulation runs twice. The first run
(:func:`schedule_job`) drops each rank's events as they are made and keeps only when each
collective ended; then each rank's program runs again alone against those end times
(:func:`rank_state`), doing exactly what it did in the whole job, and is written before the
next one runs. A job of 4,096 ranks (TP8 x PP4 x DP128, 2.9 GB of Kineto JSON and NCCL
logs) is written in 124 MB and 2.9 minutes so; holding every rank's events at once would
take 8.3 GB and 7.3 minutes.

Besides Kineto it writes, from the same simulated calls:

- ``nccl``: an ``NCCL_DEBUG=INFO`` log per rank (``NCCL_DEBUG_SUBSYS=INIT,COLL,GRAPH``):
  the version banner, per communicator ``Init START``/``COMPLETE`` with the same commId on
  every member, ring/tree and channel connection lines, then one COLL line per call, in
  the shapes NCCL 2.26 prints (github.com/NVIDIA/nccl, tag v2.26.x);
- ``nsys``: one Nsight Systems SQLite export of the job (:mod:`pipeline.synth.nsys`) whose
  kernels, launches and NCCL ranges are the job's own, the ranges with NCCL 2.25+ NVTX
  payloads (the call's comm hash and bytes; a ``ncclCommInitRank`` per communicator of each
  rank), the comm hash of a group being its commId in the NCCL logs.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from ..synth import job as J
from ..synth.kineto import Event, Slot, _Micro, render_trace
from ..vocab import OP_NAMES

FORMATS = ("kineto", "nccl", "nsys")
_MARK = re.compile(r"@@(\d+)@@")
#: args holding per-rank counters that must stay unique across copies, by counter
_ID_ARGS = {
    "External id": "ext",
    "correlation": "corr",
    "Ev Idx": "ev_idx",
    "Python id": "py_id",
    "Python parent id": "py_id",
    "Sequence number": "seq_nr",
}


@dataclass
class _Template:
    """A rank's window of events as text pieces with open numbers."""

    static: list[str]  # text between the numbers (one more than numbers)
    base: np.ndarray  # value of each number in the first copy
    delta: np.ndarray  # its change per copy

    def copy(self, k: int) -> str:
        values = (self.base + k * self.delta).tolist()
        out = [""] * (2 * len(values) + 1)
        out[0::2] = self.static
        out[1::2] = map(str, values)
        return "".join(out)


def simulated_job(spec: J.JobSpec) -> tuple[list[J.Group], dict[int, J.Rank], dict[int, int]]:
    """The job simulated once (see :func:`pipeline.synth.job.simulate_job`)."""
    return J.simulate_job(spec)


@dataclass
class Schedule:
    """A job simulated once with every rank's events dropped as they were made: what each
    rank needs to run its program again alone (:func:`rank_state`), one rank at a time.
    Holding every rank's events at once would take 8 GB at 4,096 ranks."""

    groups: list[J.Group]
    starts: dict[int, int]  # first CPU time per rank
    period: int  # see period_ns
    done: dict[tuple, int]  # end time of every collective, by its key


def schedule_job(spec: J.JobSpec) -> Schedule:
    """Simulate ``spec`` on one clock, keeping the collectives' end times, not the events."""
    from ..synth.program import rank_program

    groups = J.process_groups(spec)
    ranks = {r: J.new_rank(spec, r, groups) for r in range(spec.world)}
    starts = {r: state.cpu_ns for r, state in ranks.items()}

    def forget(r: int) -> None:
        ranks[r].trace.events.clear()
        ranks[r].calls.clear()

    done = J.simulate({r: rank_program(state) for r, state in ranks.items()}, after=forget)
    return Schedule(groups, starts, period_ns(ranks, starts), done)


def rank_state(spec: J.JobSpec, sched: Schedule, r: int) -> J.Rank:
    """Rank ``r`` after its program ran alone, each collective ending when it did in the
    whole job: the same events and calls as :func:`simulated_job` gives it."""
    from ..synth.program import rank_program

    state = J.new_rank(spec, r, sched.groups)
    J.replay(rank_program(state), sched.done)
    return state


def period_ns(ranks: dict[int, J.Rank], starts: dict[int, int]) -> int:
    """One window's length, the same for all ranks, in whole microseconds."""
    first = min(J.trace_window(ranks[r], starts[r])[0] for r in ranks)
    last = max(J.trace_window(ranks[r], starts[r])[1] for r in ranks)
    return -(-(last - first + 50_000) // 1_000) * 1_000


def _template(spec: J.JobSpec, state: J.Rank, period: int) -> _Template:
    tr = state.trace
    counters = {
        "ext": tr._ext,
        "corr": tr._corr,
        "ev_idx": tr._ev_idx,
        "py_id": tr._py_id,
        "seq_nr": state.autograd_seq,
    }
    base: list[int] = []
    delta: list[int] = []

    def slot(value: int, step: int, suffix: str = "") -> Slot:
        base.append(value)
        delta.append(step)
        return Slot(len(base) - 1, suffix)

    texts = []
    for ev in sorted(tr.events, key=lambda e: e.head["ts"].ns):
        head = dict(ev.head)
        ts: _Micro = head["ts"]
        head["ts"] = slot(ts.ns // 1_000, period // 1_000, f".{ts.ns % 1_000:03d}")
        name = head.get("name", "")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            head["name"] = f"ProfilerStep#{slot(int(name[13:]), spec.steps)}"
        if head.get("ph") in ("s", "f"):
            head["id"] = slot(head["id"], counters["corr"])
        args = dict(ev.args) if ev.args is not None else None
        for key, counter in _ID_ARGS.items():
            if args is not None and type(args.get(key)) is int:
                args[key] = slot(args[key], counters[counter])
        texts.append(Event(head, args).render())
    parts = _MARK.split(",\n".join(texts))
    index = np.array(parts[1::2], dtype=np.int64)
    return _Template(
        static=parts[0::2],
        base=np.array(base, dtype=np.int64)[index],
        delta=np.array(delta, dtype=np.int64)[index],
    )


def _open(path: Path, use_gzip: bool) -> IO[str]:
    if use_gzip:
        # mtime=0: the bytes depend on the content only
        raw = open(path, "wb")  # noqa: SIM115 - closed with the gzip stream
        return _GzipText(raw)
    return open(path, "w", encoding="utf-8")  # noqa: SIM115


class _GzipText:
    """A text writer onto a deterministic gzip stream (level 1: fast, for large jobs)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0)

    def write(self, text: str) -> int:
        return self._gz.write(text.encode())

    def __enter__(self) -> _GzipText:
        return self

    def __exit__(self, *exc: object) -> None:
        self._gz.close()
        self._raw.close()


def write_kineto(
    spec: J.JobSpec,
    state: J.Rank,
    sched: Schedule,
    out_dir: Path,
    repeats: int,
    use_gzip: bool = False,
) -> Path:
    """Rank ``state``'s trace holding ``repeats`` copies of the simulated window."""
    begin, end = J.trace_window(state, sched.starts[state.rank])
    meta = J.metadata_events(spec, state, begin)
    spans = state.trace.span_events(begin, end + (repeats - 1) * sched.period)
    name = J.rank_trace_name(spec, state.rank)
    text = render_trace(J.trace_top(spec, state, sched.groups), meta + spans, name)
    cut = text.index(spans[0].render())
    template = _template(spec, state, sched.period)
    path = out_dir / (name + (".gz" if use_gzip else ""))
    with _open(path, use_gzip) as f:
        f.write(text[:cut])
        for k in range(repeats):
            f.write(template.copy(k))
            f.write(",\n")
        f.write(text[cut:])
    return path


# -- NCCL debug log ---------------------------------------------------------------------------
#: op -> NCCL's name of it in ``<Func>: opCount`` lines (vocab.OP_NAMES)
NCCL_OPS = {
    OP_NAMES[func]: func
    for func in ("AllReduce", "Broadcast", "Send", "Recv", "AllGather", "ReduceScatter")
}
#: torch dtype key of job.DTYPE -> ncclDataType_t
NCCL_DTYPES = {"bf16": 9, "fp32": 7, "fp16": 6, "int64": 4, "int32": 2}


def _comm_ptr(rank: int, group: J.Group) -> str:
    return f"0x55{rank:04x}{int(group.name):04x}a0"


def _comm_hash(group: J.Group) -> int:
    """The group's NCCL commId / comm hash: the same on every member, distinct per group."""
    return (0x9E3779B97F4A7C15 * (int(group.name) + 1)) & 0xFFFFFFFFFFFFFFFF


def _comm_id(group: J.Group) -> str:
    return f"0x{_comm_hash(group):x}"  # NCCL prints 0x%llx: no zero padding


def _nccl_prefix(rank: int, pid: int, tid: int) -> str:
    return f"{J.host_name(rank)}:{pid}:{tid} [{rank % J.GPUS_PER_HOST}] NCCL INFO "


def _nccl_header(state: J.Rank) -> str:
    r, pid = state.rank, state.main_tid
    init = _nccl_prefix(r, pid, pid + 50)
    lines = [f"{_nccl_prefix(r, pid, pid)}NCCL version {J.NCCL_VERSION}+cuda12.6"] if r == 0 else []
    mine = [g for g in state.groups if r in g.ranks]
    for g in mine:
        me, n = g.ranks.index(r), len(g.ranks)
        ids = (
            f"comm {_comm_ptr(r, g)} rank {me} nranks {n} cudaDev {r % 8} nvmlDev {r % 8} "
            f"busId {(r % 8) * 0x10 + 0x18:x}000 commId {_comm_id(g)}"
        )
        lines.append(f"{init}ncclCommInitRankConfig {ids} - Init START")
        prev, nxt = (me - 1) % n, (me + 1) % n
        for c in range(2):
            lines.append(f"{init}Ring {c:02d} : {prev} -> {me} -> {nxt}")
        down = nxt if me + 1 < n else -1
        up = me - 1 if me > 0 else -1
        lines.append(f"{init}Trees [0] {down}/-1/-1->{me}->{up} [1] {down}/-1/-1->{me}->{up}")
        if n > 1:
            for c in range(2):
                lines.append(
                    f"{init}Channel {c:02d}/0 : {me}[{r % 8}] -> {nxt}[{g.ranks[nxt] % 8}] "
                    "via P2P/CUMEM/read"
                )
        lines.append(f"{init}ncclCommInitRankConfig {ids} - Init COMPLETE")
    return "\n".join(lines) + "\n"


def _nccl_calls(state: J.Rank, counters: dict[str, int]) -> str:
    r, pid = state.rank, state.main_tid
    prefix = _nccl_prefix(r, pid, pid)
    lines = []
    for i, c in enumerate(state.calls):
        g = c.group
        op_count = counters.get(g.name, 0)
        counters[g.name] = op_count + 1
        root = c.peer if c.peer is not None else (c.root or 0)
        # 2.12+: send and recv print their one buffer as recvbuff
        p2p = c.op in ("send", "recv")
        send = "(nil)" if p2p else f"0x7f3a{(i % 4096):04x}0000"
        recv = f"0x7f3b{(i % 4096):04x}0000"
        lines.append(
            f"{prefix}{NCCL_OPS[c.op]}: opCount {op_count:x} sendbuff {send} recvbuff {recv} "
            f"count {c.count} datatype {NCCL_DTYPES[c.dtype]} op 0 root {root} "
            f"comm {_comm_ptr(r, g)} [nranks={len(g.ranks)}] stream 0x55d1e2{c.stream:06x}"
        )
    return "\n".join(lines) + "\n" if lines else ""


def nccl_log_name(rank: int) -> str:
    """File name of a rank's NCCL log (``NCCL_DEBUG_FILE=%h.%p``-like)."""
    return f"rank{rank}.nccl.log"


def write_nccl_log(state: J.Rank, out_dir: Path, repeats: int) -> Path:
    """Rank ``state``'s ``NCCL_DEBUG=INFO`` log with the COLL line of every call of every
    copy."""
    path = out_dir / nccl_log_name(state.rank)
    counters: dict[str, int] = {}
    with open(path, "w", encoding="utf-8") as f:
        f.write(_nccl_header(state))
        for _ in range(repeats):
            f.write(_nccl_calls(state, counters))
    return path


# -- Nsight Systems ---------------------------------------------------------------------------
def job_kernels(
    sim: tuple[list[J.Group], dict[int, J.Rank], dict[int, int]], repeats: int
) -> dict[int, list]:
    """Per rank, the job's kernels for :func:`pipeline.synth.nsys.write_export`."""
    _, ranks, starts = sim
    period = period_ns(ranks, starts)
    return {r: rank_kernels(state, period, repeats) for r, state in ranks.items()}


def rank_kernels(state: J.Rank, period: int, repeats: int) -> list:
    """Rank ``state``'s kernels in ``repeats`` copies of the window, ``period`` apart."""
    one = _rank_kernels(state)
    return [k.shifted(i * period) for i in range(repeats) for k in one]


def _rank_kernels(state: J.Rank) -> list:
    from ..synth.nsys import JobKernel

    events = state.trace.events
    launches = {
        e.args["correlation"]: e
        for e in events
        if e.head.get("cat") in ("cuda_runtime", "cuda_driver") and e.args
    }
    # by stream too: a p2p kernel can start together with another group's all_reduce
    nccl_calls = {(c.start_ns, c.stream): c for c in state.calls}
    kernels = []
    for e in sorted(events, key=lambda e: e.head["ts"].ns):
        if e.head.get("cat") != "kernel" or not e.args:
            continue
        launch = launches.get(e.args["correlation"])
        start = e.head["ts"].ns
        call = nccl_calls.get((start, e.args["stream"]))
        kernels.append(
            JobKernel(
                name=e.head["name"],
                stream=e.args["stream"],
                start_ns=start,
                dur_ns=e.head["dur"].ns,
                launch_ns=launch.head["ts"].ns if launch else start - 5_000,
                launch_dur_ns=launch.head["dur"].ns if launch else 3_000,
                grid=tuple(e.args["grid"]),
                block=tuple(e.args["block"]),
                **(_call_fields(call) if call else {}),
            )
        )
    return kernels


def _call_fields(call: J.CommCall) -> dict:
    """The JobKernel fields of an NCCL call: its function and NVTX payload values."""
    return {
        "nccl_call": f"nccl{NCCL_OPS[call.op]}",
        "comm_hash": _comm_hash(call.group),
        "nbytes": call.count * J.DTYPE[call.dtype][2],
        "root": call.root or 0,
        "peer": call.peer or 0,
    }


def job_comms(sim: tuple[list[J.Group], dict[int, J.Rank], dict[int, int]]) -> dict[int, list]:
    """Per rank, its communicators (every group it belongs to, in creation order) for
    :func:`pipeline.synth.nsys.write_export`."""
    groups, ranks, _ = sim
    return {r: rank_comms(groups, r) for r in ranks}


def rank_comms(groups: list[J.Group], r: int) -> list:
    """Rank ``r``'s communicators: every group it belongs to, in creation order."""
    from ..synth.nsys import JobComm

    return [JobComm(_comm_hash(g), len(g.ranks), g.ranks.index(r)) for g in groups if r in g.ranks]


def write_nsys(
    spec: J.JobSpec, kernels: dict[int, list], comms: dict[int, list], out_dir: Path
) -> list[Path]:
    """One SQLite export per host (every rank of it a process), as ``nsys profile`` writes
    one per node: ``job.nsys.sqlite`` for a job on one host, else ``job.<host>.nsys.sqlite``."""
    from ..synth.nsys import write_export

    by_host: dict[str, list[int]] = {}
    for r in sorted(kernels):
        by_host.setdefault(J.host_name(r), []).append(r)
    paths = []
    for host, ranks in by_host.items():
        name = "job.nsys.sqlite" if len(by_host) == 1 else f"job.{host}.nsys.sqlite"
        paths.append(
            write_export(
                out_dir / name,
                ranks=ranks,
                world_size=spec.world,
                kernels={r: kernels[r] for r in ranks},
                comms={r: comms[r] for r in ranks},
                session_start_ns=J.BASE_TIME_NS,
                payloads=True,
                hostname=host,
            )
        )
    return paths


# -- everything -------------------------------------------------------------------------------
def repeats_for(spec: J.JobSpec, sched: Schedule, target_bytes: int) -> int:
    """Copies of the window that make the Kineto traces about ``target_bytes`` in all (each
    rank's program is run again to size its template)."""
    one = sum(
        sum(map(len, _template(spec, rank_state(spec, sched, r), sched.period).static))
        for r in range(spec.world)
    )
    return max(1, -(-target_bytes // max(1, int(one * 1.1))))


def write_scaled_job(
    spec: J.JobSpec,
    out_dir: Path,
    *,
    repeats: int | None = None,
    target_bytes: int | None = None,
    formats: Iterable[str] = ("kineto",),
    use_gzip: bool = False,
) -> dict[str, list[Path]]:
    """Write the job in ``formats`` (see :data:`FORMATS`); returns the paths by format.

    ``repeats`` copies of the simulated window, or as many as make ``target_bytes`` of
    Kineto JSON (one copy when neither is given). The job is simulated once
    (:func:`schedule_job`), then each rank runs again alone and is written before the next
    one runs, so that memory holds one rank's events (and, for ``nsys``, every rank's
    kernels), not the job's.
    """
    formats = list(formats)
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown formats {unknown}; choose from {list(FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    sched = schedule_job(spec)
    if repeats is None:
        repeats = repeats_for(spec, sched, target_bytes) if target_bytes else 1
    written: dict[str, list[Path]] = {fmt: [] for fmt in FORMATS if fmt in formats}
    kernels: dict[int, list] = {}
    for r in range(spec.world):
        state = rank_state(spec, sched, r)
        if "kineto" in formats:
            written["kineto"].append(write_kineto(spec, state, sched, out_dir, repeats, use_gzip))
        if "nccl" in formats:
            written["nccl"].append(write_nccl_log(state, out_dir, repeats))
        if "nsys" in formats:
            kernels[r] = rank_kernels(state, sched.period, repeats)
    if "nsys" in formats:
        comms = {r: rank_comms(sched.groups, r) for r in kernels}
        written["nsys"] = write_nsys(spec, kernels, comms, out_dir)
    return written
