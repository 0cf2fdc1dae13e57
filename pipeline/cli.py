"""The ``tokenwire`` command line: a thin shell over the library.

Each command validates its options, calls one library function and prints. Data goes to
stdout, progress and errors to stderr. Input errors become one ``Error: ...`` line and exit
code 1; wrong invocations exit 2 (click's usage errors); internal errors exit 3.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import __version__
from pipeline.errors import ConfigError, TraceFormatError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tokenwire")
def cli() -> None:
    """tokenwire: where the bytes of a training job go."""


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
    except (TraceFormatError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(report.to_json() if fmt == "json" else report.to_text())
    if report.problem_found:
        click.get_current_context().exit(hang_analysis.EXIT_PROBLEM)
