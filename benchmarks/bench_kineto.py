"""Kineto ingest next to the tools people use today, on the same inputs, in one run.

Inputs: the real Kineto traces in ``../shared/real_traces`` (when present; one job per source
folder or file, since they come from unrelated jobs) and a generated 16-rank job (TP2 x PP2 x
DP4, ``pipeline.synth.scale``) of at least 1 GB of JSON (``--quick``: 200 MB).

Each side runs in its own child process (``benchmarks.measure``: wall time, peak RSS of the
child's whole process tree):

- ``json.load`` and ``orjson.loads`` of every file (read + gunzip + decode, nothing else),
  and msgspec's decode into the parser's typed structs (tokenwire's first stage alone);
- ``tokenwire ingest`` (parse + Parquet), 1 worker;
- HTA's ``TraceAnalysis(trace_dir=...)`` load, one per job folder (``holistictraceanalysis``,
  the ``bench`` extra); when it is missing or fails, the benchmark says so and goes on;
- on the generated job: 2 local workers (and one per core, when that is not 2: HTA's own
  pool has min(cores, ranks) processes, so the speed and memory targets compare it with as
  many tokenwire workers), a Dask LocalCluster of 2 worker processes, with Dask's default
  worker environment and with the one ``docs/scale.md`` recommends (cluster start excluded:
  it stands for a running cluster), ``tokenwire link``,
  ``tokenwire report``, a plain DuckDB ``count(*)`` over all of the job's Parquet tables (the
  targets' yardstick; it reads only the files' footers) and a DuckDB scan of every column of
  every table (what linking has to read at least), and a DuckDB rewrite of the collectives
  as they are (less than any link does, which writes a row per collective: a floor under
  the link target). Each of these runs ``--repeats`` times
  (3), the steps in turn, and its median run is the one compared: the nine pairs of runs of
  one build, in one such benchmark, put the 2-worker speed-up anywhere from 1.64x to 1.90x.

Then the targets (``docs/benchmarks.md``), each with the measured ratio and met / not met.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from benchmarks.measure import REPO, Measurement, line, measure, median_run, timed

TIMED = """
import os, sys, time
from pathlib import Path
def done(t0):
    open(os.environ["TW_TIMING"], "w").write(str(time.perf_counter() - t0))
"""
JSON_LOAD = (
    TIMED
    + """
import gzip, json
t0 = time.perf_counter()
for p in sys.argv[1:]:
    data = open(p, 'rb').read()
    if data[:2] == b'\\x1f\\x8b':
        data = gzip.decompress(data)
    json.loads(data)
    del data
done(t0)
"""
)
ORJSON_LOAD = JSON_LOAD.replace("import gzip, json", "import gzip, orjson as json")
# tokenwire's first stage alone: msgspec into the parser's typed structs (args kept raw)
MSGSPEC_LOAD = JSON_LOAD.replace(
    "import gzip, json",
    "import gzip, msgspec\nfrom pipeline.ingest.kineto.parse import Trace\n"
    "class json:\n    loads = msgspec.json.Decoder(Trace).decode",
)
# The ingest children take (setting, dataset, folders...) and fail on any bad file.
_EXIT_ON_ERRORS = """
for e in errors:
    print(e.error, file=sys.stderr)
sys.exit(1 if errors else 0)
"""
INGEST = (
    TIMED
    + """
from pipeline.ingest.run import ingest
jobs, dataset, folders = int(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
t0 = time.perf_counter()
errors = ingest(folders, dataset, jobs=jobs).errors
done(t0)
"""
    + _EXIT_ON_ERRORS
)
INGEST_DASK = (
    TIMED
    + """
import dask
from distributed import LocalCluster
from pipeline.ingest.run import ingest
environ, dataset, folders = sys.argv[1], Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
settings = {}
if environ == "docs":  # the worker environment docs/scale.md recommends
    key = "distributed.nanny.pre-spawn-environ."
    settings = {key + "MALLOC_TRIM_THRESHOLD_": None,
                key + "POLARS_MAX_THREADS": str(max(1, (os.cpu_count() or 2) // 2)),
                key + "ARROW_DEFAULT_MEMORY_POOL": "system"}
with dask.config.set(settings), LocalCluster(n_workers=2, threads_per_worker=1,
                                             processes=True, dashboard_address=None) as cluster:
    t0 = time.perf_counter()
    errors = ingest(folders, dataset, scheduler=cluster.scheduler_address).errors
    done(t0)
"""
    + _EXIT_ON_ERRORS
)
HTA_LOAD = (
    TIMED
    + """
import logging
logging.disable(logging.CRITICAL)
try:
    from hta.trace_analysis import TraceAnalysis
except ImportError as exc:
    sys.exit(f"holistictraceanalysis is not installed (pip install 'tokenwire[bench]'): {exc}")
t0 = time.perf_counter()
for folder in sys.argv[1:]:
    TraceAnalysis(trace_dir=folder)
done(t0)
"""
)
LINK = (
    TIMED
    + """
from pipeline.link.runner import link
t0 = time.perf_counter()
link(Path(sys.argv[1]))
done(t0)
"""
)
SCAN = (
    TIMED
    + """
from pipeline.dataset.views import connect
from pipeline.dataset.schema import load_schemas
con = connect(sys.argv[1], derived=False)
t0 = time.perf_counter()
for name, schema in load_schemas().items():
    if not schema.derived:
        con.execute(f"SELECT max(hash(COLUMNS(*))) FROM {name}").fetchall()
done(t0)
"""
)
REPORT = (
    TIMED
    + """
# as the command does (pipeline/cli.py): a format checker altair never uses, 1 s to import
sys.modules.setdefault("rfc3987_syntax", None)
from pipeline.report import build_report
t0 = time.perf_counter()
build_report(Path(sys.argv[1]), output=Path(sys.argv[2]))
done(t0)
"""
)
COUNT = (
    TIMED
    + """
import duckdb
dataset = Path(sys.argv[1])
con = duckdb.connect()
t0 = time.perf_counter()
total = 0
for table in sorted(p for p in dataset.iterdir() if p.is_dir()):
    files = sorted(str(f) for f in table.rglob('*.parquet'))
    total += con.execute('SELECT count(*) FROM read_parquet(?)', [files]).fetchall()[0][0]
done(t0)
print(total)
"""
)
# The least a link can cost: it writes collective_links, a row for each collective. This reads
# the collectives, every column, and writes them back unchanged, with DuckDB's own Parquet
# writer, in a fresh connection as the count(*) has (connect outside the timed part).
REWRITE = (
    TIMED
    + """
import duckdb, tempfile
dataset = Path(sys.argv[1])
files = sorted(str(f) for f in (dataset / 'collectives').rglob('*.parquet'))
if not files:
    sys.exit(f"{dataset}: no collectives to rewrite")
con = duckdb.connect()
with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / 'collectives.parquet'
    t0 = time.perf_counter()
    con.execute(f"COPY (SELECT * FROM read_parquet(?)) TO '{out}' (FORMAT parquet)", [files])
    done(t0)
    written = con.execute('SELECT count(*) FROM read_parquet(?)', [str(out)]).fetchall()[0][0]
    read = con.execute('SELECT count(*) FROM read_parquet(?)', [files]).fetchall()[0][0]
if written != read:
    sys.exit(f"the rewrite holds {written} rows of the {read} collectives")
"""
)


def json_mb(paths: list[Path]) -> float:
    """Uncompressed JSON size of ``paths`` in MB (10^6 bytes)."""
    total = 0
    for p in paths:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as f:
                while chunk := f.read(1 << 24):
                    total += len(chunk)
        else:
            total += p.stat().st_size
    return total / 1e6


def real_job_folders(into: Path) -> list[Path]:
    """One folder per real job (links to its Kineto traces only), when the traces are there."""
    root = REPO.parent / "shared" / "real_traces"
    if not root.is_dir():
        return []
    sources = [root / "kineto" / "dlrm_v100_8ranks", *sorted((root / "kineto").glob("*.json.gz"))]
    sources += sorted(p for p in (root / "kineto_cpu_gloo").glob("*/*") if p.is_dir())
    folders = []
    for i, src in enumerate(sources):
        files = sorted(src.glob("*.pt.trace.json.gz")) if src.is_dir() else [src]
        folder = into / f"real{i}"
        folder.mkdir(parents=True, exist_ok=True)
        for f in files:
            (folder / f.name).symlink_to(f)
        folders.append(folder)
    return folders


def generated_job(into: Path, target_mb: float) -> Path:
    """A 16-rank job (TP2 x PP2 x DP4) of about ``target_mb`` MB of Kineto JSON."""
    from pipeline.synth.job import JobSpec
    from pipeline.synth.scale import write_scaled_job

    folder = into / "gen16"
    write_scaled_job(JobSpec(tp=2, pp=2, dp=4), folder, target_bytes=int(target_mb * 1e6))
    return folder


def _files(folders: list[Path]) -> list[str]:
    return [str(f) for d in folders for f in sorted(d.iterdir())]


def hta_processes(folder: Path) -> int:
    """How many processes HTA's load uses for a job folder: min(cores, rank files)."""
    return max(1, min(os.cpu_count() or 1, len(_files([folder]))))


def compare_tools(title: str, folders: list[Path], work: Path) -> dict[str, Measurement]:
    """json.load, orjson, tokenwire (1 worker) and HTA on the same job folders."""
    files = _files(folders)
    mb = json_mb([Path(f) for f in files])
    print(f"== {title}: {len(files)} files, {mb:,.1f} MB of JSON", flush=True)
    out: dict[str, Measurement] = {}
    dataset = work / f"ds-{title.split()[0]}"
    shutil.rmtree(dataset, ignore_errors=True)
    steps = [
        ("json", "json.load", JSON_LOAD, files),
        ("orjson", "orjson.loads", ORJSON_LOAD, files),
        ("msgspec", "msgspec decode (typed structs)", MSGSPEC_LOAD, files),
        (
            "tokenwire",
            "tokenwire ingest (1 worker)",
            INGEST,
            ["1", str(dataset), *map(str, folders)],
        ),
        ("hta", "HTA TraceAnalysis load", HTA_LOAD, [str(f) for f in folders]),
    ]
    for key, label, code, args in steps:
        out[key] = measure(label, code, *args, check=key != "hta")
        print(line(out[key], mb), flush=True)
    out["_mb"] = Measurement("MB", mb, 0.0)
    return out


def compare_scaling(folder: Path, work: Path, repeats: int = 3) -> dict[str, Measurement]:
    """1 vs 2 local workers, Dask LocalCluster(2) vs the pool, link vs count(*): each step
    ``repeats`` times, the steps taken in turn (so that the machine's drift falls on all of
    them alike), and each one's median run kept."""
    mb = json_mb(sorted(folder.iterdir()))
    print(f"== workers and linking: the generated job ({mb:,.1f} MB)", flush=True)
    cores = hta_processes(folder)
    steps = [
        ("w1", "ingest, 1 worker", INGEST, "1"),
        ("w2", "ingest, 2 local workers", INGEST, "2"),
        ("dask", "ingest, Dask LocalCluster(2)", INGEST_DASK, "default"),
        ("dask_docs", "  the same, workers set up per docs", INGEST_DASK, "docs"),
    ]
    if cores != 2:
        steps.insert(2, ("wcores", f"ingest, {cores} local workers", INGEST, str(cores)))

    def ingest_run(key: str, label: str, code: str, setting: str) -> Measurement:
        dataset = work / f"ds-{key}"
        shutil.rmtree(dataset, ignore_errors=True)
        args = [setting, str(dataset), str(folder)]
        return measure(label, code, *args, check=not key.startswith("dask"))

    out = _repeated([(s[0], functools.partial(ingest_run, *s)) for s in steps], repeats, mb)
    out["wcores"] = out.get("wcores", out["w2"])
    dataset = str(work / "ds-w2")
    queries = [
        ("count", functools.partial(measure, "DuckDB count(*) of every table", COUNT, dataset)),
        ("scan", functools.partial(measure, "DuckDB scan of every column", SCAN, dataset)),
        ("rewrite", functools.partial(
            measure, "DuckDB rewrite of the collectives", REWRITE, dataset)),
        ("link", functools.partial(measure, "tokenwire link", LINK, dataset)),
        ("report", functools.partial(
            measure, "tokenwire report", REPORT, dataset, str(work / "report.html"))),
    ]  # fmt: skip
    out |= _repeated(queries, repeats, None)
    return out


def _repeated(
    steps: list[tuple[str, Callable[[], Measurement]]], repeats: int, mb: float | None
) -> dict[str, Measurement]:
    """Each step's median of ``repeats`` runs, the steps run in turn; printed as they end."""
    runs: dict[str, list[Measurement]] = {key: [] for key, _ in steps}
    for i in range(repeats):
        for key, run in steps:
            runs[key].append(m := run())
            print(f"{line(m, mb)}  [run {i + 1}/{repeats}]", flush=True)
    out = {key: median_run(ms) for key, ms in runs.items()}
    if repeats > 1:
        print(f"  -- the median run of each of {repeats}:")
        for m in out.values():
            print(line(m, mb), flush=True)
    return out


def targets(tools: dict[str, Measurement], scale: dict[str, Measurement]) -> list[tuple]:
    """(target, measured text, met) for each target of ``docs/benchmarks.md``."""
    rows = []
    tw, hta, orj = tools["tokenwire"], tools["hta"], tools["orjson"]
    if hta.ok:
        # HTA parses ranks in a pool of min(cores, ranks) processes: the fair match is as many
        # tokenwire workers (its own default); one worker against that pool is shown too.
        same = scale["wcores"]
        speed = timed(hta) / timed(same)
        name = "ingest >= 10x faster than HTA load (same cores)"
        rows.append((name, f"{speed:.1f}x", speed >= 10))
        mem = hta.peak_rss_mb / same.peak_rss_mb
        rows.append(("ingest peak RSS <= 1/3 of HTA's (same cores)", f"1/{mem:.1f}", mem >= 3))
        speed = timed(hta) / timed(tw)
        rows.append(("(1 worker against HTA's pool: speed)", f"{speed:.1f}x", None))
        mem = hta.peak_rss_mb / tw.peak_rss_mb
        rows.append(("(1 worker against HTA's pool: peak RSS)", f"1/{mem:.1f}", None))
        ceiling = timed(hta) / timed(tools["msgspec"])
        rows.append(("(msgspec decode alone, 1 core / HTA load)", f"{ceiling:.1f}x", None))
    else:
        rows.append(("ingest >= 10x faster than HTA load", f"HTA failed: {hta.note}", None))
    ratio = timed(tw) / timed(orj)
    rows.append(("ingest (parse + Parquet) <= 2x orjson.loads", f"{ratio:.2f}x", ratio <= 2))
    speedup = timed(scale["w1"]) / timed(scale["w2"])
    rows.append(("2 local workers >= 1.7x faster than 1", f"{speedup:.2f}x", speedup >= 1.7))
    for key, name in (
        ("dask_docs", "Dask LocalCluster(2) <= 1.3x the local pool"),
        ("dask", "(the same, Dask's default worker environment)"),
    ):
        if scale[key].ok:
            ratio = timed(scale[key]) / timed(scale["w2"])
            met = ratio <= 1.3 if key == "dask_docs" else None
            rows.append((name, f"{ratio:.2f}x", met))
        else:
            rows.append((name, scale[key].note, None))
    ratio = scale["link"].inner_seconds / scale["count"].inner_seconds
    rows.append(("tokenwire link <= 5x DuckDB count(*)", f"{ratio:.1f}x", ratio <= 5))
    ratio = scale["report"].inner_seconds / scale["count"].inner_seconds
    rows.append(("tokenwire report <= 5x DuckDB count(*)", f"{ratio:.1f}x", ratio <= 5))
    # count(*) reads only Parquet footers. Rewriting the collectives as they are is less than
    # any link does (it must also join them and write five more tables): where that alone is
    # over 5x, no link meets the target above.
    ratio = scale["rewrite"].inner_seconds / scale["count"].inner_seconds
    rows.append(("(floor: DuckDB rewrite of the collectives / count(*))", f"{ratio:.1f}x", None))
    for key in ("link", "report"):
        ratio = scale[key].inner_seconds / scale["scan"].inner_seconds
        rows.append((f"(tokenwire {key} / DuckDB scan of every column)", f"{ratio:.1f}x", None))
    return rows


def main(argv: list[str] | None = None) -> None:
    """Run the comparison and print its tables and the targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 200 MB generated job")
    parser.add_argument("--generated-mb", type=float, default=None)
    parser.add_argument("--work", type=Path, default=REPO / "bench_out")
    parser.add_argument(
        "--repeats", type=int, default=3,
        help="runs of each worker, Dask, link and report step (the median is kept)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    target_mb = args.generated_mb or (200.0 if args.quick else 1100.0)
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        real = real_job_folders(Path(tmp) / "real")
        if real:
            results["real"] = compare_tools("real Kineto traces", real, args.work)
        else:
            print("== real traces: ../shared/real_traces is absent, skipped", flush=True)
        gen = generated_job(Path(tmp), target_mb)
        results["generated"] = compare_tools("generated 16-rank job", [gen], args.work)
        scale = compare_scaling(gen, args.work, max(1, args.repeats))
    rows = targets(results["generated"], scale)
    print("== targets (generated 16-rank job; timed parts where a child reports one)")
    for name, measured, met in rows:
        verdict = "n/a" if met is None else ("met" if met else "NOT MET")
        print(f"  {name:<50} {measured:>22}  {verdict}")
    if "real" in results and results["real"]["hta"].ok:
        r = results["real"]
        print(
            f"  (real traces: ingest {timed(r['hta']) / timed(r['tokenwire']):.1f}x faster "
            f"than HTA, peak RSS 1/{r['hta'].peak_rss_mb / r['tokenwire'].peak_rss_mb:.1f})"
        )
    dump = {k: {n: asdict(m) for n, m in v.items()} for k, v in results.items()}
    dump["scaling"] = {n: asdict(m) for n, m in scale.items()}
    dump["targets"] = [list(r) for r in rows]
    (args.work / "kineto_results.json").write_text(json.dumps(dump, indent=1))


if __name__ == "__main__":
    main()
