"""Writing a trace file: the JSON object Chrome's trace viewer and Perfetto read, plain or
gzipped (by the name's ``.gz``), whole or not at all (:func:`pipeline.output.atomic_output`).

The events are already JSON text (:mod:`pipeline.export.events`); they are joined in batches
into the ``traceEvents`` array, so the file is never held twice in memory.
"""

from __future__ import annotations

import contextlib
import gzip
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from ..output import atomic_output

#: Events joined per write.
BATCH = 200_000


def write_trace(output: Path, lines: pl.Series, other: dict[str, Any]) -> int:
    """Write ``{"traceEvents": [...lines], "displayTimeUnit": "ns", "otherData": other}`` to
    ``output``; its size in bytes.

    Raises
    ------
    OutputError
        ``output`` cannot be written (a folder, a missing folder, a full disk).
    """
    output = Path(output)
    with atomic_output(output) as tmp, open(tmp, "wb") as raw:
        # (gzip's header names the file inside: the output's, not the temporary one's)
        inner = output.name.removesuffix(".gz")
        zipped = output.name.endswith(".gz")
        with (
            gzip.GzipFile(inner, "wb", fileobj=raw) if zipped else contextlib.nullcontext(raw) as f
        ):
            f.write(b'{"traceEvents":[\n')
            for start in range(0, lines.len(), BATCH):
                if start:
                    f.write(b",\n")
                f.write(lines.slice(start, BATCH).str.join(",\n").item().encode())
            f.write(b'\n],"displayTimeUnit":"ns","otherData":')
            f.write(orjson.dumps(other))
            f.write(b"}\n")
    return output.stat().st_size
