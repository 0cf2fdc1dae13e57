"""Every table of the dataset, row for row, as two builds of tokenwire ingest and link it: a
check that a change meant to be only faster changes no row.

    python -m benchmarks.compare_builds REV [--inputs DIR ...]

``REV`` (a git revision of this repository, e.g. ``main``) is exported to a temporary folder
and run beside the working tree, each build in its own process. Inputs, each ingested as its
own job: the sample job, every run of ``tests/data/cpu_gloo`` and, where present, every
Kineto and Nsight folder of the real traces beside the repository (the formats whose
files hold ops), the real NCCL logs and nccl-tests outputs (a job each), one job of many
small Kineto files of several runs (:func:`mixed_job`) and a generated job of 48 ranks' NCCL
logs (:func:`nccl_job`), both of which ingest parses in batches of files at once. Each table
is read whole, sorted on all its columns and compared; the command exits 1 on the first
table that differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = REPO.parent / "shared" / "real_traces"

#: Ingest, then link, each input as its own job; paths as arguments.
_RUN = """
import sys
from pathlib import Path
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
out = Path(sys.argv[1])
for arg in sys.argv[2:]:
    job, path = arg.split("=", 1)
    ingest([path], out / job, jobs=1, job=job)
    try:
        link(out / job)
    except Exception as exc:  # (a job link refuses is compared as ingested)
        print(f"{job}: link: {exc}", file=sys.stderr)
"""


def default_inputs() -> dict[str, Path]:
    """Job name -> folder: the sample job, the CPU gloo runs of tests/data, the real traces."""
    inputs = {"sample": REPO / "sample_traces"}
    for run in sorted((REPO / "tests" / "data" / "cpu_gloo").iterdir()):
        if run.is_dir():
            inputs[f"gloo-{run.name}"] = run
    for kind in ("kineto", "kineto_cpu_gloo", "nsys"):
        folder = REAL / kind
        if not folder.is_dir():
            continue
        for sub in sorted(folder.iterdir()):
            inputs[f"real-{kind}-{sub.name.split('.')[0]}"] = sub
    for kind in ("nccl_logs", "nccl_tests"):  # (files of many jobs: one job each folder)
        if (REAL / kind).is_dir():
            inputs[f"real-{kind}"] = REAL / kind
    return inputs


#: The runs of tests/data/cpu_gloo whose rank files go into :func:`mixed_job`.
_MIXED_RUNS = ("ddp4", "fsdp4", "moe4", "pp4", "tp_dp", "recsys_a2a", "straggler", "fsdp1_4")


def mixed_job(out: Path) -> Path:
    """A job of many small files ingested together: the Kineto rank files of several runs of
    ``tests/data/cpu_gloo`` and the 8 DLRM ranks of the real traces (where present), each
    under a rank of its own (``benchmarks.bench_floor.many_small``), beside one run's flight
    recorder dumps. Ingest parses them in batches (``pipeline.ingest.run.parse_files``), so
    this job compares the batched parse with the other build's."""
    from benchmarks.bench_floor import many_small

    traces = [
        p
        for run in _MIXED_RUNS
        for p in sorted((REPO / "tests" / "data" / "cpu_gloo" / run).glob("rank*.pt.trace.json.gz"))
    ]
    traces += sorted((REAL / "kineto" / "dlrm_v100_8ranks").glob("*.json.gz"))
    many_small(traces, 1, out)
    for dump in sorted((REPO / "tests" / "data" / "cpu_gloo" / "ddp4").glob("*flight_recorder*")):
        (out / dump.name).write_bytes(dump.read_bytes())
    return out


def nccl_job(out: Path) -> Path:
    """A generated job of 48 ranks (TP4 x PP2 x DP6), an ``NCCL_DEBUG=INFO`` log each: ingest
    parses small NCCL logs in batches (``pipeline.ingest.nccl.log.parse_batch``), so this job
    compares the batched parse with the other build's."""
    from pipeline.synth.__main__ import main as synth

    args = ["--tp", "4", "--pp", "2", "--dp", "6", "--steps", "1", "--layers", "2"]
    synth([str(out), *args, "--global-batch", "12", "--formats", "nccl"])
    return out


def run_build(root: Path, out: Path, inputs: dict[str, Path]) -> None:
    """Ingest and link every input with the package under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "TOKENWIRE_SCHEMAS": str(root / "schemas")}
    args = [f"{job}={path}" for job, path in inputs.items()]
    # (in root: `python -c` puts its working directory ahead of PYTHONPATH, and run from the
    # repository that would import the working tree's package for both builds)
    subprocess.run([sys.executable, "-c", _RUN, str(out), *args], env=env, check=True, cwd=root)


def tables(dataset: Path) -> dict[str, object]:
    """Each view of the dataset, sorted on all its columns, as an Arrow table."""
    from pipeline.dataset.views import connect

    con = connect(dataset)
    views = "select view_name from duckdb_views() where not internal"
    names = [r[0] for r in con.execute(views).fetchall()]
    out = {}
    for name in sorted(names):
        cols = [r[0] for r in con.execute(f'describe "{name}"').fetchall()]
        order = ", ".join(f'"{c}"' for c in cols if c not in ("file_id", "part"))
        out[name] = con.sql(f'select * from "{name}" order by {order}').to_arrow_table()
    return out


def compare(a: Path, b: Path) -> list[str]:
    """The differences between two datasets, one line per table that differs."""
    diffs = []
    ta, tb = tables(a), tables(b)
    for name in sorted(set(ta) | set(tb)):
        if name not in ta or name not in tb:
            diffs.append(f"{a.name}: table {name} only in one build")
        else:
            rows = (ta[name].num_rows, tb[name].num_rows)
            cols = [c for c in ta[name].column_names if not _same(ta[name], tb[name], c)]
            if rows[0] != rows[1] or cols:
                diffs.append(f"{a.name}: {name} differs (rows {rows[0]} / {rows[1]}): {cols}")
    return diffs


def _same(a, b, column: str) -> bool:
    """Whether ``column`` holds the same values in both tables: exactly, except the ingest
    time of ``files`` (never the same) and floats, equal to 1e-9 relative (DuckDB sums them
    in parallel, in an order that varies from run to run)."""
    import numpy as np
    import pyarrow as pa

    if column == "ingested_at_ns":
        return True
    if column not in b.column_names or a.num_rows != b.num_rows:
        return False
    x, y = a[column], b[column]
    if pa.types.is_floating(x.type) and pa.types.is_floating(y.type):
        u, v = x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False)
        return bool(np.allclose(u, v, rtol=1e-9, atol=0, equal_nan=True))
    return x.equals(y)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the git revision to compare the working tree with")
    parser.add_argument("--inputs", nargs="*", type=Path, help="folders (default: all)")
    parser.add_argument("--keep", type=Path, help="keep REV's datasets here, and reuse them")
    args = parser.parse_args(argv)
    inputs = {p.name: p for p in args.inputs} if args.inputs else default_inputs()
    with tempfile.TemporaryDirectory(prefix="tw-builds-") as tmp:
        if not args.inputs:
            inputs["batch-mixed"] = mixed_job(Path(tmp) / "inputs" / "batch-mixed")
            inputs["batch-nccl"] = nccl_job(Path(tmp) / "inputs" / "batch-nccl")
        before = args.keep or Path(tmp) / "before"
        if not before.is_dir():
            base = Path(tmp) / "base"
            base.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.rev, "pipeline", "schemas"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
            run_build(base, before, inputs)
        run_build(REPO, Path(tmp) / "after", inputs)
        diffs = []
        for job in inputs:
            diffs += compare(before / job, Path(tmp) / "after" / job)
    for line in diffs:
        print(line, file=sys.stderr)
    print(f"{len(inputs)} jobs, {len(diffs)} tables differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
