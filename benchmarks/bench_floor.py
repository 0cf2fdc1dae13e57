"""Ingest of real profiler traces next to the floor of its own work, whole processes with
their imports: a plain script that gzip-decompresses each file, parses it with ``orjson``,
builds one pyarrow table of every event's name, cat, ph, ts, dur, pid, tid and args (as JSON
text) with list comprehensions and writes it as zstd Parquet, one part per file.

    python -m benchmarks.bench_floor [--traces DIR] [--copies N] [--cpu]

Two sets: the traces as they are (``--traces``: few big files; default the public Kineto
traces beside the repository, else the sample job), and many small files (the 8 DLRM ranks
of the public traces, else the first 8 traces, copied ``--copies`` times,
``distributedInfo.rank`` rewritten so each copy is a rank of its own). tokenwire runs
``ingest --jobs 1``; each step is the median of 3 runs.

``--cpu`` measures the work alone instead, steadier on a shared machine: in one process,
imports and a first warm-up round excluded, the CPU time (user + system, every thread) of
the floor's loop and of ``ingest([folder], out, jobs=1)`` per file, best of 3 rounds, the
two alternating.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.measure import REPO, line, measure, median_run

PUBLIC = REPO.parent / "shared" / "real_traces" / "kineto"

#: The floor's work on one file: orjson, the events' name, cat, ph, pid, tid, ts, dur and
#: args as JSON text in one pyarrow table, written as zstd Parquet.
WRITE_PART = """
import gzip
from pathlib import Path
import orjson, pyarrow as pa, pyarrow.parquet as pq

def write_part(path, part):
    raw = Path(path).read_bytes()
    events = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw)
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    cols = {k: [e.get(k) for e in events] for k in ("name", "cat", "ph", "pid", "tid")}
    cols = {k: [None if v is None else str(v) for v in vs] for k, vs in cols.items()}
    cols["ts"] = [float(e["ts"]) if "ts" in e else None for e in events]
    cols["dur"] = [float(e["dur"]) if "dur" in e else None for e in events]
    cols["args"] = [orjson.dumps(e["args"]).decode() if "args" in e else None for e in events]
    pq.write_table(pa.table(cols), part, compression="zstd")
"""

#: The floor: everything a Kineto ingest must do at the least, written plainly.
FLOOR = (
    WRITE_PART
    + """
import sys
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
for i, path in enumerate(sorted(Path(sys.argv[1]).rglob("*.json*"))):
    write_part(path, out / f"part-{i}.parquet")
"""
)

INGEST = """
import sys
from pipeline.ingest.run import ingest
summary = ingest([sys.argv[1]], sys.argv[2], jobs=1)
"""

#: CPU time of the work alone: FLOOR's loop and ingest, in one process, best of 3 rounds.
CPU = """
import json, shutil, sys, time
from pathlib import Path
from pipeline.ingest.run import ingest
floor_code = compile(sys.argv[3], "floor", "exec")
def floor(src, out):
    sys.argv[1:3] = [src, out]
    exec(floor_code, {"__name__": "floor"})
def ours(src, out):
    ingest([src], out, jobs=1)
src, work = sys.argv[1], Path(sys.argv[2])
best = {}
for k in range(4):  # (round 0 warms up: the first call's imports and caches)
    for label, run in (("floor", floor), ("tokenwire", ours)):
        out = work / f"cpu-{label}-{k}"
        start = time.process_time()
        run(src, str(out))
        took = time.process_time() - start
        shutil.rmtree(out, ignore_errors=True)
        if k:
            best[label] = min(best.get(label, took), took)
print(json.dumps(best))
"""

_RANK = re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*)\d+')


def many_small(traces: list[Path], copies: int, out: Path) -> Path:
    """``copies`` x len(traces) rank files: each trace again under a new rank."""
    out.mkdir(parents=True)
    rank = 0
    for _ in range(copies):
        for path in traces:
            raw = path.read_bytes()
            text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
            text = _RANK.sub(lambda m, r=rank: m.group(1) + str(r).encode(), text, count=1)
            (out / f"rank{rank:05d}.pt.trace.json.gz").write_bytes(gzip.compress(text, 1))
            rank += 1
    return out


def json_mb(path: Path) -> float:
    """MB of JSON in one trace file, gzipped or not."""
    raw = path.read_bytes()
    return len(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw) / 1e6


def _folder_json_mb(folder: Path) -> float:
    return sum(json_mb(path) for path in folder.rglob("*.json*"))


def compare(title: str, traces: Path, work: Path) -> str:
    """The floor and tokenwire's ingest on ``traces``, each the median of 3 runs."""
    runs = {"floor": [], "tokenwire": []}
    for k in range(3):
        for label, code in (("floor", FLOOR), ("tokenwire", INGEST)):
            out = work / f"{label}-{k}"
            runs[label].append(measure(f"{label} ({title})", code, str(traces), str(out)))
            shutil.rmtree(out, ignore_errors=True)
    floor, ours = median_run(runs["floor"]), median_run(runs["tokenwire"])
    mb = _folder_json_mb(traces)
    return "\n".join([
        f"== ingest --jobs 1, {title}: {mb:,.1f} MB of JSON",
        line(floor, mb),
        line(ours, mb),
        f"  ratio tokenwire/floor: time x{ours.seconds / floor.seconds:.2f}, "
        f"peak RSS x{ours.peak_rss_mb / floor.peak_rss_mb:.2f}",
    ])  # fmt: skip


def compare_cpu(title: str, traces: Path, work: Path) -> str:
    """CPU time per file of the floor and of tokenwire's ingest on ``traces`` (see ``CPU``)."""
    files = len(list(traces.rglob("*.json*")))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CPU, str(traces), str(work), FLOOR],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    best = json.loads(done.stdout.splitlines()[-1])
    floor, ours = (best[k] / files * 1e3 for k in ("floor", "tokenwire"))
    return (
        f"== CPU time per file, {title}, best of 3: floor {floor:.1f} ms, "
        f"tokenwire {ours:.1f} ms, ratio x{ours / floor:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, help="a folder of Kineto traces")
    parser.add_argument("--copies", type=int, default=32, help="copies of 8 traces")
    parser.add_argument("--cpu", action="store_true", help="CPU time of the work alone")
    args = parser.parse_args(argv)
    run = compare_cpu if args.cpu else compare
    traces = args.traces or (PUBLIC if PUBLIC.is_dir() else REPO / "sample_traces")
    files = sorted(p for p in traces.rglob("*.json*") if "trace" in p.name)
    with tempfile.TemporaryDirectory(prefix="tw-floor-") as tmp:
        work = Path(tmp)
        print(run(f"{len(files)} files of {traces.name}", traces, work), flush=True)
        dlrm = sorted((PUBLIC / "dlrm_v100_8ranks").glob("*.json*"))
        small = many_small(dlrm if not args.traces and dlrm else files[:8], args.copies,
                           work / "small")  # fmt: skip
        print(run(f"{8 * args.copies} rank files", small, work), flush=True)


if __name__ == "__main__":
    main()
