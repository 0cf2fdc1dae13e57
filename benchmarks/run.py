"""``make bench``: every benchmark, each printing tokenwire next to its baseline.

``--quick`` (``make bench ARGS=--quick``) runs the same comparisons on smaller inputs.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import (
    bench_big,
    bench_floor,
    bench_kineto,
    bench_link,
    bench_memory,
    bench_nccl_log,
    bench_nsys,
    bench_page,
    bench_predict,
    bench_ranks,
)


def main() -> None:
    """Run all benchmarks in turn (full sizes unless --quick)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, a few minutes")
    args = parser.parse_args()
    bench_kineto.main(["--quick"] if args.quick else [])
    bench_big.main(["--quick"] if args.quick else [])
    sys.argv = ["bench_nccl_log", "--size-mb", "100" if args.quick else "500"]
    bench_nccl_log.main()
    sys.argv = ["bench_nsys", "--kernels", "200000" if args.quick else "2000000"]
    bench_nsys.main()
    sys.argv = ["bench_link", "--events", "2000000" if args.quick else "20000000"]
    bench_link.main()
    sys.argv = ["bench_link", "--many-ranks", "1024" if args.quick else "16384"]
    bench_link.main()
    bench_page.main(["--ranks", "1024" if args.quick else "16384"])
    bench_ranks.main(["--quick"] if args.quick else [])
    bench_ranks.main(["--scale-ranks", "1024" if args.quick else "16384"])
    bench_floor.main(["--copies", "4"] if args.quick else [])
    bench_memory.main(["--file-mb", "10", "--counts", "2,8"] if args.quick else [])
    if not args.quick:  # (a trace of 1 GB or more: the memory target's own size)
        bench_memory.main(["--big-mb", "1050"])
    bench_predict.main(["--list-max", "16384"] if args.quick else [])


if __name__ == "__main__":
    main()
