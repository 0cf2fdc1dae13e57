"""Benchmark: parse a generated NCCL debug log and compare with ``wc -l`` on the same file.

Usage: ``python -m benchmarks.bench_nccl_log [--size-mb 1000] [--keep]``. The log is 8 ranks
of a 2.2x job interleaved on one stdout (OpenMPI tags, Init lines, ring/tree/connection lines,
then per-step AllReduce / AllGather / ReduceScatter / Send / Recv COLL lines with TUNING lines
and program output), written by repeating one step block with changing numbers.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.ingest.nccl import log as nccl_log

RANKS = 8


def _prefix(r: int, tid_off: int = 0) -> str:
    return f"[1,{r}]<stdout>:node{r // 4}:{1000 + r}:{1000 + r + tid_off} [{r % 4}] NCCL INFO "


def _header() -> str:
    out = []
    for r in range(RANKS):
        p = _prefix(r, 60)
        out.append(
            f"{p}ncclCommInitRank comm 0x55{r:02d}a000 rank {r} nranks {RANKS} cudaDev {r % 4} "
            f"nvmlDev {r % 4} busId {r % 4 + 1}b000 commId 0x1d39176440db4936 - Init START"
        )
        out.append(
            f"{p}Trees [0] {(r + 1) % RANKS}/-1/-1->{r}->{(r - 1) % RANKS} [1] -1/-1/-1->{r}->{(r + 1) % RANKS}"  # noqa: E501
        )
        for c in range(4):
            out.append(
                f"{p}Channel {c:02d}/0 : {r}[{r % 4}] -> {(r + 1) % RANKS}[{(r + 1) % 4}] via P2P/CUMEM/read"  # noqa: E501
            )
        out.append(
            f"{p}ncclCommInitRank comm 0x55{r:02d}a000 rank {r} nranks {RANKS} cudaDev {r % 4} "
            f"nvmlDev {r % 4} busId {r % 4 + 1}b000 commId 0x1d39176440db4936 - Init COMPLETE"
        )
    return "\n".join(out) + "\n"


def _step(step: int) -> str:
    out = [f"step {step} loss {1.0 / (step + 1):.6f} lr 0.0003"]
    calls = [
        ("AllReduce", 7, 9, 16777216),
        ("AllGather", 9, 0, 4194304),
        ("ReduceScatter", 9, 0, 4194304),
    ]
    for k, (op, dt, redop, count) in enumerate(calls * 6):
        oc = f"{step * 32 + k:x}"
        for r in range(RANKS):
            out.append(
                f"{_prefix(r)}{op}: opCount {oc} sendbuff 0x7f3a2c{k:06x} recvbuff 0x7f3a2d{k:06x} "
                f"count {count + step % 7} datatype {dt} op {redop % 5} root 0 comm 0x55{r:02d}a000 "  # noqa: E501
                f"[nranks={RANKS}] stream 0x55d1e2b31200"
            )
            if r == 0:
                out.append(
                    f"{_prefix(0)}{op}: {(count + step % 7) * 2} Bytes -> Algo RING proto SIMPLE "
                    "channel{Lo..Hi}={0..15}"
                )
    for r in range(RANKS):
        peer = (r + 1) % RANKS
        for op in ("Send", "Recv"):
            out.append(
                f"{_prefix(r)}{op}: opCount {step:x} sendbuff (nil) recvbuff 0x7f3a48000000 count 262144 "  # noqa: E501
                f"datatype 9 op 0 root {peer} comm 0x55{r:02d}a000 [nranks={RANKS}] stream 0x55d1e2c41000"  # noqa: E501
            )
    return "\n".join(out) + "\n"


def generate(path: Path, size_bytes: int) -> int:
    """Write a log of about ``size_bytes``; returns its size."""
    written = 0
    with open(path, "w") as fh:
        written += fh.write(_header())
        step = 0
        while written < size_bytes:
            written += fh.write(_step(step))
            step += 1
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--size-mb", type=float, default=1000.0, help="size of the generated log (MB, 1e6 B)"
    )
    ap.add_argument(
        "--dir", type=Path, default=None, help="where to write the log (default: a temp dir)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "nccl_bench.log"
        t0 = time.perf_counter()
        size = generate(path, int(args.size_mb * 1e6))
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        wc = subprocess.run(["wc", "-l", str(path)], capture_output=True, text=True, check=True)
        wc_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = nccl_log.parse(path)
        parse_s = time.perf_counter() - t0
        mb = size / 1e6
        rows = {k: v.num_rows for k, v in result.tables.items()}
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"file        {mb:,.1f} MB, {int(wc.stdout.split()[0]):,} lines (generated in {gen_s:.1f} s)"  # noqa: E501
        )
        print(f"wc -l       {wc_s:8.2f} s  {mb / wc_s:10,.1f} MB/s")
        print(
            f"parse       {parse_s:8.2f} s  {mb / parse_s:10,.1f} MB/s  ({parse_s / wc_s:,.1f}x wc -l)"  # noqa: E501
        )
        print(f"rows        {rows}")
        print(f"peak RSS    {peak_mb:,.0f} MB")
        print(f"warnings    {result.warnings.messages()}")


if __name__ == "__main__":
    main()
