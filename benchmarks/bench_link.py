"""``tokenwire link`` and ``tokenwire report`` on a large job next to a plain DuckDB scan of
the same Parquet.

The job is made from the ingested sample job (8 ranks, 2 steps) by copying its Parquet rows:
each of ``--ranks`` ranks takes the rows of sample rank ``r % 8`` and repeats its steps
``--repeat`` times, shifted in time, with ids kept unique, until the dataset holds at least
``--events`` events (ops + kernels + collectives); or, with ``--many-ranks N``, the tests'
generated job of N ranks. The baseline reads every column of every table of the same
dataset (a hash of each column), in the same run; beside it, the least any link does: a
rewrite of the collectives as they are (link writes a row per collective too). The report is
written from the linked dataset; beside it, the least any report does: a process that imports
the libraries it draws with (DuckDB, PyArrow, Polars, Altair) and makes the dataset's views.
Beside link, a second floor: a DuckDB copy of each derived table of the linked dataset as it
is (what link writes, with nothing computed). The targets, on CPU time: link at most 2x the
rewrite, report at most 1.2x the imports and views (``make bench`` prints each ratio beside
its target, and link's ratio to the copy of its outputs). With ``--many-ranks``, the report's
work beyond its imports and views is split in three: the report with every query's answer
given (read from a file a report wrote, so that it runs no query: its modules, sections,
charts and page), the report of the same generated job at :data:`FIXED_RANKS` ranks (the
same sections, charts and queries over a 64th of the rows at 16,384 ranks) next to its own
imports and views, and the rest, which grows with the job. Each is a whole process (imports
included), run ``--repeats`` times in turn; the best run of each is compared, by wall time
and by CPU time (user + system), which other work on a shared machine disturbs less.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import polars as pl

from benchmarks.measure import Measurement, measure
from pipeline.dataset.commit import write_manifest, write_part
from pipeline.dataset.schema import conform
from pipeline.dataset.store import (
    FileEntry,
    Manifest,
    part_columns,
    part_path,
)
from pipeline.dataset.views import connect
from pipeline.ingest.run import ingest

REPO = Path(__file__).resolve().parents[1]
#: The fewest ranks of the generated job whose report has every section and chart of a
#: many-rank report (the rank x channel grid is drawn up to 128 ranks).
FIXED_RANKS = 256
TIMED_TABLES = ("ops", "kernels", "collectives", "steps", "time_breakdown")
ID_COLUMNS = {
    "ops": ("op_id", "parent_id", "correlation", "external_id"),
    "kernels": ("kernel_id", "correlation", "external_id"),
    "collectives": ("collective_id", "launch_op_id", "correlation", "external_id"),
}
LINK = """
import sys
from pathlib import Path
from pipeline.link.runner import link
link(Path(sys.argv[1]))
"""
REPORT = """
import sys
from pipeline.cli import cli
cli(["report", sys.argv[1], "-o", sys.argv[2]], standalone_mode=False)
"""
REWRITE = """
import sys, tempfile
from pathlib import Path
from pipeline.dataset.views import connect
con = connect(sys.argv[1], derived=False)
with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "collectives.parquet"
    con.execute(f"COPY (SELECT * FROM collectives) TO '{out}' (FORMAT parquet)")
"""
#: The least any link writes: a copy of each derived table of the linked dataset as it is,
#: by DuckDB (the tables' rows read from their parts and written again, nothing computed).
OUTPUT_COPY = """
import sys, tempfile
from pathlib import Path
from pipeline.dataset.store import read_manifest
from pipeline.dataset.views import connect
con = connect(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    out = Path(sys.argv[2] if len(sys.argv) > 2 else tmp)
    for name in sorted(read_manifest(Path(sys.argv[1])).derived):
        con.execute(f"COPY (SELECT * FROM {name}) TO '{out / name}.parquet' (FORMAT parquet)")
"""
#: A report that keeps the answer of each of its queries in a file (``argv[3]``).
ANSWERS = """
import pickle, sys
from pipeline.cli import cli
from pipeline.report.context import Context
answers, query = {}, Context.query
def recording(self, name, **params):
    answers[name, repr(sorted(params.items()))] = frame = query(self, name, **params)
    return frame
Context.query = recording
cli(["report", sys.argv[1], "-o", sys.argv[2]], standalone_mode=False)
with open(sys.argv[3], "wb") as f:
    pickle.dump(answers, f)
"""
#: The same report with each query answered from that file: all a report does but query.
REPORT_GIVEN = """
import pickle, sys
from pipeline.cli import cli
from pipeline.report.context import Context
with open(sys.argv[3], "rb") as f:
    answers = pickle.load(f)
Context.query = lambda self, name, **params: answers[name, repr(sorted(params.items()))]
cli(["report", sys.argv[1], "-o", sys.argv[2]], standalone_mode=False)
"""
#: The least a report does: import the libraries it draws with, and make the dataset's views.
VIEWS = """
import sys
import altair, duckdb, polars, pyarrow
from pipeline.dataset.views import connect
connect(sys.argv[1])
"""
SCAN = """
import sys
from pipeline.dataset.views import connect
from pipeline.dataset.schema import load_schemas
con = connect(sys.argv[1], derived=False)
for name, schema in load_schemas().items():
    if not schema.derived:
        con.execute(f"SELECT max(hash(COLUMNS(*))) FROM {name}").fetchall()
"""


def build_job(sample: Path, out: Path, *, ranks: int, repeat: int) -> int:
    """Write the scaled job; return its number of events."""
    base = out.parent / "sample-ds"
    # the profiler traces only: the job's NCCL logs and Nsight export repeat the same calls
    ingest(sorted(sample.glob("*.pt.trace.json*")), base, job="sample", jobs=1)
    out.mkdir(parents=True)
    manifest = Manifest()
    events = 0
    span = (
        pl.read_parquet(base / "steps")
        .select((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span"))
        .item()
        + 1_000_000
    )
    con = connect(base)
    for rank in range(ranks):
        src = rank % 8
        file_id = f"bench{rank:012d}"
        entry = FileEntry(file_id, file_id * 4, f"bench/rank{rank}", "bench", "kineto", [rank])
        for table in (*TIMED_TABLES, "ranks", "communicators"):
            # (through the view: the small tables' ranks share one merged part)
            rows = con.sql(f"SELECT * FROM {table} WHERE rank = ?", params=[src]).to_arrow_table()
            frame = pl.from_arrow(part_columns(table, conform(table, rows)))
            copies = (
                [_shift(frame, table, k, span) for k in range(repeat)]
                if table in (TIMED_TABLES)
                else [frame]
            )
            rows = pl.concat(copies).with_columns(
                pl.lit(file_id).alias("file_id"), pl.lit(rank, pl.Int64).alias("rank")
            )
            rel = part_path(table, "bench", file_id)
            write_part(out, rel, rows.to_arrow())
            entry.parts[table] = [rel]
            if table in ("ops", "kernels", "collectives"):
                events += rows.height
        _write_file_row(con, out, entry, src)
        manifest.files[file_id] = entry
    write_manifest(out, manifest)
    return events


def _write_file_row(con, out: Path, entry: FileEntry, src: int) -> None:
    """The ``files`` row of a copied rank: sample rank ``src``'s, renamed (the report lists
    a dataset's jobs from this table)."""
    rows = pl.from_arrow(
        con.sql("SELECT * FROM files WHERE list_contains(ranks, ?)", params=[src]).to_arrow_table()
    ).with_columns(
        pl.lit(entry.file_id).alias("file_id"),
        pl.lit(entry.sha256).alias("sha256"),
        pl.lit(entry.path).alias("path"),
        pl.lit("bench").alias("job"),
        pl.lit([entry.ranks[0]], pl.List(pl.Int64)).alias("ranks"),
    )
    rel = part_path("files", "bench", entry.file_id)
    write_part(out, rel, part_columns("files", conform("files", rows.to_arrow())))
    entry.parts["files"] = [rel]


def _shift(frame: pl.DataFrame, table: str, k: int, span: int) -> pl.DataFrame:
    """Copy ``k`` of a rank's rows: ids offset past every earlier copy, times and steps on."""
    ids = [c for c in ID_COLUMNS.get(table, ()) if c in frame.columns]
    times = [c for c in ("start_ns", "end_ns", "enqueue_ns") if c in frame.columns]
    steps = ["step"] if "step" in frame.columns else []
    return frame.with_columns(
        *[(pl.col(c) + k * 10_000_000) for c in ids],
        *[(pl.col(c) + k * span) for c in times],
        *[(pl.col(c) + 2 * k) for c in steps],
    )


def main() -> None:
    """Build the job, then time the plain scan, link and report, in turn, ``--repeats``
    times; the best run of each is compared (wall time and CPU time)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--events", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--many-ranks",
        type=int,
        metavar="N",
        help="instead: the tests' generated job of N ranks (tests/report/fixtures.large_job)",
    )
    parser.add_argument("--work", type=Path, default=REPO / "bench_out")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        dataset = Path(tmp) / "job"
        if args.many_ranks:
            ranks, events = args.many_ranks, many_ranks_job(dataset, args.many_ranks)
        else:
            probe = Path(tmp) / "probe"
            per_copy = build_job(REPO / "sample_traces", probe, ranks=args.ranks, repeat=1)
            shutil.rmtree(probe)
            repeat = max(1, -(-args.events // per_copy))
            ranks = args.ranks
            events = build_job(REPO / "sample_traces", dataset, ranks=ranks, repeat=repeat)
        page = Path(tmp) / "report.html"
        steps = [
            ("DuckDB scan of every column", SCAN, (str(dataset),)),
            ("DuckDB rewrite of the collectives", REWRITE, (str(dataset),)),
            ("tokenwire link", LINK, (str(dataset),)),
            ("DuckDB copy of link's outputs", OUTPUT_COPY, (str(dataset),)),
            ("imports and views", VIEWS, (str(dataset),)),
            ("tokenwire report", REPORT, (str(dataset), str(page))),
        ]
        if args.many_ranks:
            steps += fixed_steps(dataset, Path(tmp) / "fixed", page)
        runs: dict[str, list[Measurement]] = {label: [] for label, _, _ in steps}
        for _ in range(args.repeats):
            for label, code, paths in steps:
                runs[label].append(measure(label, code, *paths))
    measured = [best(runs[label]) for label, _, _ in steps]
    scan, rewrite, linked, outputs, views, report = measured[:6]
    print(f"== link and report: {ranks} ranks, {events:,} events, best of {args.repeats}")
    for m in measured:
        print(
            f"  {m.label:<32} {m.seconds:8.2f} s  CPU {m.cpu_seconds:8.2f} s  "
            f"peak RSS {m.peak_rss_mb:8.0f} MB"
        )
    for m, name in ((rewrite, "rewrite"), (linked, "link"), (report, "report")):
        print(
            f"  ratio {name}/scan: time x{m.seconds / scan.seconds:.2f}, "
            f"CPU x{m.cpu_seconds / scan.cpu_seconds:.2f}, "
            f"peak RSS x{m.peak_rss_mb / scan.peak_rss_mb:.1f}"
        )
    for m, floor, target in ((linked, rewrite, 2.0), (linked, outputs, None), (report, views, 1.2)):
        aim = f" (target at most x{target})" if target is not None else ""
        print(
            f"  ratio {m.label} / {floor.label}: CPU x{m.cpu_seconds / floor.cpu_seconds:.2f}"
            f"{aim}, time x{m.seconds / floor.seconds:.2f}"
        )
    if args.many_ranks:
        print_fixed(views, report, *measured[6:])


def fixed_steps(dataset: Path, work: Path, page: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """The steps that time the report of ``dataset`` with its queries' answers given, and
    the report of the generated job at :data:`FIXED_RANKS` ranks (written and linked under
    ``work``) and that report's imports and views."""
    small = work / "job"
    many_ranks_job(small, FIXED_RANKS)
    answers = work / "answers.pickle"
    measure("the report's answers", ANSWERS, str(dataset), str(page), str(answers))
    return [
        ("tokenwire report, answers given", REPORT_GIVEN, (str(dataset), str(page), str(answers))),
        (f"imports and views, {FIXED_RANKS} ranks", VIEWS, (str(small),)),
        (f"tokenwire report, {FIXED_RANKS} ranks", REPORT, (str(small), str(page))),
    ]


def print_fixed(
    views: Measurement,
    report: Measurement,
    given: Measurement,
    small_views: Measurement,
    small: Measurement,
) -> None:
    """The report's CPU beyond its imports and views, in three parts: what it does but query
    (its answers given), its queries at few ranks, and what grows with the job; beside them,
    what the 1.2x target leaves for all three."""
    beyond = report.cpu_seconds - views.cpu_seconds
    drawn = given.cpu_seconds - views.cpu_seconds
    fixed = small.cpu_seconds - small_views.cpu_seconds
    for m, floor, what in (
        (given, views, "all the report does but query"),
        (small, small_views, "the report's work at few ranks"),
    ):
        print(
            f"  ratio {m.label} / {floor.label}: CPU x{m.cpu_seconds / floor.cpu_seconds:.2f}"
            f" ({what})"
        )
    print(
        f"  report CPU beyond its imports and views: {beyond:.2f} s; {drawn:.2f} s without a "
        f"query, {fixed - drawn:.2f} s more at {FIXED_RANKS} ranks, {beyond - fixed:.2f} s "
        f"more growing with the job; the 1.2x target leaves {0.2 * views.cpu_seconds:.2f} s"
    )


def many_ranks_job(dataset: Path, ranks: int) -> int:
    """The tests' job of ``ranks`` ranks (3 steps; per rank and step 10 collectives and 6
    kernels), written and linked; its number of events."""
    from tests.report.fixtures import large_job

    large_job(dataset, ranks=ranks)
    con = connect(dataset, derived=False)
    return sum(
        con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
        for t in ("ops", "kernels", "collectives")
    )


def best(runs: list[Measurement]) -> Measurement:
    """The fastest of repeated runs of one step, with its CPU time and peak RSS the least of
    any run (other work on the machine only ever adds to each)."""
    fastest = min(runs, key=lambda m: m.seconds)
    return replace(
        fastest,
        cpu_seconds=min(m.cpu_seconds for m in runs),
        peak_rss_mb=min(m.peak_rss_mb for m in runs),
    )


if __name__ == "__main__":
    main()
