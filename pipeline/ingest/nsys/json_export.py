"""Read the line-delimited ``nsys export --type json`` stream into NsysRaw.

The json export is the raw event stream, not the SQL tables: line 1 is
``{"data": [all strings], "files": [...]}`` (string ids index that list), then one object per
event keyed by its kind (``NvtxEvent``, ``TraceProcessEvent``, ``CommEvent``, ``CudaEvent``,
``DiagnosticEvent``...), and a last ``{"data": [thread names]}``. 64-bit numbers are
strings. Unlike the SQLite export of nsys <= 2023.4 it keeps NVTX binary payloads
(``"Payload": {"BinaryData": [{"SchemaId": "...", "Data": "<base64>"}]}``) and each
process's command line and environment (``CommEvent``), which is why it is worth reading.

Shapes verified against real nsys 2022.4 and 2023.4 output: NvtxEvent, TraceProcessEvent,
CommEvent. ``CudaEvent`` field names (``startNs``, ``kernel.shortName``,
``memcpy.sizebytes``...) follow a public 2021 parser of this export and are not verified
against a real file with GPU work.

The stream has mixed record kinds, so it is read line by line (orjson) into column lists;
json exports are small next to SQLite ones, and the NVTX table is built in bulk at the end.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from pathlib import Path

import orjson

from ...errors import TraceFormatError
from ...ingest.nsys.raw import (
    KERNEL_SCHEMA,
    NVTX_SCHEMA,
    RUNTIME_SCHEMA,
    NsysRaw,
    ProcessInfo,
    check_time,
    frame,
)
from ...ingest.values import OutOfRange, check_int64, describe

_RUNTIME_CLASSES = {0, 1}  # ENUM_NSYS_EVENT_CLASS: CUDA runtime, CUDA driver


def _int(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, str) and len(v.strip().lstrip("+-").lstrip("0")) > 19:
        raise OutOfRange(f"{describe(v)} is outside 64-bit integers")  # (int() of it is slow)
    return check_int64(int(v), describe(v))  # type: ignore[arg-type]


def _time(v: object) -> int | None:
    """A timestamp: an integer within 95 years (:data:`~pipeline.ingest.nsys.raw.MAX_ABS_NS`)."""
    out = _int(v)
    return None if out is None else check_time(out, "timestamp")


def read(path: Path, lines: Iterable[bytes]) -> NsysRaw:
    """Parse the json export's ``lines``; a line that is not JSON is a TraceFormatError."""
    strings: list[str] = []
    nvtx: list[tuple] = []
    runtime: list[tuple] = []
    kernels: list[tuple] = []
    processes: dict[int, ProcessInfo] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(path, f"not a JSON line: {exc}", line=lineno) from None
        if not isinstance(rec, dict):
            raise TraceFormatError(path, "expected a JSON object per line", line=lineno)
        try:
            if "data" in rec and lineno == 1:
                strings = [str(s) for s in rec["data"]]
            elif "NvtxEvent" in rec:
                nvtx.append(_nvtx_row(rec["NvtxEvent"], strings))
            elif "TraceProcessEvent" in rec:
                ev = rec["TraceProcessEvent"]
                if ev.get("eventClass") in _RUNTIME_CLASSES:
                    runtime.append(_runtime_row(ev, strings))
            elif "CudaEvent" in rec:
                row = _cuda_row(rec["CudaEvent"], strings)
                if row is not None:
                    kernels.append(row)
            elif "CommEvent" in rec:
                _process(rec["CommEvent"], strings, processes)
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
            raise TraceFormatError(path, f"unexpected event shape: {exc!r}", line=lineno) from None
    if not strings:
        raise TraceFormatError(path, "not an Nsight Systems json export: no string table", line=1)
    return NsysRaw(
        kernels=frame(kernels, KERNEL_SCHEMA, "CUDA kernel events"),
        runtime=frame(runtime, RUNTIME_SCHEMA, "CUDA runtime events"),
        nvtx=frame(nvtx, NVTX_SCHEMA, "NVTX events"),
        processes=processes,
        format_version="json",
    )


def _string(strings: list[str], idx: object) -> str | None:
    if idx is None:
        return None
    i = int(idx)  # type: ignore[arg-type]
    return strings[i] if 0 <= i < len(strings) else None


def _nvtx_row(ev: dict, strings: list[str]) -> tuple:
    text = ev.get("Text")
    if text is None and "TextId" in ev:
        text = _string(strings, ev["TextId"])
    payload = None
    binary = (ev.get("Payload") or {}).get("BinaryData")
    if binary:
        try:
            payload = base64.b64decode(binary[0].get("Data", ""), validate=True)
        except (binascii.Error, ValueError):
            payload = None
    return (
        _time(ev.get("Timestamp")),
        _time(ev.get("EndTimestamp")),
        _int(ev.get("Type")),
        text,
        _int(ev.get("GlobalTid")),
        _int(ev.get("EndGlobalTid")),
        _int(ev.get("DomainId")) or 0,
        _int(ev.get("RangeId")),
        payload,
    )


def _runtime_row(ev: dict, strings: list[str]) -> tuple:
    return (
        _time(ev.get("startNs")),
        _time(ev.get("endNs")),
        _int(ev.get("eventClass")),
        _int(ev.get("globalTid")),
        _int(ev.get("correlationId")),
        _string(strings, ev.get("name")),
    )


def _cuda_row(ev: dict, strings: list[str]) -> tuple | None:
    if "kernel" in ev:
        k = ev["kernel"]
        activity, nbytes, kind = "kernel", None, None
        name = _string(strings, k.get("demangledName")) or _string(strings, k.get("shortName"))
        short = _string(strings, k.get("shortName"))
        dims = [_int(k.get(d)) for d in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")]
    elif "memcpy" in ev:
        m = ev["memcpy"]
        activity, name, short, dims = "memcpy", None, None, [None] * 6
        nbytes, kind = _int(m.get("sizebytes")), _int(m.get("copyKind"))
    elif "memset" in ev:
        activity, name, short, dims = "memset", None, None, [None] * 6
        nbytes, kind = _int(ev["memset"].get("sizebytes")), None
    else:
        return None
    return (
        _time(ev.get("startNs")),
        _time(ev.get("endNs")),
        _int(ev.get("deviceId")),
        _int(ev.get("streamId")),
        _int(ev.get("correlationId")),
        _int(ev.get("globalPid")),
        name,
        short,
        activity,
        nbytes,
        kind,
        *dims,
    )


def _process(ev: dict, strings: list[str], processes: dict[int, ProcessInfo]) -> None:
    gpid = _int(ev.get("GlobalPid"))
    if gpid is None:
        return
    env_text = _string(strings, ev.get("EnvironId")) or ""
    env = {}
    for item in env_text.split("\x00"):
        key, sep, value = item.partition("=")
        if sep:
            env[key] = value
    processes[(gpid >> 24) & 0xFFFFFF] = ProcessInfo(
        name=ev.get("Command"), args=[str(a) for a in ev.get("Args", [])], env=env
    )


def sniff_head(head: bytes) -> bool:
    """True when ``head`` starts like an nsys json export (string table, then events)."""
    text = head.lstrip()
    if not text.startswith(b'{"data":['):
        return False
    markers = (
        b'"NvtxEvent"',
        b'"TraceProcessEvent"',
        b'"CommEvent"',
        b'"CudaEvent"',
        b'"[Broken backtraces]"',
        b'"QnxKernelTrace"',
    )
    return any(m in text for m in markers)
