"""Command line of the generator: ``python -m pipeline.synth OUT_DIR [knobs]``.

With no knobs it regenerates the bundled ``sample_traces/`` byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..synth.job import JobSpec
from ..synth.scale import write_scaled_job
from ..synth.writer import write_job


def _parser() -> argparse.ArgumentParser:
    d = JobSpec()
    p = argparse.ArgumentParser(
        prog="python -m pipeline.synth",
        description="Write Kineto traces of a synthetic Megatron-style GPT job, one per rank "
        "(and, with --formats, NCCL debug logs and an Nsight Systems export of the same job).",
    )
    p.add_argument("out", nargs="?", type=Path, help="output folder (or use --out)")
    p.add_argument("--out", dest="out_opt", type=Path, help="output folder")
    p.add_argument("--tp", type=int, default=d.tp, help="tensor-parallel degree")
    p.add_argument("--pp", type=int, default=d.pp, help="pipeline-parallel degree")
    p.add_argument("--dp", type=int, default=d.dp, help="data-parallel degree")
    p.add_argument("--steps", type=int, default=d.steps, help="profiled steps")
    p.add_argument("--layers", type=int, default=d.layers)
    p.add_argument("--hidden", type=int, default=d.hidden)
    p.add_argument("--heads", type=int, default=d.heads)
    p.add_argument("--ffn-hidden", type=int, default=d.ffn_hidden)
    p.add_argument("--vocab", type=int, default=d.vocab)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--micro-batch", type=int, default=d.micro_batch)
    p.add_argument("--global-batch", type=int, default=d.global_batch)
    p.add_argument(
        "--bucket-size",
        type=int,
        default=d.bucket_size,
        help="DP gradient bucket in elements (0: Megatron's max(40M, 1M*dp))",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--straggler-rank",
        type=int,
        default=d.straggler_rank,
        help="rank whose forward attention kernels run slow (-1: none)",
    )
    p.add_argument("--gzip", action="store_true", help="write .pt.trace.json.gz")
    p.add_argument(
        "--repeats",
        type=int,
        help="write the simulated steps this many times over (fast; see pipeline.synth.scale)",
    )
    p.add_argument(
        "--target-mb",
        type=float,
        help="repeat the steps until the Kineto traces hold about this many MB (10^6 B)",
    )
    p.add_argument(
        "--formats",
        default=None,
        help="comma list of kineto, nccl (NCCL_DEBUG=INFO log per rank), nsys (one SQLite "
        "export); implies the scaled writer (default: kineto)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = args.out_opt or args.out
    if out is None:
        print("error: give an output folder", file=sys.stderr)
        return 2
    try:
        spec = JobSpec(
            tp=args.tp,
            pp=args.pp,
            dp=args.dp,
            steps=args.steps,
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            ffn_hidden=args.ffn_hidden,
            vocab=args.vocab,
            seq_len=args.seq_len,
            micro_batch=args.micro_batch,
            global_batch=args.global_batch,
            bucket_size=args.bucket_size,
            seed=args.seed,
            straggler_rank=None if args.straggler_rank < 0 else args.straggler_rank,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.repeats is None and args.target_mb is None and args.formats is None:
        paths = write_job(spec, out, use_gzip=args.gzip)
        total = sum(p.stat().st_size for p in paths)
        print(f"wrote {len(paths)} traces, {total / 1e6:.2f} MB, to {out}")
        return 0
    formats = (args.formats or "kineto").split(",")
    try:
        written = write_scaled_job(
            spec,
            out,
            repeats=args.repeats,
            target_bytes=int(args.target_mb * 1e6) if args.target_mb else None,
            formats=formats,
            use_gzip=args.gzip,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for fmt, paths in written.items():
        total = sum(p.stat().st_size for p in paths)
        print(f"wrote {len(paths)} {fmt} files, {total / 1e6:.2f} MB, to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
