"""``nsys-jax`` archives (NVIDIA JAX-Toolbox): ``sniff`` and ``parse``.

``nsys-jax`` runs a JAX program under Nsight Systems and zips what its analysis needs:
``nvtx_gpu_proj_trace/trace.parquet`` (every NVTX push/pop range with its host time and its
time projected onto the GPU work it launched), ``device-metadata.parquet`` and
``system-metadata.parquet`` (the GPU, the host), and XLA's HLO dumps (``dump/``). XLA names
its ranges after what runs: ``TSL:XlaModule:#hlo_module=<module>,program_id=<id>#`` for one
execution of a compiled module, ``TSL:Thunk:#...hlo_op=<instruction>#`` for each
instruction inside it, ``NCCL:ncclGroupEnd`` for NCCL's launch. Column names follow
JAX-Toolbox's ``nsys_jax`` package (``.github/container/nsys_jax``).

The archive is read in memory (:mod:`pipeline.ingest.nsys_jax.archive`), never extracted.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import TraceFormatError
from ...ingest.nsys_jax import tables
from ...ingest.nsys_jax.archive import Archive, Folder
from ...ingest.nsys_jax.hlo import HloError, instructions
from ...ingest.result import ParseResult

FORMAT = "nsys_jax"
TRACE = "nvtx_gpu_proj_trace/trace.parquet"
ZIP_MAGIC = b"PK\x03\x04"
PARQUET_MAGIC = b"PAR1"
#: The projected trace's columns tokenwire reads.
TRACE_COLUMNS = {
    "Name": pl.String,
    "Projected Start": pl.Int64,
    "Projected Duration": pl.Int64,
    "Orig Start": pl.Float64,
    "Orig Duration": pl.Float64,
    "PID": pl.Int64,
    "TID": pl.Int64,
    "Lvl": pl.Float64,
    "RangeId": pl.Float64,
    "ParentId": pl.Float64,
    "RangeStack": pl.String,
}
_DEVICE_NAME = "('TARGET_INFO_NVTX_CUDA_DEVICE', 'name')"
_GPU_NAME = "('TARGET_INFO_GPU', 'name')"
_XLA_DEVICE = re.compile(r"global=(\d+),local=(\d+)")


def sniff(path: Path, head: bytes) -> bool:
    """True when ``path`` is a zip archive holding an ``nsys-jax`` projected NVTX trace, or
    a damaged zip whose first entries are an archive's (parse then says what is wrong), or
    the projected trace of an extracted archive."""
    if head.startswith(PARQUET_MAGIC):
        return _extracted(Path(path))
    if not head.startswith(ZIP_MAGIC):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return any(info.filename == TRACE for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return any(name in head for name in (TRACE.encode(), b"dump/module_0"))


def parse(path: Path) -> ParseResult:
    """Parse one ``nsys-jax`` archive into collectives, ops, steps, ranks and
    communicators (one rank: the archive of one JAX process)."""
    path = Path(path)
    result = ParseResult(format=FORMAT, format_version="nsys-jax archive")
    if _extracted(path):
        result.format_version = "nsys-jax archive, extracted"
    opened = Folder(path.parents[1], path) if _extracted(path) else Archive(path)
    with opened as archive:
        trace = _trace(path, archive.read(TRACE))
        device = _metadata(archive, "device-metadata.parquet")
        system = _metadata(archive, "system-metadata.parquet")
        rank, local_rank = _rank(path, device, result)
        found = tables.Found(
            trace=trace,
            rank=rank,
            local_rank=local_rank,
            host=_system_value(system, "Hostname"),
            gpu_name=_first(device, _GPU_NAME),
        )
        modules = tables.collective_modules(found)
        found.hlo = _hlo_sizes(path, archive, modules, rank, result)
    result.tables = tables.build(found, result.warnings)
    return result


def _extracted(path: Path) -> bool:
    """``path`` is ``<archive folder>/nvtx_gpu_proj_trace/trace.parquet``."""
    return path.as_posix().endswith("/" + TRACE)


def _parquet(path: Path, name: str, data: bytes) -> pl.DataFrame:
    """A Parquet member as a frame. Read with pyarrow, which reports damaged data as an
    error where Polars' reader can panic."""
    try:
        table = pq.read_table(io.BytesIO(data))
        # (only the columns go to Polars: metadata of damaged bytes can make it panic)
        return pl.from_arrow(pa.Table.from_arrays(table.columns, names=table.column_names))
    except (
        pa.ArrowException,
        OSError,
        ValueError,
        pl.exceptions.PolarsError,
        pl.exceptions.PanicException,
    ) as exc:
        raise TraceFormatError(path, f"{name}: not a readable Parquet file: {exc}") from None


def _trace(path: Path, data: bytes) -> pl.DataFrame:
    frame = _parquet(path, TRACE, data)
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceFormatError(path, f"{TRACE}: no column {missing[0]!r}")
    try:
        return frame.select([pl.col(c).cast(t) for c, t in TRACE_COLUMNS.items()])
    except pl.exceptions.PolarsError as exc:
        raise TraceFormatError(path, f"{TRACE}: a column of the wrong type: {exc}") from None


def _metadata(archive: Archive | Folder, name: str) -> pl.DataFrame | None:
    if name not in archive.members:
        return None
    return _parquet(archive.path, name, archive.read(name))


def _first(frame: pl.DataFrame | None, column: str) -> str | None:
    if frame is None or column not in frame.columns or frame.is_empty():
        return None
    value = frame.get_column(column)[0]
    return value if isinstance(value, str) else None


def _system_value(system: pl.DataFrame | None, name: str) -> str | None:
    if system is None or not {"name", "value"} <= set(system.columns):
        return None
    rows = system.filter(pl.col("name") == name).get_column("value")
    return rows[0] if rows.len() and isinstance(rows[0], str) else None


def _rank(path: Path, device: pl.DataFrame | None, result: ParseResult) -> tuple[int, int | None]:
    """The process's rank: the global id XLA gives its GPU in the NVTX device name
    (``Xla:#global=2,local=2,process=2,slice=0#``); the trace's own ``Rank`` column is 0 in
    every archive (``nsys-jax-combine`` numbers them)."""
    names = (
        []
        if device is None or _DEVICE_NAME not in device.columns
        else device.get_column(_DEVICE_NAME).to_list()
    )
    found = [m for m in (_XLA_DEVICE.search(n) for n in names if isinstance(n, str)) if m]
    if not found:
        result.rank_source = "none"
        result.warnings.add("no XLA device name in device-metadata.parquet: the rank is 0")
        return 0, None
    if len(found) > 1:
        result.warnings.add(
            f"the process drove {len(found)} GPUs: its ranges are given to the first, "
            f"global device {found[0].group(1)}"
        )
    result.rank_source = "xla_device"
    return int(found[0].group(1)), int(found[0].group(2))


def _hlo_sizes(
    path: Path,
    archive: Archive | Folder,
    modules: list[tuple[str, int]],
    rank: int,
    result: ParseResult,
) -> pl.DataFrame:
    """The collectives' sizes and replica groups from the HLO dump of each module that ran
    some (module, program_id), as :func:`tables.instruction_sizes` gives them."""
    frames = []
    for module, program_id in modules:  # (a job runs a few modules)
        member = _dump_member(archive, module, program_id)
        if member is None:
            result.warnings.add(f"no HLO dump of module {module}: its collectives have no size")
            continue
        try:  # (shapes are decoded as the sizes are worked out)
            found = list(instructions(archive.read(member)))
            frames.append(tables.instruction_sizes(found, module, program_id, rank))
        except HloError as exc:
            raise TraceFormatError(path, f"{member}: not a readable HLO dump: {exc}") from None
    return pl.concat(frames) if frames else tables.instruction_sizes([], "", 0)


def _dump_member(archive: Archive | Folder, module: str, program_id: int) -> str | None:
    prefix = f"dump/module_{program_id:04d}.{module}."
    names = sorted(
        n
        for n in archive.members
        if n.startswith(prefix) and n.endswith("after_optimizations.hlo.pb.xz")
    )
    return names[0] if names else None
