"""Kineto (PyTorch profiler) trace builder and writer for synthetic jobs.

This module owns the *shape* of a trace: which events exist, their key order, their arg names
and value types, and the text layout. It copies what PyTorch 2.x writes on CUDA (see the real
files in ``shared/real_traces/kineto/``):

- CPU events (``cpu_op``, ``user_annotation``, ``python_function``, ``cuda_runtime``,
  ``cuda_driver``) carry the process id and thread id as ints; GPU events (``kernel``,
  ``gpu_memcpy``, ``gpu_user_annotation``) carry ``pid`` = device index and ``tid`` = stream.
- A launch is a runtime (or driver) call with ``correlation``; an ``ac2g`` flow starts (``s``)
  on the CPU at the call's timestamp and finishes (``f``, ``bp: "e"``) on the GPU at the kernel's
  timestamp, both with ``id`` = correlation. Runtime calls without GPU work get the stray
  CPU-side flow event real traces have (``f`` for most calls, ``s`` for cudaStreamWaitEvent).
- ``ts``/``dur`` are microseconds with exactly 3 decimals, relative to
  ``baseTimeNanoseconds``. The builder keeps integer nanoseconds and formats them as text, so
  no float rounding ever happens.

The job logic (what runs when) lives in :mod:`pipeline.synth.job`; this module knows nothing
about models or parallelism.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

# CUPTI callback ids of the calls the generator emits (the values real traces show).
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cuLaunchKernelEx": 652,
}
# Runtime calls that get a CPU-side ``s`` flow without GPU work (Kineto quirk, seen in the
# A100 and B200 traces); every other call without GPU work gets a CPU-side ``f``.
_STRAY_START = {"cudaStreamWaitEvent"}

H100_PROPERTIES = {
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85024112640,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


def fmt_us(ns: int) -> str:
    """Format integer nanoseconds as Kineto's microsecond text with 3 decimals."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


class _Micro:
    """A time in ns that json output writes as µs with 3 decimals (see :func:`fmt_us`)."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        self.ns = ns


class Slot:
    """A number left open in a rendered template (see :mod:`pipeline.synth.scale`): renders as
    ``@@<index>@@``, followed by ``suffix`` (the fixed decimals of a time)."""

    __slots__ = ("index", "suffix")

    def __init__(self, index: int, suffix: str = "") -> None:
        self.index = index
        self.suffix = suffix

    def __str__(self) -> str:
        return f"@@{self.index}@@{self.suffix}"


def _val(v: Any) -> str:
    # ints and strings first, and strings from a cache: most values are one or the other,
    # and names repeat (json.dumps would be half the time of writing a large job)
    if type(v) is int:
        return str(v)  # what json.dumps writes for an int (a bool is not one here)
    if type(v) is str:
        return _json_text(v)
    if isinstance(v, Slot):
        return str(v)
    if isinstance(v, _Micro):
        return fmt_us(v.ns)
    if isinstance(v, float):
        return repr(round(v, 6))
    return json.dumps(v, separators=(", ", ": "))


@functools.lru_cache(maxsize=1 << 16)
def _json_text(text: str) -> str:
    return json.dumps(text)


def _line(d: dict[str, Any]) -> str:
    return ", ".join(f"{_json_text(k)}: {_val(v)}" for k, v in d.items())


@dataclass
class Event:
    """One trace event: the head keys (in Kineto's order) and optional args."""

    head: dict[str, Any]
    args: dict[str, Any] | None = None

    def render(self) -> str:
        h = self.head
        if h.get("ph") == "X":
            first = {k: h[k] for k in ("ph", "cat", "name", "pid", "tid")}
            lines = [_line(first) + ",", _line({"ts": h["ts"], "dur": h["dur"]})]
        elif h.get("ph") in ("s", "f"):
            first = {k: h[k] for k in ("ph", "id", "pid", "tid", "ts")}
            rest = {k: h[k] for k in h if k not in first}
            lines = [_line(first) + ",", _line(rest)]
        else:
            lines = [_line(h)]
        if self.args is not None:
            lines[-1] += ","
            lines.append('"args": {\n      ' + _line(self.args) + "\n    }")
        return "  {\n    " + "\n    ".join(lines) + "\n  }"


@dataclass
class KinetoTrace:
    """Events of one rank's trace plus the top-level keys, with helpers that keep ids
    (External id, correlation, Ev Idx, Python id) consistent the way PyTorch assigns them."""

    pid: int
    device: int
    base_time_ns: int
    events: list[Event] = field(default_factory=list)
    _ext: int = 0
    _corr: int = 0
    _ev_idx: int = 0
    _py_id: int = 0
    _py_stack: list[int] = field(default_factory=list)

    # -- ids ------------------------------------------------------------------------------
    def next_external_id(self) -> int:
        self._ext += 1
        return self._ext

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _next_ev_idx(self) -> int:
        idx = self._ev_idx
        self._ev_idx += 1
        return idx

    # -- CPU side -------------------------------------------------------------------------
    def _x(self, cat: str, name: str, pid: int, tid: int, ts: int, dur: int, args) -> Event:
        ev = Event(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": _Micro(ts),
                "dur": _Micro(dur),
            },
            args,
        )
        self.events.append(ev)
        return ev

    def range_event(
        self,
        cat: str,
        name: str,
        tid: int,
        ts: int,
        extra: dict[str, Any] | None = None,
        autograd: tuple[int, int] | None = None,
    ) -> tuple[Event, int]:
        """Open a ``cpu_op``/``user_annotation`` range at ``ts``; close it with :func:`close`.

        ``extra`` holds shape args (Input Dims...) or collective args and is placed the way
        PyTorch orders them; ``autograd`` is (Sequence number, Fwd thread id).
        """
        ext = self.next_external_id()
        args: dict[str, Any] = {"External id": ext}
        if autograd is not None:
            args["Record function id"] = 0
            args["Sequence number"], args["Fwd thread id"] = autograd
        else:
            args["Record function id"] = 0
        if extra:
            args.update(extra)
        args["Ev Idx"] = self._next_ev_idx()
        return self._x(cat, name, self.pid, tid, ts, 0, args), ext

    @staticmethod
    def close(ev: Event, end_ns: int) -> None:
        ev.head["dur"] = _Micro(end_ns - ev.head["ts"].ns)

    def module_event(self, name: str, module_id: int, tid: int, ts: int) -> Event:
        """An ``nn.Module: <Class>_<k>`` python_function event; nests under the open one."""
        self._py_id += 1
        parent = self._py_stack[-1] if self._py_stack else None
        args = {
            "Python parent id": parent,
            "Python id": self._py_id,
            "Python module id": module_id,
            "Ev Idx": self._next_ev_idx(),
        }
        self._py_stack.append(self._py_id)
        return self._x("python_function", f"nn.Module: {name}", self.pid, tid, ts, 0, args)

    def end_module(self, ev: Event, end_ns: int) -> None:
        self._py_stack.pop()
        self.close(ev, end_ns)

    def runtime_call(self, name: str, tid: int, ts: int, dur: int, external_id: int) -> int:
        """A CUDA runtime/driver call without GPU work (gets Kineto's stray flow event)."""
        corr = self._next_corr()
        cat = (
            "cuda_driver"
            if name.startswith("cu") and not name.startswith("cuda")
            else ("cuda_runtime")
        )
        self._x(
            cat,
            name,
            self.pid,
            tid,
            ts,
            dur,
            {"External id": external_id, "cbid": CBID[name], "correlation": corr},
        )
        self._flow("s" if name in _STRAY_START else "f", corr, self.pid, tid, ts)
        return corr

    def _flow(self, ph: str, corr: int, pid: int, tid: int, ts: int) -> None:
        head: dict[str, Any] = {
            "ph": ph,
            "id": corr,
            "pid": pid,
            "tid": tid,
            "ts": _Micro(ts),
            "cat": "ac2g",
            "name": "ac2g",
        }
        if ph == "f":
            head["bp"] = "e"
        self.events.append(Event(head))

    # -- launches -------------------------------------------------------------------------
    def launch_kernel(
        self,
        *,
        api: str,
        tid: int,
        call_ts: int,
        call_dur: int,
        external_id: int,
        kernel: str,
        stream: int,
        start: int,
        dur: int,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        regs: int,
        smem: int,
        extra: dict[str, Any] | None = None,
    ) -> int:
        """Runtime/driver launch call + ``ac2g`` flow + kernel on ``stream``."""
        corr = self._next_corr()
        cat = "cuda_driver" if api == "cuLaunchKernelEx" else "cuda_runtime"
        self._x(
            cat,
            api,
            self.pid,
            tid,
            call_ts,
            call_dur,
            {"External id": external_id, "cbid": CBID[api], "correlation": corr},
        )
        self._flow("s", corr, self.pid, tid, call_ts)
        blocks = grid[0] * grid[1] * grid[2]
        threads = block[0] * block[1] * block[2]
        sms = H100_PROPERTIES["numSms"]
        args: dict[str, Any] = {
            "External id": external_id,
            "queued": 0,
            "device": self.device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
            "registers per thread": regs,
            "shared memory": smem,
            "blocks per SM": round(blocks / sms, 6),
            "warps per SM": round(blocks * threads / 32 / sms, 6),
            "grid": list(grid),
            "block": list(block),
            "est. achieved occupancy %": min(100, int(blocks * threads * 100 / (sms * 2048))),
        }
        if extra:
            args.update(extra)
        self._x("kernel", kernel, self.device, stream, start, dur, args)
        self._flow("f", corr, self.device, stream, start)
        return corr

    def memcpy(
        self,
        *,
        tid: int,
        call_ts: int,
        call_dur: int,
        external_id: int,
        stream: int,
        start: int,
        dur: int,
        nbytes: int,
        kind: str,
    ) -> None:
        """``cudaMemcpyAsync`` + flow + ``gpu_memcpy``."""
        corr = self._next_corr()
        self._x(
            "cuda_runtime",
            "cudaMemcpyAsync",
            self.pid,
            tid,
            call_ts,
            call_dur,
            {"External id": external_id, "cbid": CBID["cudaMemcpyAsync"], "correlation": corr},
        )
        self._flow("s", corr, self.pid, tid, call_ts)
        gbps = nbytes / dur if dur else 0.0
        self._x(
            "gpu_memcpy",
            kind,
            self.device,
            stream,
            start,
            dur,
            {
                "External id": external_id,
                "device": self.device,
                "context": 1,
                "stream": stream,
                "correlation": corr,
                "bytes": nbytes,
                "memory bandwidth (GB/s)": gbps,
            },
        )
        self._flow("f", corr, self.device, stream, start)

    def gpu_annotation(self, name: str, stream: int, start: int, dur: int, ext: int) -> None:
        self._x("gpu_user_annotation", name, self.device, stream, start, dur, {"External id": ext})

    # -- whole file -----------------------------------------------------------------------
    def metadata_events(
        self, ts: int, threads: dict[int, str], streams: list[int], n_devices: int
    ) -> list[Event]:
        out: list[Event] = []

        def m(name: str, pid: int, tid: int, args: dict[str, Any]) -> None:
            out.append(
                Event({"name": name, "ph": "M", "ts": _Micro(ts), "pid": pid, "tid": tid}, args)
            )

        m("process_name", self.pid, 0, {"name": "python"})
        m("process_labels", self.pid, 0, {"labels": "CPU"})
        m("process_sort_index", self.pid, 0, {"sort_index": self.pid})
        for dev in range(n_devices):
            m("process_name", dev, 0, {"name": "python"})
            m("process_labels", dev, 0, {"labels": f"GPU {dev}"})
            m("process_sort_index", dev, 0, {"sort_index": 16777216 + dev})
        for s in streams:
            m("thread_name", self.device, s, {"name": f"stream {s} "})
            m("thread_sort_index", self.device, s, {"sort_index": s})
        for tid, tname in threads.items():
            m("thread_name", self.pid, tid, {"name": f"thread {tid} ({tname})"})
            m("thread_sort_index", self.pid, tid, {"sort_index": tid})
        return out

    def span_events(self, start: int, end: int) -> list[Event]:
        """The profiler's own ``Trace`` span and the two instant events real traces end with."""
        return [
            Event(
                {
                    "ph": "X",
                    "cat": "Trace",
                    "ts": _Micro(start),
                    "dur": _Micro(end - start),
                    "pid": "Spans",
                    "tid": "PyTorch Profiler",
                    "name": "PyTorch Profiler (0)",
                },
                {"Op count": 0},
            ),
            Event(
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "ts": _Micro(start),
                    "pid": "Spans",
                    "tid": 0,
                },
                {"sort_index": 536870912},
            ),
            Event(
                {
                    "name": "Iteration Start: PyTorch Profiler",
                    "ph": "i",
                    "s": "g",
                    "pid": "Traces",
                    "tid": "Trace PyTorch Profiler",
                    "ts": _Micro(start),
                }
            ),
            Event(
                {
                    "name": "Record Window End",
                    "ph": "i",
                    "s": "g",
                    "pid": "",
                    "tid": "",
                    "ts": _Micro(end),
                }
            ),
        ]


def render_trace(top: dict[str, Any], events: list[Event], trace_name: str) -> str:
    """The whole file as text: top-level keys in PyTorch's order, then events, then name."""
    parts = ["{"]
    for key, value in top.items():
        if key == "deviceProperties":
            devs = ",\n".join("    {\n      " + _line(d) + "\n    }" for d in value)
            parts.append(f'  "deviceProperties": [\n{devs}\n  ],')
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value, separators=(', ', ': '))},")
    parts.append('  "traceEvents": [')
    parts.append(",\n".join(ev.render() for ev in events))
    parts.append("  ],")
    parts.append(f'  "traceName": {json.dumps(trace_name)}')
    parts.append("}")
    return "\n".join(parts) + "\n"
