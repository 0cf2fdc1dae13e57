"""rocprofiler-sdk JSON (``rocprofv3 --output-format json``): ``sniff`` and ``parse``.

The file is one object, ``{"rocprofiler-sdk-tool": [<process>, ...]}``, each process with
its ``metadata`` (pid, host), ``agents`` (CPUs and GPUs), ``kernel_symbols``, the names of
every record kind and operation (``strings``) and the ``buffer_records`` the tool traced:
``kernel_dispatch`` (a kernel on a GPU queue, launched by a host thread), ``marker_api``
(ROCTx ranges and marks, their messages in ``strings.marker_api``) and ``rccl_api`` (RCCL
calls). Field names follow rocprofiler-sdk's ``buffer_tracing.h`` and its JSON writer
(ROCm/rocprofiler-sdk, ``source/lib/output/generateJSON.cpp``).

Times are the tool's nanosecond clock (not Unix time), the same for every process of a host.
A file names no rank: it is taken from the file name (``rank3``), else the index of the GPU
the process dispatched to (a warning says so).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from ...errors import TraceFormatError
from ...ingest.gz import GZIP_MAGIC, gunzip
from ...ingest.result import ParseResult
from ...ingest.rocprof import records, tables
from ...ingest.values import rank_from_file_name

FORMAT = "rocprof"
TOOL_KEY = b'"rocprofiler-sdk-tool"'


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` (the first 64 KiB, gunzipped) opens a rocprofiler-sdk JSON file."""
    start = head.lstrip()
    return start.startswith(b"{") and start[1:].lstrip().startswith(TOOL_KEY)


def parse(path: Path) -> ParseResult:
    """Parse one rocprofv3 JSON file into kernels, collectives, ops, steps and ranks."""
    path = Path(path)
    processes = _processes(path, _load(path))
    result = ParseResult(format=FORMAT, format_version="rocprofiler-sdk json")
    named = rank_from_file_name(path.name)
    frames = [records.read(path, i, proc) for i, proc in enumerate(processes)]
    if named is not None and len(frames) > 1:
        raise TraceFormatError(
            path, f"the name says rank {named}, but the file holds {len(frames)} processes"
        )
    result.tables = tables.build(frames, named, result.warnings)
    result.rank_source = "file_name" if named is not None else "gpu_index"
    if named is None:
        result.warnings.add(
            "the file names no rank: the rank is the index of the GPU the process used "
            "(name the file rank<N>.json to give it)"
        )
    return result


def _load(path: Path) -> object:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from None
    data = gunzip(path, raw) if raw.startswith(GZIP_MAGIC) else raw
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(path, f"not valid JSON: {exc.msg}", offset=exc.pos) from None


def _processes(path: Path, data: object) -> list[dict]:
    procs = data.get("rocprofiler-sdk-tool") if isinstance(data, dict) else None
    if not isinstance(procs, list) or not procs:
        raise TraceFormatError(path, "no process in 'rocprofiler-sdk-tool' (a non-empty list)")
    bad = next((i for i, p in enumerate(procs) if not isinstance(p, dict)), None)
    if bad is not None:
        raise TraceFormatError(path, f"rocprofiler-sdk-tool[{bad}] is not an object")
    return procs
