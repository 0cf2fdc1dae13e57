"""A job of many ranks: the dataset with its small tables written as one part per table and
job ("merged"), next to the same rows kept as a part per table and file ("apart"), in one
run.

The job is generated (``pipeline.synth``, TP8 x PP4 x DP``--dp``, 2 steps, 8 layers, a
Kineto trace and an NCCL debug log per rank: 1,024 ranks by default, 128 with ``--quick``).
It is ingested twice with 2 workers: as tokenwire does it, and with no table counted as
small (``compact.SMALL_PART_ROWS = 0``: every table of every file is a part of its own, and
nothing is merged; ``--baseline-rows N`` counts tables under N rows as small instead). On
each dataset the benchmark times ``tokenwire link``, ``tokenwire report``, two ad hoc
queries (bytes per rank and op over every collective; ops and their time per rank) and a
DuckDB ``count(*)`` of every table, each in its own child process, and prints the ratios.

``--target-mb`` makes each rank's trace bigger (the job's Kineto MB in all): at 3,000 MB for
1,024 ranks each trace holds some 5,400 ops, a table per file above 4,096 rows
(``--baseline-rows 4096`` compares that threshold with tokenwire's 16 Ki).

``--scale-ranks N`` times instead the ingest of docs/scale.md's job (TP8 x PP4, 1 step, 4
layers, a Kineto trace and an NCCL log per rank) of N ranks with 2 workers, whole process,
against the target of 3 minutes for 16,384 ranks (N / 16,384 of it for fewer ranks);
``--scale-job DIR`` keeps the generated job there to time it again.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_kineto import COUNT, LINK, REPORT, TIMED
from benchmarks.measure import REPO, Measurement, line, measure

INGEST = (
    TIMED
    + """
from pipeline.dataset import compact
from pipeline.ingest.run import ingest
merge, dataset, folder = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
if merge == "apart":
    compact.SMALL_PART_ROWS = int(sys.argv[4])  # 0: no part is small, each stays as written
t0 = time.perf_counter()
errors = ingest([folder], dataset, jobs=2).errors
done(t0)
sys.exit(1 if errors else 0)
"""
)
QUERY = (
    TIMED
    + """
from pipeline.dataset.views import connect
t0 = time.perf_counter()
con = connect(sys.argv[1], read_only=True)
con.execute("SELECT rank, op, sum(bytes) FROM collectives GROUP BY ALL").fetchall()
con.execute("SELECT rank, count(*), sum(dur_ns) FROM ops GROUP BY rank").fetchall()
done(t0)
"""
)


def generate(out: Path, dp: int, target_mb: float | None = None) -> int:
    """Write the job (TP8 x PP4 x DP``dp``) in a child process (the writer's memory would
    otherwise count in every child's peak: they start as copies of this process); return
    its number of files."""
    command = [sys.executable, "-m", "pipeline.synth", str(out), "--tp", "8", "--pp", "4"]
    command += ["--dp", str(dp), "--steps", "2", "--layers", "8", "--global-batch", "128"]
    if target_mb:
        command += ["--target-mb", str(target_mb)]
    subprocess.run(
        [*command, "--formats", "kineto,nccl"], cwd=REPO, check=True, stdout=subprocess.DEVNULL
    )
    return sum(1 for _ in out.iterdir())


def run(folder: Path, work: Path, baseline_rows: int = 0) -> dict[str, dict[str, Measurement]]:
    """Ingest ``folder`` both ways and time what reads each dataset."""
    out: dict[str, dict[str, Measurement]] = {}
    for layout in ("merged", "apart"):
        dataset = work / f"ds-{layout}"
        shutil.rmtree(dataset, ignore_errors=True)
        steps = out[layout] = {}
        steps["ingest"] = measure(
            f"ingest, 2 workers ({layout})",
            INGEST,
            layout,
            str(dataset),
            str(folder),
            str(baseline_rows),
        )
        steps["link"] = measure(f"tokenwire link ({layout})", LINK, str(dataset))
        steps["report"] = measure(
            f"tokenwire report ({layout})", REPORT, str(dataset), str(work / "report.html")
        )
        steps["query"] = measure(f"ad hoc query ({layout})", QUERY, str(dataset))
        steps["count"] = measure(f"DuckDB count(*) ({layout})", COUNT, str(dataset))
        parts = sum(1 for _ in dataset.rglob("*.parquet"))
        print(f"  ({layout}: {parts:,} Parquet files after link)", flush=True)
        for m in steps.values():
            print(line(m), flush=True)
    return out


#: docs/scale.md's target: 16,384 ranks ingested in 3 minutes on 2 cores.
SCALE_TARGET_S = 180.0


def scale(ranks: int, work: Path, job: Path | None = None) -> None:
    """Generate docs/scale.md's job of ``ranks`` ranks (into ``job`` when given and not there
    yet; reused when it is), ingest it with 2 workers (a whole process, imports included) and
    print the time beside the target."""
    dp = max(1, ranks // 32)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        folder = job or Path(tmp) / "job"
        if not folder.exists():
            command = [sys.executable, "-m", "pipeline.synth", str(folder), "--tp", "8"]
            command += ["--pp", "4", "--dp", str(dp), "--steps", "1", "--layers", "4"]
            command += ["--global-batch", str(4 * dp), "--formats", "kineto,nccl"]
            subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        files = sum(1 for _ in folder.iterdir())
        m = measure(f"ingest, 2 workers, {32 * dp:,} ranks", INGEST, "merged",
                    str(Path(tmp) / "ds"), str(folder))  # fmt: skip
    target = SCALE_TARGET_S * 32 * dp / 16384
    print(f"== docs/scale.md's job: {32 * dp:,} ranks, {files:,} files, ingest with 2 workers")
    print(line(m))
    verdict = "met" if m.seconds <= target else "NOT MET"
    print(f"  ingest {m.seconds:7.1f} s (CPU {m.cpu_seconds:7.1f} s): x{m.seconds / target:.2f}"
          f" of the target, at most {target:.0f} s ({SCALE_TARGET_S:.0f} s for 16,384 ranks):"
          f" {verdict}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Generate the job, run both layouts, print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 ranks instead of 1,024")
    parser.add_argument("--work", type=Path, default=REPO / "bench_out")
    parser.add_argument("--target-mb", type=float, help="the job's Kineto MB (bigger traces)")
    parser.add_argument(
        "--baseline-rows", type=int, default=0, help="small-table rows of the baseline (0: none)"
    )
    parser.add_argument("--scale-ranks", type=int, help="instead: docs/scale.md's job's ingest")
    parser.add_argument(
        "--scale-job",
        type=Path,
        help="--scale-ranks' job folder: generated there when absent, reused when present "
        "(generating 16,384 ranks takes 15 to 35 minutes on 2 cores)",
    )
    args = parser.parse_args(argv)
    if args.scale_ranks:
        args.work.mkdir(parents=True, exist_ok=True)
        scale(args.scale_ranks, args.work, args.scale_job)
        return
    dp = 4 if args.quick else 32
    args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        folder = Path(tmp) / "job"
        files = generate(folder, dp, args.target_mb)
        print(f"== many ranks: {32 * dp:,} ranks, {files:,} files (Kineto + NCCL log)", flush=True)
        out = run(folder, Path(tmp), args.baseline_rows)
    baseline = f"under {args.baseline_rows:,} rows" if args.baseline_rows else "none"
    print(f"== merged small parts / the baseline (small parts: {baseline}; timed parts)")
    for step in ("ingest", "link", "report", "query", "count"):
        merged, apart = out["merged"][step], out["apart"][step]
        ours, base = merged.inner_seconds, apart.inner_seconds
        print(f"  {step:<8} {ours:7.2f} s against {base:7.2f} s: x{ours / base:.2f}")


if __name__ == "__main__":
    main()
