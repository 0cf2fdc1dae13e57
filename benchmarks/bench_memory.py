"""Ingest's memory follows the largest file, not the job: peak RSS of ``ingest --jobs 1`` on
jobs of more and more rank files of the same size, next to the JSON size of the largest file
and a fixed base (the same command on one small file: the interpreter, its imports, the
dataset's write).

    python -m benchmarks.bench_memory [--trace FILE | --file-mb 40] [--counts 4,16,64]
    python -m benchmarks.bench_memory --big-mb 1050   # one trace of 1 GB or more


The rank files are copies of one trace (default: a generated one-rank GPT job of
``--file-mb`` MB, ``pipeline.synth``), each under a rank of its own. A bound holds when
``(peak - base) / the file's JSON`` stays the same as the job grows, and at most 1.5. The
floor of benchmarks/bench_floor.py (orjson, pyarrow) runs on the smallest job beside it,
its base measured the same way.

``--big-mb N`` measures instead one generated one-rank trace of about N MB (issue target: for
a trace of 1 GB or more, the whole ingest's peak RSS at most the file's size), ingested by
``tokenwire ingest`` (the command line) as a user runs it, beside the same command on the
small sample trace; the file is written under the system's temporary folder and deleted
after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from benchmarks.bench_floor import FLOOR, INGEST, json_mb, many_small
from benchmarks.measure import REPO, measure


def _generated_trace(out: Path, file_mb: int) -> Path:
    from pipeline.synth.__main__ import main as synth

    synth([str(out), "--tp", "1", "--pp", "1", "--dp", "1", "--target-mb", str(file_mb)])
    return next(out.glob("*.json"))


#: ``tokenwire ingest`` of one folder as a user runs it: the command line, which sets the
#: allocators before Polars loads (pipeline/allocators.py), and the worker count it picks.
INGEST_DEFAULT = """
import sys
from pipeline.cli import cli
cli(["ingest", sys.argv[1], "-o", sys.argv[2]])
"""
#: Peak RSS of a 1 GB+ trace's ingest / the file's size: at most this.
BIG_TARGET = 1.0


def big_trace(file_mb: int, repeats: int = 2) -> None:
    """Peak RSS of the ingest of one generated trace of about ``file_mb`` MB, next to its
    size (median of ``repeats`` runs), and the same command on the small sample trace: the
    interpreter and its libraries, what no trace's size changes."""
    small = next(iter(sorted((REPO / "sample_traces").glob("rank0.*.json*"))))
    with tempfile.TemporaryDirectory(prefix="tw-memory-big-") as tmp:
        work = Path(tmp)
        base_in = many_small([small], 1, work / "base")
        base = measure("ingest of the sample trace", INGEST_DEFAULT, str(base_in),
                       str(work / "base-ds"))  # fmt: skip
        print(f"  the same command on the sample trace ({json_mb(small):.2f} MB): "
              f"peak RSS {base.peak_rss_mb * 2**20 / 1e6:,.0f} MB", flush=True)  # fmt: skip
        trace = _generated_trace(work / "generated", file_mb)
        size = trace.stat().st_size
        runs = []
        for i in range(repeats):
            m = measure("ingest of one big trace", INGEST_DEFAULT, str(trace.parent),
                        str(work / f"ds{i}"))  # fmt: skip
            shutil.rmtree(work / f"ds{i}", ignore_errors=True)
            runs.append(m)
            print(f"  run {i + 1}: peak RSS {m.peak_rss_mb * 2**20 / 1e6:,.0f} MB, "
                  f"{m.seconds:.1f} s, CPU {m.cpu_seconds or 0:.1f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
        peak = sorted(m.peak_rss_mb for m in runs)[(len(runs) - 1) // 2] * 2**20
        ratio = peak / size
        verdict = "met" if ratio <= BIG_TARGET else "NOT MET"
        print(
            f"== ingest of one {size / 1e6:,.0f} MB trace: peak RSS {peak / 1e6:,.0f} MB, "
            f"{ratio:.2f}x the file, target <= {BIG_TARGET}x: {verdict}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="the Kineto trace every rank file copies")
    parser.add_argument("--file-mb", type=int, default=40, help="size of the generated trace")
    parser.add_argument("--counts", default="4,16,64", help="rank files per job, comma-separated")
    parser.add_argument("--big-mb", type=int, help="one generated trace of this size instead")
    args = parser.parse_args(argv)
    if args.big_mb:
        big_trace(args.big_mb)
        return
    small = next(iter(sorted((REPO / "sample_traces").glob("rank0.*.json*"))))
    with tempfile.TemporaryDirectory(prefix="tw-memory-") as tmp:
        work = Path(tmp)
        trace = args.trace or _generated_trace(work / "generated", args.file_mb)
        file_mb = json_mb(trace)
        base_in = many_small([small], 1, work / "base")
        base = measure("ingest of one small file", INGEST, str(base_in), str(work / "base-ds"))
        print(f"== ingest --jobs 1 memory: copies of {trace.name} ({file_mb:.1f} MB of JSON)")
        print(f"  base (one {json_mb(small):.2f} MB file): peak RSS {base.peak_rss_mb:,.0f} MB")
        floor_base = measure("floor, one small file", FLOOR, str(base_in), str(work / "fb"))
        count0 = int(args.counts.split(",")[0])
        first = many_small([trace], count0, work / "floor-job")
        floor = measure("floor", FLOOR, str(first), str(work / "floor-out"))
        print(
            f"  the floor, {count0} files: (peak - its base) / largest file "
            f"x{(floor.peak_rss_mb - floor_base.peak_rss_mb) / file_mb:.2f}"
        )
        for count in (int(c) for c in args.counts.split(",")):
            folder = many_small([trace], count, work / f"job{count}")
            m = measure(f"ingest of {count} files", INGEST, str(folder), str(work / f"ds{count}"))
            over = (m.peak_rss_mb - base.peak_rss_mb) / file_mb
            print(
                f"  {count:5d} files ({count * file_mb:8,.1f} MB): "
                f"peak RSS {m.peak_rss_mb:7,.0f} MB, (peak - base) / largest file x{over:.2f}, "
                f"{m.seconds:6.1f} s"
            )


if __name__ == "__main__":
    main()
