"""``make bench``: every benchmark, each printing tokenwire next to its baseline."""

from __future__ import annotations

import sys

from benchmarks import bench_kineto


def main() -> None:
    """Run all benchmarks in turn."""
    sys.argv = sys.argv[:1]
    bench_kineto.main()


if __name__ == "__main__":
    main()
