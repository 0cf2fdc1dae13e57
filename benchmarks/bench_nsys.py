"""Benchmark: parse an Nsight SQLite export of >= 2 million kernels, next to a plain SELECT.

Run: ``python -m benchmarks.bench_nsys [--kernels N]``. Generates the export in a temporary
folder (``pipeline.synth.nsys``: 8 ranks, one runtime call per kernel, NVTX ranges per
layer, one NCCL all-reduce per layer), then times, in the same run:

- ``SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL`` fetched into a Python list (the floor any
  sqlite3-based reader pays), and
- ``pipeline.ingest.nsys.parse.parse`` of the whole file (kernels, memcpys, runtime calls, NVTX,
  nesting, ranks, collectives),

and prints rows per second for both and their ratio.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from pipeline.ingest.nsys import parse as nsys
from pipeline.synth.nsys import Layout, write_export


def run(kernels: int) -> dict[str, float]:
    """Generate, time both readers, return the measurements."""
    ranks = list(range(8))
    gemms = 500
    layers = 50
    steps = max(1, -(-kernels // (len(ranks) * layers * (gemms + 1))))
    layout = Layout(steps=steps, layers=layers, gemms_per_layer=gemms)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sqlite"
        t0 = time.perf_counter()
        write_export(path, ranks=ranks, layout=layout)
        gen_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        con = sqlite3.connect(path)
        rows = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        con.close()
        select_s = time.perf_counter() - t0
        n = len(rows)
        del rows

        t0 = time.perf_counter()
        result = nsys.parse(path)
        parse_s = time.perf_counter() - t0
        assert result.tables["kernels"].num_rows == n
        size_mb = path.stat().st_size / 1e6
    return {
        "kernels": n,
        "file_mb": size_mb,
        "generate_s": gen_s,
        "select_s": select_s,
        "parse_s": parse_s,
    }


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=2_000_000)
    args = parser.parse_args()
    m = run(args.kernels)
    n = m["kernels"]
    print(
        f"nsys export: {n:,} kernels ({m['file_mb']:.0f} MB, generated in {m['generate_s']:.1f} s)"
    )
    print(f"  SELECT * into a list : {m['select_s']:6.2f} s  {n / m['select_s']:>12,.0f} rows/s")
    print(f"  nsys.parse (all)     : {m['parse_s']:6.2f} s  {n / m['parse_s']:>12,.0f} kernels/s")
    print(f"  parse / select time  : {m['parse_s'] / m['select_s']:.2f}x")


if __name__ == "__main__":
    main()
