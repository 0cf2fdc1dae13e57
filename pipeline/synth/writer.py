"""Writing a synthetic job's traces to a folder, deterministically (plain JSON or gzip)."""

from __future__ import annotations

import gzip
from pathlib import Path

from ..synth.job import JobSpec, job_traces

TRACE_GLOB = "rank*.pt.trace.json*"


def write_job(spec: JobSpec, out_dir: Path, *, use_gzip: bool = False) -> list[Path]:
    """Write one trace per rank into ``out_dir``; earlier ``rank*.pt.trace.json*`` files there
    are removed first (other files, such as ``job.yaml``, are left alone). Returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(TRACE_GLOB):
        old.unlink()
    written: list[Path] = []
    for name, text in job_traces(spec).items():
        data = text.encode()
        if use_gzip:
            path = out_dir / (name + ".gz")
            # mtime=0 and no file name in the header: the bytes depend on the content only
            path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        else:
            path = out_dir / name
            path.write_bytes(data)
        written.append(path)
    return written
