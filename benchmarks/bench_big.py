"""Ingest of big Kineto traces next to the typed-decode floor, side by side.

    python -m benchmarks.bench_big [--file-mb 87] [--repeats 3] [--keep DIR]

The floor is the least any Kineto ingest must do: decode each file with msgspec into typed
structs (``name``, ``cat``, ``ph``, ``ts``, ``dur``, ``pid``, ``tid``; ``args`` kept as raw
JSON), the files shared by two processes (one per core of the development machine), and
nothing else: no columns, no Parquet. tokenwire is ``ingest`` of the same files as a user
runs it (a worker per core once the input is 64 MB or more; parse, derive, write Parquet,
commit). Both are whole processes, imports included, run in turn ``--repeats`` times; the
median of each is compared (target: at most 1.5x), by wall time and by CPU time (user +
system of the whole process tree, steadier on a shared machine). Then the CPU time of each
stage of one file's ingest.

Sets: a 4-rank FSDP run recorded on CPU (``tests/data/cpu_gloo/fsdp4``) with each rank's
steps repeated to about ``--file-mb`` MB of JSON (:mod:`benchmarks.big_kineto`), written under
the system's temporary folder and deleted after; and the largest real Kineto traces of
``../shared/real_traces`` (the B200 and A100 ones), where present.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_floor import WRITE_PART, json_mb
from benchmarks.bench_kineto import HTA_LOAD
from benchmarks.big_kineto import write_big_run
from benchmarks.measure import REPO, Measurement, line, measure

#: The floor: msgspec's decode of every file into typed structs, in two processes.
FLOOR = """
import gzip, sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
import msgspec

class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: msgspec.Raw = msgspec.Raw(b"")

class Trace(msgspec.Struct):
    traceEvents: list[Event]

def decode(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\\x1f\\x8b":
        raw = gzip.decompress(raw)
    return len(msgspec.json.Decoder(Trace).decode(raw).traceEvents)

if __name__ == "__main__":
    with ProcessPoolExecutor(2, mp_context=get_context("fork")) as pool:
        print(sum(pool.map(decode, sorted(sys.argv[1:], key=lambda p: -os.path.getsize(p)))))
""".replace("import gzip, sys", "import gzip, os, sys")
#: A second floor, of parse-and-write: ``bench_floor.FLOOR``'s work (orjson, the events'
#: name, cat, ph, pid, tid, ts, dur and args as JSON text in one pyarrow table, zstd
#: Parquet) on each file, the files shared by two processes.
WRITE_FLOOR = (
    WRITE_PART
    + """
import os, sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

def write(task):
    i, path, out = task
    write_part(path, Path(out) / f"part-{i}.parquet")

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    files = sorted(sys.argv[2:], key=lambda p: -os.path.getsize(p))
    with ProcessPoolExecutor(2, mp_context=get_context("fork")) as pool:
        list(pool.map(write, [(i, p, out) for i, p in enumerate(files)]))
"""
)
#: ``tokenwire ingest`` as a user runs it: one worker per core once the input is large.
INGEST = """
import sys
from pipeline.ingest.run import ingest
errors = ingest(sys.argv[2:], sys.argv[1]).errors
sys.exit(1 if errors else 0)
"""
#: CPU time of each stage of one file's ingest (one Polars thread, as each of two workers
#: has), in one process: the decode alone first, then ``parse_file`` with its stages timed.
STAGES = """
import functools, json, shutil, sys, tempfile, time
from pathlib import Path
t0 = time.process_time()
import pipeline.ingest.run as run
import pipeline.ingest.kineto.parse as kp
from pipeline.ingest.kineto.stream import EventStream
imports = time.process_time() - t0
spent = {}
def timed(owner, name, stage):
    f = getattr(owner, name)
    @functools.wraps(f)
    def w(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            spent[stage] = spent.get(stage, 0) + time.process_time() - t
    setattr(owner, name, w)
timed(kp._Batches, "add", "frames")
timed(kp._Batches, "flush", "frames")
timed(kp, "_parse_read", "tables")
timed(run, "attribute_collectives", "derive")
timed(run, "add_time_breakdown", "derive")
timed(run, "_write_tables", "write")
path = Path(sys.argv[1])
t = time.process_time()
for _ in EventStream(path, kp.Event, kp.Trace):
    pass
decode = time.process_time() - t
with tempfile.TemporaryDirectory() as tmp:
    t = time.process_time()
    out = run.parse_file(path, "j", True, "0" * 64, Path(tmp), 0)
    whole = time.process_time() - t
assert out.status == "ingested", out.error
spent["decode"] = whole - sum(spent.values())
print(json.dumps({"imports": imports, "decode alone": decode, "parse_file": whole, **spent}))
"""
_STAGES = ("decode", "frames", "tables", "derive", "write")
#: What the target says, and its bound.
TARGET = 1.5


def compare(
    title: str,
    files: list[Path],
    work: Path,
    repeats: int,
    one_job: bool = True,
    hta: bool = False,
) -> float:
    """Floor and ingest of ``files`` (each a rank of one job when ``one_job``, else each a
    job of its own), in turn; the ratio of the medians. ``hta``: HTA's load of the same
    job folders too, once (it takes several times as long)."""
    folder = work / "in"
    shutil.rmtree(folder, ignore_errors=True)
    jobs = [folder] if one_job else [folder / f"job{i}" for i in range(len(files))]
    for i, f in enumerate(files):
        into = jobs[0] if one_job else jobs[i]
        into.mkdir(parents=True, exist_ok=True)
        (into / f.name).symlink_to(f.resolve())
    links = sorted(str(p) for p in folder.rglob("*.json*"))
    mb = sum(json_mb(f) for f in files)
    runs: dict[str, list[Measurement]] = {"floor": [], "write_floor": [], "tokenwire": []}
    for i in range(repeats):
        for key in runs:
            out = work / f"ds-{key}"
            shutil.rmtree(out, ignore_errors=True)
            if key == "floor":
                m = measure("typed decode, 2 processes", FLOOR, *links)
            elif key == "write_floor":
                m = measure("parse and write, 2 processes", WRITE_FLOOR, str(out), *links)
            else:
                m = measure("tokenwire ingest", INGEST, str(out), *map(str, jobs))
            shutil.rmtree(out, ignore_errors=True)
            runs[key].append(m)
            print(
                f"{line(m, mb)}  CPU {m.cpu_seconds:.2f} s  "
                f"[run {i + 1}/{repeats}, load {os.getloadavg()[0]:.1f}]",
                flush=True,
            )
    floor = statistics.median(m.seconds for m in runs["floor"])
    ours = statistics.median(m.seconds for m in runs["tokenwire"])
    ratio = ours / floor
    cpu = statistics.median(m.cpu_seconds or 0 for m in runs["tokenwire"]) / statistics.median(
        m.cpu_seconds or 0 for m in runs["floor"]
    )
    verdict = "met" if ratio <= TARGET else "NOT MET"
    written = statistics.median(m.seconds for m in runs["write_floor"])
    rss = statistics.median(m.peak_rss_mb for m in runs["tokenwire"])
    if hta:
        m = measure("HTA TraceAnalysis load", HTA_LOAD, *map(str, jobs), check=False)
        print(f"{line(m, mb)}  [once, load {os.getloadavg()[0]:.1f}]", flush=True)
        if m.ok:
            print(f"  HTA's load / tokenwire ingest: {m.seconds / ours:.1f}x", flush=True)
    print(
        f"== {title}: {len(files)} files, {mb:,.1f} MB of JSON: floor {floor:.2f} s, "
        f"tokenwire {ours:.2f} s (peak RSS {rss:,.0f} MB): "
        f"ingest / typed-decode floor {ratio:.2f}x (CPU {cpu:.2f}x), target <= {TARGET}x: "
        f"{verdict}; the parse-and-write floor / the typed-decode floor {written / floor:.2f}x, "
        f"tokenwire / the parse-and-write floor {ours / written:.2f}x",
        flush=True,
    )
    return ratio


def stages(files: list[Path]) -> None:
    """Print where each file's ingest spends its CPU time, stage by stage (see ``STAGES``)."""
    print("  CPU seconds per stage (1 Polars thread): decode = msgspec into the parser's "
          "structs, frames = columns from the structs, tables = steps, nesting, kernels, "
          "collectives, derive = attribution and time breakdown, write = Parquet")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "POLARS_MAX_THREADS": "1"}
    for f in files:
        done = subprocess.run(
            [sys.executable, "-c", STAGES, str(f)],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        t = json.loads(done.stdout.splitlines()[-1])
        parts = ", ".join(f"{k} {t[k]:.2f}" for k in _STAGES)
        print(f"    {f.name:<40} {parts}; all {t['parse_file']:.2f} (imports {t['imports']:.2f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file-mb", type=float, default=87.0, help="JSON per big rank file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="reuse (or write) the big files here")
    parser.add_argument("--quick", action="store_true", help="files of 8 MB, no HTA")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tw-big-") as tmp:
        work = Path(tmp)
        big = args.keep or work / "big"
        files = sorted(big.glob("*.json")) if big.is_dir() else []
        if not files:
            files = write_big_run(big, file_mb=8.0 if args.quick else args.file_mb)
        title = "4-rank FSDP run, steps repeated"
        compare(title, files, work, args.repeats, hta=not args.quick)
        stages(files[:1])
        real = REPO.parent / "shared" / "real_traces" / "kineto"
        largest = [
            real / "b200_rank0of8_eager.json.gz",
            real / "a100_rank0of2_nccl_metadata.json.gz",
        ]
        if all(p.is_file() for p in largest):
            compare("largest real Kineto traces", largest, work, args.repeats, one_job=False)
            stages(largest)
        else:
            print("== real traces: ../shared/real_traces is absent, skipped")


if __name__ == "__main__":
    main()
