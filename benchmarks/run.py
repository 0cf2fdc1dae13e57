"""``make bench``: every benchmark, each printing tokenwire next to its baseline."""

from __future__ import annotations

import sys

from benchmarks import bench_kineto, bench_link, bench_nccl_log, bench_nsys


def main() -> None:
    """Run all benchmarks in turn, each with its default (full) sizes."""
    for bench in (bench_kineto, bench_nccl_log, bench_nsys, bench_link):
        sys.argv = [bench.__name__]
        bench.main()


if __name__ == "__main__":
    main()
