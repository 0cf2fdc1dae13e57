"""Ingest of big Kineto traces next to the typed-decode floor, side by side.

    python -m benchmarks.bench_big [--file-mb 87] [--repeats 3] [--keep DIR]

The floor is the least any Kineto ingest must do: decode each file with msgspec into typed
structs (``name``, ``cat``, ``ph``, ``ts``, ``dur``, ``pid``, ``tid``; ``args`` kept as raw
JSON), the files shared by two processes (one per core of the development machine), and
nothing else: no columns, no Parquet. tokenwire is ``ingest --jobs 2`` of the same files (parse,
derive, write Parquet, commit). Both are whole processes, imports included, run alternately
``--repeats`` times; the median of each is compared (target: at most 1.5x).

Sets: a 4-rank FSDP run recorded on CPU (``tests/data/cpu_gloo/fsdp4``) with each rank's
steps repeated to about ``--file-mb`` MB of JSON (:mod:`benchmarks.big_kineto`), written under
the system's temporary folder and deleted after; and the largest real Kineto traces of
``../shared/real_traces`` (the B200 and A100 ones), where present.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.bench_floor import json_mb
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
INGEST = """
import sys
from pipeline.ingest.run import ingest
errors = ingest(sys.argv[2:], sys.argv[1], jobs=2).errors
sys.exit(1 if errors else 0)
"""
#: What the target says, and its bound.
TARGET = 1.5


def compare(title: str, files: list[Path], work: Path, repeats: int, one_job: bool = True) -> float:
    """Floor and ingest of ``files`` (each a rank of one job when ``one_job``, else each a
    job of its own), alternately; the ratio of the medians."""
    folder = work / "in"
    shutil.rmtree(folder, ignore_errors=True)
    jobs = [folder] if one_job else [folder / f"job{i}" for i in range(len(files))]
    for i, f in enumerate(files):
        into = jobs[0] if one_job else jobs[i]
        into.mkdir(parents=True, exist_ok=True)
        (into / f.name).symlink_to(f.resolve())
    links = sorted(str(p) for p in folder.rglob("*.json*"))
    mb = sum(json_mb(f) for f in files)
    runs: dict[str, list[Measurement]] = {"floor": [], "tokenwire": []}
    for i in range(repeats):
        for key in runs:
            out = work / f"ds-{key}"
            shutil.rmtree(out, ignore_errors=True)
            if key == "floor":
                m = measure("typed decode, 2 processes", FLOOR, *links)
            else:
                m = measure("tokenwire ingest --jobs 2", INGEST, str(out), *map(str, jobs))
            shutil.rmtree(out, ignore_errors=True)
            runs[key].append(m)
            print(f"{line(m, mb)}  [run {i + 1}/{repeats}, load {os.getloadavg()[0]:.1f}]")
    floor = statistics.median(m.seconds for m in runs["floor"])
    ours = statistics.median(m.seconds for m in runs["tokenwire"])
    ratio = ours / floor
    verdict = "met" if ratio <= TARGET else "NOT MET"
    rss = statistics.median(m.peak_rss_mb for m in runs["tokenwire"])
    print(
        f"== {title}: {len(files)} files, {mb:,.1f} MB of JSON: floor {floor:.2f} s, "
        f"tokenwire {ours:.2f} s (peak RSS {rss:,.0f} MB): "
        f"ingest / typed-decode floor {ratio:.2f}x, target <= {TARGET}x: {verdict}",
        flush=True,
    )
    return ratio


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file-mb", type=float, default=87.0, help="JSON per big rank file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="reuse (or write) the big files here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tw-big-") as tmp:
        work = Path(tmp)
        big = args.keep or work / "big"
        files = sorted(big.glob("*.json")) if big.is_dir() else []
        if not files:
            files = write_big_run(big, file_mb=args.file_mb)
        compare("4-rank FSDP run, steps repeated", files, work, args.repeats)
        real = REPO.parent / "shared" / "real_traces" / "kineto"
        largest = [
            real / "b200_rank0of8_eager.json.gz",
            real / "a100_rank0of2_nccl_metadata.json.gz",
        ]
        if all(p.is_file() for p in largest):
            compare("largest real Kineto traces", largest, work, args.repeats, one_job=False)
        else:
            print("== real traces: ../shared/real_traces is absent, skipped")


if __name__ == "__main__":
    main()
