"""The ``tokenwire`` command line: a thin shell over the library.

Each command validates its options, calls one library function and prints. Data goes to
stdout, progress and errors to stderr. Input errors become one ``Error: ...`` line and exit
code 1; wrong invocations exit 2 (click's usage errors); internal errors exit 3.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from pipeline import __version__
from pipeline.errors import TokenwireError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tokenwire")
def cli() -> None:
    """tokenwire: where the bytes of a training job go."""


EXIT_BAD_INPUT = 1
EXIT_INTERNAL = 3


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(code)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "dataset",
    required=True,
    type=click.Path(path_type=Path),
    help="Dataset folder (created when missing).",
)
@click.option("--job", help="Job name for every file (default: the folder's name).")
@click.option(
    "--jobs",
    "workers",
    type=click.IntRange(min=1),
    help="Parallel worker processes (default: one per core for large inputs).",
)
def ingest(paths: tuple[Path, ...], dataset: Path, job: str | None, workers: int | None) -> None:
    """Parse trace files and folders of a job into a Parquet dataset.

    \b
    Example:
      tokenwire ingest traces/ -o run42.tw --job run42

    A file already in the dataset (same sha256) is skipped. Bad files are reported one line
    each on stderr and the exit code is 1; the good files of the run are kept.
    """
    from pipeline.ingest.run import ingest as run_ingest

    try:
        with _Progress() as bar:
            summary = run_ingest(
                paths, dataset, job=job, jobs=workers, on_start=bar.start, on_file=bar.advance
            )
    except TokenwireError as exc:
        _fail(str(exc))
    except Exception as exc:  # a bug: one line and exit 3, never a traceback
        first = (str(exc).splitlines() or [""])[0]
        _fail(f"internal error: {type(exc).__name__}: {first}", EXIT_INTERNAL)
    _print_summary(summary)
    errors = summary.errors
    for out in errors:
        click.echo(f"Error: {out.error}", err=True)
    if any(o.internal for o in errors):
        raise SystemExit(EXIT_INTERNAL)
    if errors:
        raise SystemExit(EXIT_BAD_INPUT)


class _Progress:
    """A progress bar over files on stderr; click shows it only on a terminal."""

    def __init__(self) -> None:
        self._bar = None
        self._stack = contextlib.ExitStack()

    def start(self, total: int) -> None:
        bar = click.progressbar(length=total, label="ingest", file=sys.stderr, show_pos=True)
        self._bar = self._stack.enter_context(bar)

    def advance(self, outcome: object) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


def _print_summary(summary) -> None:
    parts = [f"{summary.count('ingested')} ingested", f"{summary.count('skipped')} skipped"]
    if summary.count("unrecognised"):
        parts.append(f"{summary.count('unrecognised')} not traces")
    if summary.errors:
        parts.append(f"{len(summary.errors)} failed")
    click.echo("files: " + ", ".join(parts), err=True)
    for table, n in summary.rows.items():
        click.echo(f"  {table:<16} {n:>12,} rows", err=True)
    for out in summary.outcomes:
        if out.status == "ingested" and out.warning_count:
            click.echo(f"Warning: {out.path}: {out.warning_count} warnings", err=True)
            for msg in out.warnings[:5]:
                click.echo(f"  {msg}", err=True)
        if out.status == "unrecognised":
            click.echo(
                f"Warning: {out.path}: not a trace format tokenwire reads; skipped", err=True
            )


@cli.command()
@click.argument("dataset", type=click.Path(path_type=Path))
def tables(dataset: Path) -> None:
    """List the dataset's tables: columns with types and units, and row counts."""
    from pipeline.dataset.catalog import describe

    try:
        for table in describe(dataset):
            click.echo(f"{table.name} ({table.rows:,} rows): {table.description}")
            for col in table.columns:
                unit = f" [{col.unit}]" if col.unit else ""
                click.echo(f"  {col.name:<22} {col.type_name:<13}{unit:<12} {col.meaning}")
    except TokenwireError as exc:
        _fail(str(exc))


@cli.command()
@click.argument("dataset", type=click.Path(path_type=Path))
@click.argument("query", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json", "parquet"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write to this file (required for --format parquet).",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Let statements write or reach other files (COPY ... TO, ATTACH, CREATE TABLE...).",
)
def sql(
    dataset: Path, query: str | None, fmt: str, output: Path | None, allow_writes: bool
) -> None:
    """Run SQL over the dataset's tables (one DuckDB view per table).

    \b
    Example:
      tokenwire sql run42.tw "SELECT op, sum(bytes) FROM collectives GROUP BY op"

    Without QUERY, statements are read from stdin. The dataset is opened read-only: DuckDB
    may read only its parts, and statements that write (COPY, INSERT, DELETE, CREATE,
    ATTACH, EXPORT, INSTALL/LOAD) are refused unless --allow-writes is given.
    """
    from pipeline.dataset.query import run_query, write_result

    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet needs -o FILE")
    text = query if query is not None else sys.stdin.read()
    try:
        frame = run_query(dataset, text, allow_writes=allow_writes)
        if output is not None:
            write_result(frame, output, fmt)
        else:
            click.echo(format_frame(frame, fmt), nl=False)
    except TokenwireError as exc:
        _fail(str(exc))


def format_frame(frame, fmt: str) -> str:
    """Render a Polars frame as text for stdout."""
    import polars as pl

    if fmt == "csv":
        return frame.write_csv()
    if fmt == "json":
        return frame.write_json() + "\n"
    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=80, tbl_width_chars=200):
        return str(frame) + "\n"


@cli.command("hang")
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="PATH..."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Plain-text report or JSON.",
)
def hang(paths: tuple[Path, ...], fmt: str) -> None:
    """Where a hung job's ranks stopped agreeing, from PyTorch flight recorder dumps.

    PATH is a dump file (JSON or pickle, plain or gzipped) or a folder holding one dump per
    rank. For each process group it prints the last collective every rank completed, the
    first sequence id where ranks disagree, the ranks that never entered or are stuck in the
    first unfinished collective, and ops, element counts or dtypes that differ between ranks.

    Exit codes: 0 no hang or mismatch found; 4 a hang or mismatch was found; 1 unreadable
    input; 2 wrong invocation.
    """
    from pipeline.analysis import hang as hang_analysis

    try:
        report = hang_analysis.analyze_paths(list(paths))
    except TokenwireError as exc:
        _fail(str(exc))
    click.echo(report.to_json() if fmt == "json" else report.to_text())
    if report.problem_found:
        raise SystemExit(hang_analysis.EXIT_PROBLEM)
